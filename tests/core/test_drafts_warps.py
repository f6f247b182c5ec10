"""Drafts and sampling warps: each is a valid model and does what its docstring says."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specref import drafts, warps
from specref.apps.named_drafts import by_name
from specref.sampling import next_distributions


def test_uniform_draft():
    d = drafts.UniformDraft(5)
    np.testing.assert_allclose(d(np.array([1, 2, 3])), np.full((3, 5), 0.2))


def test_ngram_fits_counts_and_backs_off():
    seqs = [[0, 1, 2, 0, 1, 2, 0, 1], [3, 3, 3]]
    bigram = drafts.NGramDraft.fit(seqs, 5, n=2)
    row = next_distributions(bigram, np.array([0]), 1)[0]
    assert row.sum() == pytest.approx(1.0) and np.all(row > 0)  # smoothed: every token possible
    assert np.argmax(row) == 1  # after 0 always came 1
    # an unseen context backs off to the add-one unigram
    unigram = drafts.NGramDraft.fit(seqs, 5, n=1)
    np.testing.assert_allclose(next_distributions(bigram, np.array([4]), 1)[0], next_distributions(unigram, np.array([4]), 1)[0])
    counts = np.array([3, 3, 2, 3, 0]) + 1.0
    np.testing.assert_allclose(next_distributions(unigram, np.array([0]), 1)[0], counts / counts.sum())
    # Witten-Bell weight: context (0,) seen 3 times with 1 distinct follower -> lambda = 3/4
    np.testing.assert_allclose(row, 0.25 * counts / counts.sum() + 0.75 * np.eye(5)[1])
    trigram = drafts.NGramDraft.fit(seqs, 5, n=3)
    assert np.argmax(next_distributions(trigram, np.array([2, 0]), 1)[0]) == 1
    with pytest.raises(ValueError, match="outside"):
        drafts.NGramDraft.fit([[0, 9]], 5)


def test_prompt_lookup_copies_the_latest_match_and_backs_off():
    d = drafts.PromptLookupDraft(10, n=2)
    assert d.propose(np.array([5, 6, 7, 1, 5, 6, 8, 2, 5, 6])) == 8  # latest earlier "5 6" was followed by 8
    assert d.propose(np.array([1, 2, 3, 9, 3])) == 9  # no "9 3" before: back off to "3"
    assert d.propose(np.array([1, 2, 4])) == 4  # no match at all: repeat the last token
    rows = d(np.array([1, 2, 1, 2]))
    assert np.all(rows.sum(axis=1) == 1) and set(np.unique(rows)) == {0.0, 1.0}  # deterministic one-hot


def test_adaptive_prompt_lookup_drafts_only_as_far_as_the_copy_reaches():
    d = drafts.PromptLookupDraft(10, n=3, adaptive=True)
    # last 2 tokens (3, 4) occurred at 1..2, followed by 5 6 7 3 4: the copy reaches 5 tokens
    x = np.array([2, 3, 4, 5, 6, 7, 3, 4])
    assert d.match(x, shortest=2) == (2, 3)
    assert [d.draft_length(x, K) for K in (1, 4, 5, 8)] == [1, 4, 5, 5]
    # the longest match wins: (6, 3, 4) occurred at 0..2, followed by 5 6 3 4 up to the end
    assert d.match(np.array([6, 3, 4, 5, 6, 3, 4]), shortest=2) == (3, 3)
    assert d.draft_length(np.array([6, 3, 4, 5, 6, 3, 4]), 8) == 4
    assert d.draft_length(np.array([1, 2, 3, 4, 2]), 8) == 0  # only a 1-token match: nothing to copy
    assert d.draft_length(np.array([7]), 8) == 0
    # the plain draft always drafts K; its proposals are the same either way
    plain = drafts.PromptLookupDraft(10, n=3)
    assert plain.draft_length(x, 6) == 6 and plain.propose(x) == d.propose(x) == 5
    with pytest.raises(ValueError, match="adaptive prompt-lookup draft needs n >= 2"):
        drafts.PromptLookupDraft(10, n=1, adaptive=True)
    with pytest.raises(ValueError, match="out of range"):
        d.draft_length(np.array([1, 2, 12]), 4)


def test_the_adaptive_draft_matches_longer_by_default_and_copies_from_the_right_turn_of_a_loop():
    assert drafts.PromptLookupDraft(10).n == 3 and drafts.PromptLookupDraft(10, adaptive=True).n == 8
    assert by_name("prompt-lookup-adaptive", 10).n == 8 and by_name("prompt-lookup", 10).n == 3
    assert by_name("prompt-lookup-adaptive", 10, lookup_n=3).n == 3
    # a loop in which "1 2 3" recurs twice per turn, followed by 4 and then by 5:
    # 0 1 2 3 4 | 9 1 2 3 5 | 0 1 2 3 -> the turn continues with 4, which only a 4-token match finds
    x = np.array([0, 1, 2, 3, 4, 9, 1, 2, 3, 5, 0, 1, 2, 3])
    short, long = drafts.PromptLookupDraft(10, n=3, adaptive=True), drafts.PromptLookupDraft(10, adaptive=True)
    assert short.match(x, shortest=2) == (3, 9) and short.propose(x) == 5        # the latest "1 2 3"
    assert long.match(x, shortest=2) == (4, 4) and long.propose(x) == 4          # "0 1 2 3" at 0..3
    assert long.draft_length(x, 20) == len(x) - 4


class _Script(drafts._RowModel):
    """A greedy target that writes a fixed text: after i tokens its argmax is text[i] (one-hot)."""

    def __init__(self, text, V):
        self.text, self.V = list(text), V

    def row(self, tokens):
        out = np.zeros(self.V)
        out[self.text[len(tokens)]] = 1.0
        return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=6), st.integers(1, 5), st.integers(1, 40),
       st.integers(1, 6), st.booleans(), st.integers(2, 8))
def test_lookup_replay_counts_the_calls_of_the_real_sampling_loop(motif, turns, extra, K, adaptive, n):
    # tools/lookup_replay.py counts greedy prompt lookup's target calls from the target's greedy text alone;
    # here it must agree with Chen Algorithm 2 run for real, call for call, on a text that loops with edits
    from specref.sampling import speculative_sampling
    from tools.lookup_replay import replay

    V = 6
    rng = np.random.default_rng(len(motif) * 100 + turns)
    text = []
    for _ in range(turns):                       # the motif repeated, one token changed at random per turn
        turn = list(motif)
        turn[rng.integers(len(turn))] = int(rng.integers(V))
        text += turn
    text += list(rng.integers(V, size=extra % 7))
    prompt, continuation = text[:2], text[2:] + [5] * (extra - extra % 7)
    draft = drafts.PromptLookupDraft(V, n=n, adaptive=adaptive)
    steps = []
    out = speculative_sampling(np.array(prompt), draft, _Script(prompt + continuation + [0] * (K + 1), V),
                               len(continuation), K, np.random.default_rng(0),
                               on_step=lambda s: steps.append(s.n_drafted) and False)
    assert out[len(prompt):].tolist() == continuation
    assert replay(draft, prompt, continuation, K) == (len(steps), sum(steps))


@pytest.mark.parametrize("model", [drafts.UniformDraft(4), drafts.PromptLookupDraft(4),
                                   drafts.NGramDraft.fit([[0, 1, 2, 3]], 4, n=2)])
def test_drafts_reject_bad_tokens(model):
    with pytest.raises(ValueError, match="token ids"):
        model(np.array([0, 4]))
    with pytest.raises(ValueError, match="non-empty"):
        model(np.array([], dtype=int))


def _rows():
    return arrays(np.float64, (2, 6), elements=st.floats(0, 1)).filter(
        lambda a: np.all(a.sum(1) > 1e-3)).map(lambda a: a / a.sum(1, keepdims=True))


@settings(max_examples=200, deadline=None)
@given(_rows(), st.floats(0.05, 3.0), st.integers(1, 6), st.floats(0.05, 1.0))
def test_warps_give_distributions(probs, T, k, p):
    for w in [warps.Warp(T), warps.Warp(T, top_k=k), warps.Warp(T, top_p=p), warps.Warp(0.0)]:
        out = w(probs)
        assert np.all(out >= 0) and np.allclose(out.sum(1), 1.0)
        assert np.all(out[probs == 0] == 0)  # a warp never creates mass where there was none
    assert np.all((warps.Warp(1.0, top_k=k)(probs) > 0).sum(1) <= k)
    kept = warps.Warp(1.0, top_p=p)(probs) > 0
    for row, keep in zip(probs, kept):  # kept mass reaches p; dropping the smallest kept token would not
        assert row[keep].sum() >= p * row.sum() - 1e-12
        assert row[keep].sum() - row[keep].min() < p * row.sum() + 1e-12


def test_warp_examples():
    probs = np.array([0.5, 0.25, 0.125, 0.125])
    np.testing.assert_array_equal(warps.Warp(0.0)(probs), [1, 0, 0, 0])
    np.testing.assert_allclose(warps.Warp(0.5)(probs), probs**2 / (probs**2).sum())
    np.testing.assert_allclose(warps.Warp(1.0, top_p=0.7)(probs), [2 / 3, 1 / 3, 0, 0])
    np.testing.assert_allclose(warps.Warp(1.0, top_k=1)(probs), [1, 0, 0, 0])
    big = np.random.default_rng(0).dirichlet(np.full(5000, 0.01))  # exercises the full-sort fallback too
    for p in [0.5, 0.95, 0.9999]:
        order = np.sort(big)[::-1]
        n = int(np.searchsorted(np.cumsum(order), p)) + 1
        assert (warps.Warp(1.0, top_p=p)(big) > 0).sum() == n


@pytest.mark.parametrize("kwargs", [dict(temperature=-1), dict(temperature=np.nan), dict(top_k=0), dict(top_p=0.0),
                                    dict(top_p=1.5)])
def test_bad_warps_are_named(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[0]):
        warps.Warp(**kwargs)


def test_temperature_on_a_partial_support_equals_the_full_formula():
    """Temperature on rows that cover part of the vocabulary: zeros stay zero, the rest follows the formula."""
    rng = np.random.default_rng(4)
    probs = np.zeros((2, 1000))
    probs[0, rng.choice(1000, 40, replace=False)] = rng.dirichlet(np.ones(40))
    probs[1, rng.choice(1000, 30, replace=False)] = rng.dirichlet(np.ones(30))
    with np.errstate(divide="ignore"):
        logits = np.log(probs) / 0.7
    expected = np.exp(logits - logits.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(warps.temperature(probs, 0.7), expected, rtol=1e-12, atol=0)
    assert np.all(warps.temperature(probs, 0.7)[probs == 0] == 0)


def test_copy_or_model_copies_long_matches_and_asks_the_model_otherwise():
    V = 6
    model = drafts.UniformDraft(V)
    d = drafts.CopyOrModel(model, V, n=2)
    rows = d.next_probs(np.array([0, 1, 2, 3, 0, 1]), 1)      # "0 1" occurred before, followed by 2
    np.testing.assert_array_equal(rows[0], np.eye(V)[2])
    rows = d.next_probs(np.array([0, 1, 2, 3, 4, 5]), 1)      # no match: the model's row
    np.testing.assert_allclose(rows[0], np.full(V, 1 / V))
    both = d.next_probs(np.array([0, 1, 2, 0, 1]), 2)          # row for "...0" (no match), row for "...0 1" (copy 2)
    np.testing.assert_allclose(both[0], np.full(V, 1 / V))
    np.testing.assert_array_equal(both[1], np.eye(V)[2])
    assert d.copies == 2
    with pytest.raises(ValueError, match="k must be"):
        d.next_probs(np.array([0, 1]), 3)


def test_copy_or_model_keeps_the_target_law():
    """Whole sequences with the combined draft have the target's law (chi-square at stats.LEVEL, fixed seed)."""
    from specref import sampling
    from specref.proof import laws, stats
    target, draft = laws.markov_pair()
    draft = drafts.CopyOrModel(draft, 3, n=2)
    prompt = np.array([0, 1, 0])
    law = laws.sequence_law(target, prompt, 4)
    counts = stats.sample_sequences(lambda r: sampling.speculative_sampling(prompt, draft, target, 4, 2, r),
                                    4000, len(prompt), np.random.default_rng(8))
    assert stats.chi_square_gof(counts, law)[2] > stats.LEVEL
    assert draft.copies > 0


def _softmax64(x):
    e = np.exp(np.asarray(x, np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, (3, 7), elements=st.integers(-160, 160).map(lambda i: i / 8)), st.floats(0.05, 3.0),
       st.integers(1, 7),
       st.floats(0.05, 1.0))
def test_warping_the_logits_gives_the_rows_warping_their_softmax_gives(logits, T, k, p):
    """The loop warps a target's logits (`Warp.from_logits`: one softmax at the temperature); the rows must be those
    the warp gives the probabilities, whose softmax it skips.  Logits on a grid of 1/8: two logits closer than float
    rounding would give the argmax of the logits and that of their rounded probabilities a different token.  Control: the temperature applied to the
    probabilities instead of the logits (softmax(softmax(x) / T)), a slip one line long, is a different law."""
    probs = _softmax64(logits)
    for w in [warps.Warp(T), warps.Warp(T, top_k=k), warps.Warp(T, top_p=p), warps.Warp(1.0), warps.Warp(0.0)]:
        got, want = w.from_logits(logits), w(probs)
        assert got.dtype == np.float64 and got.shape == want.shape
        if w.top_p is not None:   # top-p's cut may fall between two tokens whose rounding differs (a tie of the
            rows = ((got > 0) == (want > 0)).all(axis=1)  # cumulative mass at p): rare, and only in one row here
            assert rows.sum() >= 2
            np.testing.assert_allclose(got[rows], want[rows], rtol=1e-9, atol=1e-15)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
    x = np.array([[2.0, 1.0, 0.0]], np.float32)             # the slip on a row where it shows: not the same law
    wrong = _softmax64(_softmax64(x) / 0.5)
    assert not np.allclose(wrong, warps.Warp(0.5)(_softmax64(x)), rtol=1e-3)
    np.testing.assert_allclose(warps.Warp(0.5).from_logits(x), warps.Warp(0.5)(_softmax64(x)), rtol=1e-12)


def test_warping_logits_refuses_rows_it_cannot_warp_and_keeps_minus_infinity_at_zero():
    x = np.array([[0.0, -np.inf, 1.0]], np.float32)
    np.testing.assert_allclose(warps.Warp(0.5).from_logits(x), _softmax64(x / 0.5))
    assert warps.Warp(0.5).from_logits(x)[0, 1] == 0
    for bad in (np.array([[0.0, np.nan]]), np.array([[-np.inf, -np.inf]]), np.array([[1.0, np.inf]])):
        with pytest.raises(ValueError, match="finite largest entry"):
            warps.Warp(0.8, top_p=0.95).from_logits(bad)
    for bad in (np.array([1, 2]), np.zeros((2, 0))):
        with pytest.raises(ValueError, match="non-empty float array"):
            warps.Warp(0.8).from_logits(bad)


def test_a_warped_model_with_logits_gives_the_rows_of_one_without_them():
    """`Warped` takes the logits when the model offers them (next_logits, tree_logits) and the probabilities
    otherwise: the same rows either way, for the last k positions and for a tree."""
    rng = np.random.default_rng(3)
    table = rng.normal(0, 3, (50, 11)).astype(np.float32)     # a bigram "model": logits of the next token

    class WithLogits:
        def next_logits(self, tokens, k=1):
            return table[np.asarray(tokens)[-k:]]

        def tree_logits(self, tokens, tree_tokens, parents):
            return table[np.concatenate([np.asarray(tokens)[-1:], tree_tokens])]

    class ProbsOnly:
        def next_probs(self, tokens, k=1):
            return _softmax64(table[np.asarray(tokens)[-k:]])

        def score_tree(self, tokens, tree_tokens, parents):
            return _softmax64(table[np.concatenate([np.asarray(tokens)[-1:], tree_tokens])])

    tokens, tree, parents = np.array([3, 9, 4]), np.array([7, 2, 5]), np.array([-1, -1, 0])
    for w in [dict(temperature=0.8, top_p=0.95), dict(temperature=0.0), dict(temperature=1.3, top_k=3)]:
        a, b = warps.Warped(WithLogits(), **w), warps.Warped(ProbsOnly(), **w)
        np.testing.assert_allclose(a.next_probs(tokens, 2), b.next_probs(tokens, 2), rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(a(tokens), b(tokens), rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(a.score_tree(tokens, tree, parents), b.score_tree(tokens, tree, parents),
                                   rtol=1e-9, atol=1e-15)
    with pytest.raises(ValueError, match="expected \\[2, V\\] rows"):
        warps.Warped(type("Short", (), {"next_logits": lambda self, t, k=1: table[:1]})(), 0.8).next_probs(tokens, 2)


@settings(max_examples=200, deadline=None)
@given(_rows(), st.floats(0.05, 3.0), st.integers(1, 6), st.floats(0.05, 1.0), st.integers(0, 2**32 - 1))
def test_a_warp_on_part_of_the_vocabulary_gives_the_rows_of_the_whole(probs, T, k, p, seed):
    """A draft over part of the vocabulary (the trained draft keeps 4096 of 49152 tokens) is warped on the columns
    in use only: the same rows as warping the rows those columns make alone, put back in place.  Control: the
    columns put back in the wrong places is caught by the same comparison."""
    V = 40
    cols = np.sort(np.random.default_rng(seed).choice(V, probs.shape[1], replace=False))
    wide = np.zeros((probs.shape[0], V))
    wide[:, cols] = probs
    distinct = all(len(set(r[r > 0])) == np.count_nonzero(r) for r in probs)  # top-k's pick among ties is argpartition's
    for w in [warps.Warp(T), warps.Warp(T, top_k=k), warps.Warp(T, top_p=p), warps.Warp(1.0), warps.Warp(0.0)]:
        if w.top_k is not None and not distinct:
            continue
        got = w(wide)
        want = np.zeros_like(wide)
        want[:, cols] = w(probs)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        shifted = np.zeros_like(wide)
        shifted[:, (cols + 1) % V] = w(probs)
        assert not np.allclose(got, shifted)
