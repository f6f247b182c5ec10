"""Running the benchmark: a method (ArS, or SpS with one draft, K or a tree, and a setting), one
generation with it, and the Benchmark that runs every problem with every method, storing each
(problem, method) result in the JSONL file beside --json as soon as it is known and skipping on a
rerun what that file holds already (the settings key says what must match)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import time
import zlib
from typing import Callable, Mapping

import numpy as np

from specref import verifiers
from specref.apps import sandbox
from specref.fast.blas import openblas_info
from specref.apps.demo import TREE_VERIFY, TreeProfile
from specref.apps.humaneval.problems import (BODY_INDENT, HUMANEVAL_SHA256, STOP_SEQUENCES, Problem,
                                             check_completion, truncate_at_stop)
from specref.apps.named_drafts import DRAFTS, LOOKUP_DRAFTS, by_name
from specref.apps.options import NEURAL_DRAFTS
from specref.apps.timing import timed_generation
from specref.proof.laws import ExpectedTokens
from specref.runstats import RunStats
from specref.trees import Tree
from specref.smollm2.draft import draft_sha256, neural_draft
from specref.warps import Warp

NGRAM_ORDER = 2  # the n-gram draft is a bigram (Witten-Bell backoff to the unigram)
PROMPT_LOOKUP_N = 3  # prompt lookup matches the last 3 tokens, backing off to 2 and 1; the adaptive draft
                     # too here (its own default is 8), so that stored results stay comparable and reusable;
                     # --lookup-n changes it for the drafts that look up the context (LOOKUP_DRAFTS)


@dataclasses.dataclass(frozen=True)
class Method:
    draft: str | None  # None for ArS, else one of DRAFTS
    K: int  # draft tokens per SpS loop (0 for ArS; a tree's number of nodes)
    temperature: float  # 0 = greedy
    top_p: float | None  # nucleus mass (None = no top-p)
    tree: str | None = None  # a tree of drafts' shape (`specref.trees.Tree.parse`), None for a chain
    drawing: str | None = None  # how the tree's children are drawn ("topk", "iid", "without_replacement")

    def __post_init__(self):
        if self.draft is None and self.K != 0:
            raise ValueError(f"ArS has no draft and K = 0, got K = {self.K}")
        if self.draft is not None and (self.draft not in DRAFTS or self.K < 1):
            raise ValueError(f"SpS needs a draft in {DRAFTS} and K >= 1, got {self.draft!r}, K = {self.K}")
        if self.tree is not None and (self.draft is None or Tree.parse(self.tree, self.drawing).size != self.K):
            raise ValueError(f"a tree needs a draft and K = its number of nodes, got {self.draft!r}, K = {self.K}, "
                             f"tree {self.tree!r}")

    @property
    def shape(self) -> Tree | None:
        """The tree this method drafts per call, or None for a chain."""
        return None if self.tree is None else Tree.parse(self.tree, self.drawing)

    @property
    def name(self) -> str:
        return "ArS" if self.draft is None else "SpS"

    @property
    def decoding(self) -> str:
        return "greedy" if self.temperature == 0 else f"T={self.temperature:g},top_p={self.top_p:g}"

    @property
    def label(self) -> str:
        """The method's name in the progress log and in its generator's seed (`method_rng`), so its format
        is fixed: changing it changes every SpS completion."""
        base = "ArS" if self.draft is None else sps_label(self.draft, self.K, self.tree, self.drawing)
        return f"{base} {self.decoding}"


def sps_label(draft: str, K: int, tree: str | None = None, drawing: str | None = None) -> str:
    """An SpS method's name, as the log, the seeds and the parity lines give it: SpS[neural,K=3] for a chain,
    SpS[neural,tree=2+1,rrs] for a tree (its shape and the verifier its drawing of children takes)."""
    return f"SpS[{draft},K={K}]" if tree is None else f"SpS[{draft},tree={tree},{TREE_VERIFY[drawing]}]"


@dataclasses.dataclass(frozen=True)
class Generation:
    completion: str  # the generated text up to (not including) the stop sequence
    stopped_by: str  # "stop" (a stop sequence), "control" (e.g. <|im_end|>) or "length"
    stats: RunStats  # the loop's counts and times (its tokens: SpS may overshoot the stop by up to K)
    expected_calls: int = 0  # verify calls whose expected tokens were added up (SpS loops)
    expected_token: float = 0.0  # sum over those calls of token-level verification's expected tokens
    expected_block: float = 0.0  # the same for block verification, on the same drafts and rows
    profile_calls: int = 0  # tree calls whose chances by rank at the root were added up (`demo.TreeProfile`)
    profile_sums: tuple = ()  # their sums, rank by rank
    profile_deeper: tuple = ()  # the same below the root: [nodes reached, sums by rank] at depths 1, 2, ...


# ---- generation ---------------------------------------------------------------------------

def generate(prompt_ids: list[int], target, draft, method: Method, max_new_tokens: int, tokenizer,
             rng: np.random.Generator, stop: bool = True, verify: str = "token") -> Generation:
    """Sample a completion with `method` (SpS verified by `verify`, "token" or "block"); stop at a stop sequence (if `stop`), a control token or the budget."""
    control = set(tokenizer.special_ids.values())

    def done(new: list[int]) -> bool:
        return bool(control.intersection(new)) or (stop and truncate_at_stop(tokenizer.decode(new))[1])

    # the prompt is prefilled before the clock starts: ms/token measures the sampling loop (Chen
    # Table 1), and otherwise whichever method runs first on a problem would pay for the prompt
    expected = ExpectedTokens(verifiers.REGISTRY[verify].function)
    profile = TreeProfile(method.drawing) if method.tree else None
    stats = timed_generation(np.asarray(prompt_ids, dtype=np.int64), target, draft if method.draft else None,
                             method.K, Warp(method.temperature, None, method.top_p), max_new_tokens, rng, stop=done,
                             verify=expected, tree=method.shape, verify_tree=profile)
    stats.seconds -= expected.seconds + (profile.seconds if profile else 0.0)  # measurements, not sampling
    if method.draft and stats.calls_by_drafted and not method.tree:
        expected.add_undrafted_calls(stats.calls_by_drafted[0])
    new = stats.new_tokens
    stopped_by = "control" if control.intersection(new) else "stop" if stop and done(new) else "length"
    if stopped_by == "control":
        new = new[: min(i for i, t in enumerate(new) if t in control)]
    completion = tokenizer.decode(new)
    if stop:
        completion = truncate_at_stop(completion)[0]
    return Generation(completion=completion, stopped_by=stopped_by, stats=stats, expected_calls=expected.calls,
                      expected_token=expected.token, expected_block=expected.block,
                      profile_calls=profile.calls if profile else 0, profile_sums=tuple(profile.sums) if profile else (),
                      profile_deeper=tuple(profile.deeper) if profile else ())


def method_rng(seed: int, task_id: str, method: Method) -> np.random.Generator:
    """The random stream of one (problem, method): fixed by the seed, independent across pairs."""
    return np.random.default_rng([seed, zlib.crc32(task_id.encode()), zlib.crc32(method.label.encode())])


# ---- stored results -----------------------------------------------------------------------

def lookup_n(args) -> int:
    """The prompt lookup's longest match for this run (--lookup-n; PROMPT_LOOKUP_N if not set)."""
    return getattr(args, "lookup_n", None) or PROMPT_LOOKUP_N


def settings_key(kind: str, method: Method, args, model_name: str) -> str:
    """What must match for a stored result to be reused: everything that changes the sample, and the OpenBLAS
    kernels that timed it (`specref.fast.blas`: OPENBLAS_CORETYPE can force others on the same CPU, which changes
    every timing), so a resumed run never mixes timings taken under two kernels.

    A method that runs the trained draft (`NEURAL_DRAFTS`) is also keyed on that draft file's SHA-256.
    The lookup's longest match changes only the drafts that look up the context; every other
    method is stored under PROMPT_LOOKUP_N whatever --lookup-n says, so that its results (ArS's
    above all) are shared by runs that differ only in --lookup-n.
    """
    n = lookup_n(args) if method.draft in LOOKUP_DRAFTS else PROMPT_LOOKUP_N
    described = {k: v for k, v in dataclasses.asdict(method).items()
                 if k not in ("tree", "drawing") or method.tree is not None}  # a chain keeps the keys it had
    settings = {"kind": kind, "method": described, "verify": getattr(args, "verify", "token"),
                "seed": args.seed,
                "max_new_tokens": args.max_new_tokens, "model": model_name,
                "problems_sha256": HUMANEVAL_SHA256, "ngram_order": NGRAM_ORDER,
                "prompt_lookup_n": n, "stops": STOP_SEQUENCES, "body_indent": BODY_INDENT,
                "blas_core": openblas_info()["core"] or "unknown"}
    settings.update(trained_draft_key(method.draft, args))
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def trained_draft_key(draft: str | None, args) -> dict:
    """What names the trained draft in a stored result's key: for a draft that runs it (`NEURAL_DRAFTS`), its file's
    SHA-256 (--draft-file, or the shipped one), so a new shipped draft or another file is another run; else {}."""
    return {"neural_draft": draft_sha256(getattr(args, "draft_file", None))} if draft in NEURAL_DRAFTS else {}


def results_path(json_path) -> pathlib.Path:
    """Where the per-problem results of `--json PATH` go: PATH with .json replaced by .jsonl, or .jsonl appended to
    any other name (so runs/a.v1 and runs/a.v2 keep apart: runs/a.v1.jsonl, runs/a.v2.jsonl)."""
    path = pathlib.Path(json_path)
    return path.with_suffix(".jsonl") if path.suffix == ".json" else path.with_name(path.name + ".jsonl")


def read_results(path: pathlib.Path) -> dict[tuple[str, str], dict]:
    """Stored results by (settings key, task id); a torn last line (an interrupted write) is skipped."""
    results = {}
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                results[(record["key"], record["task_id"])] = record
    return results


def end_torn_line(path: pathlib.Path) -> None:
    """If an interrupted write left the file without a final newline, end that line, so that
    the next record starts on its own line (the torn one is then skipped by read_results)."""
    if path.exists() and path.stat().st_size:
        with open(path, "rb+") as f:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")


def aggregate(records: list[dict], K: int) -> tuple[RunStats, int, int]:
    """Totals over the problems of one method: the summed run statistics, problems, passed.

    A record stored before runs counted their calls by drafted tokens (`calls_by_drafted`) comes
    from a draft that drafted K in every call (0 for ArS), and is counted so."""
    records = [r if "calls_by_drafted" in r else {**r, "calls_by_drafted": [0] * K + [r["loops"]]} for r in records]
    return RunStats.total(records), len(records), sum(r.get("status") == "passed" for r in records)


# ---- the benchmark ------------------------------------------------------------------------

class Benchmark:
    """Everything one run needs: problems, model, tokenizer, where results go, what is done."""

    def __init__(self, problems: list[Problem], model, args, model_name: str, log: Callable = print):
        self.problems = problems
        self.model = model
        self.tokenizer = model.tokenizer
        self.args = args
        self.model_name = model_name
        self.log = log
        self.V = self.tokenizer.vocab_size
        self.prompt_ids = {p.task_id: self.tokenizer.encode(p.prompt + BODY_INDENT) for p in problems}
        self._solutions: list[list[int]] | None = None
        self.results_path = results_path(args.json) if args.json else None
        self.stored = read_results(self.results_path) if self.results_path else {}
        if self.results_path:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
            end_torn_line(self.results_path)
        # Used only by tests: completion text that replaces the generated one for these task ids
        # before execution (to run a hanging or crashing completion through the whole pipeline).
        self.overrides: Mapping[str, str] = getattr(args, "completion_overrides", None) or {}
        self.limits = sandbox.ResourceLimits(seconds=args.timeout)

    def solutions_of_others(self, task_id: str) -> list[list[int]]:
        """Token ids of every canonical solution except this problem's (leave-one-out, no leakage)."""
        if self._solutions is None:
            self._solutions = [self.tokenizer.encode(p.canonical_solution) for p in self.problems]
        return [s for p, s in zip(self.problems, self._solutions) if p.task_id != task_id]

    def neural_draft(self):
        """The trained draft the neural drafts run: the file --draft-file names, or the shipped one."""
        return neural_draft(self.model, getattr(self.args, "draft_file", None))

    def record(self, record: dict) -> None:
        self.stored[(record["key"], record["task_id"])] = record
        if self.results_path:
            with open(self.results_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()

    def run_methods(self, kind: str, methods: list[Method], execute: bool, stop: bool) -> dict[Method, str]:
        """Generate (and, if `execute`, test) every problem with every method, skipping stored results."""
        keys = {m: settings_key(kind, m, self.args, self.model_name) for m in methods}
        drafts: dict[str, object] = {}
        wall = time.perf_counter()
        for number, problem in enumerate(self.problems, 1):
            todo = [m for m in methods if (keys[m], problem.task_id) not in self.stored]
            if not todo:
                continue
            drafts.clear()  # the n-gram draft depends on the problem (leave-one-out)
            parts = []
            for m in todo:
                if m.draft is not None and m.draft not in drafts:
                    drafts[m.draft] = by_name(m.draft, self.V, lambda: self.solutions_of_others(problem.task_id),
                                              NGRAM_ORDER, lookup_n(self.args), neural=self.neural_draft)
                verify = getattr(self.args, "verify", "token")
                g = generate(self.prompt_ids[problem.task_id], self.model, drafts.get(m.draft), m,
                             self.args.max_new_tokens, self.tokenizer, method_rng(self.args.seed, problem.task_id, m),
                             stop=stop, verify=verify)
                record = {"key": keys[m], "kind": kind, "task_id": problem.task_id, "method": m.label,
                          "verify": verify, "completion": BODY_INDENT + g.completion, "stopped_by": g.stopped_by,
                          "expected_calls": g.expected_calls, "expected_token": g.expected_token,
                          "expected_block": g.expected_block, "profile_calls": g.profile_calls,
                          "profile_sums": list(g.profile_sums), "profile_deeper": [list(d) for d in g.profile_deeper],
                          **g.stats.counts()}
                if execute:
                    completion = self.overrides.get(problem.task_id, record["completion"])
                    result = check_completion(problem, completion, self.limits)
                    record.update(completion=completion, status=result.status, test_seconds=result.seconds,
                                  stderr_tail=result.stderr_tail[-500:])
                self.record(record)
                mark = {"passed": "ok", "failed": "FAIL"}.get(record.get("status"), record.get("status", ""))
                rate = g.stats.tokens / g.stats.seconds if g.stats.seconds else float("nan")
                alpha = f" a={g.stats.alpha_hat:.2f}" if g.stats.n_examined else ""
                parts.append(f"{m.label}: {g.stats.tokens} tok {rate:.0f} tok/s{alpha} {mark}".rstrip())
            self.log(f"[{number}/{len(self.problems)}] {problem.task_id} ({time.perf_counter() - wall:.0f} s)")
            for part in parts:
                self.log(f"    {part}")
            self.log("    running: " + self.running_summary(methods, keys))
        return keys

    def running_summary(self, methods: list[Method], keys: dict[Method, str]) -> str:
        """Tokens/s and alpha so far, per method."""
        out = []
        for m in methods:
            t, n_problems, passed = aggregate([r for (k, _), r in self.stored.items() if k == keys[m]], m.K)
            if not t.tokens:
                continue
            text = f"{m.label} {t.tokens / t.seconds:.1f} tok/s"
            if t.n_examined:
                text += f" a={t.alpha_hat:.2f}"
            if "status" in next((r for (k, _), r in self.stored.items() if k == keys[m]), {}):
                text += f" pass {passed}/{n_problems}"
            out.append(text)
        return "; ".join(out)
