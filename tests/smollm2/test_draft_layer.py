"""The draft layer (specref.smollm2.draft_layer) and its training (specref.apps.train_layer).

On a tiny configuration (d = 16, 4 query heads over 2 key/value heads), so every test takes well under
a second: the hand-written gradients of every parameter against finite differences (float64), with a
plausible slip in the backward pass caught by the same check; incremental drafting (the draft's own
cache) equal to the windowed forward; the unrolled training mask equal to step-by-step drafting,
with a mask that leaks one true entry too many caught; the model class against the windowed forward
through a stand-in target, after rollbacks and a target that advances; files and bad inputs.
"""

import numpy as np
import pytest

from specref.apps import train_layer as tl
from specref.smollm2 import draft as nd
from specref.smollm2 import draft_layer as dl

TINY = dl.LayerConfig(d_model=16, n_heads=4, n_kv_heads=2, head_dim=4, d_ff=12, rms_eps=1e-5, rope_base=10000.0)


def random_params(c=TINY, seed=0, dtype=np.float64, scale=0.3) -> dict:
    rng = np.random.default_rng(seed)
    P = {name: rng.standard_normal(shape) * scale for name, shape in c.shapes().items()}
    for name in ("attn_norm", "ffn_norm", "out_norm"):
        P[name] = 1.0 + 0.2 * rng.standard_normal(c.d_model)
    return {name: a.astype(dtype) for name, a in P.items()}


def window(c=TINY, B=2, L=7, seed=1, dtype=np.float64):
    """Random inputs for B windows of L positions (each window at its own first position)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((B, L, c.d_model)).astype(dtype)
    e = rng.standard_normal((B, L, c.d_model)).astype(dtype)
    positions = rng.integers(1, 30, B)[:, None] + np.arange(L)[None, :]
    return h, e, positions


# ---- gradients ------------------------------------------------------------------------------------

def worst_gradient_error(J: int, seed: int = 2, per_param: int = 5) -> float:
    """Largest relative difference between `backward` and central differences of a random linear
    function of every level's output, over a few entries of every parameter."""
    rng = np.random.default_rng(seed)
    P = random_params(seed=seed)
    h, e, positions = window()
    weights = [rng.standard_normal(h.shape) for _ in range(J)]

    def loss(P):
        return sum(float((w * y).sum()) for w, y in zip(weights, dl.forward(P, TINY, h, e, positions, J)[0]))

    _, cache = dl.forward(P, TINY, h, e, positions, J)
    grads = dl.backward(P, TINY, cache, weights)
    worst = 0.0
    for name in dl.PARAM_NAMES:
        assert grads[name].shape == P[name].shape, name
        for _ in range(per_param):
            ix = tuple(int(rng.integers(0, s)) for s in P[name].shape)
            old = P[name][ix]
            P[name][ix] = old + 1e-6
            up = loss(P)
            P[name][ix] = old - 1e-6
            down = loss(P)
            P[name][ix] = old
            numeric = (up - down) / 2e-6
            worst = max(worst, abs(numeric - grads[name][ix]) / max(1e-6, abs(numeric) + abs(grads[name][ix])))
    return worst


@pytest.mark.parametrize("J", [1, 3])
def test_backward_matches_finite_differences(J):
    worst = worst_gradient_error(J)
    print(f"J = {J}: max relative error {worst:.2e}")
    assert worst < 1e-6


def test_a_slip_in_the_backward_pass_is_caught_by_the_same_check(monkeypatch):
    """Negative control: RMSNorm's backward without the term through the root-mean-square."""
    monkeypatch.setattr(dl, "rms_norm_backward", lambda x, r, g, dy: (dy * g * r, (dy * x * r).reshape(-1, x.shape[-1]).sum(0)))
    assert worst_gradient_error(3) > 1e-3


def test_the_loss_through_the_head_has_the_gradient_of_its_parts():
    """train_layer's loss (KL + TV through the restricted head, mean over levels and kept rows) and its
    gradient in every level's output, against finite differences."""
    rng = np.random.default_rng(3)
    ys = [rng.standard_normal((2, 5, 16)) for _ in range(3)]
    HN = rng.standard_normal((16, 40)) * 0.5
    q = nd.softmax(rng.standard_normal((2, 5, 40)) * 2) * 0.9
    valid = [rng.random((2, 5)) < 0.7 for _ in range(3)]
    loss, dys, _ = tl.levels_loss(ys, HN, q, valid, 1.0, 1.0)
    for j, ix in [(0, (0, 1, 3)), (2, (1, 4, 0)), (1, (1, 2, 7))]:
        old = ys[j][ix]
        ys[j][ix] = old + 1e-6
        up = tl.levels_loss(ys, HN, q, valid, 1.0, 1.0)[0]
        ys[j][ix] = old - 1e-6
        down = tl.levels_loss(ys, HN, q, valid, 1.0, 1.0)[0]
        ys[j][ix] = old
        assert abs((up - down) / 2e-6 - dys[j][ix]) < 1e-6 * max(1.0, abs(dys[j][ix]))
        if not valid[j][ix[:2]]:
            assert dys[j][ix] == 0.0


# ---- drafting equals the windowed forward ---------------------------------------------------------

def test_incremental_drafting_equals_the_windowed_forward():
    """One window through `forward` (level 1) equals the draft's cache filled in pieces of 3, 1, 2, 1."""
    P = random_params()
    h, e, positions = window(B=1)
    want = dl.forward(P, TINY, h, e, positions, 1)[0][0][0]                   # [L, d]
    rot = dl.rotations(TINY, positions)[0].astype(np.complex128)
    cache = dl.LayerCache(TINY, capacity=2, dtype=np.float64)                # grows twice
    got = [cache.extend(P, h[0, a:b], e[0, a:b], rot[a:b]) for a, b in [(0, 3), (3, 4), (4, 6), (6, 7)]]
    err = np.abs(np.concatenate(got) - want).max()
    print(f"max |incremental - window| {err:.1e}")
    assert err < 1e-12


def drafted(P, h, e, rot, m: int, j: int):  # -> [d]
    """Step j of drafting started at window index m, one entry at a time: the true entries 0..m, then
    entries m+1 .. m+j-1 each from the previous one's prediction."""
    cache = dl.LayerCache(TINY, dtype=np.float64)
    y = cache.extend(P, h[:m + 1], e[:m + 1], rot[:m + 1])[-1]
    for a in range(m + 1, m + j):
        y = cache.extend(P, y[None], e[a:a + 1], rot[a:a + 1])[0]
    return y


def unrolled_error(P, J=3):
    h, e, positions = window(B=1, L=8)
    ys = dl.forward(P, TINY, h, e, positions, J)[0]
    rot = dl.rotations(TINY, positions)[0].astype(np.complex128)
    worst = 0.0
    for j in range(1, J + 1):
        for a in range(j - 1, 8):                                             # a = m + j - 1, m >= 0
            worst = max(worst, np.abs(ys[j - 1][0, a] - drafted(P, h[0], e[0], rot, a - j + 1, j)).max())
    return worst


def test_the_unrolled_mask_equals_step_by_step_drafting():
    err = unrolled_error(random_params())
    print(f"max |unrolled level - drafted step| {err:.1e}")
    assert err < 1e-12


def test_a_mask_that_shows_the_true_entry_of_the_step_being_drafted_is_caught(monkeypatch):
    """Negative control: level j seeing level 1 up to a - j + 2 (one true entry drafting does not have)."""
    right = dl.unrolled_mask

    def leaky(L, j):
        allowed = right(L, j).copy()
        a = np.arange(L)
        ok = a - j + 2 < L
        allowed[a[ok], (a - j + 2)[ok].clip(0)] |= j > 1
        return allowed

    monkeypatch.setattr(dl, "unrolled_mask", leaky)
    assert unrolled_error(random_params()) > 1e-3


def test_unrolled_mask_by_hand():
    m = dl.unrolled_mask(4, 2)                                                # level 2: level-1 keys, then level-2 keys
    assert m.shape == (4, 8)
    np.testing.assert_array_equal(m[:, :4], [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(m[:, 4:], np.eye(4, dtype=bool))
    np.testing.assert_array_equal(dl.unrolled_mask(3, 1), np.tril(np.ones((3, 3), bool)))


def test_rollback_then_another_branch_equals_a_fresh_cache():
    P = random_params()
    h, e, positions = window(B=1, L=8)
    rot = dl.rotations(TINY, positions)[0].astype(np.complex128)
    cache = dl.LayerCache(TINY, dtype=np.float64)
    cache.extend(P, h[0, :6], e[0, :6], rot[:6])
    cache.rollback(3)
    other = h[0, 3:5][::-1]
    got = cache.extend(P, other, e[0, 3:5], rot[3:5])
    fresh = dl.LayerCache(TINY, dtype=np.float64)
    fresh.extend(P, h[0, :3], e[0, :3], rot[:3])
    np.testing.assert_allclose(got, fresh.extend(P, other, e[0, 3:5], rot[3:5]), atol=1e-13)
    with pytest.raises(ValueError, match="cannot roll"):
        cache.rollback(6)


# ---- the model class, through a stand-in target ----------------------------------------------------

class StandIn:
    """A target with the interface LayerDraft reads (config, weights, cache, final_states): its state
    s_i is a fixed random recurrence of the tokens, computed for the positions not yet cached."""

    class Config:
        vocab_size, d_model, context_length = 50, 16, 128

    class Weights:
        def __init__(self, head):
            self.head = head

        def head_matrix(self):
            return self.head

        def embed(self, tokens):
            return self.head[:, tokens].T

    class Cache:
        def __init__(self):
            self.tokens, self.h, self.length = np.zeros(128, np.int64), np.zeros((128, 16), np.float32), 0

        def shared_prefix(self, tokens):
            m = min(self.length, len(tokens))
            differ = np.flatnonzero(self.tokens[:m] != tokens[:m])
            return int(differ[0]) if differ.size else m

    def __init__(self, seed=5):
        rng = np.random.default_rng(seed)
        self.config = self.Config()
        self.weights = self.Weights(rng.standard_normal((16, 50)).astype(np.float32))
        self.M = (rng.standard_normal((16, 16)) * 0.4).astype(np.float32)
        self.cache = self.Cache()
        self.calls = 0

    def final_states(self, tokens, k=1):
        c = self.cache
        c.length = c.shared_prefix(tokens)
        for i in range(c.length, len(tokens)):
            prev = c.h[i - 1] if i else np.zeros(16, np.float32)
            c.h[i] = np.tanh(self.weights.embed(tokens[i:i + 1])[0] + prev @ self.M)
            c.tokens[i] = tokens[i]
        c.length = len(tokens)
        self.calls += 1
        return c.h[len(tokens) - k:len(tokens)]


def layer_weights(seed=0) -> dl.LayerDraftWeights:
    kept = np.sort(np.random.default_rng(seed).choice(50, 20, replace=False)).astype(np.int64)
    return dl.LayerDraftWeights(random_params(seed=seed, dtype=np.float32), TINY, kept, {"note": "random, for tests"})


def window_rows(target, w, tokens, m):  # -> [n - 1, d]: s~ of positions 1..n-1, drafting from m
    """What the draft's states should be by `forward`: positions up to m from the target's states s_0..s_{m-1}
    (level 1), position m + j - 1 (j >= 2) the j-th drafted step (level j)."""
    n = len(tokens)
    S = target.cache.h[:m].astype(np.float64)
    h = np.zeros((1, n - 1, 16))
    h[0, :m] = S                                                              # h at position p is s_{p-1}
    e = target.weights.embed(tokens[1:]).astype(np.float64)[None]
    P = {k: v.astype(np.float64) for k, v in w.params.items()}
    ys = dl.forward(P, TINY, h, e, np.arange(1, n)[None], max(n - m, 1))[0]
    return np.array([ys[max(p - m, 0)][0, p - 1] for p in range(1, n)])


def test_the_model_class_equals_the_windowed_forward_after_rollbacks():
    target, w = StandIn(), layer_weights()
    tokens = np.array([3, 17, 4, 40, 22, 9, 31, 8, 12])
    draft = dl.LayerDraft(target, w)
    target.final_states(tokens[:5])                                          # the target holds s_0 .. s_4
    x = list(tokens[:6])
    for t in tokens[6:]:                                                      # draft 3 ahead, one row per call
        draft.next_probs(np.array(x), 1)
        x.append(int(t))
    assert draft.computed == 5 + 2                                           # positions 1..5, then 6, 7
    got = draft.states(tokens, 4)                                            # positions 5..8
    assert draft.computed == 8
    np.testing.assert_allclose(got, window_rows(target, w, tokens, 5)[4:], atol=2e-5)
    branch = np.concatenate([tokens[:7], [1, 2]])                            # roll back two, another branch
    got = draft.states(branch, 3)
    assert draft.computed == 10                                              # only the two new positions
    np.testing.assert_allclose(got, dl.LayerDraft(target, w).states(branch, 3), atol=1e-6)
    target.final_states(branch[:8])                                          # the target advances over the branch
    got = draft.states(branch, 2)
    np.testing.assert_allclose(got, window_rows(target, w, branch, 8)[-2:], atol=2e-5)
    assert draft.computed == 13                                              # positions 6, 7, 8 redone from true states
    # negative control: rows drafted before the target advanced differ from these
    assert np.abs(dl.LayerDraft(StandIn(), w).states(branch, 2) - got).max() > 1e-4


def test_protocol_rows_and_zeros_outside_the_kept_tokens():
    target, w = StandIn(), layer_weights(1)
    draft = dl.LayerDraft(target, w)
    tokens = np.array([5, 6, 7, 8, 9])
    rows = draft.next_probs(tokens, 3)
    assert target.calls == 1                                                 # the target read the prefix first
    assert rows.shape == (3, 50) and rows.dtype == np.float64
    np.testing.assert_allclose(rows.sum(1), 1.0, atol=1e-9)
    assert np.all(rows[:, np.setdiff1d(np.arange(50), w.kept)] == 0.0)
    every = draft(tokens)
    np.testing.assert_allclose(every[0, w.kept], 1.0 / len(w.kept))          # row 0: no state before it
    np.testing.assert_allclose(every[-3:], rows, atol=1e-6)


def test_bad_inputs_are_clear_errors(tmp_path):
    target, w = StandIn(), layer_weights()
    draft = dl.LayerDraft(target, w)
    with pytest.raises(ValueError, match="k = 0"):
        draft.next_probs([1, 2, 3], 0)
    with pytest.raises(ValueError, match="out of range"):
        draft.next_probs([1, 2, 99], 1)
    with pytest.raises(ValueError, match="need 1 <= k"):
        draft.states([1, 2, 3], 3)
    with pytest.raises(ValueError, match="multiple"):
        dl.LayerConfig(16, 3, 2, 4, 12).check()
    wide = dl.LayerDraftWeights(w.params, dl.LayerConfig(32, 4, 2, 4, 12), w.kept, {})
    with pytest.raises(nd.DraftError, match="wide"):
        dl.LayerDraft(target, wide)
    bad = dict(w.params, w_o=w.params["w_o"][:, :3])
    with pytest.raises(nd.DraftError, match="w_o has shape"):
        dl.LayerDraft(target, dl.LayerDraftWeights(bad, TINY, w.kept, {}))
    with pytest.raises(nd.DraftError, match="no draft layer file"):
        dl.load_layer_draft(tmp_path / "none.npz")


def test_files_round_trip_and_corruption(tmp_path):
    w = layer_weights()
    path = tmp_path / "layer.npz"
    sha = dl.save_layer_draft(path, w)
    assert sha == nd.file_sha256(path) and list(tmp_path.iterdir()) == [path]
    back = dl.load_layer_draft(path, V=50)
    assert back.config == TINY and back.meta["note"] == "random, for tests"
    for name in dl.PARAM_NAMES:
        np.testing.assert_array_equal(back.params[name], w.params[name])
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["w_down"] = arrays["w_down"] + 1.0
    np.savez(tmp_path / "tampered.npz", **arrays)
    with pytest.raises(nd.DraftError, match="do not match the digest"):
        dl.load_layer_draft(tmp_path / "tampered.npz", V=50)
    (tmp_path / "cut.npz").write_bytes(path.read_bytes()[:200])
    with pytest.raises(nd.DraftError, match="not a readable"):
        dl.load_layer_draft(tmp_path / "cut.npz", V=50)


def test_the_default_width_fits_in_30_mb():
    n = sum(int(np.prod(s)) for s in dl.LayerConfig().shapes().values())
    print(f"default draft layer: {n:,} parameters, {4 * n / 2**20:.1f} MiB in float32")
    assert 4 * n < 30 * 2**20
