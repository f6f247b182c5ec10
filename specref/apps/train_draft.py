"""`python -m specref train-draft`: train the neural draft (specref.smollm2.draft) from the target, here.

Data, offline and never HumanEval: functions with a docstring from Python's own standard library
on this machine (`sysconfig.get_paths()["stdlib"]`, test suites excluded), shuffled with the seed.
Every 20th function (by the shuffle) is held out for the held-out measurements; the rest are
training text, seen by the target in two ways:
  - teacher-forced: whole functions packed into sequences of up to 384 tokens;
  - on-policy: the target's own completion (temperature 0.8, top-p 0.95, at most 64 tokens, cut
    at a new top-level statement) of a function's signature and docstring, the way it completes a
    HumanEval prompt.
For every position the target's final state s (float16), the log-sum-exp of its logits and its
argmax are kept, so its distribution over any set of tokens is exp(s H - lse).  The data is cut
into shards (cache/draft-data/<key>/NNNN.npz, each written atomically), made by worker processes
(one model each); an interrupted run resumes at the first missing shard.

Training: A and b start from ridge regression (s_{i-1}, e(x_i)) -> s_i, W2 from 0; then Adam on
KL + TV through the restricted head, each example unrolled two steps (the second from the draft's
own prediction, as drafting ahead sees it).  A checkpoint is written every 30 s (atomically); an
interrupted run resumes from it.  The progress line shows the step, the loss, the held-out alpha
(one step and two steps ahead, at temperature 1) and the time left.

Output: --out PATH (default: the cache's draft.npz); --install writes the draft that ships with
the repository (specref/smollm2/draft.npz) and prints the SHA-256 to record in
specref.smollm2.draft.SHIPPED_SHA256.  --quick: a small configuration (about a minute).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import pathlib
import sysconfig
import textwrap
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from specref.apps import options
from specref.files import replacing
from specref.smollm2 import draft as nd
from specref.smollm2.fetch import cache_root
from specref.fast import Plan, fast_model, load_fast
from specref.smollm2.model import SmolLM2, load_smollm2
from specref.warps import Warp

STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
HELD_OUT_EVERY = 20  # every 20th function (after the seeded shuffle) is held out
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "lib2to3", "__pycache__",
             "turtledemo", "ensurepip", "tkinter"}


@dataclass(frozen=True)
class Config:
    """What a training run does; every field is part of the cache key of its data and checkpoint."""

    seed: int = 0
    tf_sequences: int = 160  # teacher-forced sequences of training text (up to 384 tokens each)
    gen_sequences: int = 256  # on-policy completions of training prompts (the text drafting will see)
    held_out_sequences: int = 48  # on-policy completions of held-out prompts (for the held-out alpha)
    max_new: int = 64  # tokens per on-policy completion
    seq_len: int = 384  # tokens per teacher-forced sequence
    shard_sequences: int = 16  # sequences per data shard
    hidden: int = 1024  # units in the draft's SiLU layer
    kept: int = 4096  # tokens the draft's head covers
    steps: int = 3000  # Adam steps
    batch: int = 256
    lr: float = 1e-3
    unroll: int = 2  # steps each example is unrolled (the later ones from the draft's own prediction)
    kl_weight: float = 1.0
    tv_weight: float = 1.0
    ridge_init: bool = True  # start A, b from ridge regression (False: from zero, to see training work)

    def data_key(self) -> str:
        """The data directory's key: the counts are not in it, since a shard's content does not depend
        on them (the plan for fewer sequences is a prefix of the plan for more; see shard_plan)."""
        fields = ("seed", "max_new", "seq_len", "shard_sequences")
        return _digest({f: getattr(self, f) for f in fields})

    def run_key(self) -> str:
        return _digest(asdict(self))


QUICK = Config(tf_sequences=6, gen_sequences=6, held_out_sequences=4, max_new=24, seq_len=128,
               shard_sequences=4, hidden=64, kept=2048, steps=150, batch=64, lr=3e-3)


def _digest(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# ---- the text -------------------------------------------------------------------------------------

def stdlib_functions(seed: int) -> list[tuple[str, str]]:
    """(source, prompt) of standard-library functions with a docstring, in a seeded order.

    The prompt is the source up to the end of the docstring plus a newline and the body's
    indentation, as a HumanEval prompt ends.  Only functions of 200-2500 characters, dedented.
    """
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    found = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                source = (pathlib.Path(dirpath) / name).read_text(encoding="utf-8")
                tree = ast.parse(source)
            except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
                continue
            lines = source.splitlines()
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(node.body) < 2 \
                        or ast.get_docstring(node) is None:
                    continue
                start = node.lineno - 1 - len(node.decorator_list)
                full = textwrap.dedent("\n".join(lines[start:node.end_lineno]))
                head = textwrap.dedent("\n".join(lines[start:node.body[0].end_lineno]))
                body_indent = node.body[1].col_offset - node.col_offset
                if 200 <= len(full) <= 2500 and body_indent > 0:
                    found.append((full, head + "\n" + " " * body_indent))
    if not found:
        raise RuntimeError(f"no standard-library functions with docstrings found under {root}")
    order = np.random.default_rng(seed).permutation(len(found))
    return [found[i] for i in order]


def split(functions: list) -> tuple[list, list]:
    """(training, held-out) functions: every HELD_OUT_EVERY-th is held out."""
    return ([f for i, f in enumerate(functions) if i % HELD_OUT_EVERY],
            [f for i, f in enumerate(functions) if i % HELD_OUT_EVERY == 0])


# ---- the target's view of the text ----------------------------------------------------------------

class Recorder:
    """Collects, per position, the token, the target's final state, log-sum-exp and argmax."""

    def __init__(self, model: SmolLM2):
        self.model = model
        self.head = model.weights.head_matrix()                   # [d, V]
        self.rows = {k: [] for k in ("tok", "h", "lse", "amax", "seq", "kind")}
        self.n = 0

    def record(self, ids: list[int], n_prompt: int) -> None:
        """Record positions 0..len(ids)-1 of the sequence the target's cache holds."""
        cache = self.model.cache
        n = len(ids)
        if cache.length < n or list(cache.tokens[:n]) != list(ids):
            raise RuntimeError("the target's cache does not hold the sequence to record")
        h = cache.h[:n].copy()                                   # [n, d]
        lse, amax = np.empty(n, np.float32), np.empty(n, np.int32)
        for a in range(0, n, 128):
            logits = h[a:a + 128] @ self.head                     # [<=128, V]
            top = logits.max(1)
            lse[a:a + 128] = top + np.log(np.exp(logits - top[:, None]).sum(1))
            amax[a:a + 128] = logits.argmax(1)
        kind = np.zeros(n, np.int8)
        kind[n_prompt:] = 1                                      # 1: the target's own sampled tokens
        for key, value in (("tok", np.asarray(ids, np.int32)), ("h", h.astype(np.float16)), ("lse", lse),
                           ("amax", amax), ("seq", np.full(n, self.n, np.int32)), ("kind", kind)):
            self.rows[key].append(value)
        self.n += 1

    def arrays(self) -> dict:
        return {k: np.concatenate(v) for k, v in self.rows.items()}


def complete(model: SmolLM2, prompt_ids: list[int], max_new: int, rng: np.random.Generator) -> list[int]:
    """The target's own completion (T 0.8, top-p 0.95) of prompt_ids; every returned id is in its cache."""
    warp = Warp(0.8, None, 0.95)
    ids = list(prompt_ids)
    control = set(model.tokenizer.special_ids.values())
    new: list[int] = []
    for _ in range(max_new):
        q = warp(model.next_probs(ids, 1))[0]
        token = int(rng.choice(len(q), p=q))
        new.append(token)
        if token in control or any(s in model.tokenizer.decode(new) for s in STOPS):
            break
        ids.append(token)
    model.final_states(ids, 1)  # the last id kept is processed too
    return ids


def make_shard(model: SmolLM2, config: Config, kind: str, index: int, items: list) -> dict:
    """One shard: teacher-forced sequences ("tf") or completions ("gen", "held") of `items`."""
    rec = Recorder(model)
    rng = np.random.default_rng([config.seed, {"tf": 1, "gen": 2, "held": 3}[kind], index])
    tok = model.tokenizer
    for item in items:
        model.reset()
        if kind == "tf":
            ids = item[:config.seq_len]
            model.final_states(ids, 1)
            rec.record(ids, len(ids))
        else:
            prompt = tok.encode(item)[:300]
            ids = complete(model, prompt, config.max_new, rng)
            rec.record(ids, len(prompt))
    return rec.arrays()


def shard_plan(config: Config, tokenizer) -> list[tuple[str, int, list]]:
    """Every shard as (kind, index, items).  Shard i of a kind holds the same items whatever the counts
    (only the last shard of a kind may be shorter), so its file name carries its length."""
    functions = stdlib_functions(config.seed)
    train, held = split(functions)
    half = len(train) // 2                       # teacher-forced text and prompts come from different functions
    packed, chunk = [], []
    for source, _ in train[:half]:
        ids = tokenizer.encode(source + "\n\n\n")
        if chunk and len(chunk) + len(ids) > config.seq_len:
            packed.append(chunk)
            chunk = []
            if len(packed) == config.tf_sequences:
                break
        chunk = (chunk + ids)[:config.seq_len]
    prompts = [prompt for _, prompt in train[half:]][:config.gen_sequences]
    held_prompts = [prompt for _, prompt in held][:config.held_out_sequences]
    plan = []
    for kind, items in (("tf", packed), ("gen", prompts), ("held", held_prompts)):
        for i in range(0, len(items), config.shard_sequences):
            plan.append((kind, i // config.shard_sequences, items[i:i + config.shard_sequences]))
    return plan


def write_npz(path: pathlib.Path, arrays: dict) -> None:
    """np.savez whole or not at all (`specref.files.replacing`): never a half-written shard."""
    with replacing(path, "wb") as f:
        np.savez(f, **arrays)


_WORKER_MODEL: SmolLM2 | None = None


def _worker_init(cache_dir) -> None:
    global _WORKER_MODEL
    # one process per core: each multiplies on one thread (a plan's threads would compete)
    _WORKER_MODEL = fast_model(load_smollm2(cache_dir=cache_dir, progress=lambda *a: None), Plan.fixed("panels"))


def _worker_shard(config: Config, kind: str, index: int, items: list, path: str) -> str:
    write_npz(pathlib.Path(path), make_shard(_WORKER_MODEL, config, kind, index, items))
    return path


def make_data(model: SmolLM2, config: Config, root: pathlib.Path, workers: int, log) -> dict[str, dict]:
    """Every shard of the data (made if missing, reused if present); returns {"train": ..., "held": ...}."""
    plan = shard_plan(config, model.tokenizer)
    paths = {(kind, i): root / f"{kind}-{i:04d}-{len(items)}.npz" for kind, i, items in plan}
    todo = [(kind, i, items) for kind, i, items in plan if not paths[(kind, i)].is_file()]
    log(f"data: {len(plan)} shards in {root} ({len(plan) - len(todo)} already made)")
    start, done = time.perf_counter(), 0

    def progress():
        elapsed = time.perf_counter() - start
        left = elapsed / done * (len(todo) - done) if done else float("nan")
        log(f"  data shard {done}/{len(todo)}  {elapsed:5.0f} s  about {left:4.0f} s left")

    if todo and workers > 1:
        # each worker loads its own model; OpenBLAS in the workers uses one thread (see specref.__main__)
        ctx = multiprocessing.get_context("spawn")
        saved = os.environ.get("OPENBLAS_NUM_THREADS")
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        try:
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init,
                                                        initargs=(None,)) as pool:
                futures = [pool.submit(_worker_shard, config, kind, i, items, str(paths[(kind, i)]))
                           for kind, i, items in todo]
                for future in concurrent.futures.as_completed(futures):
                    future.result()
                    done += 1
                    progress()
        finally:
            if saved is None:
                os.environ.pop("OPENBLAS_NUM_THREADS", None)
            else:
                os.environ["OPENBLAS_NUM_THREADS"] = saved
    else:
        for kind, i, items in todo:
            write_npz(paths[(kind, i)], make_shard(model, config, kind, i, items))
            done += 1
            progress()
    model.reset()
    return {"train": load_shards([p for (k, _), p in paths.items() if k != "held"]),
            "held": load_shards([p for (k, _), p in paths.items() if k == "held"])}


def load_shards(paths: list[pathlib.Path]) -> dict:
    """Concatenate shards, keeping their sequences distinct."""
    parts, offset = [], 0
    for path in sorted(paths):
        with np.load(path) as z:
            part = {k: z[k] for k in z.files}
        part["seq"] = part["seq"] + offset
        offset = int(part["seq"].max()) + 1
        parts.append(part)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# ---- training ---------------------------------------------------------------------------------------

def kept_tokens(data: dict, n: int, V: int) -> np.ndarray:
    """The n tokens most frequent in the training text or as the target's argmax (ties: lower id), sorted."""
    counts = np.bincount(data["tok"], minlength=V) + np.bincount(data["amax"], minlength=V)
    order = np.lexsort((np.arange(V), -counts))                    # by count, then by id
    return np.sort(order[:n]).astype(np.int64)


def chains(data: dict, steps: int) -> np.ndarray:
    """Indices i such that positions i .. i + steps are in one sequence."""
    s = data["seq"]
    ok = np.ones(len(s) - steps, bool)
    for j in range(1, steps + 1):
        ok &= s[j:len(s) - steps + j] == s[:len(s) - steps]
    return np.flatnonzero(ok)


def ridge(data: dict, E: np.ndarray, lam: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Least squares with a ridge penalty lam * n: [s_{i-1}, e(x_i), 1] -> s_i."""
    i = chains(data, 1)
    X = np.concatenate([data["h"][i].astype(np.float32), E[data["tok"][i + 1]],
                        np.ones((len(i), 1), np.float32)], 1).astype(np.float64)   # [n, 2d + 1]
    Y = data["h"][i + 1].astype(np.float64)                                          # [n, d]
    G = X.T @ X
    G[np.diag_indices_from(G)] += lam * len(i)
    W = np.linalg.solve(G, X.T @ Y)
    return W[:-1].astype(np.float32), W[-1].astype(np.float32)


def target_probs(data: dict, i: np.ndarray, HN: np.ndarray) -> np.ndarray:  # -> [len(i), N]
    """The target's probabilities of the kept tokens at positions i (not renormalised)."""
    return np.exp(data["h"][i].astype(np.float32) @ HN - data["lse"][i][:, None])


class Adam:
    """Adam (Kingma and Ba) with bias correction; its state is plain arrays so it can be checkpointed."""

    def __init__(self, params: dict, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.b1, self.b2, self.eps, self.t = b1, b2, eps, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: dict, grads: dict, lr: float) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for k in params:
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * grads[k]
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * grads[k] * grads[k]
            params[k] -= (lr / c1) * self.m[k] / (np.sqrt(self.v[k] / c2) + self.eps)


def learning_rate(config: Config, step: int) -> float:
    """Linear warm-up over 100 steps, then linear decay to a tenth."""
    return config.lr * min(1.0, (step + 1) / 100) * (1 - 0.9 * step / config.steps)


def held_out_alpha(params: dict, held: dict, E: np.ndarray, HN: np.ndarray, ahead: int = 1) -> float:
    """Mean alpha at temperature 1 on the target's own held-out tokens, drafting `ahead` steps from a true state.

    The target's distribution is over the whole vocabulary; the draft's is 0 outside the kept tokens,
    so alpha = sum over kept tokens of min(p, q) (q restricted, not renormalised).
    """
    i = chains(held, ahead)
    i = i[held["kind"][i + ahead] == 1]                             # positions of sampled tokens
    state = held["h"][i].astype(np.float32)
    for j in range(1, ahead + 1):
        state = nd.net_forward(params, state, E[held["tok"][i + j]])[0]
    total = 0.0
    for a in range(0, len(i), 512):
        p = nd.softmax(state[a:a + 512] @ HN)
        total += float(np.minimum(p, target_probs(held, i[a:a + 512] + ahead, HN)).sum())
    return total / max(len(i), 1)


def train(config: Config, data: dict, held: dict, E: np.ndarray, HN: np.ndarray, checkpoint: pathlib.Path,
          log, seconds_limit: float | None = None) -> tuple[dict, list[dict]]:
    """Train (resuming from `checkpoint` if it exists); returns the parameters and the progress history."""
    rng = np.random.default_rng([config.seed, 7])
    d = E.shape[1]
    if checkpoint.is_file():
        with np.load(checkpoint) as z:
            state = {k: z[k] for k in z.files}
        params = {n: state["p_" + n] for n in nd.PARAM_NAMES}
        opt = Adam(params)
        opt.m = {n: state["m_" + n] for n in nd.PARAM_NAMES}
        opt.v = {n: state["v_" + n] for n in nd.PARAM_NAMES}
        opt.t = int(state["t"])
        rng.bit_generator.state = json.loads(str(state["rng"]))
        history = json.loads(str(state["history"]))
        log(f"resuming from step {opt.t} ({checkpoint})")
    else:
        A, b = ridge(data, E) if config.ridge_init else (np.zeros((2 * d, d), np.float32), np.zeros(d, np.float32))
        init = np.random.default_rng([config.seed, 8])
        params = {"A": A, "b": b,
                  "W1": (init.standard_normal((2 * d, config.hidden)) / np.sqrt(2 * d)).astype(np.float32),
                  "b1": np.zeros(config.hidden, np.float32), "W2": np.zeros((config.hidden, d), np.float32)}
        opt = Adam(params)
        history = [{"step": 0, "held_out_alpha": held_out_alpha(params, held, E, HN),
                    "held_out_alpha_2": held_out_alpha(params, held, E, HN, 2), "loss": None}]
        log(f"step 0 (ridge initialisation): held-out alpha {history[0]['held_out_alpha']:.3f}, "
            f"2 ahead {history[0]['held_out_alpha_2']:.3f}")
    starts = chains(data, config.unroll)
    start, last_save, losses = time.perf_counter(), time.perf_counter(), []
    first_step = opt.t
    eval_every = max(config.steps // 12, 1)
    while opt.t < config.steps:
        sel = starts[rng.integers(0, len(starts), config.batch)]
        state = data["h"][sel].astype(np.float32)
        grads, loss = None, 0.0
        for j in range(1, config.unroll + 1):      # step j starts from step j-1's prediction (not differentiated)
            y, cache = nd.net_forward(params, state, E[data["tok"][sel + j]])
            step_loss, dy, _ = nd.head_loss(y, HN, target_probs(data, sel + j, HN), config.kl_weight,
                                            config.tv_weight)
            g = nd.net_backward(params, cache, dy / config.unroll)
            grads = g if grads is None else {k: grads[k] + g[k] for k in g}
            loss += step_loss / config.unroll
            state = y
        opt.step(params, grads, learning_rate(config, opt.t))
        losses.append(loss)
        if opt.t % eval_every == 0 or opt.t == config.steps:
            rate = (opt.t - first_step) / (time.perf_counter() - start)
            entry = {"step": opt.t, "loss": float(np.mean(losses[-eval_every:])),
                     "held_out_alpha": held_out_alpha(params, held, E, HN),
                     "held_out_alpha_2": held_out_alpha(params, held, E, HN, 2)}
            history.append(entry)
            log(f"step {opt.t}/{config.steps}  loss {entry['loss']:.3f}  held-out alpha {entry['held_out_alpha']:.3f} "
                f"(2 ahead {entry['held_out_alpha_2']:.3f})  {rate:.1f} steps/s  "
                f"about {(config.steps - opt.t) / rate:.0f} s left")
        if time.perf_counter() - last_save > 30 or opt.t == config.steps:
            save_checkpoint(checkpoint, params, opt, rng, history)
            last_save = time.perf_counter()
        if seconds_limit is not None and time.perf_counter() - start > seconds_limit:
            save_checkpoint(checkpoint, params, opt, rng, history)
            log(f"stopped after {seconds_limit:.0f} s at step {opt.t}; run again to resume")
            break
    return params, history


def save_checkpoint(path: pathlib.Path, params: dict, opt: Adam, rng: np.random.Generator, history: list) -> None:
    arrays = {"t": np.array(opt.t), "rng": np.array(json.dumps(rng.bit_generator.state)),
              "history": np.array(json.dumps(history))}
    for n in nd.PARAM_NAMES:
        arrays["p_" + n], arrays["m_" + n], arrays["v_" + n] = params[n], opt.m[n], opt.v[n]
    write_npz(path, arrays)


def run_training(model: SmolLM2, config: Config, cache_root: pathlib.Path, workers: int, log,
                 seconds_limit: float | None = None) -> nd.DraftWeights | None:
    """Data, then training; returns the draft (None if stopped early by seconds_limit)."""
    t0 = time.perf_counter()
    data = make_data(model, config, cache_root / "draft-data" / config.data_key(), workers, log)
    train_data, held = data["train"], data["held"]
    log(f"data ready: {len(train_data['tok'])} training positions, {int(held['kind'].sum())} held-out sampled "
        f"positions ({time.perf_counter() - t0:.0f} s)")
    head = model.weights.head_matrix()                            # [d, V]
    E = np.ascontiguousarray(head.T)                              # [V, d]: the tied embeddings
    kept = kept_tokens(train_data, config.kept, head.shape[1])
    HN = np.ascontiguousarray(head[:, kept])
    checkpoint = cache_root / "draft-train" / f"{config.run_key()}.npz"
    params, history = train(config, train_data, held, E, HN, checkpoint, log, seconds_limit)
    if history[-1]["step"] < config.steps:
        return None
    meta = {"config": asdict(config), "history": history, "train_positions": int(len(train_data["tok"])),
            "held_out_sampled_positions": int(held["kind"].sum()),
            "command": "python -m specref train-draft" + (" --quick" if config == QUICK else "")
                       + f" --seed {config.seed}",
            "data": "Python standard library functions (teacher-forced and the target's own completions); "
                    "no HumanEval", "seconds": round(time.perf_counter() - t0, 1)}
    return nd.DraftWeights(params, kept, meta)


# ---- the command ----------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a small configuration (about a minute)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--steps", type=options.integer(1, 10**7), default=None,
                        help=f"Adam steps (default {Config.steps}, quick {QUICK.steps})")
    parser.add_argument("--out", type=options.output_file(), default=None,
                        help="where to write the draft (default: draft.npz in the cache directory)")
    parser.add_argument("--install", action="store_true",
                        help="write the draft that ships with the repository (specref/smollm2/draft.npz)")
    parser.add_argument("--workers", type=options.integer(1, 64), default=max(os.cpu_count() or 1, 1),
                        help="processes that make the data, one model each (default: the number of cores)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="cache directory (default $SPECREF_CACHE or ~/.cache/specref)")
    # read by specref.__main__ before NumPy is imported (the training's large products use every core)
    parser.add_argument("--blas-threads", metavar="N", type=options.integer(0), default=0,
                        help="OpenBLAS threads for training (default 0: every core)")


def check_args(args) -> None:
    if args.out is not None and args.install:
        raise ValueError("argument --out: not allowed with --install (both name the output file; give one)")


def run(args) -> int:
    config = QUICK if args.quick else Config()
    config = replace(config, seed=args.seed, **({"steps": args.steps} if args.steps else {}))
    root = cache_root(args.cache_dir)
    out = nd.SHIPPED_PATH if args.install else pathlib.Path(args.out) if args.out else root / "draft.npz"
    model = load_fast(cache_dir=args.cache_dir, measure=True)
    log = lambda text: print(text, flush=True)  # noqa: E731
    weights = run_training(model, config, root, args.workers, log)
    sha = nd.save_draft(out, weights)
    last = weights.meta["history"][-1]
    print(f"wrote {out} (SHA-256 {sha}); held-out alpha {last['held_out_alpha']:.3f}, "
          f"2 ahead {last['held_out_alpha_2']:.3f}")
    if args.install:
        print(f"record it: SHIPPED_SHA256 = \"{sha}\" in specref/smollm2/draft.py")
    return 0

