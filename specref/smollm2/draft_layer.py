"""A draft for SmolLM2 with one decoder layer: EAGLE's design (Li et al. 2024), trained here.

The MLP draft (`specref.smollm2.draft`) predicts the target's next final state from one state and
one token.  EAGLE's draft reads the whole sequence of its own features instead: at position i

    u_i = [s_{i-1}, e(x_i)]                              # [2d]: the state before, the newest token
    x_i = u_i W_in + b_in                                # [d]: the draft's feature
    x_i <- x_i + attn(rms_norm(x_i)) W_o                 # grouped-query causal attention over x_1..x_i,
                                                         #   RoPE at the target's positions i
    x_i <- x_i + swiglu(rms_norm(x_i))                   # the target's feed-forward form
    s~_i = rms_norm(x_i) * out_norm                      # lives where the target's final state s_i lives

one pre-norm decoder layer like each of the target's 30, and the same read-out as the MLP draft:
p_i = softmax(s~_i H_N) on the N kept tokens, 0 elsewhere (exact under modified rejection sampling).
Position 0 has no state before it, so the draft's entries start at position 1.

Drafting K tokens after the target has processed tokens[:m] (its states s_0 .. s_{m-1}): the draft's
entries for positions 1..m come from the target's true states; entry m+j (j >= 1) takes the draft's
own prediction s~_{m+j-1} in place of s_{m+j-1} and attends to the true entries up to m and its own
drafted entries m+1 .. m+j.  Training sees the same thing (EAGLE-3's "training-time test", Li et
al. 2025): `forward` unrolls J levels over a window, level j at window index a being the j-th
drafted step of a run that started at a - j + 1 (`unrolled_mask`).

Parameters (names are the file's keys; those of the layer are the target's `LayerWeights` names, so
the layer can start from the target's last decoder layer):
    w_in [2d, d], b_in [d]           the feature map
    attn_norm [d], w_qkv [d, q + 2kv], w_o [q, d]        attention (Q, K in the GGUF RoPE pair layout)
    ffn_norm [d], w_gate_up [d, 2f], w_down [f, d]       SwiGLU
    out_norm [d]                     the final RMSNorm's gain
Every backward pass below is written by hand and checked against finite differences in
tests/smollm2/test_draft_layer.py; the network runs in the parameters' dtype (float32 in use,
float64 in those checks).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import zipfile
from dataclasses import asdict, dataclass

import numpy as np

from specref.files import replacing
from specref.smollm2 import draft as nd
from specref.smollm2.model import rope_rotations

PARAM_NAMES = ("w_in", "b_in", "attn_norm", "w_qkv", "w_o", "ffn_norm", "w_gate_up", "w_down", "out_norm")
FORMAT = "specref-layer-draft"
VERSION = 1


@dataclass(frozen=True)
class LayerConfig:
    """The draft layer's widths; d_model, rms_eps and rope_base are the target's."""

    d_model: int = 576  # the target's state width
    n_heads: int = 9  # query heads
    n_kv_heads: int = 3  # key/value heads, each shared by n_heads / n_kv_heads query heads
    head_dim: int = 64
    d_ff: int = 1536  # SwiGLU hidden width
    rms_eps: float = 1e-5
    rope_base: float = 100000.0

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def shapes(self) -> dict:
        """name -> shape of every parameter."""
        d, f = self.d_model, self.d_ff
        return {"w_in": (2 * d, d), "b_in": (d,), "attn_norm": (d,), "w_qkv": (d, self.q_dim + 2 * self.kv_dim),
                "w_o": (self.q_dim, d), "ffn_norm": (d,), "w_gate_up": (d, 2 * f), "w_down": (f, d),
                "out_norm": (d,)}

    def check(self) -> None:
        if min(self.d_model, self.n_heads, self.n_kv_heads, self.head_dim, self.d_ff) < 1 or self.head_dim % 2:
            raise ValueError(f"a draft layer needs positive widths and an even head_dim, got {self}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads = {self.n_heads} is not a multiple of n_kv_heads = {self.n_kv_heads}")


def like_target(target_config, n_heads: int = 9, n_kv_heads: int = 3, head_dim: int = 64,
                d_ff: int = 1536) -> LayerConfig:
    """A LayerConfig for a target (d_model, rms_eps and rope_base are the target's)."""
    return LayerConfig(target_config.d_model, n_heads, n_kv_heads, head_dim, d_ff, target_config.rms_eps,
                       target_config.rope_base)


# ---- pieces, forward and backward ----------------------------------------------------------------

def rms_norm(x, g, eps):  # [..., d], [d] -> y [..., d], r [..., 1]
    """RMSNorm (as the target's) and the reciprocal root-mean-square r the backward pass needs."""
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * r * g, r


def rms_norm_backward(x, r, g, dy):  # [..., d], [..., 1], [d], [..., d] -> dx [..., d], dg [d]
    """y = x r g with r = (mean x^2 + eps)^(-1/2): dx = r (dy g - x r^2 mean(dy g x))."""
    dn = dy * g
    dx = r * (dn - x * (r * r) * (dn * x).mean(-1, keepdims=True))
    return dx, (dy * x * r).reshape(-1, x.shape[-1]).sum(0)


def rotate(x, rot):  # [..., n, h, hd], [..., n, hd/2] complex -> [..., n, h, hd]
    """RoPE in the GGUF pair layout (as `specref.smollm2.model.rope`): (x[2j], x[2j+1]) is a complex
    number turned by rot; conj(rot) turns it back (the backward pass)."""
    cdt = np.complex64 if x.dtype == np.float32 else np.complex128
    z = np.ascontiguousarray(x).view(cdt)
    return (z * rot[..., None, :].astype(cdt)).view(x.dtype)


def silu_parts(a):  # [...] -> silu(a), sigmoid(a)
    sg = 0.5 + 0.5 * np.tanh(0.5 * a)
    return a * sg, sg


def causal(n: int, T: int):  # -> [n, T] bool
    """Query i (the i-th of the last n of T entries) sees entries up to its own."""
    return np.arange(T)[None, :] <= np.arange(T - n, T)[:, None]


def unrolled_mask(L: int, j: int):  # -> [L, j L] bool
    """What level j sees (keys: level 1's L entries, then level 2's, ... level j's).

    Level j at window index a is the j-th drafted step of a run that started at a - j + 1: it sees
    level 1 (the entries made from the target's true states) up to a - j + 1, and level k's entry at
    a - j + k for k = 2..j (the run's own drafted entries, itself last).  Level 1 is causal.
    """
    a = np.arange(L)[:, None]
    b = np.arange(L)[None, :]
    blocks = [b <= a - j + 1] + [b == a - j + k for k in range(2, j + 1)]
    return np.concatenate(blocks, axis=1)


def attend(q, k, v, allowed):  # [B, n, H, hd], [B, Hkv, T, hd], [B, Hkv, T, hd], [n, T] -> [B, n, H*hd], probs
    """Grouped-query attention: query head h reads key/value head h // (H / Hkv)."""
    B, n, H, hd = q.shape
    Hkv = k.shape[1]
    qg = q.reshape(B, n, Hkv, H // Hkv, hd).transpose(0, 2, 3, 1, 4)            # [B, Hkv, g, n, hd]
    scores = (qg @ k[:, :, None].swapaxes(-1, -2)) * hd ** -0.5              # [B, Hkv, g, n, T]
    scores = np.where(allowed, scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = probs @ v[:, :, None]                                                # [B, Hkv, g, n, hd]
    return out.transpose(0, 3, 1, 2, 4).reshape(B, n, H * hd), probs


def attend_backward(q, k, v, probs, dout):  # ..., [B, n, H*hd] -> dq [B, n, H, hd], dk, dv [B, Hkv, T, hd]
    B, n, H, hd = q.shape
    Hkv = k.shape[1]
    g = H // Hkv
    qg = q.reshape(B, n, Hkv, g, hd).transpose(0, 2, 3, 1, 4)                   # [B, Hkv, g, n, hd]
    do = dout.reshape(B, n, Hkv, g, hd).transpose(0, 2, 3, 1, 4)               # [B, Hkv, g, n, hd]
    dv = (probs.swapaxes(-1, -2) @ do).sum(2)                                  # [B, Hkv, T, hd]
    dp = do @ v[:, :, None].swapaxes(-1, -2)                                   # [B, Hkv, g, n, T]
    ds = probs * (dp - (dp * probs).sum(-1, keepdims=True)) * hd ** -0.5      # through the softmax
    dq = ds @ k[:, :, None]                                                    # [B, Hkv, g, n, hd]
    dk = (ds.swapaxes(-1, -2) @ qg).sum(2)                                     # [B, Hkv, T, hd]
    return dq.transpose(0, 3, 1, 2, 4).reshape(B, n, H, hd), dk, dv


def entries(P: dict, c: LayerConfig, h, e, rot):  # [B, n, d] x2, [B, n, hd/2] -> x, q, k, v, cache
    """The feature x = [h, e] W_in + b_in and its queries, keys and values (RoPE applied)."""
    B, n, d = h.shape
    u = np.concatenate([h, e], -1)                                             # [B, n, 2d]
    x = u @ P["w_in"] + P["b_in"]                                              # [B, n, d]
    a, ra = rms_norm(x, P["attn_norm"], c.rms_eps)
    qkv = a @ P["w_qkv"]                                                       # [B, n, q + 2kv]
    q = rotate(qkv[..., :c.q_dim].reshape(B, n, c.n_heads, c.head_dim), rot)
    k = rotate(qkv[..., c.q_dim:c.q_dim + c.kv_dim].reshape(B, n, c.n_kv_heads, c.head_dim), rot)
    v = qkv[..., c.q_dim + c.kv_dim:].reshape(B, n, c.n_kv_heads, c.head_dim)
    return x, q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), (u, x, a, ra)  # k, v [B, Hkv, n, hd]


def finish(P: dict, c: LayerConfig, x, mixed):  # [B, n, d], [B, n, q] -> s~ [B, n, d], cache
    """The attention's output projection and residual, SwiGLU and its residual, the final RMSNorm."""
    x2 = x + mixed @ P["w_o"]
    f2, r2 = rms_norm(x2, P["ffn_norm"], c.rms_eps)
    gu = f2 @ P["w_gate_up"]
    gate, up = gu[..., :c.d_ff], gu[..., c.d_ff:]
    sg_gate, sg = silu_parts(gate)
    act = sg_gate * up                                                          # [B, n, f]
    x3 = x2 + act @ P["w_down"]
    y, r3 = rms_norm(x3, P["out_norm"], c.rms_eps)
    return y, (mixed, x2, f2, r2, gate, up, sg_gate, sg, act, x3, r3)


def flat(a):  # [..., m] -> [rows, m]
    return a.reshape(-1, a.shape[-1])


def finish_backward(P: dict, c: LayerConfig, cache, dy, grads: dict):  # dy [B, n, d] -> dx [B, n, d], dmixed
    """Backward through `finish`, adding into grads; returns the gradients of its inputs x and mixed."""
    mixed, x2, f2, r2, gate, up, sg_gate, sg, act, x3, r3 = cache
    dx3, grads["out_norm"] = rms_norm_backward(x3, r3, P["out_norm"], dy)
    grads["w_down"] = flat(act).T @ flat(dx3)
    dact = dx3 @ P["w_down"].T
    dgate = dact * up * (sg * (1 + gate * (1 - sg)))                            # silu' = sg (1 + a (1 - sg))
    dgu = np.concatenate([dgate, dact * sg_gate], -1)                           # [B, n, 2f]
    grads["w_gate_up"] = flat(f2).T @ flat(dgu)
    dx2, grads["ffn_norm"] = rms_norm_backward(x2, r2, P["ffn_norm"], dgu @ P["w_gate_up"].T)
    dx2 = dx2 + dx3
    grads["w_o"] = flat(mixed).T @ flat(dx2)
    return dx2, dx2 @ P["w_o"].T


def entries_backward(P: dict, c: LayerConfig, cache, rot, dx, dq, dk, dv, grads: dict):  # -> dh [B, n, d]
    """Backward through `entries` (dk, dv [B, Hkv, n, hd] as it returns them), adding into grads;
    returns the gradient of its input h (e is the target's embedding, not trained)."""
    u, x, a, ra = cache
    B, n, d = x.shape
    back = np.conj(rot)
    dqkv = np.concatenate([rotate(dq, back).reshape(B, n, c.q_dim),
                           rotate(dk.transpose(0, 2, 1, 3), back).reshape(B, n, c.kv_dim),
                           dv.transpose(0, 2, 1, 3).reshape(B, n, c.kv_dim)], -1)
    grads["w_qkv"] = grads.get("w_qkv", 0) + flat(a).T @ flat(dqkv)
    dxa, dg = rms_norm_backward(x, ra, P["attn_norm"], dqkv @ P["w_qkv"].T)
    grads["attn_norm"] = grads.get("attn_norm", 0) + dg
    dx = dx + dxa
    grads["w_in"] = grads.get("w_in", 0) + flat(u).T @ flat(dx)
    grads["b_in"] = grads.get("b_in", 0) + flat(dx).sum(0)
    return (dx @ P["w_in"].T)[..., :d]


def _add(grads: dict, more: dict) -> None:
    for name, g in more.items():
        grads[name] = grads[name] + g if name in grads else g


# ---- windows, unrolled -------------------------------------------------------------------------

def rotations(c: LayerConfig, positions):  # [B, L] int -> [B, L, hd/2] complex64
    """RoPE's rotations at the target's positions (the first position of a sequence is 0)."""
    table = rope_rotations(int(np.max(positions)) + 1, c.head_dim, c.rope_base)
    return table[positions]


def forward(P: dict, c: LayerConfig, h, e, positions, J: int = 1):  # [B, L, d] x2, [B, L] -> J x [B, L, d], cache
    """The draft over windows of L consecutive positions, unrolled J levels (EAGLE-3's training-time test).

    h[:, a] = s_{i-1} (the target's state before position i = positions[:, a]), e[:, a] = e(x_i).
    Level 1 is the draft on the target's true states; level j takes level j-1's prediction at a - 1 in
    place of h[:, a] and attends as `unrolled_mask` says, so its output at a is what drafting j steps
    from the true context up to a - j + 1 gives (rows a < j - 1 started before the window: ignore them).
    """
    rot = rotations(c, positions).astype(np.complex64 if P["w_in"].dtype == np.float32 else np.complex128)
    L = h.shape[1]
    ys, caches, ks, vs = [], [], [], []
    for j in range(1, J + 1):
        hin = h if j == 1 else np.concatenate([h[:, :1], ys[-1][:, :-1]], 1)   # [B, L, d]: the chain
        x, q, k, v, ecache = entries(P, c, hin, e, rot)
        ks.append(k)
        vs.append(v)
        kk, vv = np.concatenate(ks, 2), np.concatenate(vs, 2)                 # [B, Hkv, j L, hd]
        mixed, probs = attend(q, kk, vv, unrolled_mask(L, j))
        y, fcache = finish(P, c, x, mixed)
        ys.append(y)
        caches.append((ecache, q, probs, fcache))
    return ys, (rot, ks, vs, caches)


def backward(P: dict, c: LayerConfig, cache, dys) -> dict:  # J x [B, L, d] -> gradients, one per parameter
    """Gradients of a loss with respect to every parameter, given dloss/dy for every level's output."""
    rot, ks, vs, caches = cache
    J = len(caches)
    L = ks[0].shape[2]
    grads: dict = {}
    dks = [np.zeros_like(k) for k in ks]
    dvs = [np.zeros_like(v) for v in vs]
    dchain = np.zeros_like(dys[0])                                             # dloss / d(level j's output) from level j+1
    for j in range(J, 0, -1):                                                  # levels in reverse: j's keys collect
        ecache, q, probs, fcache = caches[j - 1]                               # from every level >= j first
        fgrads: dict = {}
        dx, dmixed = finish_backward(P, c, fcache, dys[j - 1] + dchain, fgrads)
        _add(grads, fgrads)
        dq, dkk, dvv = attend_backward(q, np.concatenate(ks[:j], 2), np.concatenate(vs[:j], 2), probs, dmixed)
        for level in range(j):
            dks[level] += dkk[:, :, level * L:(level + 1) * L]
            dvs[level] += dvv[:, :, level * L:(level + 1) * L]
        dh = entries_backward(P, c, ecache, rot, dx, dq, dks[j - 1], dvs[j - 1], grads)
        dchain = np.zeros_like(dh)
        dchain[:, :-1] = dh[:, 1:]                                             # level j's input at a was level j-1's output at a-1
    return grads


# ---- drafting: one sequence, its own cache ------------------------------------------------------

class LayerCache:
    """The draft layer's keys and values for positions 1..length of one sequence (position p at slot p-1),
    with each entry's prediction s~_p; rollback is truncation."""

    def __init__(self, c: LayerConfig, capacity: int = 64, dtype=np.float32):
        self.c, self.length, self.dtype = c, 0, dtype
        self.k = np.zeros((c.n_kv_heads, capacity, c.head_dim), dtype)
        self.v = np.zeros_like(self.k)
        self.pred = np.zeros((capacity, c.d_model), dtype)

    def rollback(self, length: int) -> None:
        """Keep the entries of positions 1..length only."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll a draft cache of {self.length} entries back to {length}")
        self.length = length

    def _reserve(self, n: int) -> None:
        if n > self.k.shape[1]:
            cap = max(n, 2 * self.k.shape[1])
            k, v, pred = (np.zeros((self.c.n_kv_heads, cap, self.c.head_dim), self.dtype),
                          np.zeros((self.c.n_kv_heads, cap, self.c.head_dim), self.dtype),
                          np.zeros((cap, self.c.d_model), self.dtype))
            m = self.length
            k[:, :m], v[:, :m], pred[:m] = self.k[:, :m], self.v[:, :m], self.pred[:m]
            self.k, self.v, self.pred = k, v, pred

    def extend(self, P: dict, h, e, rot):  # [n, d], [n, d], [n, hd/2] -> s~ [n, d]
        """Entries for the next n positions (each sees every earlier entry and itself); returns their s~."""
        n = h.shape[0]
        m = self.length
        self._reserve(m + n)
        x, q, k, v, _ = entries(P, self.c, h[None], e[None], rot[None])
        self.k[:, m:m + n], self.v[:, m:m + n] = k[0], v[0]
        mixed, _ = attend(q, self.k[None, :, :m + n], self.v[None, :, :m + n], causal(n, m + n))
        y = finish(P, self.c, x, mixed)[0][0]                                  # [n, d]
        self.pred[m:m + n] = y
        self.length = m + n
        return y


# ---- files ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerDraftWeights:
    """The draft layer's parameters, its configuration, its kept tokens and what produced them."""

    params: dict  # name -> float32 array (PARAM_NAMES)
    config: LayerConfig
    kept: np.ndarray  # [N] int64 sorted token ids
    meta: dict


def check_params(params: dict, c: LayerConfig, kept: np.ndarray, V: int) -> None:
    """DraftError unless every parameter has the shape `c` gives, is finite, and the kept ids are valid."""
    c.check()
    for name, shape in c.shapes().items():
        if name not in params:
            raise nd.DraftError(f"draft layer parameter {name} is missing")
        if params[name].shape != shape:
            raise nd.DraftError(f"draft layer parameter {name} has shape {params[name].shape}, expected {shape}")
        if not np.all(np.isfinite(params[name])):
            raise nd.DraftError(f"draft layer parameter {name} contains NaN or infinity")
    if kept.ndim != 1 or kept.size < 2 or kept.min() < 0 or kept.max() >= V or np.any(np.diff(kept) <= 0):
        raise nd.DraftError(f"kept token ids must be a sorted 1-D array of distinct ids in [0, {V}), got shape {kept.shape}")


def params_digest(params: dict, c: LayerConfig, kept: np.ndarray) -> str:
    """SHA-256 over the configuration, the parameters (fixed order, shapes included) and the kept ids."""
    h = hashlib.sha256(json.dumps(asdict(c), sort_keys=True).encode())
    for name in PARAM_NAMES:
        a = np.ascontiguousarray(params[name], np.float32)
        h.update(name.encode() + str(a.shape).encode() + a.tobytes())
    h.update(np.ascontiguousarray(kept, np.int64).tobytes())
    return h.hexdigest()


def save_layer_draft(path, w: LayerDraftWeights) -> str:
    """Write the draft whole or not at all (`specref.files.replacing`); return the file's SHA-256."""
    meta = dict(w.meta, format=FORMAT, version=VERSION, config=asdict(w.config),
                params_sha256=params_digest(w.params, w.config, w.kept))
    with replacing(path, "wb") as f:
        np.savez(f, kept=w.kept.astype(np.int32), meta=np.array(json.dumps(meta)),
                 **{n: w.params[n].astype(np.float32) for n in PARAM_NAMES})
    return nd.file_sha256(path)


def load_layer_draft(path, V: int = 49152) -> LayerDraftWeights:
    """Read a draft layer file and check it against its own digest."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise nd.DraftError(f"no draft layer file at {path}; train one with `python -m specref.apps.train_layer`")
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            params = {n: z[n].astype(np.float32) for n in PARAM_NAMES if n in z.files}
            kept = z["kept"].astype(np.int64)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise nd.DraftError(f"{path} is not a readable draft layer file ({e})") from e
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise nd.DraftError(f"{path} is not a {FORMAT} file of version {VERSION} (found {meta.get('format')!r} "
                            f"version {meta.get('version')!r})")
    c = LayerConfig(**meta["config"])
    check_params(params, c, kept, V)
    if params_digest(params, c, kept) != meta.get("params_sha256"):
        raise nd.DraftError(f"{path} is corrupt: its parameters do not match the digest stored with them")
    return LayerDraftWeights(params, c, kept, meta)


# ---- the draft as a specref model ------------------------------------------------------------------

class LayerDraft(nd.NeuralDraft):
    """The draft layer as a specref model: next_probs(tokens, k) -> float64 [k, V], 0 outside the kept tokens.

    The contract and the conventions are NeuralDraft's (its next_probs and __call__ are used as they
    are): row i is softmax(s~_i H_N); position i's entry comes from the target's own s_{i-1} when the
    target has processed tokens[:i], else from the draft's own s~_{i-1}; if the target holds none of
    the tokens, or is more than MAX_AHEAD positions behind, it first runs on the prefix; row 0 is
    uniform over the kept tokens.  Unlike the MLP, every entry attends to the ones before it, so the
    draft keeps an entry for every position 1..n-1 (`LayerCache`).  A call sharing a prefix with the
    last one keeps the entries of that prefix whose source (the target's state or the draft's own) is
    unchanged, truncates the rest (rollback) and computes the positions after it: those the target
    has processed in one pass, then the drafted ones one at a time.
    """

    def __init__(self, target, weights: LayerDraftWeights):
        self.target = target
        self.V = target.config.vocab_size
        if weights.config.d_model != target.config.d_model:
            raise nd.DraftError(f"the draft layer is {weights.config.d_model} wide, the target's states "
                                f"{target.config.d_model}")
        check_params(weights.params, weights.config, weights.kept, self.V)
        self.weights, self.c = weights, weights.config
        self.beta = np.float32(nd.logit_scale(weights.meta))   # 1 unless the file records another
        self.P = {n: np.ascontiguousarray(weights.params[n], np.float32) for n in PARAM_NAMES}
        self.kept = weights.kept
        self.HN = np.ascontiguousarray(target.weights.head_matrix()[:, self.kept])   # [d, N]
        self.rot = rope_rotations(target.config.context_length, self.c.head_dim, self.c.rope_base)
        self.cache = LayerCache(self.c)
        self.tokens = np.zeros(0, np.int64)   # the tokens of the last call
        self.L = 0                            # the target prefix its entries were made with
        self.computed = 0                     # entries computed so far (tests count them)

    def states(self, tokens, k: int) -> np.ndarray:  # [n], int -> float32 [k, d]
        """The draft's predicted states s~ of the last k positions (k < n: position 0 has none)."""
        a, first, L = nd.target_states_for(self.target, tokens, k, self.V)
        n, target = len(a), self.target.cache
        keep = min(self._shared(a) - 1, self.cache.length)   # entry p depends on tokens[:p + 1]
        if L != self.L:                                        # entries whose source changed are redone
            keep = min(keep, L, self.L)
        self.cache.rollback(max(keep, 0))
        m = self.cache.length
        true_end = min(L, n - 1)                  # positions m+1 .. true_end from the target's states
        if true_end > m:
            p = np.arange(m + 1, true_end + 1)
            self.cache.extend(self.P, target.h[p - 1], self.target.weights.embed(a[p]), self.rot[p])
            self.computed += len(p)
        for p in range(self.cache.length + 1, n):  # later positions from the draft's own predictions
            self.cache.extend(self.P, self.cache.pred[p - 2:p - 1], self.target.weights.embed(a[p:p + 1]),
                              self.rot[p:p + 1])
            self.computed += 1
        self.tokens, self.L = a, L
        return self.cache.pred[first - 1:n - 1].copy()

    def __repr__(self) -> str:
        c = self.c
        return f"LayerDraft(heads={c.n_heads}/{c.n_kv_heads}, d_ff={c.d_ff}, kept={len(self.kept)})"
