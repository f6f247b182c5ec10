"""A draft model for SmolLM2, trained here from the target itself: the target's features, one small
network, and the target's own head over the most frequent tokens.

The design (EAGLE's idea, Li et al. 2024, at small scale).  After the target has processed a
prefix, its cache holds the final normed state s_i of every position i (s_i predicts token i+1).
The draft predicts the state one position further from the state before and the next token:

    s~_i = f(s_{i-1}, e(x_i)),   f(h, e) = u A + b + silu(u W1 + b1) W2,   u = [h, e]   # [2d] -> [d]

with e the target's token embedding (the tied head's row), and reads out a distribution with the
target's head restricted to the N tokens kept (the most frequent in the training text):

    p_i = softmax(beta s~_i H_N) on the kept tokens, 0 elsewhere,

beta (the file's meta "logit_scale", 1 where absent) an inverse temperature chosen after training on
held-out code (`specref.apps.draft_calibrate`): the draft is trained at beta = 1 and comes out flatter
than the target, so a beta above 1 raises alpha.  p = 0 outside the kept tokens is exact under
modified rejection sampling: those tokens are never proposed, and the target's mass on them comes
back through the residual.  Drafting K tokens
ahead, the first step uses the target's true state (the target has processed every token but the
newest), later steps the draft's own prediction s~ in place of s.

Parameters (float32, names are the file's keys):
    A [2d, d], b [d]          the linear part (initialised by ridge regression s_{i-1}, e(x_i) -> s_i)
    W1 [2d, H], b1 [H]        the SiLU layer
    W2 [H, d]                 its output (initialised to 0: training starts from the linear map)
    kept [N] int32            the kept token ids, sorted

A draft trained with --features (EAGLE-3's inputs, Li et al. 2025) reads more than s_{i-1}: h is
[s_{i-1}, the target's residual after each listed block at the last position the target has scored],
so A and W1 have (2 + f) d rows for f layers (meta["config"]["features"]; the shipped draft reads
blocks 2, 15 and 27).  Training reads them from the data (`specref.apps.draft_features`); `NeuralDraft`
from the target's cache, which it asks to keep them (`KVCache.keep_features`).

Training (`specref.apps.train_draft`) minimises, through the restricted head, the forward KL to the
target's distribution plus the total variation 1 - alpha (what speculative sampling rewards: alpha =
sum_x min(p, q) = 1 - TV).  The backward passes below are written by hand and checked against finite
differences in the tests.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import weakref
import zipfile
from dataclasses import dataclass

import numpy as np

from specref.files import replacing
from specref.sampling import check_tokens

D_MODEL = 576
PARAM_NAMES = ("A", "b", "W1", "b1", "W2")
MAX_AHEAD = 16  # the draft chains its own predictions at most this far past the target's last state
FORMAT = "specref-neural-draft"
VERSION = 1

# The draft that ships with the repository: the train-draft command its meta records trained it and
# `python -m specref.apps.draft_calibrate` chose its beta; its SHA-256 is checked on load.
SHIPPED_PATH = pathlib.Path(__file__).resolve().parent / "draft.npz"
SHIPPED_SHA256 = "0b98aec84cb6b94c22949773d2bd88dd7ab219cc3c8213fbe029755e7509376e"


class DraftError(Exception):
    """A draft file that is missing, corrupt or of the wrong shape."""


# ---- the network, forward and backward ---------------------------------------------------------

def silu_parts(a):  # [...] -> (silu(a), sigmoid(a))
    """silu(a) = a sigmoid(a), and sigmoid(a) (written with tanh: no overflow for large |a|)."""
    sg = np.float32(0.5) + np.float32(0.5) * np.tanh(np.float32(0.5) * a)
    return a * sg, sg


def net_forward(P: dict, h, e):  # [B, d], [B, d] -> s~ [B, d], cache
    """The predicted next state f(h, e) and what the backward pass needs."""
    u = np.concatenate([h, e], axis=1)                          # [B, 2d]
    a1 = u @ P["W1"] + P["b1"]                                  # [B, H]
    s, sg = silu_parts(a1)
    y = u @ P["A"] + P["b"] + s @ P["W2"]                       # [B, d]
    return y, (u, a1, s, sg)


def net_backward(P: dict, cache, dy) -> dict:  # dy [B, d] -> gradients, one per parameter
    """Gradients of a loss with respect to every parameter, given dloss/dy."""
    u, a1, s, sg = cache
    ds = dy @ P["W2"].T                                         # [B, H]
    da1 = ds * (sg * (1 + a1 * (1 - sg)))                       # silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a)))
    return {"A": u.T @ dy, "b": dy.sum(0), "W1": u.T @ da1, "b1": da1.sum(0), "W2": s.T @ dy}


def softmax(z):  # [..., N] -> [..., N]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def head_loss(y, HN, q, kl_weight: float = 1.0, tv_weight: float = 1.0):  # [B, d], [d, N], [B, N] -> loss, dy, alpha
    """Mean of kl_weight * KL-part + tv_weight * (1 - alpha) over the batch, its gradient in y, and mean alpha.

    q holds the target's probabilities of the kept tokens (its full-vocabulary distribution
    restricted, so each row sums to at most 1).  The KL part is the cross-entropy -sum q log p
    (the target's entropy is a constant); the TV part is 1 - sum min(p, q) = 1 - alpha.
    """
    B = y.shape[0]
    p = softmax(y @ HN)                                         # [B, N]
    alpha = np.minimum(p, q).sum(1)                             # [B]
    loss = 0.0
    dz = np.zeros_like(p)
    if kl_weight:
        loss += kl_weight * float(-(q * np.log(p + 1e-30)).sum(1).mean())
        dz += kl_weight * (p * q.sum(1, keepdims=True) - q)     # d/dz of -sum q log softmax(z)
    if tv_weight:
        loss += tv_weight * float((1.0 - alpha).mean())
        g = -(p < q).astype(p.dtype)                            # d(1 - sum min(p, q)) / dp
        dz += tv_weight * p * (g - (p * g).sum(1, keepdims=True))  # through the softmax
    return loss, (dz / B) @ HN.T, float(alpha.mean())


# ---- files ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DraftWeights:
    """The draft's parameters, its kept tokens and what produced them."""

    params: dict  # name -> float32 array (PARAM_NAMES)
    kept: np.ndarray  # [N] int64 sorted token ids
    meta: dict  # command, seed, configuration, held-out measurements

    @property
    def hidden(self) -> int:
        return self.params["W1"].shape[1]

    @property
    def scale(self) -> float:
        """beta, the inverse temperature of the draft's logits (meta "logit_scale"; 1 for a draft not calibrated)."""
        return logit_scale(self.meta)


def params_digest(params: dict, kept: np.ndarray) -> str:
    """SHA-256 over the parameters and kept ids (fixed order, shapes included)."""
    h = hashlib.sha256()
    for name in PARAM_NAMES:
        a = np.ascontiguousarray(params[name], np.float32)
        h.update(name.encode() + str(a.shape).encode() + a.tobytes())
    h.update(np.ascontiguousarray(kept, np.int64).tobytes())
    return h.hexdigest()


def check_params(params: dict, kept: np.ndarray, V: int, d: int = D_MODEL, features: int = 0) -> None:
    """DraftError unless every parameter has the shape the network needs (inputs of (2 + features) d) and kept ids
    are valid."""
    missing = [n for n in PARAM_NAMES if n not in params]
    if missing:
        raise DraftError(f"draft parameters {missing} are missing")
    H = params["W1"].shape[-1] if params["W1"].ndim == 2 else -1
    n_in = (2 + features) * d
    want = {"A": (n_in, d), "b": (d,), "W1": (n_in, H), "b1": (H,), "W2": (H, d)}
    for name, shape in want.items():
        if params[name].shape != shape or H < 1:
            raise DraftError(f"draft parameter {name} has shape {params[name].shape}, expected {shape}")
        if not np.all(np.isfinite(params[name])):
            raise DraftError(f"draft parameter {name} contains NaN or infinity")
    if kept.ndim != 1 or kept.size < 2 or kept.min() < 0 or kept.max() >= V or np.any(np.diff(kept) <= 0):
        raise DraftError(f"kept token ids must be a sorted 1-D array of distinct ids in [0, {V}), got shape {kept.shape}")


def save_draft(path, weights: DraftWeights) -> str:
    """Write the draft whole or not at all (`specref.files.replacing`); return its SHA-256."""
    meta = dict(weights.meta, format=FORMAT, version=VERSION,
                params_sha256=params_digest(weights.params, weights.kept))
    with replacing(path, "wb") as f:
        np.savez(f, kept=weights.kept.astype(np.int32), meta=np.array(json.dumps(meta)),
                 **{n: weights.params[n].astype(np.float32) for n in PARAM_NAMES})
    return file_sha256(path)


def file_sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


MAX_LOGIT_SCALE = 10.0


def logit_scale(meta: dict) -> float:
    """The draft's beta from its meta (1 if absent); DraftError unless it is a number in (0, MAX_LOGIT_SCALE]."""
    beta = meta.get("logit_scale", 1.0)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta <= MAX_LOGIT_SCALE:
        raise DraftError(f"the draft's logit_scale must be a number in (0, {MAX_LOGIT_SCALE:g}], got {beta!r}")
    return float(beta)


def feature_layers(meta: dict) -> tuple[int, ...]:
    """The target blocks whose residual a draft reads besides its last state (() for the plain draft)."""
    return tuple(meta.get("config", {}).get("features") or ())


def load_draft(path=None, V: int = 49152) -> DraftWeights:
    """Read a draft file and check it (the shipped one against SHIPPED_SHA256, any against its own digest)."""
    shipped = path is None
    path = pathlib.Path(SHIPPED_PATH if shipped else path)
    if not path.is_file():
        raise DraftError(f"no draft file at {path}; train one with `python -m specref train-draft`"
                         + (" --install" if shipped else f" --out {path}"))
    if shipped and SHIPPED_SHA256 is not None and file_sha256(path) != SHIPPED_SHA256:
        raise DraftError(f"{path} is corrupt: its SHA-256 is not the one recorded in specref.smollm2.draft "
                         f"({SHIPPED_SHA256[:12]}...); restore it with `git checkout -- {path.name}` or retrain "
                         f"with `python -m specref train-draft --install`")
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            params = {n: z[n].astype(np.float32) for n in PARAM_NAMES if n in z.files}
            kept = z["kept"].astype(np.int64)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise DraftError(f"{path} is not a readable draft file ({e})") from e
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise DraftError(f"{path} is not a {FORMAT} file of version {VERSION} (found {meta.get('format')!r} "
                         f"version {meta.get('version')!r})")
    check_params(params, kept, V, features=len(feature_layers(meta)))
    logit_scale(meta)
    if params_digest(params, kept) != meta.get("params_sha256"):
        raise DraftError(f"{path} is corrupt: its parameters do not match the digest stored with them")
    return DraftWeights(params, kept, meta)


# ---- the draft as a specref model ------------------------------------------------------------------

def target_states_for(target, tokens, k: int, V: int) -> tuple[np.ndarray, int, int]:  # [n], k -> tokens, n - k, L
    """What a draft on the target's states needs before predicting the states of the last k of `tokens`: the tokens
    checked, `first` = n - k (1 <= first < n: position 0 has no state before it), and L, the length of the prefix
    for which the target's cache holds its states (positions < L).  A target that has not read this prompt, or is
    more than MAX_AHEAD positions behind, reads tokens[:first] first."""
    a = check_tokens(tokens, V)
    n = len(a)
    first = n - k
    if not 1 <= first < n:
        raise ValueError(f"k = {k} rows of predicted states requested from {n} tokens; need 1 <= k <= {n - 1}")
    L = target.cache.shared_prefix(a)
    if L == 0 or first - L > MAX_AHEAD:
        target.final_states(a[:first], 1)
        L = target.cache.shared_prefix(a)
    return a, first, L


class NeuralDraft:
    """The trained draft as a specref model: next_probs(tokens, k) -> float64 [k, V], 0 outside the kept tokens.

    Row i (the distribution of token i+1) is softmax(beta s~_i H_N) with s~_i = f(state_{i-1}, e(x_i))
    (a draft with features also reads the target's features at the last position before i it has scored):
    state_{i-1} is the target's own s_{i-1} when the target has processed tokens[:i] (its cache
    agrees with the tokens there), else the draft's own prediction s~_{i-1}, chained from the last
    state the target has.  If the target holds none of the tokens, or is more than MAX_AHEAD
    positions behind the rows asked for, the draft first runs the target on the prefix (the
    target's next call reuses it; in speculative sampling this is the prompt's prefill).  Row 0 has no state before it and is uniform over the kept tokens.
    The draft caches its predictions with the tokens and the target-prefix length they came from;
    a call sharing a prefix with the last one computes only the positions after it (rollback is
    truncation), and a prediction made from a state of a different source is redone.
    """

    def __init__(self, target, weights: DraftWeights):
        self.target = target
        self.V = target.config.vocab_size
        self.layers = feature_layers(weights.meta)
        check_params(weights.params, weights.kept, self.V, target.config.d_model, len(self.layers))
        if self.layers and target.cache.feature_layers != self.layers:
            if target.cache.feature_layers:
                raise DraftError(f"this draft reads the target's blocks {list(self.layers)}, but the target's cache "
                                 f"keeps {list(target.cache.feature_layers)} for another draft")
            target.cache.keep_features(self.layers)        # empties the target's cache
        self.weights = weights
        self.beta = np.float32(logit_scale(weights.meta))
        self.P = {n: np.ascontiguousarray(weights.params[n], np.float32) for n in PARAM_NAMES}
        self.kept = weights.kept
        self.HN = np.ascontiguousarray(target.weights.head_matrix()[:, self.kept])   # [d, N]
        self.tokens = np.zeros(0, np.int64)   # the tokens of the last call
        self.lo, self.L = 0, 0                # its predictions cover positions lo.., made with target prefix L
        self.pred = np.zeros((0, target.config.d_model), np.float32)  # pred[i - lo] = s~_i
        self.computed = 0                     # network steps run so far (tests count them)
        self.folds = 0                        # feature rows folded into the biases so far (tests count them)
        self._fold_feat, self._fold_P = None, None
        if self.layers:                       # the rows of A and W1 that multiply [s, e], and those for the features
            d = target.config.d_model
            self._se = {k: np.ascontiguousarray(np.concatenate([self.P[k][:d], self.P[k][-d:]])) for k in ("A", "W1")}
            self._F = {k: np.ascontiguousarray(self.P[k][d:-d]) for k in ("A", "W1")}

    def states(self, tokens, k: int) -> np.ndarray:  # [n], int -> float32 [k, d]
        """The draft's predicted states s~ of the last k positions (k < n: position 0 has none)."""
        a, first, L = target_states_for(self.target, tokens, k, self.V)
        n, cache = len(a), self.target.cache
        c0 = min(first, L)                        # the chain starts from a state of the target's
        reuse = self._shared(a) if len(self.tokens) else 0   # tokens[:reuse] agree with the last call
        rows, prev, fresh = [], None, False
        for i in range(c0, n):                    # position i: s~_i = f(state_{i-1}, e(x_i))
            true_source = i <= L                  # state_{i-1} is the target's own s_{i-1}
            if not fresh and self.lo <= i < reuse and (i <= self.L) == true_source:
                s_i = self.pred[i - self.lo]      # same tokens, same source: the cached prediction
            else:
                fresh = True                      # from here on every prediction is recomputed
                h = cache.h[i - 1] if true_source else prev
                P = self._folded(cache.feat[min(i, L) - 1]) if self.layers else self.P
                s_i = net_forward(P, h[None], self.target.weights.embed(a[i:i + 1]))[0][0]
                self.computed += 1
            rows.append(s_i)
            prev = s_i
        self.tokens, self.lo, self.L = a, c0, L
        self.pred = np.asarray(rows, np.float32)
        return self.pred[first - c0:]

    def _folded(self, F) -> dict:  # [f d] -> parameters of a draft on [s, e] alone
        """The network with the features F (the same for every row drafted from one target state) folded into
        the biases: u W = s W_s + F W_F + e W_e, so b + F A_F and b1 + F W1_F, with A and W1 cut to the rows of s
        and e.  Drafting k rows ahead then multiplies F by A_F and W1_F once, not k times."""
        if self._fold_feat is None or not np.array_equal(F, self._fold_feat):
            self._fold_P = dict(self._se, W2=self.P["W2"], b=self.P["b"] + F @ self._F["A"],
                                b1=self.P["b1"] + F @ self._F["W1"])
            self._fold_feat = np.array(F, np.float32)
            self.folds += 1
        return self._fold_P

    def _shared(self, a) -> int:
        m = min(len(self.tokens), len(a))
        differ = np.flatnonzero(self.tokens[:m] != a[:m])
        return int(differ[0]) if differ.size else m

    def next_probs(self, tokens, k: int = 1) -> np.ndarray:  # [n], int -> float64 [k, V]
        """Draft distributions of the last k positions: softmax over the kept tokens, 0 elsewhere."""
        n = len(check_tokens(tokens, self.V))
        if not 1 <= k <= n:
            raise ValueError(f"k = {k} rows requested from {n} tokens; need 1 <= k <= {n}")
        out = np.zeros((k, self.V))
        if k == n:                                # row 0: no state before it
            out[0, self.kept] = 1.0 / len(self.kept)
        m = min(k, n - 1)                         # rows with a predicted state
        if m:
            out[k - m:, self.kept] = softmax((self.beta * (self.states(tokens, m) @ self.HN)).astype(np.float64))
        return out

    def __call__(self, tokens) -> np.ndarray:  # [n] -> float64 [n, V]
        return self.next_probs(tokens, len(tokens))

    def __repr__(self) -> str:
        return f"NeuralDraft(hidden={self.weights.hidden}, kept={len(self.kept)}, beta={float(self.beta):g})"


def load_neural_draft(target, path=None) -> NeuralDraft:
    """The shipped draft (or the one at `path`) attached to `target`."""
    return NeuralDraft(target, load_draft(path, target.config.vocab_size))


_LOADED: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()  # target -> {path: NeuralDraft}


def neural_draft(target, path=None) -> NeuralDraft:
    """The draft file at `path` (one `train-draft --out` wrote; None: the shipped one) attached to `target`, loaded
    once per target and file (the commands ask for it per run)."""
    key = None if path is None else str(pathlib.Path(path).expanduser().resolve())
    loaded = _LOADED.setdefault(target, {})
    if key not in loaded:
        loaded[key] = load_neural_draft(target, key)
    return loaded[key]


def shipped_draft(target) -> NeuralDraft:
    """The shipped draft attached to `target`, loaded once per target (`neural_draft`)."""
    return neural_draft(target)


def draft_sha256(path=None) -> str:
    """The SHA-256 of the draft file at `path`, or of the shipped one: what names a draft in a stored result's key."""
    return SHIPPED_SHA256 if path is None else file_sha256(pathlib.Path(path).expanduser())
