"""The draft's scaling curve: alpha on the target's own HumanEval completions against training positions.

    python3 -m tools.draft_scaling_plot                 # reads figures/draft_scaling/*.json, writes scaling.png

Each run's JSON is what `python -m specref train-draft --data-positions N --report FILE` writes (its
"humaneval_alpha", measured by `specref.apps.draft_eval`); the shipped draft's comes from
`train-draft --evaluate shipped --report FILE`.  The dashed lines are the targets (alpha >= 0.60 one step
ahead, >= 0.45 three steps ahead, at T 0.8 / top-p 0.95).  The data was built twice, on two machines whose
installed packages differ (docs/draft.md, Data); a report whose name ends in SECOND_BUILD was trained on the
second build, and its points are ringed.
"""

from __future__ import annotations

import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDER = ROOT / "figures" / "draft_scaling"
SECOND_BUILD = "_build2"  # the file-name ending of the runs trained on the second data build


def runs(folder: pathlib.Path) -> list[dict]:
    """(positions, steps, alpha by setting and steps ahead) of every training run's report in `folder`."""
    out = []
    for path in sorted(folder.glob("*.json")):
        report = json.loads(path.read_text())
        config = report.get("config")
        if not config or not config.get("data_positions") or "humaneval_alpha" not in report:
            continue                                   # the shipped draft's measurement, or not a training run
        out.append({"name": path.stem, "positions": report["train_positions"], "steps": config["steps"],
                    "hidden": config["hidden"], "alpha": report["humaneval_alpha"],
                    "build": 2 if path.stem.endswith(SECOND_BUILD) else 1})
    return sorted(out, key=lambda r: r["positions"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=pathlib.Path, default=FOLDER)
    args = parser.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    found = runs(args.folder)
    if not found:
        raise SystemExit(f"no training run reports (train-draft --data-positions N --report FILE) in {args.folder}")
    fig, ax = plt.subplots(figsize=(9, 4))
    steps = sorted({r["steps"] for r in found}, key=lambda n: (-sum(r["steps"] == n for r in found), n))
    curve = [r for r in found if r["steps"] == steps[0]]  # the curve: the step count most runs used (equal compute)
    x = [r["positions"] for r in curve]
    for k, color in (("1", "C0"), ("3", "C1")):
        ax.plot(x, [r["alpha"]["nucleus"][k] for r in curve], "o-", color=color,
                label=f"{k} ahead, T 0.8 / top-p 0.95, {steps[0]} steps")
        ax.plot(x, [r["alpha"]["t1"][k] for r in curve], "x:", color=color, label=f"{k} ahead, T 1, {steps[0]} steps")
        for n, marker in zip(steps[1:], "s^vD"):  # runs with more (or fewer) steps: points beside the curve
            more = [r for r in found if r["steps"] == n]
            ax.plot([r["positions"] for r in more], [r["alpha"]["nucleus"][k] for r in more], marker, color=color,
                    mfc="none", label=f"{k} ahead, T 0.8 / top-p 0.95, {n} steps")
    second = [r for r in found if r["build"] == 2]
    if second:
        ax.plot([r["positions"] for r in second] * 2,
                [r["alpha"]["nucleus"][k] for k in ("1", "3") for r in second], "o", ms=11, mfc="none", mec="k",
                label="trained on the second data build")
    ax.axhline(0.60, color="C0", ls="--", lw=0.8, label="target, 1 ahead")
    ax.axhline(0.45, color="C1", ls="--", lw=0.8, label="target, 3 ahead")
    shipped = args.folder / "shipped_draft_alpha.json"
    if shipped.is_file():
        a = json.loads(shipped.read_text())["humaneval_alpha"]["nucleus"]
        positions = json.loads(shipped.read_text())["meta"]["train_positions"]
        ax.plot([positions] * 2, [a["1"], a["3"]], "k*", label="draft shipped until 2026-11-29 (standard library only)")
    ax.set_xscale("log")
    ax.set_xlabel("training positions")
    ax.set_ylabel("alpha on the target's HumanEval completions")
    ax.set_title("MLP draft, Adam steps of 256 examples")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the plot, off the curves
    fig.tight_layout()
    out = args.folder / "scaling.png"
    fig.savefig(out, dpi=120)
    print(f"wrote {out}: " + "; ".join(f"{r['positions']:,} positions, {r['steps']} steps, build {r['build']}: 1 ahead "
                                         f"{r['alpha']['nucleus']['1']:.3f}, 3 ahead {r['alpha']['nucleus']['3']:.3f}"
                                         for r in found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
