"""Tree attention in specref.smollm2.model: one forward pass scores a whole tree of drafted tokens.

The tree (the same contract as the tree verifiers'): tokens [N] in topological order, parents [N]
with -1 for a child of the root (the prefix's last token), else j < i.  Row 0 of the result is the
row after the prefix, row i+1 the row after node i's root-to-node path.

The ladder: the mask and the positions on a hand-drawn tree (pure NumPy); then a tiny random model
(2 layers, 4 query heads sharing 2 key/value heads, V = 50; milliseconds) where the tree's rows equal
each path scored alone and the cache after `keep_path` equals a fresh recompute, with negative
controls (the causal mask, or RoPE positions by node index instead of depth, each miss the
tolerance by far); then the same on the real model, plain and fast path (slow tier).  Tolerances
are those of tests/smollm2/test_model.py: the same float32 computation in other row groupings,
1e-5 on probabilities and 1e-4 on logits, keys, values and states; every test prints the largest
difference it saw.
"""

import numpy as np
import pytest

from specref import trees
from specref.fast import fast_model
from specref.fast.plan import Plan
from specref.smollm2 import model as M
from specref.smollm2.model import SmolLM2, attention, causal_mask, tree_mask
from specref.smollm2.weights import Config, LayerWeights, Weights

# A tree of 7 nodes that branches at three depths (the root, node 0 and node 2 have two children):
#
#   root ─┬─ 0 ─┬─ 2 ─┬─ 5
#         │     │     └─ 6
#         │     └─ 3
#         └─ 1 ─── 4
PARENTS = [-1, -1, 0, 0, 1, 2, 2]
DEPTHS = [0, 0, 1, 1, 1, 2, 2]
SEES = np.array([          # SEES[i, j] = 1: node i attends to node j (j is on i's root-to-node path)
    #  0  1  2  3  4  5  6
    [1, 0, 0, 0, 0, 0, 0],  # 0
    [0, 1, 0, 0, 0, 0, 0],  # 1
    [1, 0, 1, 0, 0, 0, 0],  # 2
    [1, 0, 0, 1, 0, 0, 0],  # 3
    [0, 1, 0, 0, 1, 0, 0],  # 4
    [1, 0, 1, 0, 0, 1, 0],  # 5
    [1, 0, 1, 0, 0, 0, 1],  # 6
])


def paths(tree_tokens, parents) -> list:
    """Each node's root-to-node path of tokens (the chain a plain model would score)."""
    out = []
    for i, j in enumerate(parents):
        out.append((out[j] if j >= 0 else []) + [int(tree_tokens[i])])
    return out


def show(matrix) -> str:
    return "\n".join(" ".join(str(int(v)) for v in row) for row in matrix)


# --- the mask and the positions, pure NumPy ---------------------------------------------------------

def test_the_mask_and_positions_of_a_small_tree_are_the_hand_drawn_ones():
    mask = tree_mask(PARENTS)
    sees = (mask == 0).astype(int)
    print(f"tree mask (1 = attends), parents {PARENTS}:\n{show(sees)}\ndepths {trees.depths(PARENTS).tolist()}")
    assert mask.shape == (7, 7) and mask.dtype == np.float32
    np.testing.assert_array_equal(sees, SEES)
    assert set(np.unique(mask[sees == 0])) == {-np.inf}
    assert trees.depths(PARENTS).tolist() == DEPTHS


def test_attention_under_the_tree_mask_sees_the_prefix_and_the_own_path_only():
    """The attention as it runs: values that are one-hot per key make its output the attention weights."""
    n_prefix, N, Hkv, g = 3, 7, 2, 2
    T = n_prefix + N
    rng = np.random.default_rng(0)
    q = rng.standard_normal((N, Hkv * g, T), dtype=np.float32)                # [N, H, hd] with hd = T
    k_t = rng.standard_normal((Hkv, T, T), dtype=np.float32)                   # [Hkv, hd, T]
    v = np.broadcast_to(np.eye(T, dtype=np.float32), (Hkv, T, T)).copy()       # [Hkv, T, hd]: key t -> e_t
    weights = attention(q, k_t, v, tree_mask(PARENTS)).reshape(N, Hkv * g, T)  # [N, H, T]
    sees = (weights > 0).astype(int)                                           # [N, H, T]
    expected = np.hstack([np.ones((N, n_prefix), int), SEES])                  # [N, T]: every prefix key, then the path
    print(f"attention weights > 0 (3 prefix keys, then the 7 nodes):\n{show(sees[:, 0])}")
    for head in range(Hkv * g):
        np.testing.assert_array_equal(sees[:, head], expected)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_a_chain_is_the_tree_whose_mask_is_causal(n):
    chain = [-1] + list(range(n - 1))
    np.testing.assert_array_equal(tree_mask(chain), causal_mask(n))
    assert trees.depths(chain).tolist() == list(range(n))


def test_depth_follows_the_parent_not_the_index():
    assert trees.depths([-1, -1, -1, 2, 3, 1]).tolist() == [0, 0, 0, 1, 2, 1]
    assert (tree_mask([-1, -1, -1, 2, 3, 1]) == 0).sum(axis=1).tolist() == [1, 1, 1, 2, 3, 2]


# --- a tiny random model: the whole contract in milliseconds -----------------------------------------

def tiny_model(seed=0) -> SmolLM2:
    """2 layers, 4 query heads in 2 groups over 2 key/value heads, V = 50, context 64; random weights."""
    rng = np.random.default_rng(seed)
    c = Config(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96, vocab_size=50,
               context_length=64, rms_eps=1e-5, rope_base=10000.0)

    def m(d_in, d_out):
        return rng.standard_normal((d_in, d_out), dtype=np.float32) * np.float32(0.2)

    layers = tuple(LayerWeights(attn_norm=np.ones(64, np.float32), w_qkv=m(64, 128), w_o=m(64, 64),
                                ffn_norm=np.ones(64, np.float32), w_gate_up=m(64, 192), w_down=m(96, 64))
                   for _ in range(c.n_layers))
    return SmolLM2(Weights(config=c, head=m(64, 50), layers=layers, output_norm=np.ones(64, np.float32)))


TINY_PREFIX = [3, 1, 4, 1, 5, 9, 2, 6]
TINY_TREE = [7, 11, 13, 17, 19, 23, 29]


def tree_vs_paths(model, reference, prefix, tree_tokens, parents) -> tuple:
    """Largest |tree row - the row of its path scored alone| in probabilities and in logits."""
    probs = model.score_tree(prefix, tree_tokens, parents)                        # [N+1, V]
    logits = model.tree_logits(prefix, tree_tokens, parents)                      # [N+1, V]
    want_p = [reference.next_probs(prefix, 1)[0]] + [reference.next_probs(prefix + p, 1)[0]
                                                     for p in paths(tree_tokens, parents)]
    want_l = [reference.next_logits(prefix, 1)[0]] + [reference.next_logits(prefix + p, 1)[0]
                                                      for p in paths(tree_tokens, parents)]
    assert probs.shape == (len(tree_tokens) + 1, model.config.vocab_size) and probs.dtype == np.float64
    assert logits.dtype == np.float32
    return np.abs(probs - np.array(want_p)).max(), np.abs(logits - np.array(want_l)).max()


def test_tiny_tree_rows_equal_each_path_scored_alone():
    err_p, err_l = tree_vs_paths(tiny_model(), tiny_model(), TINY_PREFIX, TINY_TREE, PARENTS)
    print(f"tiny model, 7-node tree: max |tree - path alone| = {err_p:.2e} (probabilities), {err_l:.2e} (logits)")
    assert err_p < 1e-5 and err_l < 1e-4


@pytest.mark.parametrize("wrong", ["causal mask", "positions by index"])
def test_tiny_tree_with_the_wrong_mask_or_positions_misses_the_tolerance(wrong, monkeypatch):
    """Negative controls: the comparison above sees a chain's mask, and RoPE at prefix + index instead of + depth."""
    if wrong == "causal mask":
        monkeypatch.setattr(M, "tree_mask", lambda parents: causal_mask(len(parents)))
    else:
        monkeypatch.setattr(trees, "depths", lambda parents: np.arange(len(parents)))
    err_p, err_l = tree_vs_paths(tiny_model(), tiny_model(), TINY_PREFIX, TINY_TREE, PARENTS)
    print(f"{wrong}: max |tree - path alone| = {err_p:.2e} (probabilities), {err_l:.2e} (logits)")
    assert err_l > 1e-2


def test_tiny_chain_through_the_tree_equals_next_probs():
    model, chain = tiny_model(), [7, 11, 13, 17, 19]
    got = model.score_tree(TINY_PREFIX, chain, [-1, 0, 1, 2, 3])
    want = tiny_model().next_probs(TINY_PREFIX + chain, len(chain) + 1)
    err = np.abs(got - want).max()
    print(f"tiny model, chain of 5 as a tree: max |score_tree - next_probs| = {err:.2e}")
    assert err < 1e-5


def cache_state(model) -> dict:
    """Copies of the valid part of the cache: keys, values, token ids and final states."""
    c, n = model.cache, model.cache.length
    return {"k": [k[..., :n].copy() for k in c.k], "v": [v[:, :n].copy() for v in c.v],
            "h": c.h[:n].copy(), "tokens": c.tokens[:n].copy()}


def compare_caches(got: dict, want: dict) -> float:
    """Largest difference in keys, values and states; token ids must be equal."""
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    return max(max(np.abs(a - b).max() for a, b in zip(got["k"], want["k"])),
               max(np.abs(a - b).max() for a, b in zip(got["v"], want["v"])),
               np.abs(got["h"] - want["h"]).max())


def kept_vs_fresh(model, fresh, prefix, tree_tokens, parents, nodes, new) -> tuple:
    """Score the tree, keep the path `nodes`; compare the cache with a fresh recompute of prefix + path,
    then the next call's rows (path + [new]) with a fresh model's.  -> (cache difference, rows difference).

    The fresh model computes the prefix in one call and the path in the next, as the tree's caller
    did, so that the difference is the path's own (in one pass over all the prefix and path, the
    prefix's float32 sums group differently: 5e-5 on states of size 50 for the real model)."""
    model.score_tree(prefix, tree_tokens, parents)
    model.keep_path(nodes)
    path = [int(tree_tokens[i]) for i in nodes]
    kept = cache_state(model)
    fresh.reset()
    fresh.next_probs(prefix, 1)
    fresh.next_probs(prefix + path, 1)
    err_cache = compare_caches(kept, cache_state(fresh))
    after = prefix + path + [new]
    assert model.cache.shared_prefix(np.array(after)) == len(prefix) + len(path)   # the next call reuses it all
    got = model.next_probs(after, len(path) + 2)
    fresh.reset()
    err_rows = np.abs(got - fresh.next_probs(after, len(path) + 2)).max()
    return err_cache, err_rows


@pytest.mark.parametrize("nodes", [[0, 2, 6], [1, 4], [0, 3], []])
def test_tiny_cache_after_keep_path_equals_a_fresh_recompute(nodes):
    model = tiny_model()
    model.next_probs(TINY_PREFIX + [40, 41], 1)             # the cache holds something else past the prefix first
    err_cache, err_rows = kept_vs_fresh(model, tiny_model(), TINY_PREFIX, TINY_TREE, PARENTS, nodes, new=42)
    print(f"tiny model, path {nodes}: max |kept cache - fresh| = {err_cache:.2e}, next rows {err_rows:.2e}")
    assert model.cache.length == len(TINY_PREFIX) + len(nodes) + 1
    assert err_cache < 1e-4 and err_rows < 1e-5


def test_tiny_keep_path_with_positions_by_index_misses_the_tolerance(monkeypatch):
    """Negative control: had the keys been rotated for prefix + node index, the kept path [0, 2, 6] would
    hold keys rotated for the wrong positions, and the comparison above would say so."""
    monkeypatch.setattr(trees, "depths", lambda parents: np.arange(len(parents)))
    err_cache, err_rows = kept_vs_fresh(tiny_model(), tiny_model(), TINY_PREFIX, TINY_TREE, PARENTS, [0, 2, 6], 42)
    print(f"positions by index: max |kept cache - fresh| = {err_cache:.2e}, next rows {err_rows:.2e}")
    assert err_cache > 1e-2 and err_rows > 1e-3


def test_a_tree_scored_after_another_tree_starts_from_the_prefix():
    model = tiny_model()
    model.score_tree(TINY_PREFIX, [30, 31, 32], [-1, 0, 0])
    model.keep_path([0, 2])
    err_p, err_l = tree_vs_paths(model, tiny_model(), TINY_PREFIX + [30, 32], TINY_TREE, PARENTS)
    print(f"second tree after a kept path: {err_p:.2e} (probabilities), {err_l:.2e} (logits)")
    assert err_p < 1e-5 and err_l < 1e-4
    assert model.cache.length == len(TINY_PREFIX) + 2        # the tree waits beyond the length


@pytest.mark.parametrize("tree_tokens, parents, message", [
    ([], [], "the tree is empty"),
    ([1, 2, 3], [-1, 2, 0], r"parents\[1\] = 2 is not before node 1: nodes must be in topological order"),
    ([1, 2], [-1, 1], r"parents\[1\] = 1 is not before node 1"),
    ([1, 2], [-1, 5], r"parents\[1\] = 5 is out of range"),
    ([1, 2], [-2, 0], r"parents\[0\] = -2 is out of range"),
    ([1, 50], [-1, 0], "token id 50 is out of range in tree tokens"),
    ([1, -1], [-1, 0], "token id -1 is out of range in tree tokens"),
    ([1, 2], [-1], "parents must be a 1-D sequence of 2 integers"),
    ([1, 2], [-1.0, 0.0], "parents must be a 1-D sequence of 2 integers"),
    ([[1, 2]], [-1], "1-D"),
])
def test_a_bad_tree_is_a_clear_error(tree_tokens, parents, message):
    with pytest.raises(ValueError, match=message):
        tiny_model().score_tree(TINY_PREFIX, tree_tokens, parents)


def test_a_bad_prefix_or_a_tree_past_the_context_is_a_clear_error():
    model = tiny_model()
    with pytest.raises(ValueError, match="empty"):
        model.score_tree([], [1], [-1])
    with pytest.raises(ValueError, match="60 tokens and a tree of 5 nodes exceed the model's context of 64"):
        model.score_tree([1] * 60, [1] * 5, [-1] * 5)


def test_keep_path_refuses_what_is_not_a_path_of_the_last_tree():
    model = tiny_model()
    with pytest.raises(ValueError, match="keep_path must follow score_tree"):
        model.keep_path([0])
    model.score_tree(TINY_PREFIX, TINY_TREE, PARENTS)
    with pytest.raises(ValueError, match=r"not a path from the root: node 2's parent is 0, not -1"):
        model.keep_path([2])
    with pytest.raises(ValueError, match=r"node 4's parent is 1, not 0"):
        model.keep_path([0, 4])
    with pytest.raises(ValueError, match="node 7 is out of range: the tree has 7 nodes"):
        model.keep_path([0, 7])
    with pytest.raises(ValueError, match="1-D sequence of node indices"):
        model.keep_path([0.0])
    model.next_probs(TINY_PREFIX, 1)                       # another call writes over what lay beyond the cache
    with pytest.raises(ValueError, match="keep_path must follow score_tree"):
        model.keep_path([0])
    model.score_tree(TINY_PREFIX, TINY_TREE, PARENTS)
    model.keep_path([1, 4])
    with pytest.raises(ValueError, match="keep_path must follow score_tree"):   # once per tree
        model.keep_path([1, 4])


# --- the real model (slow tier) ---------------------------------------------------------------------

def real_case(model):
    """The chat prompt, and a 7-node tree (PARENTS) of ordinary tokens after it."""
    prefix = model.tokenizer.chat([{"role": "user", "content": "What is the capital of France?"}])
    tree_tokens = [504, 3575, 282, 314, 4649, 7042, 30]
    return list(prefix), tree_tokens


@pytest.mark.slow
def test_real_tree_rows_equal_each_path_scored_alone(smollm2):
    prefix, tree_tokens = real_case(smollm2)
    smollm2.reset()
    err_p, err_l = tree_vs_paths(smollm2, smollm2, prefix, tree_tokens, PARENTS)
    print(f"SmolLM2, 7-node tree: max |tree - path alone| = {err_p:.2e} (probabilities), {err_l:.2e} (logits)")
    assert err_p < 1e-5 and err_l < 1e-4


@pytest.mark.slow
def test_real_chain_through_the_tree_equals_next_probs(smollm2):
    prefix, _ = real_case(smollm2)
    chain = [504, 3575, 282, 4649, 314, 7042, 30]
    smollm2.reset()
    got = smollm2.score_tree(prefix, chain, [-1] + list(range(len(chain) - 1)))
    smollm2.reset()
    want = smollm2.next_probs(prefix + chain, len(chain) + 1)
    err = np.abs(got - want).max()
    print(f"SmolLM2, chain of 7 as a tree: max |score_tree - next_probs| = {err:.2e} "
          f"(next_probs computes the prefix and the chain in one pass)")
    assert err < 1e-5
    smollm2.reset()                                          # the prefix cached first for both: the same
    smollm2.next_probs(prefix, 1)                            # products on the same rows, the same mask
    got = smollm2.score_tree(prefix, chain, [-1] + list(range(len(chain) - 1)))
    smollm2.reset()
    smollm2.next_probs(prefix, 1)
    np.testing.assert_array_equal(got, smollm2.next_probs(prefix + chain, len(chain) + 1))


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [[0, 2, 5], [1, 4]])
def test_real_cache_after_keep_path_equals_a_fresh_recompute(smollm2, nodes):
    prefix, tree_tokens = real_case(smollm2)
    fresh = SmolLM2(smollm2.weights, smollm2.tokenizer)      # the same weights, its own cache
    smollm2.reset()
    err_cache, err_rows = kept_vs_fresh(smollm2, fresh, prefix, tree_tokens, PARENTS, nodes, new=30)
    print(f"SmolLM2, path {nodes}: max |kept cache - fresh| = {err_cache:.2e} (K, V, h), next rows {err_rows:.2e}")
    assert err_cache < 1e-4 and err_rows < 1e-5


@pytest.mark.slow
def test_the_fast_path_scores_a_tree_like_the_plain_paths(smollm2):
    """The commands run the fast path: its tree rows equal the plain model's paths, and keep_path works there too."""
    fast = fast_model(smollm2, Plan.fixed("panels", 1))   # a fixed plan: nothing measured
    prefix, tree_tokens = real_case(smollm2)
    smollm2.reset()
    err_p, err_l = tree_vs_paths(fast, smollm2, prefix, tree_tokens, PARENTS)
    print(f"fast path, 7-node tree: max |tree - plain path alone| = {err_p:.2e} (probabilities), {err_l:.2e} (logits)")
    # the fast path's products sum in another order: its logits agree with the plain ones to 5e-4
    # (tests/smollm2/test_fast.py), its probabilities to 2e-5
    assert err_p < 2e-5 and err_l < 5e-4
    err_cache, err_rows = kept_vs_fresh(fast, smollm2, prefix, tree_tokens, PARENTS, [0, 2, 6], new=30)
    print(f"fast path, path [0, 2, 6]: max |kept cache - plain fresh| = {err_cache:.2e}, next rows {err_rows:.2e}")
    assert err_cache < 5e-4 and err_rows < 2e-5
