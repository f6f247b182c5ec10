"""`python -m specref draft-data`: the neural draft's data at scale, built on this machine, resumable.

The text is `specref.apps.draft_corpus`'s: functions from the standard library and the installed
packages, never HumanEval.  On the first run it is collected, checked for leaks (no run of
LEAK_NGRAM tokens shared with a HumanEval prompt or solution; a leak stops the build before any
data is made) and saved with the data (corpus.json.gz), so later runs read the same text even if
packages are installed or removed meanwhile.  Every 20th function is held out; of the rest, those
at even places are teacher-forced text and those at odd places are completion prompts.

The data is a list of shards in a fixed order (see `shard_kind`): first HELD_SHARDS of held-out
completions, then training shards in the repeated pattern of BuildSpec.pattern ("t": 16
teacher-forced sequences of up to 384 tokens; "g": the target's own completions of 32 prompts, T 0.8,
top-p 0.95, at most 64 tokens, 32 at a time).  A shard's content depends on its place in that order
only, never on the total asked for, so `--positions` picks a prefix: asking for more later makes the
shards after it and reuses the rest.  Each shard is written whole or not at all, and its file name
carries its number of positions (tf-00012-6144.npz); an interrupted run resumes at the first missing
shard.  The progress line shows the positions made, the rate and the time left.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import json
import pathlib
import sys
import time
from dataclasses import asdict, dataclass

from specref.apps import options
from specref.apps.draft_corpus import collect, leaks, source_roots, split
from specref.apps.humaneval.problems import load_problems
from specref.apps.draft_data import load_shards, make_shard, pack, write_npz
from specref.fast import Plan, fast_model
from specref.files import replacing
from specref.smollm2.fetch import cache_root
from specref.smollm2.model import load_smollm2

DEFAULT_POSITIONS = 2_000_000


@dataclass(frozen=True)
class BuildSpec:
    """What a shard holds; every field is part of the data directory's key (the total asked for is not)."""

    seed: int = 0
    seq_len: int = 384  # tokens per teacher-forced sequence
    max_new: int = 64  # tokens per completion
    tf_per_shard: int = 16  # teacher-forced sequences per "t" shard
    gen_per_shard: int = 32  # completions per "g" shard (and per held-out shard)
    held_shards: int = 4  # held-out completion shards, made first
    pattern: str = "ttg"  # the kinds of the training shards, repeated: t teacher-forced, g completions

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def shard_kind(spec: BuildSpec, s: int) -> tuple[str, int]:
    """(kind, index among shards of that kind) of shard s of the build order."""
    if s < spec.held_shards:
        return "held", s
    t = s - spec.held_shards
    cycle, place = divmod(t, len(spec.pattern))
    letter = spec.pattern[place]
    kind = {"t": "tf", "g": "gen"}[letter]
    return kind, cycle * spec.pattern.count(letter) + spec.pattern[:place].count(letter)


def corpus(root: pathlib.Path, seed: int, log, cache_dir=None, roots=None) -> list[tuple[str, str]]:
    """The functions of this build: read from root/corpus.json.gz, or collected from `roots` (default
    `source_roots()`), leak-checked and saved there."""
    path = root / "corpus.json.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [tuple(item) for item in json.load(f)["functions"]]
    roots = source_roots() if roots is None else roots
    log(f"collecting functions from {', '.join(map(str, roots))} (a few minutes, once) ...")
    functions = collect(roots, seed)
    problems = load_problems(cache_dir=cache_dir, progress=log)
    found = leaks([source for source, _ in functions], problems)
    if found:
        raise RuntimeError(f"the corpus shares runs of tokens with HumanEval problems {found}; "
                           "nothing was written (remove the package that holds them, or exclude it in "
                           "specref.apps.draft_corpus)")
    log(f"{len(functions)} functions, no HumanEval problem among them (checked {len(problems)})")
    with replacing(path, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
        json.dump({"roots": [str(r) for r in roots], "seed": seed, "leak_checked": len(problems),
                   "functions": functions}, f)
    return functions


class Items:
    """What shard (kind, index) holds: packed teacher-forced token sequences, or prompt texts."""

    def __init__(self, spec: BuildSpec, functions: list, tokenizer):
        train, held = split(functions)
        self.spec = spec
        self.prompts = {"gen": [prompt for _, prompt in train[1::2]], "held": [prompt for _, prompt in held]}
        self.packed = pack((source for source, _ in train[0::2]), tokenizer, spec.seq_len)
        self.sequences: list[list[int]] = []

    def __call__(self, kind: str, index: int) -> list:
        if kind == "tf":
            n = self.spec.tf_per_shard
            while len(self.sequences) < (index + 1) * n:   # packing is sequential: tokenize up to this shard
                chunk = next(self.packed, None)
                if chunk is None:
                    raise RuntimeError(f"the corpus holds {len(self.sequences)} teacher-forced sequences, too "
                                       f"few for shard tf {index}: ask for fewer --positions")
                self.sequences.append(chunk)
            return self.sequences[index * n:(index + 1) * n]
        n = self.spec.gen_per_shard
        items = self.prompts[kind][index * n:(index + 1) * n]
        if len(items) < n:
            raise RuntimeError(f"the corpus holds {len(self.prompts[kind])} {kind} prompts, too few for shard "
                               f"{kind} {index}: ask for fewer --positions")
        return items


def existing(root: pathlib.Path, kind: str, index: int) -> tuple[pathlib.Path, int] | None:
    """(path, positions) of shard (kind, index) if it is made."""
    for path in root.glob(f"{kind}-{index:05d}-*.npz"):
        return path, int(path.stem.rsplit("-", 1)[1])
    return None


def prefix(root: pathlib.Path, positions: int, spec: BuildSpec = BuildSpec()) -> tuple[list, list]:
    """(training shards, held-out shards) of the build in `root`: the training shards in build order until they
    hold `positions`, and the held-out ones sorted by name; ValueError if the build holds fewer positions."""
    train, held, made, s = [], [], 0, 0
    while made < positions or s < spec.held_shards:
        found = existing(root, *shard_kind(spec, s))
        if found is None:
            raise ValueError(f"the data at scale holds {made:,} training positions in {root}, fewer than the "
                             f"{positions:,} asked for: run `python -m specref draft-data --positions {positions}` "
                             "first (it resumes where it stopped)")
        if s < spec.held_shards:
            held.append(found[0])
        else:
            train.append(found[0])
            made += found[1]
        s += 1
    return train, sorted(held)


def build(spec: BuildSpec, positions: int, root: pathlib.Path, log, batch: int = 32,
          cache_dir=None, threads: int = 1) -> list[pathlib.Path]:
    """Make the shards until the training shards hold at least `positions` positions; returns every shard's path.

    One build at a time per directory: a second one started meanwhile stops with an error (it would
    only make the same shards twice)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another draft-data build is writing {root}; wait for it to end (or stop it) "
                               "and run this command again to resume") from None
        return _build(spec, positions, root, log, batch, cache_dir, threads)


def _build(spec: BuildSpec, positions: int, root: pathlib.Path, log, batch: int, cache_dir,
           threads: int) -> list[pathlib.Path]:
    functions = corpus(root, spec.seed, log, cache_dir)
    model = None
    items = None
    paths, made, s = [], 0, 0
    new_positions, new_seconds = 0, 0.0            # training shards made by this run, and their time
    while made < positions or s < spec.held_shards:
        kind, index = shard_kind(spec, s)
        found = existing(root, kind, index)
        if found is None:
            if model is None:
                # each product split over `threads` cores by output columns: the same numbers on any count
                model = fast_model(load_smollm2(cache_dir, progress=log), Plan.fixed("panels", threads))
                items = Items(spec, functions, model.tokenizer)
            t0, cpu0 = time.perf_counter(), time.process_time()
            arrays = make_shard(model, kind, index, items(kind, index), spec.seed, spec.max_new, batch)
            n = len(arrays["tok"])
            found = (root / f"{kind}-{index:05d}-{n}.npz", n)
            write_npz(found[0], arrays)
            seconds = time.perf_counter() - t0
            if kind != "held":
                new_positions, new_seconds = new_positions + n, new_seconds + seconds
            after = made + (n if kind != "held" else 0)
            cpu = time.process_time() - cpu0           # below `seconds` when other jobs share the core
            line = (f"shard {kind} {index}: {n} positions ({int(arrays['kind'].sum())} sampled) in {seconds:.0f} s "
                    f"({n / seconds:.0f}/s; CPU {cpu:.0f} s, {n / cpu:.0f}/s); training positions {after:,}/{positions:,}")
            if new_seconds:
                rate = new_positions / new_seconds
                line += f"; this run {rate:.0f}/s, about {max(positions - after, 0) / rate / 3600:.1f} h left"
            log(line)
        paths.append(found[0])
        if kind != "held":
            made += found[1]
        s += 1
    log(f"done: {made} training positions in {s - spec.held_shards} shards, "
        f"{spec.held_shards} held-out shards, in {root}")
    return paths


def load(paths: list[pathlib.Path]) -> dict[str, dict]:
    """{"train": ..., "held": ...}: the shards of a build, concatenated (`specref.apps.draft_data.load_shards`)."""
    return {"train": load_shards([p for p in paths if not p.name.startswith("held-")]),
            "held": load_shards([p for p in paths if p.name.startswith("held-")])}


# ---- the command ----------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--positions", type=options.integer(1, 10**9), default=DEFAULT_POSITIONS,
                        help=f"training positions to make, at least (default {DEFAULT_POSITIONS:,}); "
                             "what is already made is reused")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--batch", type=options.integer(1, 256), default=32,
                        help="completions run together, one decode step for all (default 32; "
                             "the data does not depend on it)")
    parser.add_argument("--threads", type=options.integer(1, 64), default=1,
                        help="cores each product is split over (default 1, which leaves the others free; "
                             "the data does not depend on it)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="cache directory (default $SPECREF_CACHE or ~/.cache/specref)")


def run(args) -> int:
    spec = BuildSpec(seed=args.seed)
    root = cache_root(args.cache_dir) / "draft-data" / f"scale-{spec.key()}"
    log = lambda text: print(text, flush=True)  # noqa: E731
    log(f"draft data: at least {args.positions:,} training positions in {root}")
    try:
        build(spec, args.positions, root, log, args.batch, args.cache_dir, args.threads)
    except RuntimeError as e:                     # a leak, a corpus too small, another build running
        print(f"python -m specref draft-data: error: {e}", file=sys.stderr)
        return 1
    return 0
