"""Exercises graded by the suite's own proofs: vectors, exact laws and a chi-square, pointed at a learner's function.

    from specref.lessons import exercises
    exercises.check_verify(my_verify)      # a cell ending here shows one line: "pass: ..." or "FAIL: ...: ..."

Letters are Chen's: p is the DRAFT distribution, q the TARGET, K the drafts per call (Leviathan's gamma in
`check_expected_tokens`, whose formula is his).  The answers live apart, in notebooks/solutions/.

    check_verify(f)             f(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens [n]: Chen's Alg. 2, lines 9-14
    check_residual(f)           f(p [V], q [V]) -> [V]: norm(max(0, q - p)), and q itself when that is all zero
    check_expected_tokens(f)    f(alpha, gamma) -> float: Leviathan's Eq. 1, gamma + 1 at alpha = 1
    check_block_weights(f)      f(x_draft [K], p [K, V], q [K+1, V]) -> w [K+1]: block verification's weights
    check_predicted_speedup(f)  f(alpha, gamma, c, score_cost) -> float: Theorem 3.8 with a measured scoring cost
    check_chi_square(f)         f(counts, law) -> (statistic, dof, p_value): Pearson's test, rare outcomes pooled
    check_roll_back(f, model)   f(cache, drafts [K], out [n+1]) -> None: the KV cache rolled back after one call
    check_tree_topk(f)          f(tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> tokens: the top-k tree
                                verifier (mrs_tree.verify_tree_topk's rule)

Each prints one verdict line, "pass: <what was checked>" or "FAIL: <check>: <diagnosis>", and returns a `Result`:
true when it passed, with `.passed` and `.diagnosis`; its repr is the verdict line, and a notebook cell that ends
with the call shows the line once.  The first failing check is the verdict, and its diagnosis names the known
mistake the failure matches when it matches one.  A function that raises, loops, changes its inputs, returns the
wrong shape or dtype, NaN or an id outside the vocabulary fails with a message saying so; the grader does not
crash.  Warnings and whatever the function prints are held back while it is graded.  Each call may take
CALL_LIMIT seconds and a whole check TIME_LIMIT; with a NumPy answer a check takes 0.1 to 3 s (`.seconds`; the
line itself holds no timing, so that a notebook's saved output does not change from run to run).

Each check's module lists its checks in its docstring.  `check_verify` grades tokens drawn with uniforms the
grader chooses (an answer that draws its randomness any other way is "not graded exactly" and does not pass); the
others answer with numbers, which are compared with exact fractions, `specref.speedup` or scipy (to a
relative 1e-9) before anything statistical runs.  A function that still raises NotImplementedError (a starter
stub) is told "not answered yet" by every check, before any other.  With a fixed seed a statistical check's verdict on a given answer never
changes, on any machine: a correct residual or Eq. 1 gets the solutions' p-values, and so does a verify that
draws its uniforms as they do.

    grading.py            the verdict (`Result`), the time limits, the seed, and what the checks share
    uniforms.py           the uniforms the grader chooses, and the exact law of a function over them
    verify.py             check_verify and the known mistakes of a verifier
    residual.py           check_residual
    expected_tokens.py    check_expected_tokens
    block_weights.py      check_block_weights
    predicted_speedup.py  check_predicted_speedup
    chi_square.py         check_chi_square
    roll_back.py          check_roll_back (on the model it is handed: it imports no model code)
    tree_topk.py          check_tree_topk and the known mistakes of a tree verifier
    gallery.py            MISTAKES, the mistakes that shipped, and show_mistakes, their chi-square table

The package imports no model code (notebooks 01-04, 07 and 08 load none; check_roll_back uses the model it is
handed).
"""

from .block_weights import BLOCK_MISTAKES, check_block_weights
from .chi_square import CHI_SQUARE_MISTAKES, check_chi_square
from .expected_tokens import EXPECTED_MISTAKES, check_expected_tokens
from .gallery import CORRECT, MISTAKES, N_GALLERY, pipeline_law, plain_law, show_mistakes
from .predicted_speedup import SPEEDUP_MISTAKES, check_predicted_speedup
from .residual import RESIDUAL_MISTAKES, check_residual
from .roll_back import ROLL_BACK_MISTAKES, check_roll_back
from .tree_topk import TREE_MISTAKES, check_tree_topk
from .verify import VERIFY_MISTAKES, argmax_draws, check_verify, letters_swapped
