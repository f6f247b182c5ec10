"""Conformance check for anyone's speculative-sampling verifier: the suite's proofs pointed at other code.

    from specref.proof import conform
    report = conform.check(my_verify)            # or conform.check(f, conform.Adapter(log_probs=True), ...)
    assert report.passed, report.text()
    report = conform.check(my_verify_tree, algorithm="tree-mss")   # a tree verifier (see below)

or from a shell: `python -m specref conform MODULE:FUNCTION`.

The contract is `specref.mrs.verify`'s: `verify(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens`,
the accepted prefix of the drafts plus one more token, with p the draft rows the drafts were drawn
from and q the target rows (Chen's letters: p = draft, q = target).  `Adapter` maps the common
other shapes onto it (a batch dimension, log-probabilities, a seed or a torch generator instead of
a NumPy one, a function that returns the number accepted and the extra token); anything else
takes a wrapper of a few lines.

What runs, in two tiers:
- exact, when the verifier lets uniforms be injected (it takes an object whose random() returns
  them, or draws from Python's random, NumPy's global functions or torch's global generator, which
  `globalrng.driven` routes to the same uniforms while the tier runs; otherwise the report says
  "exact tier not run" with what to change, and a pass says it covered the statistical tier only): the portable vectors of `specref/proof/mrs_vectors.json` (same uniforms in the documented
  order -> same tokens), and two edge cases that need a chosen uniform: q(x) = 0 is not accepted
  even with u = 0, and a rejection whose residual max(0, q - p) is all zero (p and q one rounding
  apart) yields a token of the vocabulary (vLLM's advisory GHSA-8wr5-jm2h-8r4f);
- statistical, always: chi-square goodness of fit of the output of one call against its exact
  law on the suite's random, sharp and degenerate cases and a large vocabulary, of the number of
  accepted drafts, and of whole sequences of `speculative_sampling` against a Markov-chain
  target's exact law; with checks on every output seen (1 <= length <= K + 1, the drafts as
  prefix, ids in [0, V), q(x) = 0 never kept) and p == q over a large vocabulary (no NaN, no crash,
  every draft kept).

False alarms: the chi-square checks share one family-wise level, FAMILY_LEVEL = 1e-3
(`stats.LEVEL`): each of the m checks runs at FAMILY_LEVEL / m (Bonferroni), so a correct verifier
fails a whole run with probability about 1e-3 for a random seed, nominally (each chi-square's own rate,
measured in `specref.proof.stats`' notes, is 0.9 to 1.3e-3 at level 1e-3).  The other checks cannot fail a
correct verifier.  The seed is fixed (default 0), so a run is reproducible;
`python3 -m tools.conform_false_alarm` measures the rate over fresh seeds.

Tree verifiers (`check(f, algorithm="tree-topk" | "tree-mss" | "tree-rrs")`): the contract of
`mrs_tree.verify_tree_topk`, `verify_tree_mss` and `verify_tree_rrs`, (tokens [N], parents [N], p [N+1, V],
q [N+1, V], rng) -> the accepted path and one more token.  The checker draws every tree itself, the way
the algorithm assumes (specref.proof.tree.ALGORITHMS[...]: the draft's top-k, i.i.d. children, children
without replacement in drawing order), and runs the same tiers: the vectors of tree_vectors.json and
three edge cases with chosen uniforms (u = 0 at a child with q = 0, a ratio of exactly 1 at
u = 1 - 2^-53, an all-zero residual); chi-square of one call against its exact law, the tree's drawing
included, on four tree cases (one of uneven depth), and of whole sequences of a loop with trees (2x2 trees, a chain of 3),
six checks at FAMILY_LEVEL / 6; every output's path along the tree's edges; the diagnosis names the
algorithm's known bugs (tree.ALGORITHMS[...].bugs).

Too few samples: a run with `scale` below 1 pools more outcomes into one bin.  A chi-square check
that found nothing wrong but whose bins leave no degree of freedom, or that sees fewer than half
of the known bugs it sees at its default size (`power.counts_as_test`), is reported as not tested,
with the samples from which it counts as a test; the run is then INCOMPLETE (`report.passed` is
false, the command's exit status 3), never a pass, and the coverage line leaves the check out.

Diagnosis: an output the exact law forbids is printed with its count and the token where it left the
law.  When a one-call check fails, its counts are compared with the exact laws of known bugs
(`SIGNATURES`: the `broken.Bug`s of `specref.proof.bugs.broken` and `lossy.LOSSY`, and the other
algorithm).  The bug under which the counts are most likely names the failure if it is more likely
than the correct law and than every other bug by a factor of at least e^LOG_MARGIN and the counts
also fit it (chi-square p above FIT_LEVEL); the total variation to it and to the correct law is
printed beside it; when no known law fits, the diagnosis says the bug is unknown and shows the
evidence (a forbidden output, or the largest deviation).  (Total variation alone cannot tell a bug that adds a few impossible outcomes
from the correct law; the likelihood can.)  A failing vector is compared with the same bugs' tokens
on the vectors.

The package, one idea a module; chains and trees share everything but `chain` and `tree`:
- algorithms: the algorithms and what the checker knows about each (laws, known bugs): one registry;
- adapter: `Adapter` and `adapt`, a user's function as a verifier of either shape;
- globalrng: the global generators driven by the injected uniforms, or reseeded from the checker's rng;
- watch: what every output must be (`contract_problem`, `path_problem`), the call's `Form` (chain or
  tree), `Guarded` (time limits, contract) and `Watched` (every output seen);
- checks: levels, the chi-square and vectors machinery, the diagnosis from counts;
- chain, tree: what is particular to each shape (cases, edge cases, the sequence loop, the plan of a run);
- run: `check`, the one run skeleton, and the single checks by algorithm;
- report: `Report`, its coverage line and the run's diagnosis.
"""

from specref.proof import pipeline
from specref.proof.cases import (CORRECT, LARGE_V, N_CALLS, N_LARGE_V, N_SEQUENCES, SEQ_K,  # noqa: F401
                                 TREE_N_SEQUENCES, TREE_SEQ_WIDTHS, Case, TreeCase, TreeSetting,
                                 accepted_count_case, cases, tree_call_law, tree_cases)
from specref.proof.cases import count_marginal as _count_marginal  # noqa: F401  (tools/ and tests call it so)
from specref.proof.conform.adapter import Adapter, adapt  # noqa: F401
from specref.proof.conform.algorithms import CHECKED_AS, part  # noqa: F401
from specref.proof.conform.chain import BLOCK, DIAGNOSED, KNOWN_BUGS, SIGNATURES, TOKEN_LEVEL  # noqa: F401
from specref.proof.conform.tree import TREE_EDGE_BUGS  # noqa: F401
from specref.proof.conform.checks import (FAMILY_LEVEL, FIT_LEVEL, FLOOR, LOG_MARGIN, SEQ_N, SEQ_PROMPT,  # noqa: F401
                                          SEQ_V, U_MAX, forbidden, law_check, log_likelihood, frequency_distance)
from specref.proof.conform.report import Report  # noqa: F401
from specref.proof.conform.report import summary as _summary  # noqa: F401  (tests/proof/test_shipped.py's name)
from specref.proof.conform.run import (CALL_LIMIT, RUN_LIMIT, assert_conforms, check, exact_checks,  # noqa: F401
                                       one_call_check, sequence_check)
from specref.proof.conform.watch import (CHAIN_CALL, TREE_CALL, Form, Guarded, Watched, contract_problem,  # noqa: F401
                                         form_check, path_problem, token_ids_problem)
from specref.proof.verdict import Check, ContractViolation, Limits, Stop, TimeLimit, Verdict, not_tested  # noqa: F401

# A whole speculative generator against the same models' plain sampling (see specref.proof.pipeline).
check_pipeline = pipeline.check_pipeline
