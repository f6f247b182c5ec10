"""specref: speculative sampling (Chen et al. 2023; Leviathan et al. 2023) in NumPy.

Letters: Chen's p = draft, q = target, K = number of draft tokens.  Leviathan swaps the
letters (p = target, q = draft) and calls K gamma; `specref.speedup` uses Leviathan's
gamma because its formulas are his, but every distribution argument in this package
follows Chen: draft first, target second.
"""



def __getattr__(name):
    # The real model (SmolLM2-135M in NumPy) is imported on first use, not with the package:
    # `python -m specref` must be able to set OPENBLAS_NUM_THREADS before NumPy loads.
    if name in ("SmolLM2", "load_smollm2"):
        from specref import model

        return getattr(model, name)
    raise AttributeError(f"module 'specref' has no attribute {name!r}")
