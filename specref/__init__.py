"""specref: speculative sampling (Chen et al. 2023; Leviathan et al. 2023) in NumPy.

Letters: Chen's p = draft, q = target, K = number of draft tokens.  Leviathan swaps the
letters (p = target, q = draft) and calls K gamma; `specref.speedup` uses Leviathan's
gamma because its formulas are his, but every distribution argument in this package
follows Chen: draft first, target second.
"""
