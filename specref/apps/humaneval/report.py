"""The report: one row per method from the stored per-problem results (pass@1 with its Wilson
interval, ms/token, speedup, alpha, the speedup predicted before the run and Theorem 3.8's model check
from the run's own alpha and costs), ArS vs SpS parity, Chen Figure 1's sweep rows, and the Markdown
tables printed at the end of a run."""

from __future__ import annotations

import math

from specref import speedup
from specref.apps import demo
from specref.apps.demo import TREE_VERIFY
from specref.apps.humaneval.runner import Method, aggregate, sps_label
from specref.runstats import RunStats
from specref.trees import Tree

Z95 = 1.959963984540054  # two-sided 95% normal quantile

# Fields every row of the --json report has (the README's results table is built from them).
REQUIRED_ROW_FIELDS = ("method", "draft", "K", "temperature", "top_p", "pass_at_1", "pass_at_1_ci95",
                       "ms_per_token", "speedup", "alpha", "tokens_per_target_call", "predicted_speedup",
                       "predicted_note", "model_check_speedup", "n_problems")

# The --json report's format.  1 (reports without a "format" field, written before it existed): a row's
# predicted_speedup was Theorem 3.8 with the run's own alpha and costs, and predicted_speedup_bench the same with
# the bench's scoring costs.  2: predicted_speedup is the prediction made before the run (None where there is
# none, predicted_note says why), and those two figures are model_check_speedup and model_check_speedup_bench.
REPORT_FORMAT = 2

# Why a row has no a-priori prediction (its predicted_note).
NO_PILOT = ("no a-priori prediction: K or the tree was given (--K, --tree, or K = 4 with --no-bench-costs), "
            "so no pilot measured this draft before the run")
OLD_CHOICE = ("no a-priori prediction: K and the tree were chosen by a results file written before their "
              "predictions were stored")


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


# ---- rows ---------------------------------------------------------------------------------

def apriori(m: Method, choices: dict | None) -> tuple[float | None, str]:
    """(the speedup predicted for method `m` before the run, or None; why there is none, else "").

    ArS is the baseline: 1.  An SpS row's prediction is that of the choice that made it (`choices.choose`: the
    pilot's replay of the draft over the target's own completions, with the scoring costs measured before the run):
    the chain's for the K it
    chose, the tree's for the tree it chose.  A row that no pilot chose (--K, --tree) has none (NO_PILOT), and so
    has a row whose choice was stored before its predictions were (OLD_CHOICE)."""
    if m.draft is None:
        return 1.0, ""
    c = (choices or {}).get((m.draft, m.temperature, m.top_p))
    if c is None or (m.tree is None and m.K != c["K"]) or (m.tree is not None and m.tree != c["tree"]):
        return None, NO_PILOT
    value = c.get("predicted_tree" if m.tree is not None else "predicted_K")
    return (None, OLD_CHOICE) if value is None else (float(value), "")


def summarize(methods: list[Method], stored: dict, keys: dict[Method, str], task_ids: list[str],
              choices: dict | None = None) -> list[dict]:
    """One row per method, as described in the package docstring; `choices` (`choices.choose`, None: nothing was
    chosen) give the rows their predictions made before the run (`apriori`)."""
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
        check = 1.0  # the model check: Theorem 3.8 with this row's own alpha and costs, not a prediction
        if m.tree is not None:  # Theorem 3.8 for trees, with the run's chances by rank at each depth
            check = (speedup.tree_walltime_improvement(m.shape.parents, profile or [0.0], c,
                                                       speedup.plausible_score_cost(score_cost)[0])
                     if all(math.isfinite(v) for v in (c, score_cost)) else float("nan"))
        elif m.draft is not None:
            check = (float(speedup.improvement_with_lengths(min(alpha, 1.0), t.calls_by_drafted, c,
                                                            speedup.plausible_score_cost(score_cost)[0]))
                     if all(math.isfinite(v) for v in (alpha, c, score_cost)) else float("nan"))
        predicted, note = apriori(m, choices)
        low, high = wilson_interval(passed, n_problems)
        calls = sum(r.get("expected_calls", 0) for r in records)
        rows.append({
            "method": m.name, "draft": m.draft,
            "verify": (TREE_VERIFY[m.drawing] if m.tree else records[0].get("verify")) if records and m.draft else None,
            "K": m.K, "tree": m.tree, "drawing": m.drawing, "tree_profile": profile if m.tree else None,
            "temperature": m.temperature, "top_p": m.top_p,
            "pass_at_1": passed / n_problems if n_problems else float("nan"),
            "pass_at_1_ci95": [low, high], "passed": passed, "n_problems": n_problems,
            "ms_per_token": ms, "speedup": ars_ms / ms, "alpha": alpha if m.draft else None,
            "tokens_per_target_call": t.tokens_per_target_call,
            "expected_tokens_per_call_token": sum(r.get("expected_token", 0.0) for r in records) / calls
            if calls else None,
            "expected_tokens_per_call_block": sum(r.get("expected_block", 0.0) for r in records) / calls
            if calls else None,
            "predicted_speedup": predicted, "predicted_note": note, "model_check_speedup": check,
            "c": c if m.draft else None,
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


def add_bench_model_check(rows: list[dict], costs: dict | None) -> None:
    """Add model_check_speedup_bench to each SpS row whose every draft length the bench measured (see the package
    docstring): the model check with the bench's scoring costs, measured before the run, and the row's own alpha and c
    (so it is not a prediction either); a tree row's with the bench's cost of scoring its N nodes (a tree of N if
    measured, else a chain of N + 1), priced as the choices were (`speedup.priced_costs`)."""
    if costs is None:
        return
    curve, tree_curve = speedup.priced_costs(costs["score_ratio"], costs.get("tree_score_ratio"))
    tree = {int(n): v for n, v in costs.get("tree_score_ratio", {}).items()}  # sizes beyond the chains' (16)
    for row in rows:
        if row.get("tree"):
            ratio = tree_curve.get(row["K"], tree.get(row["K"]))
            c = row.get("c")
            ok = ratio is not None and c is not None and math.isfinite(c)
            row["model_check_speedup_bench"] = speedup.tree_walltime_improvement(
                Tree.parse(row["tree"]).parents, row.get("tree_profile") or [0.0], c,
                speedup.plausible_score_cost(ratio)[0]) if ok else None
            continue
        drafted = row.get("calls_by_drafted") or []
        ratios = [1.0 if k == 0 else curve.get(k) for k in range(len(drafted))]
        c = row.get("c")
        if row["draft"] is None or not drafted or any(r is None for r, n in zip(ratios, drafted) if n) or c is None \
                or not all(math.isfinite(v) for v in (row["alpha"], c)):
            row["model_check_speedup_bench"] = 1.0 if row["draft"] is None else None
            continue
        row["model_check_speedup_bench"] = speedup.improvement_with_lengths(
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
        name = sps_label(row["draft"], row["K"], row.get("tree"), row.get("drawing"))
        out.append({
            "draft": row["draft"], "temperature": row["temperature"], "top_p": row["top_p"],
            "difference": row["pass_at_1"] - ars["pass_at_1"], "difference_ci95": [low, high], "agree": agree,
            "statement": (
                f"{decoding}: {name} pass@1 {row['pass_at_1']:.1%} vs ArS {ars['pass_at_1']:.1%} "
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
            "model_check_speedup": row["model_check_speedup"], "c": row["c"], "score_cost": row["score_cost"],
            "verify": row["verify"], "tokens_per_target_call": row["tokens_per_target_call"],
            "expected_tokens_per_call_token": row["expected_tokens_per_call_token"],
            "expected_tokens_per_call_block": row["expected_tokens_per_call_block"],
        })
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table, and under it what its two Theorem 3.8 columns are."""
    lines = ["| method | draft | verify | K | tree | decoding | pass@1 [95% CI] | ms/token | speedup | predicted "
             "| model check | model check (bench costs) | alpha | tokens/target call | expected: token | expected: block |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        decoding = "greedy" if r["temperature"] == 0 else f"T={r['temperature']:g}, top-p={r['top_p']:g}"
        low, high = r["pass_at_1_ci95"]
        alpha = "" if r["alpha"] is None else f"{r['alpha']:.2f}"
        lines.append(
            f"| {r['method']} | {r['draft'] or '-'} | {r.get('verify') or '-'} | {r['K']} | {r.get('tree') or '-'} | {decoding} | "
            f"{r['pass_at_1']:.1%} [{low:.1%}, {high:.1%}] ({r['passed']}/{r['n_problems']}) | "
            f"{r['ms_per_token']:.1f} | {r['speedup']:.2f}x | "
            f"{'none' if r['predicted_speedup'] is None else _times(r['predicted_speedup'])} | "
            f"{r['model_check_speedup']:.2f}x | {_times(r.get('model_check_speedup_bench'))} | {alpha} | "
            f"{r['tokens_per_target_call']:.2f} | {_number(r.get('expected_tokens_per_call_token'))} | "
            f"{_number(r.get('expected_tokens_per_call_block'))} |")
    notes = ["", "predicted: made before the run, from each draft replayed over the target's own pilot completions "
                 "and the scoring costs measured before it (the choices below).",
             "model check (run's alpha, run's costs): Theorem 3.8 with the row's own alpha, c and scoring cost; with "
             "bench costs: the same with the scoring costs measured at the start. They check the model's algebra, "
             "not a prediction."]
    notes += sorted({f"none: {r['predicted_note']}." for r in rows if r["predicted_speedup"] is None})
    return "\n".join(lines + notes)


def _times(value) -> str:
    return "" if value is None else f"{value:.2f}x"


def _number(value) -> str:
    return "" if value is None else f"{value:.2f}"


def format_sweep(rows: list[dict], new_tokens: int) -> str:
    """The sweep's rows as a Markdown table; K is given per row, so no row has an a-priori prediction."""
    lines = [f"| draft | K | ms per {new_tokens} tokens | tokens per loop / (K+1) | ms per loop | speedup | model check "
             "| alpha |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        alpha = "" if r["alpha"] is None else f"{r['alpha']:.2f}"
        lines.append(f"| {r['draft'] or 'ArS'} | {r['K']} | {r[f'ms_per_{new_tokens}_tokens']:.0f} | "
                     f"{r['tokens_per_loop_over_K_plus_1']:.2f} | {r['ms_per_loop']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['model_check_speedup']:.2f}x | {alpha} |")
    lines += ["", "model check (run's alpha, run's costs): Theorem 3.8 with the row's own alpha, c and scoring cost, "
                  "a check of the model's algebra, not a prediction (K is given per row: no pilot, no a-priori "
                  "prediction)."]
    return "\n".join(lines)
