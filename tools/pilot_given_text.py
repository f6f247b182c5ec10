"""The pilot's expected calls against speculative sampling's, on a toy target that copies in runs.

    python3 -m tools.pilot_given_text [--texts 800]

Given the text, speculative sampling accepts a draft at the text's token x with chance min(1, p(x) / q(x)),
independently from token to token (`specref.apps.pilot`'s docstring).  This samples texts from a toy target that
copies the token 4 back, with chance 0.95 after a copied token and 0.3 otherwise, replays a one-hot copy draft over
each (`pilot.replay`, K = 4), and prints the mean expected calls of three predictions beside the mean calls of
speculative sampling runs (other seeds, the same law of texts): the replay's (chances given the text's token), the
same calls with Definition 3.1's alpha = sum min(p, q) at every position (the replay until 2026-11-30), and for
the tree 2+1+1 drawn top-k from a softer copy draft, `pilot.tree_calls` against the chances by rank multiplied
along its paths.  Each with its z score, the difference over its standard error.  `tests/apps/test_pilot.py`
asserts the same on fewer texts.
"""

from __future__ import annotations

import argparse

import numpy as np

from specref import speedup
from specref.apps import pilot
from specref.runstats import RunStats
from specref.sampling import autoregressive_sampling, speculative_sampling
from specref.trees import Tree
from specref.warps import Warp
from tests.apps.pilot_toys import Copier, Soft, Sticky


def z(a, b) -> float:
    return float((np.mean(a) - np.mean(b)) / np.sqrt(np.var(a) / len(a) + np.var(b) / len(b)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=800, help="texts sampled (default 800)")
    args = ap.parse_args()
    if args.texts < 2:
        ap.error(f"--texts must be at least 2, got {args.texts}")
    target, prompt, n, K = Sticky(), np.array([1, 2, 3, 4, 5, 6, 7]), 40, 4
    tree = Tree.parse("2+1+1", "topk")
    given, before, runs, walked, tree_runs, multiplied = [], [], [], [], [], []
    for s in range(args.texts):
        text = autoregressive_sampling(prompt, target, n, np.random.default_rng([7, s]))[len(prompt):]
        full = np.concatenate([prompt, text])
        rep = pilot.replay(target, Copier(), prompt, text, Warp(1.0), K)
        given.append(pilot.call_mass(rep.accept[0], rep.drafted[0][:, K - 1]).sum())
        alpha = np.array([[np.minimum(Copier().row(full[:len(prompt) + m + j]), target.row(full[:len(prompt) + m + j])).sum()
                           for j in range(K)] for m in range(n)])
        before.append(pilot.call_mass(alpha, rep.drafted[0][:, K - 1]).sum())
        stats = RunStats()
        speculative_sampling(prompt, Copier(), target, n, K, np.random.default_rng([8, s]), on_step=stats.add)
        runs.append(stats.loops)
        trep = pilot.replay(target, Soft(), prompt, text, Warp(1.0), tree.depth, "topk")
        walked.append(pilot.tree_calls(trep.ranks[0], tree.parents))
        profile = [list(row / w) for row, w in zip(trep.tree_sums, trep.tree_weights) if w > 0]
        multiplied.append(n / speedup.tree_expected_tokens(tree.parents, profile))
        stats = RunStats()
        speculative_sampling(prompt, Soft(), target, n, tree.size, np.random.default_rng([8, s]), on_step=stats.add,
                             tree=tree)
        tree_runs.append(stats.loops)
    print(f"toy target copying in runs, V = {Sticky.V}, {n} tokens a text, {args.texts} texts; mean calls per text")
    print(f"chain K = {K}, one-hot copy draft: speculative sampling {np.mean(runs):.2f}")
    print(f"  replay, chances given the text's token   {np.mean(given):.2f}  z = {z(given, runs):+.1f}")
    print(f"  replay, alpha at every position (before) {np.mean(before):.2f}  z = {z(before, runs):+.1f}")
    print(f"tree {tree.name} drawn top-k, soft copy draft: speculative sampling {np.mean(tree_runs):.2f}")
    print(f"  walk over the text (tree_calls)          {np.mean(walked):.2f}  z = {z(walked, tree_runs):+.1f}")
    print(f"  chances by rank multiplied along paths   {np.mean(multiplied):.2f}  z = {z(multiplied, tree_runs):+.1f}"
          " (text length over the formula's tokens per call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
