"""`python -m specref.apps.draft_features`: several of the target's layers for the draft's data, kept beside it.

EAGLE-3 (Li et al. 2025) feeds its draft the target's states from a low, a middle and a high layer instead
of the last layer's alone.  This command makes those features for data that already exists: for each
shard of the data at scale (`python -m specref draft-data`), in build order until --positions training
positions, for its held-out shards and for the yardstick (the target's own completions of HumanEval
prompts, `specref.apps.draft_eval`), the target re-reads every sequence teacher-forced and keeps, per
position, the residual stream after each block of --layers (counted from 1, of the target's 30),
RMS-normalised without a gain, in float16:

    feat [n, len(layers) * d]      feat[i] = [norm(x_i after block l) for l in layers]

Re-reading gives the final state the shard stored (the same model and tokens): every file records the
largest difference between the two relative to the stored value's size (at least 1), and the command
stops if it exceeds MAX_STATE_ERROR (float16 rounds to 2^-11 of a value), since then the features would
not belong to the positions they sit beside.

Files go to <data>/features-<layers>/<the shard's name>, one per shard, written whole or not at all;
an interrupted run resumes at the first shard without one.  The progress line shows the positions
done, the rate and the time left.  `specref.apps.train_draft --features` trains on them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import pathlib
import time

import numpy as np

from specref.apps import draft_build, options
from specref.apps.draft_data import write_npz
from specref.smollm2.fetch import cache_root
from specref.smollm2.gguf_file import open_gguf
from specref.smollm2.model import KVCache, feature_blocks, forward, load_smollm2
from specref.smollm2.weights import gguf_path, read_config

DEFAULT_LAYERS = (2, 15, 27)  # low, middle, high of 30 blocks, as EAGLE-3 picks them (2, L/2, L - 3)
MAX_STATE_ERROR = 2.0 ** -8  # relative; float16 rounding is 2^-11


def folder_name(layers) -> str:
    return "features-" + "-".join(str(l) for l in layers)


def parse_layers(text: str) -> tuple[int, ...]:
    """'2,15,27' -> (2, 15, 27): distinct block numbers >= 1 in increasing order; ValueError otherwise."""
    try:
        return check_layers([int(x) for x in text.split(",")], 10**6)
    except ValueError:
        raise ValueError(f"layers {text!r}: expected block numbers counted from 1, comma-separated, distinct and "
                         "increasing, such as 2,15,27") from None


def check_layers(layers, n_layers: int) -> tuple[int, ...]:
    """The layers as a sorted tuple of distinct block numbers in 1..n_layers, at least one; ValueError otherwise."""
    if not len(layers):
        raise ValueError("layers []: expected at least one block number")
    return feature_blocks(layers, n_layers)


def layer_states(model, tokens, layers) -> tuple[np.ndarray, np.ndarray]:  # [n] -> [n, m*d], [n, d]
    """One teacher-forced pass over tokens: the RMS-normalised residual after each block in `layers`
    (`KVCache.keep_features`), and the final normed state (what the target's cache keeps), both float32."""
    n = len(tokens)
    cache = KVCache(model.config, capacity=n)
    cache.keep_features(layers)
    forward(np.asarray(tokens), model.weights, cache, model.rot, model.linear, model.feed_forward)
    return cache.feat[:n], cache.h[:n]


def shard_features(model, shard: dict, layers) -> dict:
    """{"feat": float16 [n, m*d], "state_error": the largest |final state - the shard's h| / max(|h|, 1)}."""
    seq, feats, err = shard["seq"], [], 0.0
    cuts = np.flatnonzero(np.diff(seq)) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(seq)]):
        f, h = layer_states(model, shard["tok"][a:b], layers)
        feats.append(f.astype(np.float16))
        stored = shard["h"][a:b].astype(np.float32)
        err = max(err, float((np.abs(h - stored) / np.maximum(np.abs(stored), 1)).max()))
    return {"feat": np.concatenate(feats), "state_error": np.array(err)}


def feature_path(shard_path: pathlib.Path, layers) -> pathlib.Path:
    return shard_path.parent / folder_name(layers) / shard_path.name


def load_features(shard_paths, layers) -> np.ndarray:
    """The features of these shards, concatenated in the order given; ValueError naming the first one missing."""
    parts = []
    for p in shard_paths:
        f = feature_path(pathlib.Path(p), layers)
        if not f.is_file():
            raise ValueError(f"no features {folder_name(layers)} for {p.name}: run `python -m specref.apps."
                             f"draft_features --layers {','.join(map(str, layers))}` over these shards first")
        with np.load(f) as z:
            parts.append(z["feat"])
    return np.concatenate(parts)


def one_shard(model, path: pathlib.Path, layers) -> tuple[int, float]:
    """Make and write one shard's features; (positions, state error).  RuntimeError if the states disagree."""
    with np.load(path) as z:
        shard = {k: z[k] for k in ("tok", "seq", "h")}
    arrays = shard_features(model, shard, layers)
    err = float(arrays["state_error"])
    if err > MAX_STATE_ERROR:
        raise RuntimeError(f"{path.name}: re-reading its tokens gives final states {err:.4f} (relative) away from "
                           f"the stored ones, at most {MAX_STATE_ERROR:.4f} expected: not this target's data?")
    out = feature_path(path, layers)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_npz(out, arrays)
    return len(shard["tok"]), err


_WORKER_MODEL = None


def _worker_init() -> None:
    global _WORKER_MODEL
    _WORKER_MODEL = load_smollm2(progress=lambda *a: None)


def _worker_shard(path: str, layers) -> tuple[int, float]:
    return one_shard(_WORKER_MODEL, pathlib.Path(path), layers)


def make(paths, layers, log, workers: int = 1) -> None:
    """Make the features of every file in `paths` that has none yet (resumable), with progress; `workers`
    processes, each with its own model multiplying on one thread."""
    todo = [p for p in paths if not feature_path(p, layers).is_file()]
    sizes = {}
    for p in todo:
        with np.load(p) as z:
            sizes[p] = len(z["seq"])
    total = sum(sizes.values())
    log(f"{len(paths) - len(todo)} of {len(paths)} files already have features {folder_name(layers)}; "
        f"{len(todo)} to make, {total:,} positions, {workers} worker(s)")
    done, t0 = 0, time.perf_counter()

    def progress(path, n, err):
        nonlocal done
        done += n
        rate = done / (time.perf_counter() - t0)
        log(f"{path.name}: {n} positions, state error {err:.5f}; {done:,}/{total:,} at {rate:.0f}/s, "
            f"about {(total - done) / rate / 60:.0f} min left")

    if workers == 1 or len(todo) < 2:
        model = load_smollm2(progress=lambda *a: None)
        for p in todo:
            progress(p, *one_shard(model, p, layers))
        return
    ctx = multiprocessing.get_context("spawn")
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"      # one process per core, one thread each
    try:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init) as pool:
            futures = {pool.submit(_worker_shard, str(p), layers): p for p in todo}
            for future in concurrent.futures.as_completed(futures):
                progress(futures[future], *future.result())
    finally:
        if saved is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specref.apps.draft_features", description=__doc__.split("\n")[0])
    parser.add_argument("--positions", type=options.integer(1, 10**9), default=500_000,
                        help="training positions to cover, in build order (default 500,000)")
    parser.add_argument("--layers", default=",".join(map(str, DEFAULT_LAYERS)),
                        help="blocks whose output to keep, counted from 1, comma-separated (default 2,15,27)")
    parser.add_argument("--workers", type=options.integer(1, 64), default=1,
                        help="processes, one model and one thread each (default 1)")
    parser.add_argument("--no-yardstick", action="store_true", help="skip the HumanEval yardstick's features")
    args = parser.parse_args(argv)
    log = lambda text: print(text, flush=True)  # noqa: E731
    n_layers = read_config(open_gguf(gguf_path(progress=lambda *a: None))).n_layers  # the header alone
    try:
        layers = check_layers(parse_layers(args.layers), n_layers)
    except ValueError as e:
        parser.error(f"argument --layers: {e}")
    root = cache_root(None) / "draft-data"
    try:
        train, held = draft_build.prefix(root / f"scale-{draft_build.BuildSpec().key()}", args.positions)
    except ValueError as e:
        parser.error(str(e))
    paths = held + train
    if not args.no_yardstick:
        from specref.apps.draft_eval import eval_key
        yard = root / f"eval-{eval_key(164)}.npz"
        if not yard.is_file():
            parser.error(f"no yardstick at {yard}: run `python -m specref train-draft --evaluate shipped` once first")
        paths = [yard] + paths
    make(paths, layers, log, args.workers)
    log(f"done: features {folder_name(layers)} for {len(paths)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
