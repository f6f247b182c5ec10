"""Tokens per target call of a chain of K drafts against trees of K nodes: exactly, and on HumanEval.

    python3 -m tools.tree_gain exact                     # a minute: the exact tables
    python3 -m tools.tree_gain costs                     # two minutes: scoring a tree against a chain, 15 rounds
    python3 -m tools.tree_gain depths                    # two minutes: chances by rank at each depth, demo prompt
    python3 -m tools.tree_gain humaneval --limit 12 --json runs/tree_gain.json
                                                         # the trained draft on HumanEval prompts: resumable
                                                         # (results go to the .jsonl beside --json), progress shown
    python3 -m tools.tree_gain vs-chain runs/tree_gain.json   # each tree's tokens per call against its chain's

Exact: every output of one call is enumerated over the tree's draws and the verifier's uniforms
(`expected_tokens`, a recursion over contexts), on context-dependent models over V = 6 tokens:
every prefix has its own Dirichlet(0.3) row for the target, and the draft is lam * target +
(1 - lam) * another such model.  Means over 8 random pairs per lam.  A chain through
`mrs.verify` (Chen's Algorithm 2) beside trees of the same number of nodes with their children
drawn three ways, each with its exact verifier.  `tests/core/test_tree_sampling.py` checks
`expected_tokens` against the exact laws of specref.proof.tree.

HumanEval: `specref.apps.humaneval`'s benchmark (the same prompts, stop sequences, sandbox and
resume) with the trained draft (`neural`), one row per (shape, children), every shape at K = 4
nodes, some at 8 (HUMANEVAL_SHAPES); tokens per target call measured, wall clock beside it, and the chances by rank
at each depth (`demo.TreeProfile`) that Theorem 3.8 for trees takes.

Depths: greedy prompt lookup on the demo's prompt, with trees whose walk goes below the root: the chances by rank
at each depth, and the tokens per call predicted from the root's chances alone and from every depth's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `python -m specref` sets it, before NumPy is imported

import numpy as np  # noqa: E402

from specref import speedup  # noqa: E402
from specref.apps import demo, humaneval as he, pilot  # noqa: E402  (he: the command's options, he.add_arguments)
from specref.apps.costs import measure_costs  # noqa: E402
from specref.apps.humaneval.choices import GREEDY, NUCLEUS  # noqa: E402
from specref.apps.humaneval.problems import load_problems  # noqa: E402
from specref.apps.humaneval.report import add_bench_model_check, format_table, summarize  # noqa: E402
from specref.apps.humaneval.runner import Benchmark, Method  # noqa: E402
from specref.fast import load_fast  # noqa: E402
from specref.files import write_text  # noqa: E402
from specref.proof import laws  # noqa: E402
from specref.trees import Tree  # noqa: E402

# The shapes compared, at equal nodes (a chain of K is "1x1x..."): exactly at K = 4 and 6 (a chain of 8 over
# V = 6 would be 6^8 contexts per model), on HumanEval at K = 4 and 8.
SHAPES = {4: ("2x1", "3+1", "2+1+1", "4"), 6: ("2x2", "3x1", "2x1x1", "3+2+1")}
HUMANEVAL_SHAPES = {4: SHAPES[4], 8: ("4x1", "2x3", "4+2+1+1", "2x1x1x1")}
DRAWINGS = ("topk", "iid", "without_replacement")
NAMES = {"topk": "top-k", "iid": "i.i.d. (mss)", "without_replacement": "w/o repl. (rrs)"}


# ---------------------------------------------------------------- exact expectation

def _largest(row, width: int) -> list[int]:  # the width tokens with the most mass (> 0), ties to the lowest id
    live = [x for x in range(len(row)) if row[x] > 0]
    return sorted(live, key=lambda x: (-row[x], x))[:width]


def expected_tokens(tree: Tree, draft_row, target_row) -> float:
    """Exact expected tokens of one call: the tree drawn from the draft as `tree.drawing` says and verified by its
    exact verifier, over the draws and the verifier's uniforms.  draft_row(prefix), target_row(prefix): the rows
    after the tokens `prefix` (a tuple), as in specref.proof.  A chain (one child per node) drawn "iid" is
    Algorithm 2 with `mrs.verify`."""
    kids = [[] for _ in range(tree.size + 1)]  # kids[r]: template nodes under row r (0: the root, i + 1: node i)
    for i, j in enumerate(tree.parents):
        kids[j + 1].append(i)
    memo = {}

    def at(row: int, prefix: tuple) -> float:  # expected tokens from the node of `row`, reached after `prefix`
        if (row, prefix) in memo:
            return memo[row, prefix]
        under = kids[row]
        if not under:
            value = 1.0  # the bonus token
        elif tree.drawing == "topk":  # y ~ q, followed when it is a child
            q, xs = target_row(prefix), _largest(draft_row(prefix), len(under))
            value = 1.0 + sum(q[x] * at(i + 1, prefix + (x,)) for i, x in zip(under, xs))
        else:
            value = tests(row, prefix, 0, np.asarray(target_row(prefix), float), np.asarray(draft_row(prefix), float))
        memo[row, prefix] = value
        return value

    def tests(row: int, prefix: tuple, r: int, w: np.ndarray, d: np.ndarray) -> float:
        # the r-th child is drawn from d and tested against the current q, w (SpecInfer; RRS zeroes d after a rejection)
        under = kids[row]
        if r == len(under) or not d.sum() > 0:
            return 1.0  # every child rejected: the recovered token
        total = 0.0
        for x in np.flatnonzero(d > 0):
            a = min(1.0, w[x] / d[x])
            if a > 0:
                total += d[x] * a * (1.0 + at(under[r] + 1, prefix + (int(x),)))
            if a < 1:
                res = np.maximum(w - d, 0.0)
                w2 = res / res.sum() if res.sum() > 0 else w
                d2 = d
                if tree.drawing == "without_replacement":
                    d2 = d.copy()
                    d2[x] = 0.0
                    d2 = d2 / d2.sum() if d2.sum() > 0 else d2
                total += d[x] * (1 - a) * tests(row, prefix, r + 1, w2, d2)
        return total

    return at(0, ())


def root_profile(tree_children: str, draft_row, target_row, width: int = 4) -> list[float]:
    """The chances by rank at the root (`speedup.tree_expected_tokens`' accept) for children drawn `tree_children`'s
    way: exact, as in `expected_tokens` (rank r is accepted, the walk going on to that child)."""
    q, p = np.asarray(target_row(()), float), np.asarray(draft_row(()), float)
    if tree_children == "topk":
        return [float(q[x]) for x in _largest(p, width)]
    out = [0.0] * width

    def tests(r, stay, w, d):
        if r == width or not d.sum() > 0:
            return
        for x in np.flatnonzero(d > 0):
            a = min(1.0, w[x] / d[x])
            out[r] += stay * d[x] * a
            if a < 1:
                res = np.maximum(w - d, 0.0)
                d2 = d
                if tree_children == "without_replacement":
                    d2 = d.copy()
                    d2[x] = 0.0
                    d2 = d2 / d2.sum() if d2.sum() > 0 else d2
                tests(r + 1, stay * d[x] * (1 - a), res / res.sum() if res.sum() > 0 else w, d2)

    tests(0, 1.0, q, p)
    return out


def mixture(a, b, lam):
    return lambda prefix: lam * a(prefix) + (1 - lam) * b(prefix)


def exact_tables(V: int = 6, pairs: int = 8, lams=(0.2, 0.5, 0.8), concentration: float = 0.3) -> str:
    """The exact tables as Markdown: mean expected tokens per call, per shape and way of drawing children."""
    models = []
    for lam in lams:
        for seed in range(pairs):
            rng = np.random.default_rng([2026, seed])
            target = laws.random_conditionals(V, rng, concentration)
            models.append((lam, mixture(target, laws.random_conditionals(V, rng, concentration), lam), target))
    out = [f"Exact expected tokens per target call, V = {V}, Dirichlet({concentration}) rows for every prefix, "
           f"draft = lam * target + (1 - lam) * another model; mean over {pairs} pairs.", ""]
    alphas = {lam: np.mean([float(np.minimum(d(()), t(())).sum()) for l2, d, t in models if l2 == lam]) for lam in lams}
    head = "| K | tree | children | " + " | ".join(f"lam {lam} (alpha {alphas[lam]:.2f})" for lam in lams) + " |"
    out += [head, "|---|---|---|" + "---|" * len(lams)]

    def row(K, name, drawing, tree):
        values = [np.mean([expected_tokens(tree, d, t) for l2, d, t in models if l2 == lam]) for lam in lams]
        out.append(f"| {K} | {name} | {drawing} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
        print(f"  K = {K}, {name}, {drawing}: " + ", ".join(f"{v:.3f}" for v in values), file=sys.stderr, flush=True)

    for K, shapes in SHAPES.items():
        row(K, f"chain of {K}", "Algorithm 2 (mrs.verify)", Tree.chain(K, "iid"))
        row(K, f"chain of {K}", NAMES["topk"], Tree.chain(K, "topk"))
        for name in shapes:
            for drawing in DRAWINGS:
                row(K, name, NAMES[drawing], Tree.parse(name, drawing))
    out += ["", "The same, predicted by Eq. 1 for trees (specref.speedup.tree_expected_tokens) from the chances by rank "
                "at the root, exact per model and averaged over the models as a run averages them over its calls (the "
                "iid assumption: every node like an average root):", "",
            "| K | tree | children | " + " | ".join(f"lam {lam}" for lam in lams) + " |",
            "|---|---|---|" + "---|" * len(lams)]
    for K, shapes in SHAPES.items():
        for name in (f"1x{'x'.join(['1'] * (K - 1))}",) + shapes:
            for drawing in ("topk", "without_replacement"):
                tree = Tree.parse(name, drawing)
                values = [speedup.tree_expected_tokens(tree.parents, np.mean(
                    [root_profile(drawing, d, t) for l2, d, t in models if l2 == lam], axis=0)) for lam in lams]
                label = f"chain of {K}" if name.startswith("1x") else name
                out.append(f"| {K} | {label} | {NAMES[drawing]} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------- HumanEval with the trained draft

def humaneval_methods(draft: str = "neural"):
    """The rows of the HumanEval comparison: ArS, chains of 4 and 8 through mrs.verify, and trees of 4 and 8 nodes."""
    methods = []
    for temperature, top_p in (NUCLEUS, GREEDY):
        methods.append(Method(None, 0, temperature, top_p))
        for K, shapes in HUMANEVAL_SHAPES.items():
            if temperature == 0 and K == 8:
                continue  # greedy: K = 4 only
            methods.append(Method(draft, K, temperature, top_p))
            for name in shapes:
                for children in (("topk",) if temperature == 0 else ("topk", "without_replacement")):
                    if K == 8 and children == "topk" and name != "4x1":
                        continue
                    methods.append(Method(draft, K, temperature, top_p, name, children))
    return methods


def run_humaneval(argv) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.tree_gain humaneval")
    he.add_arguments(parser)
    parser.add_argument("--draft", default="neural", help="the draft (default neural: the trained draft)")
    args = parser.parse_args(argv)
    problems = load_problems(args.cache_dir)[: args.limit or 12]
    model = load_fast(args.cache_dir, measure=True)
    bench = Benchmark(problems, model, args, model_name=type(model).__name__ + ":SmolLM2-135M-Instruct.Q4_1")
    methods = humaneval_methods(args.draft)
    print(f"{len(problems)} problems x {len(methods)} methods; results {bench.results_path}", flush=True)
    costs = None if args.no_bench_costs else measure_costs(model, repeats=5)
    keys = bench.run_methods("table", methods, execute=True, stop=True)
    rows = summarize(methods, bench.stored, keys, [p.task_id for p in problems])
    add_bench_model_check(rows, costs)
    print(format_table(rows))
    if costs is not None:
        print("\nscoring costs, in decode steps: chain of K + 1 tokens "
              + ", ".join(f"K={k} {v:.2f}" for k, v in costs["score_ratio"].items())
              + "; trees of N nodes " + ", ".join(f"N={n} {v:.2f}" for n, v in costs["tree_score_ratio"].items())
              + f"; decode {costs['decode_ms_per_token']:.1f} ms")
    print("\nchances by rank at the root, then at each deeper depth (tree rows):")
    for r in rows:
        if r.get("tree"):
            print(f"  {r['tree']:>8} {r['verify']:>5} {'greedy' if r['temperature'] == 0 else 'nucleus'}: "
                  + pilot.chances_text(r["tree_profile"] or []))
    if args.json:
        write_text(args.json, json.dumps({"rows": rows, "costs": costs}, indent=2, default=float) + "\n")
        print(f"wrote {args.json}")
    return 0


def run_costs(repeats: int = 15) -> int:
    """What scoring a tree of N nodes costs against a chain of N + 1 tokens, in decode steps, in shuffled rounds
    (`specref.apps.costs.measure_costs`), and the three tree verifiers on 16 nodes."""
    model = load_fast(measure=True)
    costs = measure_costs(model, repeats=repeats)
    print(f"decode step {costs['decode_ms_per_token']:.1f} ms; medians of {repeats} rounds, [25th, 75th percentile] "
          f"of the same ratio within each round")
    print("| N | tree of N nodes | chain of N + 1 tokens |")
    print("|---|---|---|")
    for N, r in costs["tree_score_ratio"].items():
        chain = costs["score_ratio"].get(N)
        low, high = costs["tree_score_ratio_rounds"][N]
        peer = "" if chain is None else (f"{chain:.2f} [{costs['score_ratio_rounds'][N][0]:.2f}, "
                                         f"{costs['score_ratio_rounds'][N][1]:.2f}]")
        print(f"| {N} | {r:.2f} [{low:.2f}, {high:.2f}] | {peer} |")
    print("chains: " + ", ".join(f"K={k} {v:.2f}" for k, v in costs["score_ratio"].items()))
    for drawing, ms in costs["verify_tree_ms"].items():
        print(f"{drawing}: {ms:.2f} ms = {100 * costs['verify_tree_fraction'][drawing]:.2f}% of a decode step; "
              f"mrs.verify (K = 4) {costs['mrs_ms']:.2f} ms")
    return 0


def run_depths(draft: str = "prompt-lookup", shapes=("4", "4x1x1", "2+1+1+1+1+1"), max_new_tokens: int = 96) -> int:
    """Greedy runs of `draft` with each tree on the demo's default prompt: the chances by rank at each depth the
    walk reached (`demo.TreeProfile`: exact at each node, averaged over the nodes reached), and the tokens per call
    that `speedup.tree_expected_tokens` predicts from the root's chances alone and from every depth's, beside the
    measured tokens per call."""
    model = load_fast(measure=True)
    tok = model.tokenizer
    prompt_ids = tok.chat([{"role": "user", "content": demo.DEFAULT_PROMPT}])
    for shape in shapes:
        tree = Tree.parse(shape, demo.tree_children(draft, 0.0))
        r = demo.generate(model, prompt_ids, "SpS", draft, 0, 0.0, None, max_new_tokens, 0, tok.eos_id, tree=tree)
        print(f"{draft}, greedy, tree {shape} ({tree.drawing} children), {len(r.tokens)} tokens: "
              f"{r.stats.tokens_per_target_call:.2f} tokens per call measured; predicted "
              f"{speedup.tree_expected_tokens(tree.parents, r.profile[0]):.2f} from the root's chances, "
              f"{speedup.tree_expected_tokens(tree.parents, r.profile):.2f} from every depth's")
        for depth, row in enumerate(r.profile):
            print(f"  depth {depth}: chances by rank " + " ".join(f"{v:.3f}" for v in row))
    return 0


def against_chains(rows: list[dict]) -> list[str]:
    """Each tree row's tokens per target call against the chain row of the same K and decoding in the same run."""
    lines = []
    for r in rows:
        if not r.get("tree"):
            continue
        chain = [c for c in rows if c.get("method") == "SpS" and not c.get("tree") and c["K"] == r["K"]
                 and c["temperature"] == r["temperature"] and c.get("top_p") == r.get("top_p")]
        if len(chain) != 1:
            raise ValueError(f"the tree {r['tree']} (K = {r['K']}) has {len(chain)} chain rows of its K and decoding")
        decoding = "greedy" if r["temperature"] == 0 else "nucleus"
        tree, base = r["tokens_per_target_call"], chain[0]["tokens_per_target_call"]
        lines.append(f"{decoding:>7} K = {r['K']}: tree {r['tree']:>8} ({r['verify']:>4}) {tree:.2f} tokens per call "
                     f"against the chain's {base:.2f}: {tree / base - 1:+.1%}")
    return lines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["vs-chain"]:
        if len(argv) != 2:
            print("usage: python3 -m tools.tree_gain vs-chain RESULTS.json (a `tree_gain humaneval --json` report)")
            return 2
        print("\n".join(against_chains(json.loads(pathlib.Path(argv[1]).read_text())["rows"])))
        return 0
    if argv[:1] == ["exact"]:
        print(exact_tables())
        return 0
    if argv[:1] == ["costs"]:
        return run_costs()
    if argv[:1] == ["depths"]:
        return run_depths()
    if argv[:1] == ["humaneval"]:
        return run_humaneval(argv[1:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
