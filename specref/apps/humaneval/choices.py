"""What is chosen before the run: the methods (ArS and SpS per draft, nucleus and greedy, or Chen
Figure 1's sweep over K) and, without --K and --tree, each draft's K and tree per setting, chosen as
the demo chooses them: each draft replayed over the target's own completions of the first problems
(`specref.apps.pilot`), with the run's measured scoring costs."""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from specref import speedup
from specref.apps import demo, pilot
from specref.apps.demo import tree_drawing
from specref.apps.humaneval.problems import Problem
from specref.apps.humaneval.runner import (NGRAM_ORDER, Benchmark, Method, generate, lookup_n, method_rng,
                                           settings_key, trained_draft_key)
from specref.apps.named_drafts import by_name
from specref.trees import Tree
from specref.warps import Warp

PREDICTIONS = ("predicted_K", "predicted_tree")  # a choice's a-priori predictions (absent from older choice records)
NUCLEUS = (0.8, 0.95)  # Chen Table 1, HumanEval: temperature 0.8, top-p 0.95
GREEDY = (0.0, None)
TREE_SIZES = tuple(range(2, pilot.K_CHOICES + 1))  # trees whose scoring the run measures: every size a choice may take


def setting_name(temperature: float, top_p: float | None) -> str:
    """How a setting is named in the log and in the costs' `warp_ratio`: "greedy" or "T 0.8, top-p 0.95"."""
    return "greedy" if temperature == 0 else f"T {temperature:g}, top-p {top_p:g}"


def setting_warps() -> dict:
    """setting name -> its warp, for the two settings a run samples with (`measure_costs`' warps)."""
    return {setting_name(T, p): Warp(T, None, p) for T, p in (NUCLEUS, GREEDY)}


def methods_for(drafts: Iterable[str], K, tree: str | None = None) -> list[Method]:
    """ArS and SpS per draft, nucleus (Chen Table 1) and greedy.

    K: the chain's K for every draft, or a function (draft, temperature, top_p) -> K or None (no chain
    row); tree likewise: a shape for every draft, or a function -> shape or None (no tree row), its
    children drawn as `demo.tree_drawing` says."""
    methods = []
    for temperature, top_p in (NUCLEUS, GREEDY):
        methods.append(Method(None, 0, temperature, top_p))
        for d in drafts:
            k = K(d, temperature, top_p) if callable(K) else K
            shape = tree(d, temperature, top_p) if callable(tree) else tree
            if k is not None:
                methods.append(Method(d, k, temperature, top_p))
            if shape is not None:
                drawing = tree_drawing(d, temperature)
                methods.append(Method(d, Tree.parse(shape, drawing).size, temperature, top_p, shape, drawing))
    return methods


def sweep_methods(drafts: Iterable[str], Ks: Iterable[int]) -> list[Method]:
    """Chen Figure 1: ArS (K = 0) and SpS for every draft and K, nucleus sampling."""
    return [Method(None, 0, *NUCLEUS)] + [Method(d, K, *NUCLEUS) for d in drafts for K in Ks]


# The pilot's completions: this many problems spread evenly over the run's (`pilot_problems`), sampled by ArS at
# seed + demo.PILOT_SEED.  Until 2026-11-29 it was the first 8, which under-stated the trained draft's greedy
# acceptance on all 164 problems (0.320 against 0.536); 16 spread over them came within 0.031 of the whole run's
# acceptance in each of its four chain rows (`python3 -m tools.pilot_subsets`, docs/humaneval.md).
PILOT_PROBLEMS = 16


def pilot_problems(problems: list[Problem]) -> list[Problem]:
    """The pilot's problems: PILOT_PROBLEMS of `problems` spread evenly over them (problem i * n // k), or all."""
    n = len(problems)
    k = min(n, PILOT_PROBLEMS)
    return [problems[i * n // k] for i in range(k)]


def choose(bench: Benchmark, drafts: list[str], costs: dict) -> dict[tuple, dict]:
    """(draft, temperature, top_p) -> {"K", "tree", "why_K", "why_tree", "predicted_K", "predicted_tree"}: K and a
    tree (None where none pays) per draft and setting, chosen before the run (`demo.choose_K_replayed`,
    `demo.choose_tree_replayed`) from the run's measured scoring costs (as `speedup.priced_costs` prices them, then
    with the setting's warp of every row scored: `speedup.warped_costs` with the costs' `warp_ratio`) and
    each draft replayed over the pilot's text
    (`specref.apps.pilot`): the target's own completions of PILOT_PROBLEMS problems spread over the run's
    (`pilot_problems`), sampled by ArS with
    the run's warp, length and stop rule at seed + demo.PILOT_SEED, with the speedups those choices predict
    (`KChoice.predicted`, `TreeChoice.predicted`: the rows' "predicted_speedup").  Each choice is stored in the
    results file and reused on resume (the costs measured again on resume do not change it: its rows are stored
    under the K and tree it chose).  A choice stored before its predictions were (an older results file) has
    predicted_K and predicted_tree None: its rows then have no a-priori prediction, and say why."""
    chain, tree = speedup.priced_costs(costs["score_ratio"], costs.get("tree_score_ratio"))
    problems = pilot_problems(bench.problems)
    out = {}
    for temperature, top_p in (NUCLEUS, GREEDY):
        setting = setting_name(temperature, top_p)
        if setting not in costs.get("warp_ratio", {}):
            raise ValueError(f"the measured costs have no warp cost for {setting}: measure them with "
                             f"measure_costs(..., warps=setting_warps())")
        w = costs["warp_ratio"][setting]
        scoring = speedup.warped_costs([chain[K] for K in sorted(chain)], w)       # K = 1, 2, ...
        tree_scoring = speedup.warped_costs([tree[N] for N in sorted(tree)], w)    # N = 1, 2, ...
        texts = None
        for d in drafts:
            key = hashlib.sha256(json.dumps({"kind": "choice", "draft": d, "temperature": temperature,
                                             "top_p": top_p, "pilot": ["replay", [p.task_id for p in problems],
                                                                       demo.PILOT_SEED, pilot.K_CHOICES,
                                                                       "rows timed after a target call",
                                                                       pilot.TIMED_EVERY, "warped calls",
                                                                       "tree depths", pilot.TREE_DEPTHS,
                                                                       "accepted given the text's token",
                                                                       "top-k trees walked over the text"],
                                             "settings": settings_key("choice", Method(None, 0, temperature, top_p),
                                                                      bench.args, bench.model_name),
                                             **trained_draft_key(d, bench.args)},
                                            sort_keys=True).encode()).hexdigest()[:16]
            if (key, "choice") not in bench.stored:
                if texts is None:
                    bench.log(f"pilot, {setting}: the target's own completions of {len(problems)} problems ...")
                    texts = [_pilot_text(bench, problem, temperature, top_p) for problem in problems]
                bench.log(f"pilot, {setting}: replaying {d} over them ...")
                replayed = pilot.Replay.pooled([
                    demo.replay_draft(bench.model, bench.prompt_ids[problem.task_id], text.stats.new_tokens,
                                      text.stats, by_name(d, bench.V, lambda: bench.solutions_of_others(problem.task_id),
                                                          NGRAM_ORDER, lookup_n(bench.args),
                                                          neural=bench.neural_draft),
                                      d, temperature, top_p, bench.args.seed)
                    for problem, text in zip(problems, texts)])
                k = demo.choose_K_replayed(replayed, scoring)
                t = demo.choose_tree_replayed(replayed, tree_drawing(d, temperature), tree_scoring, k)
                bench.record({"key": key, "task_id": "choice", "K": k.K, "why_K": k.why(),
                              "tree": t.tree if t.pays else None, "why_tree": t.why(),
                              "predicted_K": k.predicted, "predicted_tree": t.predicted,
                              "pilot_tokens": replayed.tokens})
            c = bench.stored[(key, "choice")]
            out[(d, temperature, top_p)] = {**{k: c[k] for k in ("K", "tree", "why_K", "why_tree")},
                                            **{k: c.get(k) for k in PREDICTIONS}}
            bench.log(f"{d}, {setting}: K: {c['why_K']}; tree: {c['why_tree']}")
    return out


def _pilot_text(bench: Benchmark, problem: Problem, temperature: float, top_p: float | None):
    """The target's own completion of `problem` for the pilot: ArS with the run's length and stop rule, at seed +
    demo.PILOT_SEED (a Generation; its stats hold the tokens and the decode step's time)."""
    method = Method(None, 0, temperature, top_p)
    return generate(bench.prompt_ids[problem.task_id], bench.model, None, method, bench.args.max_new_tokens,
                    bench.tokenizer, method_rng(bench.args.seed + demo.PILOT_SEED, problem.task_id, method))
