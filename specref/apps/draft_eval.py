"""The draft's yardstick: how often the target accepts it on the target's own completions of HumanEval.

The held-out set (made once, cached under cache/draft-data/eval-<key>.npz): the target completes
every HumanEval prompt (the prompt and the body indent `humaneval` gives it, at T 0.8 / top-p 0.95,
at most EVAL_MAX_NEW tokens, cut at a new top-level statement), and the positions are recorded as in
the training data (`specref.apps.draft_data.Recorder`).  It is for evaluation only: no training data
comes from HumanEval (the data build's leak check keeps it out).

alpha k steps ahead, at a position i of the target's own sampled text: the draft starts from the
target's true state s_{i-k} and chains its own predictions over the true tokens x_{i-k+1} .. x_i, so
its k-th prediction is the one drafting makes for token i+1 when the target last scored position
i-k; alpha is sum_x min(p(x), q(x)) there (Leviathan et al. 2023, Definition 3.1), averaged over
every sampled position that has k positions of its sequence before it.  Three settings:
  - "t1": both distributions as they are (temperature 1);
  - "nucleus": both warped by T 0.8 and top-p 0.95, as `demo` and `humaneval` warp them;
  - "greedy": 1 when the draft's argmax is the target's, else 0.
The draft's distribution is 0 outside its kept tokens, so the target's mass there is never matched.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import time
from typing import Callable, Iterator

import numpy as np

from specref.apps.draft_data import WARP, Recorder, complete_batch, write_npz
from specref.smollm2.model import softmax

EVAL_MAX_NEW = 96  # new tokens per completion, as in the HumanEval runs
EVAL_SEED = 0
SETTINGS = ("t1", "nucleus", "greedy")

# chain(data, i, ahead) yields the draft's predicted states [len(i), d] for steps 1..ahead, starting
# from the target's state at positions i and reading the true tokens i+1, i+2, ...
Chain = Callable[[dict, np.ndarray, int], Iterator[np.ndarray]]


def eval_key(n_prompts: int) -> str:
    spec = {"prompts": n_prompts, "max_new": EVAL_MAX_NEW, "seed": EVAL_SEED, "warp": [WARP.temperature, WARP.top_p],
            "humaneval": "prompt + body indent"}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def make_eval_data(model, prompts: list[list[int]], log=print, batch: int = 32) -> dict:
    """The target's completions of `prompts`, recorded; completion j draws from default_rng([EVAL_SEED, 9, j])."""
    rec = Recorder(model)
    t0 = time.perf_counter()
    for a in range(0, len(prompts), batch):
        part = prompts[a:a + batch]
        rngs = [np.random.default_rng([EVAL_SEED, 9, j]) for j in range(a, a + len(part))]
        caches, ids = complete_batch(model, part, EVAL_MAX_NEW, rngs)
        for cache, kept, prompt in zip(caches, ids, part):
            rec.record(cache, kept, len(prompt))
        log(f"held-out completions: {a + len(part)}/{len(prompts)} ({time.perf_counter() - t0:.0f} s)")
    data = rec.arrays()
    data.update(nucleus_rows(data["h"], model.weights.head_matrix(), data["lse"], data["kind"] == 1))
    return data


def nucleus_rows(h: np.ndarray, head: np.ndarray, lse: np.ndarray, where: np.ndarray) -> dict:
    """The target's warped (T 0.8, top-p 0.95) distribution at the positions `where`, as sparse rows:
    nuc_ptr [n+1] (row i is nuc_tok/nuc_p[nuc_ptr[i]:nuc_ptr[i+1]], empty where `where` is False)."""
    ptr, toks, ps = [0], [], []
    idx = np.flatnonzero(where)
    rows = {}
    for a in range(0, len(idx), 256):
        i = idx[a:a + 256]
        q = WARP(np.exp(h[i].astype(np.float32) @ head - lse[i][:, None]).astype(np.float64))   # [m, V]
        for r, pos in enumerate(i):
            nz = np.flatnonzero(q[r])
            rows[pos] = (nz.astype(np.int32), q[r, nz].astype(np.float32))
    for pos in range(len(h)):
        t, p = rows.get(pos, (np.zeros(0, np.int32), np.zeros(0, np.float32)))
        toks.append(t)
        ps.append(p)
        ptr.append(ptr[-1] + len(t))
    return {"nuc_ptr": np.asarray(ptr, np.int64), "nuc_tok": np.concatenate(toks), "nuc_p": np.concatenate(ps)}


def load_eval_data(model, root: pathlib.Path, problems, log=print, n_prompts: int | None = None,
                   features=()) -> dict:
    """The held-out set for the first n_prompts HumanEval problems (all by default), made once and cached; with
    the target's other layers' `features` ("feat") if given (made by `specref.apps.draft_features`)."""
    n = len(problems) if n_prompts is None else n_prompts
    if not 1 <= n <= len(problems):
        raise ValueError(f"n_prompts = {n_prompts}: expected 1 to {len(problems)} HumanEval prompts")
    path = root / "draft-data" / f"eval-{eval_key(n)}.npz"
    if not path.is_file():
        from specref.apps.humaneval.problems import BODY_INDENT
        prompts = [model.tokenizer.encode(p.prompt + BODY_INDENT) for p in problems[:n]]
        log(f"making the held-out set: the target's completions of {n} HumanEval prompts (once) ...")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_npz(path, make_eval_data(model, prompts, log))
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    if features:
        from specref.apps.draft_features import load_features
        data["feat"] = load_features([path], features)
    return data


def starts(data: dict, ahead: int) -> np.ndarray:
    """Positions i with i .. i + ahead in one sequence and i + ahead one of the target's sampled tokens."""
    s = data["seq"]
    ok = np.ones(len(s) - ahead, bool)
    for j in range(1, ahead + 1):
        ok &= s[j:len(s) - ahead + j] == s[:len(s) - ahead]
    i = np.flatnonzero(ok)
    return i[data["kind"][i + ahead] == 1]


def _warp_rows(logits: np.ndarray) -> np.ndarray:  # [m, N] -> float64 [m, N]
    return WARP(softmax(logits.astype(np.float64)))


def alphas(chain: Chain, data: dict, HN: np.ndarray, kept: np.ndarray, aheads=(1, 2, 3), scale: float = 1.0) -> dict:
    """{"t1": {k: alpha}, "nucleus": {...}, "greedy": {...}} for k in aheads (module docstring), the draft's logits
    multiplied by `scale` (its beta, `specref.smollm2.draft`)."""
    out = {s: {} for s in SETTINGS}
    for k in aheads:
        i = starts(data, k)
        *_, state = chain(data, i, k)                                   # the k-th prediction [m, d]
        at = i + k                                                      # where the target's row is
        sums = dict.fromkeys(SETTINGS, 0.0)
        for a in range(0, len(i), 512):
            z = scale * (state[a:a + 512] @ HN)                         # [m, N] the draft's logits
            pos = at[a:a + 512]
            q = np.exp(data["h"][pos].astype(np.float32) @ HN - data["lse"][pos][:, None])   # [m, N]
            sums["t1"] += float(np.minimum(softmax(z), q).sum())
            sums["greedy"] += float((kept[z.argmax(1)] == data["amax"][pos]).sum())
            pw = _warp_rows(z)                                          # [m, N]
            for r, p in enumerate(pos):
                lo, hi = data["nuc_ptr"][p], data["nuc_ptr"][p + 1]
                t = data["nuc_tok"][lo:hi]
                j = np.searchsorted(kept, t)
                hit = (j < len(kept)) & (kept[np.minimum(j, len(kept) - 1)] == t)
                sums["nucleus"] += float(np.minimum(pw[r, j[hit]], data["nuc_p"][lo:hi][hit]).sum())
        for s in SETTINGS:
            out[s][k] = sums[s] / max(len(i), 1)
    out["positions"] = {k: int(len(starts(data, k))) for k in aheads}
    return out


def with_features(data: dict, i: np.ndarray, state: np.ndarray) -> np.ndarray:  # [m], [m, d] -> [m, (1 + f) d]
    """The draft's input h besides the token: the state, then, if the data keeps them ("feat",
    `specref.apps.draft_features`), the target's other layers at position i, the last one it scored."""
    if "feat" not in data:
        return state
    return np.concatenate([state, data["feat"][i].astype(np.float32)], 1)


def mlp_chain(params: dict, E: np.ndarray) -> Chain:
    """The chain of `specref.smollm2.draft`'s network: s~ = f(state, e(x)) step after step (with the features
    of the start position, if the data has them)."""
    from specref.smollm2.draft import net_forward

    def chain(data, i, ahead):
        state = data["h"][i].astype(np.float32)
        for j in range(1, ahead + 1):
            state = net_forward(params, with_features(data, i, state), E[data["tok"][i + j]])[0]
            yield state
    return chain
