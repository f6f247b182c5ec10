"""How close the pilot's choice of a tree was: every tree shape's predicted speedup, recomputed from a humaneval run.

    python3 -m tools.tree_choices figures/he164_zen4.json [more.json ...]

The run's JSON keeps its measured costs and, per draft and setting, the pilot's chances by rank at each depth as the
log prints them (`why_tree`, rounded to hundredths).  This prices each tree shape of `pilot.tree_shapes` from them
as `choices.choose` does (`speedup.priced_costs`, the setting's warp, `speedup.tree_walltime_improvement` with the
printed c per row), so it shows which shapes were within a hair of the one chosen.  The rounding and the single c
(the pilot's costs by row depth are not kept) make these approximate: compare shapes with each other, not with
the run's "predicted" column.  Trees drawn top-k (greedy) are predicted by counting calls over the pilot's texts,
which the JSON does not keep; they are skipped.
"""

from __future__ import annotations

import json
import re
import sys

from specref import speedup
from specref.apps.pilot import tree_shapes
from specref.trees import Tree


def chances(why_tree: str) -> tuple[list[list[float]], float]:
    """(chances by rank at each depth, c per row) from a choice's `why_tree` text."""
    c = float(re.search(r"c ([\d.]+): tree", why_tree).group(1))
    parts = why_tree.split("chances by rank ")[1].split(", c ")[0].split("; ")
    return [[float(x) for x in parts[0].split()]] + [[float(x) for x in p.split(": ")[1].split()] for p in parts[1:]], c


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:]) or ["figures/he164_zen4.json"]
    for path in paths:
        run = json.load(open(path))
        costs = run["costs"]
        _, tree = speedup.priced_costs(costs["score_ratio"], costs.get("tree_score_ratio"))
        for choice in run["choices"]:
            if "topk" in choice["why_tree"].split(",")[0]:
                continue
            setting = f"T {choice['temperature']}, top-p {choice['top_p']}"
            priced = speedup.warped_costs([tree[N] for N in sorted(tree)], costs["warp_ratio"][setting])
            profile, c = chances(choice["why_tree"])
            trees = {s: Tree.parse(s) for s in tree_shapes(len(priced))}
            shapes = sorted(((speedup.tree_walltime_improvement(t.parents, profile, c, priced[t.size - 1]), s)
                             for s, t in trees.items()), reverse=True)
            print(f"{path}: {choice['draft']}, {setting}: chose {choice['tree']} "
                  f"(predicted {choice['predicted_tree']:.3f}x); recomputed from the printed chances, the best five: "
                  + ", ".join(f"{s} {v:.3f}x" for v, s in shapes[:5]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
