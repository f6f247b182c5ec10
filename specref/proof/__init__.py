"""The proof tools: exact laws, chi-square goodness of fit, and deliberately broken samplers.

`stats` enumerates the exact law of a verifier's output, of the number of accepted drafts and of
whole sequences from a Markov-chain target, and tests samples against them; `broken` holds the
negative controls that those same tests must reject.
"""
