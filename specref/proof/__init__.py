"""The proof tools: exact laws, chi-square goodness of fit, and deliberately broken samplers.

`stats` enumerates the exact law of each verifier's output (token-level, lenient, block, greedy), of
the number of accepted drafts and of whole sequences from a Markov-chain target, and tests samples
against them with one pooling rule; `broken` holds the negative controls that those same tests must
reject, each a `Bug` with its sampler and its exact law; `lossy` the lossy rules used in practice.
"""
