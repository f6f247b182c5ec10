"""What is chosen before the run: the methods (ArS and SpS per draft, nucleus and greedy, or Chen
Figure 1's sweep over K) and, without --K and --tree, each draft's K and tree per setting, chosen as
the demo chooses them from pilot runs on the first problem and the run's measured scoring costs."""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from specref import speedup
from specref.apps import demo
from specref.apps.demo import tree_drawing
from specref.apps.humaneval.problems import Problem
from specref.apps.humaneval.runner import (NGRAM_ORDER, Benchmark, Method, generate, lookup_n, method_rng,
                                           settings_key)
from specref.apps.named_drafts import by_name
from specref.trees import Tree
from specref.smollm2.draft import shipped_draft

PREDICTIONS = ("predicted_K", "predicted_tree")  # a choice's a-priori predictions (absent from older choice records)
NUCLEUS = (0.8, 0.95)  # Chen Table 1, HumanEval: temperature 0.8, top-p 0.95
GREEDY = (0.0, None)


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


def choose(bench: Benchmark, drafts: list[str], costs: dict) -> dict[tuple, dict]:
    """(draft, temperature, top_p) -> {"K", "tree", "why_K", "why_tree", "predicted_K", "predicted_tree"}: K and a
    tree (None where none pays) per draft and setting, chosen as the demo chooses them (`demo.choose_K`,
    `demo.choose_tree`) from pilot runs of demo.PILOT_TOKENS on the first problem (seed + 1; ArS, the chain, the
    tree demo.TREE_PILOT) and the run's measured scoring costs, with the speedups those choices predict before the
    run (`KChoice.predicted`, `TreeChoice.predicted`: the rows' "predicted_speedup").  Each choice is stored in the
    results file and reused on resume (the costs measured again on resume do not change it: its rows are stored
    under the K and tree it chose).  A choice stored before its predictions were (an older results file) has
    predicted_K and predicted_tree None: its rows then have no a-priori prediction, and say why."""
    scoring = [speedup.plausible_score_cost(costs["score_ratio"][K])[0] for K in sorted(costs["score_ratio"])]
    problem = bench.problems[0]
    prompt, out = bench.prompt_ids[problem.task_id], {}
    for temperature, top_p in (NUCLEUS, GREEDY):
        base = None
        for d in drafts:
            key = hashlib.sha256(json.dumps({"kind": "choice", "draft": d, "temperature": temperature,
                                             "top_p": top_p, "pilot": [problem.task_id, demo.PILOT_TOKENS,
                                                                       demo.PILOT_K, demo.TREE_PILOT],
                                             "settings": settings_key("choice", Method(None, 0, temperature, top_p),
                                                                      bench.args, bench.model_name)},
                                            sort_keys=True).encode()).hexdigest()[:16]
            if (key, "choice") not in bench.stored:
                if base is None:
                    base = _pilot(bench, prompt, problem, Method(None, 0, temperature, top_p), None)
                draft = by_name(d, bench.V, lambda: bench.solutions_of_others(problem.task_id), NGRAM_ORDER,
                                lookup_n(bench.args), neural=lambda: shipped_draft(bench.model))
                chain = _pilot(bench, prompt, problem, Method(d, demo.PILOT_K, temperature, top_p), draft)
                drawing = tree_drawing(d, temperature)
                pilot_tree = Method(d, Tree.parse(demo.TREE_PILOT).size, temperature, top_p, demo.TREE_PILOT, drawing)
                tree = _pilot(bench, prompt, problem, pilot_tree, draft)
                k = demo.choose_K(chain, base, scoring)
                t = demo.choose_tree(tree, base, scoring, k)
                bench.record({"key": key, "task_id": "choice", "K": k.K, "why_K": k.why(),
                              "tree": t.tree if t.pays else None, "why_tree": t.why(),
                              "predicted_K": k.predicted, "predicted_tree": t.predicted})
            c = bench.stored[(key, "choice")]
            out[(d, temperature, top_p)] = {**{k: c[k] for k in ("K", "tree", "why_K", "why_tree")},
                                            **{k: c.get(k) for k in PREDICTIONS}}
            setting = "greedy" if temperature == 0 else f"T {temperature:g}, top-p {top_p:g}"
            bench.log(f"{d}, {setting}: K: {c['why_K']}; tree: {c['why_tree']}")
    return out


def _pilot(bench: Benchmark, prompt, problem: Problem, method: Method, draft) -> "demo.Run":
    """A pilot run of demo.PILOT_TOKENS (no stop sequences) as a demo.Run, for `demo.choose_K` / `choose_tree`."""
    g = generate(prompt, bench.model, draft, method, demo.PILOT_TOKENS, bench.tokenizer,
                 method_rng(bench.args.seed + 1, problem.task_id, method), stop=False,
                 verify=getattr(bench.args, "verify", "token"))
    profile = demo.profile_table(g.profile_calls, g.profile_sums, g.profile_deeper)
    return demo.Run(method.name, method.draft or "-", method.K, method.temperature, method.top_p, [], g.stats,
                       tree=method.tree or "", drawing=method.drawing or "", profile=profile)
