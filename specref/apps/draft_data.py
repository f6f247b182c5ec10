"""What the neural draft trains on: the target's view of Python text, cut into shards on disk.

The text comes from `specref.apps.draft_corpus` (never HumanEval).  The target sees it in two ways:
  - teacher-forced ("tf"): whole functions packed into sequences of up to seq_len tokens;
  - on-policy ("gen", and "held" for held-out prompts): the target's own completion (temperature
    0.8, top-p 0.95, at most max_new tokens, cut at a new top-level statement) of a function's
    signature and docstring, the way it completes a HumanEval prompt.  Completions run B at a time
    (`complete_batch`: one decode step for all B, `specref.smollm2.model.decode_batch`), each with
    its own random generator, so a completion does not depend on what it was batched with.
For every position the target's final state s (float16), the log-sum-exp of its logits and its
argmax are kept, so its distribution over any set of tokens is exp(s H - lse).  A shard is one
.npz, written whole or not at all (`specref.files.replacing`).

`make_data` makes the small data `train-draft` uses (counts in its Config; worker processes, one
model each); `specref.apps.draft_build` makes the data at scale (`python -m specref draft-data`).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pathlib
import time

import numpy as np

from specref.apps.draft_corpus import split, stdlib_functions
from specref.fast import Plan, fast_model
from specref.files import replacing
from specref.smollm2.model import KVCache, SmolLM2, decode_batch, forward, load_smollm2, softmax
from specref.warps import Warp

STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
WARP = Warp(0.8, None, 0.95)  # how the target completes a prompt here (and in `humaneval`)
MAX_PROMPT = 300  # tokens of a prompt kept (its start)
KINDS = {"tf": 1, "gen": 2, "held": 3}  # a shard's kind, and its code in the random seeds


# ---- the target's view of the text ----------------------------------------------------------------

class Recorder:
    """Collects, per position, the token, the target's final state, log-sum-exp and argmax."""

    def __init__(self, model: SmolLM2):
        self.head = model.weights.head_matrix()                   # [d, V]
        self.rows = {k: [] for k in ("tok", "h", "lse", "amax", "seq", "kind")}
        self.n = 0

    def record(self, cache: KVCache, ids: list[int], n_prompt: int) -> None:
        """Record positions 0..len(ids)-1 of the sequence `cache` holds; those from n_prompt on were sampled."""
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


def ends(model: SmolLM2, new: list[int]) -> bool:
    """A completion ends at a control token or once its text starts a new top-level statement."""
    return new[-1] in model.tokenizer.special_ids.values() or any(s in model.tokenizer.decode(new) for s in STOPS)


def complete(model: SmolLM2, prompt_ids: list[int], max_new: int, rng: np.random.Generator) -> list[int]:
    """The target's own completion (WARP) of prompt_ids, one sequence at a time: the ids kept (the prompt,
    then the sampled tokens before the one that ended it), every one of them in the model's cache."""
    ids, new = list(prompt_ids), []
    for _ in range(max_new):
        q = WARP(model.next_probs(ids, 1))[0]
        new.append(int(rng.choice(len(q), p=q)))
        if ends(model, new):
            break
        ids.append(new[-1])
    model.final_states(ids, 1)  # the last id kept is processed too
    return ids


def complete_batch(model: SmolLM2, prompts: list[list[int]], max_new: int,
                   rngs: list[np.random.Generator]) -> tuple[list[KVCache], list[list[int]]]:
    """`complete` for B prompts at once: each prompt is prefilled into a cache of its own, then every
    decode step runs the unfinished sequences together.  Sequence b draws only from rngs[b], in the
    same order as `complete`, so it gets the same tokens.  Returns the caches and the ids kept."""
    caches = [KVCache(model.config, len(p) + max_new + 1) for p in prompts]
    for cache, p in zip(caches, prompts):
        forward(np.asarray(p), model.weights, cache, model.rot, model.linear, model.feed_forward)
    ids = [list(p) for p in prompts]
    new: list[list[int]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    while active:
        h = np.stack([caches[b].h[caches[b].length - 1] for b in active])            # [B, d]
        q = WARP(softmax(model.linear(h, model.weights.head), np.float64))             # [B, V]
        fed = []
        for row, b in enumerate(active):
            new[b].append(int(rngs[b].choice(q.shape[1], p=q[row])))
            if not ends(model, new[b]):
                ids[b].append(new[b][-1])
                fed.append(b)
        if fed:
            decode_batch([ids[b][-1] for b in fed], model.weights, [caches[b] for b in fed], model.rot,
                         model.linear, model.feed_forward)
        active = [b for b in fed if len(new[b]) < max_new]
    return caches, ids


def make_shard(model: SmolLM2, kind: str, index: int, items: list, seed: int, max_new: int,
               batch: int = 16) -> dict:
    """One shard: teacher-forced token sequences ("tf"), or completions of prompt texts ("gen", "held"),
    `batch` at a time.  Completion j of shard `index` draws from default_rng([seed, kind code, index, j])."""
    rec = Recorder(model)
    if kind == "tf":
        for ids in items:
            cache = KVCache(model.config, len(ids))
            forward(np.asarray(ids), model.weights, cache, model.rot, model.linear, model.feed_forward)
            rec.record(cache, ids, len(ids))
        return rec.arrays()
    if kind not in KINDS:
        raise ValueError(f"unknown shard kind {kind!r}; expected one of {sorted(KINDS)}")
    for a in range(0, len(items), batch):
        prompts = [model.tokenizer.encode(text)[:MAX_PROMPT] for text in items[a:a + batch]]
        rngs = [np.random.default_rng([seed, KINDS[kind], index, j]) for j in range(a, a + len(prompts))]
        caches, ids = complete_batch(model, prompts, max_new, rngs)
        for cache, kept, prompt in zip(caches, ids, prompts):
            rec.record(cache, kept, len(prompt))
    return rec.arrays()


def pack(sources, tokenizer, seq_len: int):
    """Token sequences of up to seq_len tokens, each holding whole functions (a longer one is cut), in order."""
    chunk: list[int] = []
    for source in sources:
        ids = tokenizer.encode(source + "\n\n\n")
        if chunk and len(chunk) + len(ids) > seq_len:
            yield chunk
            chunk = []
        chunk = (chunk + ids)[:seq_len]
    if chunk:
        yield chunk


def write_npz(path: pathlib.Path, arrays: dict) -> None:
    """np.savez whole or not at all (`specref.files.replacing`): never a half-written shard."""
    with replacing(path, "wb") as f:
        np.savez(f, **arrays)


def load_shards(paths: list[pathlib.Path], in_order: bool = False) -> dict:
    """Concatenate shards (sorted by name, or in the order given), keeping their sequences distinct."""
    parts, offset = [], 0
    for path in (paths if in_order else sorted(paths)):
        with np.load(path) as z:
            part = {k: z[k] for k in z.files}
        part["seq"] = part["seq"] + offset
        offset = int(part["seq"].max()) + 1
        parts.append(part)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# ---- train-draft's data: standard-library functions, counted in sequences -------------------------

def shard_plan(config, tokenizer) -> list[tuple[str, int, list]]:
    """Every shard of `config` (a `specref.apps.train_draft.Config`) as (kind, index, items).  Shard i of a
    kind holds the same items whatever the counts (only the last shard of a kind may be shorter), so its
    file name carries its length."""
    train, held = split(stdlib_functions(config.seed))
    half = len(train) // 2                       # teacher-forced text and prompts come from different functions
    packed = []
    for chunk in pack((source for source, _ in train[:half]), tokenizer, config.seq_len):
        if len(packed) == config.tf_sequences:
            break
        packed.append(chunk)
    prompts = [prompt for _, prompt in train[half:]][:config.gen_sequences]
    held_prompts = [prompt for _, prompt in held][:config.held_out_sequences]
    plan = []
    for kind, items in (("tf", packed), ("gen", prompts), ("held", held_prompts)):
        for i in range(0, len(items), config.shard_sequences):
            plan.append((kind, i // config.shard_sequences, items[i:i + config.shard_sequences]))
    return plan


_WORKER_MODEL: SmolLM2 | None = None


def _worker_init(cache_dir) -> None:
    global _WORKER_MODEL
    # one process per core: each multiplies on one thread (a plan's threads would compete)
    _WORKER_MODEL = fast_model(load_smollm2(cache_dir=cache_dir, progress=lambda *a: None), Plan.fixed("panels"))


def _worker_shard(config, kind: str, index: int, items: list, path: str) -> str:
    write_npz(pathlib.Path(path), make_shard(_WORKER_MODEL, kind, index, items, config.seed, config.max_new))
    return path


def make_data(model: SmolLM2, config, root: pathlib.Path, workers: int, log) -> dict[str, dict]:
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
            write_npz(paths[(kind, i)], make_shard(model, kind, i, items, config.seed, config.max_new))
            done += 1
            progress()
    model.reset()
    return {"train": load_shards([p for (k, _), p in paths.items() if k != "held"]),
            "held": load_shards([p for (k, _), p in paths.items() if k == "held"])}
