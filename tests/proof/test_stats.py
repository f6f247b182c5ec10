"""The exact laws of specref.proof.stats checked against each other and against independent computations."""

from fractions import Fraction

import numpy as np
import pytest

from specref import mrs
from specref.proof import conform, laws, stats
from specref.proof.bugs import broken, lossy


def _rows(seed, K, V, conc=1.0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc), size=K), rng.dirichlet(np.full(V, conc), size=K + 1)


@pytest.mark.parametrize("seed", range(3))
def test_lenient_call_law(seed):
    p, q = _rows(seed, 1, 4, 0.5)
    exact_p, exact_q = [[Fraction(v) for v in row] for row in p], [[Fraction(v) for v in row] for row in q]
    for x in range(4):  # l = 1 is token-level verification, exactly
        assert laws.lenient_call_law([x], exact_p, exact_q, 1) == laws.token_call_law([x], exact_p, exact_q)
    for lenience in (0.8, 0.5, 0.2):  # the first token's law: min(p, q / l) + (1 - alpha_l) residual (Leviathan A.5)
        first = np.zeros(4)
        for out, v in laws.rows_call_law(lambda x, p_, q_: laws.lenient_call_law(x, p_, q_, lenience), p, q).items():
            first[out[0]] += v
        alpha = mrs.lenient_acceptance_rate(p[0], q[0], lenience)
        np.testing.assert_allclose(first, np.minimum(p[0], q[0] / lenience) + (1 - alpha) * mrs.residual(p[0], q[0]),
                                   atol=1e-15)


def test_greedy_call_law_is_verify_greedys_output():
    rng = np.random.default_rng(7)
    for _ in range(300):
        K, V = int(rng.integers(1, 4)), int(rng.integers(2, 5))
        q = rng.integers(0, 3, size=(K + 1, V)).astype(float)  # small integer scores: many ties
        x = rng.integers(0, V, size=K)
        assert laws.greedy_call_law(x.tolist(), None, q.tolist()) == {tuple(mrs.verify_greedy(x, q).tolist()): 1}
    # a one-hot target is greedy decoding: token-level verification gives greedy's output, whatever the draft
    p, _ = _rows(3, 3, 4)
    one_hot = np.eye(4)[[2, 0, 3, 1]]
    assert laws.rows_call_law(laws.token_call_law, p, one_hot) == \
        pytest.approx(laws.rows_call_law(laws.greedy_call_law, p, one_hot), abs=1e-15)


def test_every_known_bugs_law_is_a_distribution_and_not_the_correct_law():
    # on the rows where the conformance checker must reject each of them (its "random" case); on other rows a
    # misreading may happen to be exact (residual_without_w is, on _rows(5, 3, 3))
    for bugs, algorithm in [([*broken.BROKEN.values(), *lossy.LOSSY], "token"), (broken.BROKEN_BLOCK.values(), "block")]:
        case = conform.cases(algorithm)[0]
        right = laws.rows_call_law(conform.CORRECT[algorithm], case.p, case.q)
        for bug in bugs:
            law = laws.rows_call_law(bug.law, case.p, case.q)
            off = max(abs(law.get(k, 0.0) - right.get(k, 0.0)) for k in set(law) | set(right))
            print(f"{bug.name}: largest difference from the correct law {off:.3g}")
            assert sum(law.values()) == pytest.approx(1.0, abs=1e-12), bug.name
            assert off > 1e-6, bug.name  # rounding is near 1e-16


@pytest.mark.parametrize("seed", range(5))
def test_stopping_law_and_block_law_are_distributions(seed):
    p, q = _rows(seed, 4, 3, 0.3)
    x_draft = [int(np.argmax(p[t])) for t in range(4)]
    w, h, r = laws.block_weights(x_draft, p.tolist(), q.tolist())
    assert w[0] == 1 and all(0 <= v <= 1 for v in w + h) and h[-1] == w[-1]
    assert sum(laws.stopping_law(h)) == pytest.approx(1.0, abs=1e-15)
    assert sum(laws.block_call_law(x_draft, p.tolist(), q.tolist()).values()) == pytest.approx(1.0, abs=1e-15)
    # the same weights as the NumPy code in specref.mrs
    w2 = mrs._block_w(np.array(x_draft), p, q)
    np.testing.assert_allclose(w2, w, atol=1e-15)
    np.testing.assert_allclose([mrs._block_h(i, w2, p, q)[0] for i in range(1, 5)], h[1:], atol=1e-14)
    for i in range(4):
        np.testing.assert_allclose(mrs._block_residual(w2[i], p[i], q[i]), r[i], atol=1e-15)


def test_stopping_law_by_hand():
    h = [Fraction(1), Fraction(1, 2), Fraction(1, 3)]
    assert laws.stopping_law(h) == [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3)]  # (2/3)(1/2)1, (2/3)(1/2), 1/3


@pytest.mark.parametrize("seed", range(5))
def test_expected_tokens_given_drafts_matches_the_exact_laws(seed):
    K, V = 3, 4
    p, q = _rows(seed, K, V, 0.5)
    x_draft = np.array([np.random.default_rng(seed).choice(V, p=p[t]) for t in range(K)])
    token, block = laws.expected_tokens_given_drafts(x_draft, p, q)
    assert token == pytest.approx(laws.mean_output_length(laws.token_call_law(x_draft.tolist(), p.tolist(), q.tolist())))
    assert block == pytest.approx(laws.mean_output_length(laws.block_call_law(x_draft.tolist(), p.tolist(), q.tolist())))


def test_expected_tokens_recorder_averages_over_calls():
    p, q = _rows(0, 2, 3)
    recorder = laws.ExpectedTokens(mrs.verify_block)
    rng = np.random.default_rng(1)
    counts = stats.sample_verify(recorder, p, q, 4000, rng)
    law = laws.chain_call_law(laws.block_call_law, laws.fixed_rows(p), laws.fixed_rows(q), 2, 3)
    token = laws.chain_call_law(laws.token_call_law, laws.fixed_rows(p), laws.fixed_rows(q), 2, 3)
    measured = sum(len(k) * c for k, c in counts.items()) / 4000
    assert recorder.calls == 4000
    assert recorder.block / 4000 == pytest.approx(laws.mean_output_length(law), abs=0.02)
    assert recorder.token / 4000 == pytest.approx(laws.mean_output_length(token), abs=0.02)
    assert measured == pytest.approx(laws.mean_output_length(law), abs=0.05)


def test_continued_and_joint_laws():
    q = laws.fixed_rows([[0.25, 0.75]] * 3)
    joint = laws.target_joint_law(q, 2, 2)
    assert joint == {(0, 0): 0.0625, (0, 1): 0.1875, (1, 0): 0.1875, (1, 1): 0.5625}
    assert laws.continued_law({(1,): 1.0}, q, 2) == {(1, 0): 0.25, (1, 1): 0.75}
