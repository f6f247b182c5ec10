"""The checker's exact tier on verifiers that draw from global generators (specref.proof.conform.globalrng).

A verifier that draws its coins from Python's `random.random()` or NumPy's global functions gets the checker's
injected uniforms while the exact tier runs, so its edge cases see the coin at u = 0: the inclusive coin
`u <= ratio` fails and the strict `u < ratio` (its negative control) passes.  A verifier whose randomness the
checker cannot reach is reported as "exact tier not run" with what to change, and its pass says so.  These are
exact checks: they cannot fail a correct verifier by chance.  (torch is driven the same way when imported:
tests/proof/test_conform_torch.py, which runs where torch is installed.)
"""

import random
import threading
import time

import numpy as np
import pytest

from specref import mrs, mrs_tree
from specref.proof import conform, tree
from specref.proof.conform import globalrng, run
from specref.proof.vectors import ListedUniforms
from specref.proof.verdict import Limits

INCLUSIVE = tree.ALGORITHMS["tree-topk"].bug["inclusive_zero_coin"]


class PythonRandom:
    """Python's global random() seen through the generator interface the references take."""

    def random(self, size=None):
        if size is None:
            return random.random()
        return np.array([random.random() for _ in range(int(np.prod(size)))]).reshape(size)


class NumpyGlobal:
    """NumPy's legacy global functions seen through the same interface (coins from np.random.random, the last token's
    uniform from np.random.rand)."""

    def random(self, size=None):
        return np.random.random() if size is None else np.random.rand(*np.atleast_1d(size))


def inclusive_python_random(tokens, parents, p, q, rng):  # ignores rng, as EAGLE's evaluate_posterior does
    return INCLUSIVE(tokens, parents, p, q, PythonRandom())


def strict_python_random(tokens, parents, p, q, rng):
    return mrs_tree.verify_tree_topk(tokens, parents, p, q, PythonRandom())


def strict_own_randomness(tokens, parents, p, q):  # takes no rng at all: --rng none
    return mrs_tree.verify_tree_topk(tokens, parents, p, q, PythonRandom())


def chain_numpy_global(x_draft, p, q):  # coins from np.random.random, the last token by np.random.choice
    K = len(x_draft)
    for t in range(K):
        u = np.random.random()
        if not u < min(1.0, q[t, x_draft[t]] / p[t, x_draft[t]]):
            residual = np.maximum(q[t] - p[t], 0.0)
            w = residual if residual.sum() > 0 else q[t]
            return np.append(x_draft[:t], np.random.choice(len(w), p=w / w.sum()))
    return np.append(x_draft, np.random.choice(q.shape[1], p=q[K] / q[K].sum()))


def exact_tier(function, adapter, algorithm):
    verifier = conform.Guarded(conform.adapt(function, adapter, algorithm), Limits(10.0, 60.0, "verifier call"),
                               conform.TREE_CALL if algorithm.startswith("tree") else conform.CHAIN_CALL)
    return run._exact_tier(verifier, algorithm, adapter, True)


def test_a_coin_from_pythons_random_reaches_the_exact_tier():
    # before globalrng, the inclusive coin passed every edge check: random.random() never gave 0
    inclusive = {c.name: c for c in exact_tier(inclusive_python_random, conform.Adapter(), "tree-topk")}
    assert inclusive["edge q(x) = 0, u = 0"].passed is False, inclusive["edge q(x) = 0, u = 0"].line()
    assert "inclusive_zero_coin" in inclusive["vectors (verify_tree_topk)"].diagnosis
    for function, adapter in [(strict_python_random, conform.Adapter()),
                              (strict_own_randomness, conform.Adapter(rng="none"))]:  # the negative controls
        checks = exact_tier(function, adapter, "tree-topk")
        assert len(checks) == 4 and all(c.passed for c in checks), [c.line() for c in checks]
    assert random.random.__self__ is random._inst and "random" not in vars(random._inst)  # restored after the tier


def test_numpys_global_functions_reach_the_exact_tier():
    checks = exact_tier(chain_numpy_global, conform.Adapter(rng="none"), "token")
    assert len(checks) == 3 and all(c.passed for c in checks), [c.line() for c in checks]
    with globalrng.driven(ListedUniforms([0.0, 0.3, 0.99])) as u:  # choice is mrs.sample's inverse CDF
        assert np.random.random() == 0.0 and np.random.uniform(2.0, 4.0) == pytest.approx(2.6)
        assert np.random.choice(3, p=[0.5, 0.0, 0.5]) == 2 and u.used == 3
    assert np.random.random.__self__ is np.random.mtrand._rand  # restored


def test_randomness_the_checker_cannot_reach_is_not_run_and_the_pass_says_so():
    def own_generator(tokens, parents, p, q):  # a generator of its own: nothing reaches it
        return mrs_tree.verify_tree_topk(tokens, parents, p, q, np.random.default_rng())

    (check,) = exact_tier(own_generator, conform.Adapter(rng="none"), "tree-topk")
    assert check.name == "exact tier not run" and check.passed is None
    assert "drew none of the checker's uniforms" in check.detail and "--rng none" in check.detail
    (seeded,) = exact_tier(lambda x, p, q, seed: mrs.verify(x, p, q, np.random.default_rng(seed)),
                           conform.Adapter(rng="seed"), "token")
    assert "a seed or a generator of its own" in seeded.detail
    report = conform.Report("f", "token", 0, checks=[check, conform.Check("one call", "statistical", True)])
    assert report.verdict().startswith("PASSED THE STATISTICAL TIER ONLY") and report.passed
    assert conform.Report("f", "token", 0, checks=report.checks[1:]).verdict() == "PASSED"


def test_reseed_globals_makes_a_global_verifier_reproducible():
    f = conform.adapt(strict_own_randomness, conform.Adapter(rng="none", reseed_globals=True), "tree-topk")
    g = conform.adapt(strict_own_randomness, conform.Adapter(rng="none"), "tree-topk")
    tokens, parents = np.array([0, 1]), np.array([-1, -1])
    p, q = np.full((3, 4), 0.25), np.array([[0.1, 0.2, 0.3, 0.4]] * 3)
    runs = [[f(tokens, parents, p, q, np.random.default_rng(s)).tolist() for s in range(30)] for _ in range(2)]
    assert runs[0] == runs[1]  # same seeds, same outputs
    random.seed(1)  # the negative control: without reseeding, the global state carries over
    first = [g(tokens, parents, p, q, np.random.default_rng(s)).tolist() for s in range(30)]
    assert first != [g(tokens, parents, p, q, np.random.default_rng(s)).tolist() for s in range(30)]


@pytest.mark.slow  # two whole tree runs at default size: 5 minutes on a loaded 2-core machine
def test_an_inclusive_coin_from_pythons_random_fails_a_default_tree_topk_run():
    failed = conform.check(inclusive_python_random, algorithm="tree-topk")
    assert not failed.passed and "inclusive_zero_coin" in failed.diagnosis, failed.text()
    passed = conform.check(strict_python_random, conform.Adapter(reseed_globals=True), algorithm="tree-topk")
    assert passed.verdict() == "PASSED", passed.text()


def test_a_call_abandoned_at_its_time_limit_leaves_the_global_generators_restored():
    # Off the main thread a call past its limit runs on in an abandoned daemon thread.  The exact tier had driven the
    # global generators inside that call, so they stayed replaced until the call returned: later checks in the same
    # process then saw a replaced random.random (found when test files ran in another order).
    def sleeps(x_draft, p, q, rng):  # ignores rng, draws nothing: its exact-tier probe hits the limit
        time.sleep(5)
        return x_draft

    result = {}
    worker = threading.Thread(target=lambda: result.update(report=conform.check(sleeps, call_limit=0.5)), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and result["report"].checks[-1].name == "time limit"
    assert random.random.__self__ is random._inst and "random" not in vars(random._inst)  # while the call sleeps on
    assert np.random.random.__self__ is np.random.mtrand._rand
    assert not globalrng._DRIVING


def test_driven_again_with_the_same_uniforms_changes_nothing_and_restores_nothing():
    u = ListedUniforms([0.25, 0.5, 0.75])
    with globalrng.driven(u):
        with globalrng.driven(u):  # the adapted verifier's entry inside the guarded call's
            assert random.random() == 0.25
        assert random.random() == 0.5  # still driven: the inner exit restored nothing
        with globalrng.driven(ListedUniforms([0.9])):  # other uniforms: driven by them, then back to u
            assert random.random() == 0.9
        assert random.random() == 0.75
    assert random.random.__self__ is random._inst
