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
  longest match, for those drafts only, and the trained draft's file, `--draft-file` or the shipped
  one, for the neural drafts only).  expected_tokens_per_call_token and
  _block: both verifiers' expected tokens per target call, computed exactly for each call's
  drafts and rows (`specref.proof.stats.ExpectedTokens`, not timed) and averaged over the
  calls, beside the measured tokens_per_target_call of the verifier that ran.
- predicted_speedup: the speedup predicted BEFORE the run, by the pilot that chose this row's K or
  tree (below): the draft replayed over the target's own completions (a tree: its chances by rank)
  with its rows' costs timed as a call meets them (`pilot.Replay.c_by_depth`), and the costs measured
  at the start of the run, priced as the loop pays them: scoring K + 1 tokens, or a tree of N nodes
  with its path kept (`measure_costs`' tree sizes 2 to 8), each row scored also warped at the
  setting's measured cost (`speedup.warped_costs`) (`specref.apps.pilot.KChoice.predicted`,
  `pilot.TreeChoice.predicted`).  ArS: 1.  None where no pilot chose the row (--K, --tree, or
  --no-bench-costs), or where the choice was stored by an older results file that did not store
  its prediction; predicted_note says which, and the table prints "none".
- model_check_speedup: Leviathan Theorem 3.8 with the scoring cost measured rather than assumed
  (`specref.speedup.walltime_improvement_measured`), from this row's OWN alpha, c = time of one
  draft call / time of one ArS target call, and score_cost = time of one SpS target call
  (K + 1 rows) / time of one ArS target call, all timed in the same run (warps included);
  a score_cost below 1 is timing noise (score_noise) and the check uses 1.  It takes its inputs
  from the outcome it is compared with: a check of the model's algebra, not a prediction.
  model_check_speedup_bench: the same with score_cost from `specref.apps.costs.measure_costs`
  (the bare forward pass scoring K + 1 tokens after a cached prefix, no warps), measured
  at the start of the run, and the row's own alpha and c; skipped with --no-bench-costs.
- The report has "format": 2.  A report without "format" (written before it) is format 1: there,
  predicted_speedup and predicted_speedup_bench are the two model checks above, not predictions.

K and the tree per draft.  Without --K and --tree, each draft gets, per setting, the K that
Leviathan's Theorem 3.8 predicts fastest and, where one pays, a tree of drafts (a second SpS row,
`specref.trees.Tree`), chosen as `python -m specref demo` chooses them (`demo.choose_K_replayed`,
`demo.choose_tree_replayed`): from the scoring costs measured at the start of the run and each draft replayed over
the target's own completions of a few problems spread over the run's (`specref.apps.pilot`: the chance of
acceptance at each position and depth, c, the tree's chances by rank at each depth; `choices.pilot_problems`).  The choices
are stored in the results file with the speedups they predict, so a resumed run keeps both; a choice
stored by an older results file has no prediction, and the run says so.  --K forces a chain of K for every
draft, --tree a tree for every draft (`demo.tree_drawing` says how its children are drawn); with
either, nothing is chosen.  With --no-bench-costs there are no costs to choose with: K = 4, no tree.
A tree row reports its shape (tree), how its children were drawn (verify: topk, mss or rrs),
tree_profile (the chance that the walk goes on to each child of a node, by rank, exactly over the
verifier's uniforms, averaged over the nodes reached at each depth: one list per depth, the root's
first; `demo.TreeProfile`), its prediction before the run (from the pilot's replay), and the model check of
Theorem 3.8 for trees (`speedup.tree_walltime_improvement`) with that profile and the row's measured costs.

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
import json
import pathlib
import sys

from specref import verifiers
from specref.fast import load_fast
from specref.fast.blas import describe_kernels, openblas_info
from specref.apps import options, sandbox
from specref.apps.costs import measure_costs
from specref.apps.humaneval.choices import PILOT_PROBLEMS, TREE_SIZES, choose, methods_for, setting_warps, sweep_methods
from specref.apps.humaneval.problems import STOP_SEQUENCES, load_problems
from specref.apps.humaneval.report import (REPORT_FORMAT, OLD_CHOICE, add_bench_model_check, format_sweep,
                                           format_table, parity, summarize, sweep_rows)
from specref.apps.humaneval.runner import PROMPT_LOOKUP_N, Benchmark, lookup_n
from specref.apps.named_drafts import LOOKUP_DRAFTS, check_draft_file
from specref.files import write_text
from specref.smollm2.draft import draft_sha256


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
    parser.add_argument("--draft-file", type=options.draft_file, default=None, metavar="FILE",
                        help=f"the trained draft the {' and '.join(options.NEURAL_DRAFTS)} drafts run: a file "
                             "`train-draft --out FILE` wrote (default: the shipped draft); stored results are kept "
                             "apart per draft file")
    parser.add_argument("--max-new-tokens", type=options.MAX_NEW_TOKENS, default=128,
                        help=f"token budget per completion, 1 to {options.CONTEXT_LENGTH - 1} (default 128)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--lookup-n", type=options.integer(1, 64), default=PROMPT_LOOKUP_N,
                        help=f"the longest match of the prompt-lookup drafts ({', '.join(LOOKUP_DRAFTS)}), 1 to 64 "
                             f"(default {PROMPT_LOOKUP_N}, which every stored result before this option used; "
                             f"elsewhere the adaptive draft matches up to 8)")
    parser.add_argument("--verify", choices=verifiers.CHAINS, default="token",
                        help="SpS verifier: token (Chen's Algorithm 2, default) or block (block verification); "
                             "stored results are kept apart per verifier")
    parser.add_argument("--json", type=options.output_file(parents=True, suffix_not=".jsonl"), default=None,
                        help="write the results here; per-problem results go to the .jsonl beside it (.json replaced by .jsonl, "
                             "or .jsonl appended to any other name), "
                             "and a rerun with the same settings resumes from them")
    parser.add_argument("--k-sweep", type=options.K_list, default=None, metavar="K1,K2,...",
                        help="instead of the table, run Chen Figure 1's sweep over these K (nucleus sampling, "
                             "exactly --max-new-tokens tokens per problem, no stop sequences, no tests)")
    parser.add_argument("--timeout", type=options.real(0.0, low_open=True), default=10.0,
                        help="seconds allowed to run one problem's tests, > 0 (default 10)")
    parser.add_argument("--no-bench-costs", action="store_true",
                        help="skip measuring the model's scoring cost per K before the run "
                             "(then rows have no model_check_speedup_bench, and nothing is chosen or predicted "
                             "before the run)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="cache directory (default $SPECREF_CACHE or ~/.cache/specref)")


def check_args(args) -> tuple[list[str], list[int] | None]:
    """The drafts and the sweep's K values (None: no sweep); ValueError naming a bad option.

    A parsed command line was checked as it was read; options set by other code are checked
    here by the same types (`specref.apps.options.checked`)."""
    args = options.checked(add_arguments, args)
    check_draft_file(getattr(args, "draft_file", None), args.drafts)
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
    kernels = openblas_info()
    print(describe_kernels(kernels))
    print(f"HumanEval: {len(problems)} problems, sandbox isolation '{sandbox.isolation()}', "
          f"seed {args.seed}, max {args.max_new_tokens} new tokens" + (f", results {bench.results_path}" if bench.results_path else ""))
    report: dict = {"format": REPORT_FORMAT, "settings": {"limit": args.limit, "K": args.K, "tree": getattr(args, "tree", None),
                                 "drafts": drafts, "seed": args.seed,
                                 "lookup_n": lookup_n(args),
                                 "verify": getattr(args, "verify", "token"),
                                 "max_new_tokens": args.max_new_tokens, "timeout": args.timeout,
                                 "stop_sequences": STOP_SEQUENCES, "isolation": sandbox.isolation(),
                                 "model": bench.model_name, "openblas": kernels,
                                 "draft_file": getattr(args, "draft_file", None),
                                 "draft_sha256": draft_sha256(getattr(args, "draft_file", None))}}
    costs = None
    if not args.no_bench_costs:
        print("measuring the scoring cost per K (specref.apps.costs.measure_costs) ...")
        costs = measure_costs(model, repeats=5, tree_sizes=TREE_SIZES, warps=setting_warps(),
                              warp_text=bench.prompt_ids[problems[0].task_id])
        report["costs"] = costs
        print("  scoring K + 1 tokens, in decode steps: " + ", ".join(f"K={k} {v:.2f}" for k, v in
                                                                       costs["score_ratio"].items()))
        print("  scoring a tree of N nodes and keeping a path: " + ", ".join(f"N={n} {v:.2f}" for n, v in
                                                                            costs.get("tree_score_ratio", {}).items()))
        print("  warping one row: " + ", ".join(f"{name} {v:.3f}" for name, v in costs.get("warp_ratio", {}).items()))
    if Ks:
        methods = sweep_methods(drafts, Ks)
        keys = bench.run_methods("sweep", methods, execute=False, stop=False)
        rows = sweep_rows(methods, bench.stored, keys, task_ids, args.max_new_tokens)
        add_bench_model_check(rows, costs)
        report["k_sweep"] = rows
        print(format_sweep(rows, args.max_new_tokens))
    else:
        K, tree, choices = args.K, getattr(args, "tree", None), None
        if K is None and tree is None:
            if costs is None:
                print("K = 4 for every draft (Chen Table 1): --no-bench-costs leaves no measured costs to choose K "
                      "and a tree with")
                K = 4
            else:
                choices = choose(bench, drafts, costs)
                report["choices"] = [{"draft": d, "temperature": T, "top_p": p, **c} for (d, T, p), c in choices.items()]
                K = lambda d, T, p: choices[(d, T, p)]["K"]                     # noqa: E731
                tree = lambda d, T, p: choices[(d, T, p)]["tree"]               # noqa: E731
        methods = methods_for(drafts, K, tree)
        keys = bench.run_methods("table", methods, execute=True, stop=True)
        rows = summarize(methods, bench.stored, keys, task_ids, choices)
        add_bench_model_check(rows, costs)
        report["rows"] = rows
        report["parity"] = parity(rows)
        print(format_table(rows))
        for p in report["parity"]:
            print(p["statement"])
        if report.get("choices"):
            print("K and tree per draft, and the speedups they predict before the run (the 'predicted' column): "
                  "each draft replayed over the target's own completions of "
                  f"{min(len(problems), PILOT_PROBLEMS)} problems spread over the run's, with this run's scoring costs "
                  "(specref.apps.pilot; --K, --tree force them):")
            for c in report["choices"]:
                setting = "greedy" if c["temperature"] == 0 else f"T {c['temperature']:g}, top-p {c['top_p']:g}"
                print(f"  {c['draft']}, {setting}: K: {c['why_K']}; tree: {c['why_tree']}")
            if any(c["predicted_K"] is None for c in report["choices"]):
                print(f"NOTE: {OLD_CHOICE} (resumed from an older results file): those rows show none; "
                      "rerun with a new --json to have them predicted")
    if args.json:
        path = pathlib.Path(args.json)
        write_text(path, json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")
    return 0
