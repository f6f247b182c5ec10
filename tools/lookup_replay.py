"""How many target calls greedy prompt lookup needs, replayed on the target's own greedy output:
`python3 -m tools.lookup_replay [--problems 20] [--json PATH]`.

Greedy speculative sampling with a deterministic draft is fully determined by the greedy
continuation the target produces without speculation: a call drafts k tokens, the verifier keeps
the longest drafted prefix that agrees with the continuation and adds the target's next token
(Chen Algorithm 2 with a one-hot q and a one-hot p; `mrs.verify` accepts x~_t iff it is q's
argmax, and the residual max(0, q - p) puts all its mass on the argmax otherwise).  So the
number of calls, tokens per call and tokens drafted can be counted for any prompt-lookup setting
from one ArS run, with no timing noise: `replay` does that, and a test checks it against the real
sampling loop.  This is how the adaptive draft's default longest match (`PromptLookupDraft.ADAPTIVE_N`)
was chosen.

The workloads are the three of tools/hf_prompt_lookup.py (two chat requests on HumanEval/0's
function and HumanEval/5's raw prompt) and the raw prompts of HumanEval's first --problems problems,
each continued greedily for 128 tokens or to the end-of-sequence token.  The continuations are
cached (in the specref cache, one JSON file, rewritten atomically after each prompt), so an
interrupted run resumes where it stopped.  Settings replayed: the plain draft matching up to 3
tokens, and the adaptive draft matching up to each --adaptive-n (default 3 and 8), at K = 2, 4, 8, 10.
"""

import argparse
import ast
import json
import os
import pathlib
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")           # as the command line sets it

import numpy as np  # noqa: E402

from specref.apps import demo  # noqa: E402
from specref.apps.humaneval.problems import load_problems  # noqa: E402
from specref.drafts import PromptLookupDraft  # noqa: E402
from specref.files import write_text  # noqa: E402
from specref.sampling import draft_length  # noqa: E402
from specref.smollm2.fetch import cache_root  # noqa: E402
from specref.fast import load_fast  # noqa: E402

NEW_TOKENS = 128
KS = (2, 4, 8, 10)
ADAPTIVE_NS = (3, 8)   # the adaptive draft's longest matches replayed by default (the plain draft: 3)


def replay(draft: PromptLookupDraft, prompt, continuation, K: int) -> tuple[int, int]:
    """(target calls, tokens drafted) of greedy SpS with `draft` that produces exactly `continuation` after `prompt`."""
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    x = [int(t) for t in prompt]
    target = [int(t) for t in continuation]
    if not x:
        raise ValueError("the prompt must hold at least one token")
    calls = drafted = done = 0
    while done < len(target):
        k = draft_length(draft, np.array(x), K)
        y = list(x)
        for _ in range(k):                      # the draft is one-hot: its sample is its proposal
            y.append(draft.propose(np.array(y)))
        proposal = y[len(x):]
        accepted = 0
        while accepted < k and done + accepted < len(target) and proposal[accepted] == target[done + accepted]:
            accepted += 1
        step = min(accepted + 1, len(target) - done)  # the kept prefix and the target's own next token
        x += target[done:done + step]
        done += step
        calls += 1
        drafted += k
    return calls, drafted


def workloads(tokenizer, problems) -> dict:
    """name -> prompt token ids: tools/hf_prompt_lookup.py's three workloads."""
    p0, p5 = problems[0], problems[5]
    fn = ast.parse(p0.prompt).body[-1]
    untyped = f"def {fn.name}({', '.join(a.arg for a in fn.args.args)}):\n" + p0.canonical_solution
    chat = lambda text: tokenizer.chat([{"role": "user", "content": text}])  # noqa: E731
    return {
        "type hints + docstring (HumanEval/0)": chat("Add type hints and a docstring to this Python function "
                                                     "and return it:\n\n" + untyped),
        "rename idx to i (HumanEval/0)": chat("Rename the variable idx to i in this Python function and "
                                              "return it:\n\n" + p0.prompt + p0.canonical_solution),
        "raw prompt (HumanEval/5)": tokenizer.encode(p5.prompt),
    }


def continuations(spec, prompts: dict, cache: pathlib.Path) -> dict:
    """name -> the target's greedy continuation of that prompt (cached, resumable)."""
    done = {}
    if cache.exists():
        try:
            done = json.loads(cache.read_text())
        except json.JSONDecodeError as e:
            raise SystemExit(f"{cache} is not valid JSON ({e}); remove it to regenerate the continuations")
    eos = spec.tokenizer.eos_id
    for i, (name, ids) in enumerate(prompts.items()):
        key = json.dumps([ids, NEW_TOKENS])
        if name in done and done[name]["key"] == key:
            continue
        print(f"  [{i + 1}/{len(prompts)}] greedy continuation of {name} ...", flush=True)
        r = demo.generate(spec, ids, "ArS", "-", 0, 0.0, None, NEW_TOKENS, 0, eos)
        done[name] = {"key": key, "tokens": list(map(int, r.tokens))}
        write_text(cache, json.dumps(done))
    return {name: done[name]["tokens"] for name in prompts}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=20, help="HumanEval problems from the first (default 20)")
    parser.add_argument("--adaptive-n", type=int, nargs="+", default=list(ADAPTIVE_NS),
                        help="longest matches of the adaptive draft to replay (default 3 8)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the counts to this JSON file")
    args = parser.parse_args(argv)
    if not 0 <= args.problems <= 164:
        parser.error(f"--problems must be between 0 and 164 (HumanEval has 164), not {args.problems}")
    if min(args.adaptive_n) < PromptLookupDraft.MIN_MATCH:
        parser.error(f"--adaptive-n values must be >= {PromptLookupDraft.MIN_MATCH} (the adaptive draft's shortest match), "
                     f"not {min(args.adaptive_n)}")
    plain_n = PromptLookupDraft.PLAIN_N
    settings = {f"plain, n = {plain_n}": (False, plain_n), **{f"adaptive, n = {n}": (True, n) for n in args.adaptive_n}}
    spec = load_fast(measure=True)
    problems = load_problems()
    chats = workloads(spec.tokenizer, problems)
    raw = {f"HumanEval/{i}": spec.tokenizer.encode(problems[i].prompt) for i in range(args.problems)}
    prompts = {**chats, **raw}
    conts = continuations(spec, prompts, cache_root() / "lookup_replay" / "continuations.json")
    V = spec.config.vocab_size
    groups = {name: [name] for name in chats}
    if raw:
        groups[f"HumanEval/0-{args.problems - 1}, raw, summed"] = list(raw)
    results = []
    print(f"\n{'workload':<42} {'setting':<16} {'K':>3} {'calls':>6} {'tok/call':>8} {'drafted':>8}")
    for group, names in groups.items():
        tokens = sum(len(conts[n]) for n in names)
        for setting, (adaptive, n) in settings.items():
            draft = PromptLookupDraft(V, n=n, adaptive=adaptive)
            for K in KS:
                counts = [replay(draft, prompts[name], conts[name], K) for name in names]
                calls, drafted = sum(c for c, _ in counts), sum(d for _, d in counts)
                results.append({"workload": group, "prompts": len(names), "tokens": tokens, "setting": setting,
                                "adaptive": adaptive, "n": n, "K": K, "calls": calls, "drafted": drafted,
                                "tokens_per_call": tokens / calls})
                print(f"{group:<42} {setting:<16} {K:>3} {calls:>6} {tokens / calls:>8.2f} {drafted:>8}")
    if args.json:
        write_text(args.json, json.dumps({"new_tokens": NEW_TOKENS, "rows": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
