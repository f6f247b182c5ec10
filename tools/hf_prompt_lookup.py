"""Prompt-lookup decoding, greedy: specref's speedup over its own ArS beside Hugging Face's over its own.

Three workloads, 128 new tokens each, greedy:
- chat: "add type hints and a docstring" to HumanEval/0's function (its body, untyped signature);
- chat: "rename idx to i" in HumanEval/0's function (prompt and canonical body);
- raw: HumanEval/5's prompt, continued.
Both sides get the same token ids (specref's tokenizer).  Hugging Face transformers runs the GGUF
dequantized by transformers, `generate(do_sample=False)` without and with
`prompt_lookup_num_tokens=K` (its default K = 10 and the same K list as specref), with its default
match of up to 2 tokens and (`hf-n8`) with `max_matching_ngram_size=8`; specref runs ArS and SpS
with the prompt-lookup draft and with its adaptive variant (`prompt-lookup-adaptive`, which drafts
only as far as the copy reaches, as Hugging Face's candidates do, and matches up to 8 tokens), and
(`specref-adaptive-n3`) the adaptive variant matching up to 3 tokens, as it did before, K = 2, 4, 8, 10.
Hugging Face copies from the earliest occurrence of the longest match, specref from the latest.
Each side's speedup is its ArS ms/token over its SpS ms/token in the same run (medians of
--repeats interleaved runs); the sides' greedy outputs are compared.

Run outside CI, in the virtual environment of tools/torch_reference.py plus transformers:

    /tmp/torchenv/bin/pip install transformers accelerate scipy
    PYTHONPATH=. /tmp/torchenv/bin/python tools/hf_prompt_lookup.py [--json PATH] [--threads N] [--repeats 3]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # what `python -m specref` sets for specref

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from specref.apps import demo  # noqa: E402
from specref.apps.humaneval.problems import load_problems  # noqa: E402
from specref.files import write_text  # noqa: E402
from specref.fast import load_fast  # noqa: E402
from specref.fast.machine import cores, cpu_label, machine_key  # noqa: E402
from specref.smollm2.weights import gguf_path  # noqa: E402
from tools.lookup_replay import NEW_TOKENS, workloads  # noqa: E402

KS = (2, 4, 8, 10)
HF_DEFAULT_K = 10
HF_SIDES = {"hf": {}, "hf-n8": {"max_matching_ngram_size": 8}}          # side -> generate() arguments
SPECREF_SIDES = {"specref": ("prompt-lookup", None), "specref-adaptive-n3": ("prompt-lookup-adaptive", 3),
                 "specref-adaptive": ("prompt-lookup-adaptive", None)}  # side -> (draft, lookup_n)
SIDES = tuple(HF_SIDES) + tuple(SPECREF_SIDES)


def hf_generate(model, ids, eos, k=None, **lookup):
    """(new token ids, ms per new token) of one greedy generate() call."""
    inputs = torch.tensor([ids])
    extra = {"prompt_lookup_num_tokens": k, **lookup} if k else {}
    t = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=NEW_TOKENS,
                             do_sample=False, eos_token_id=eos, pad_token_id=eos, **extra)
    seconds = time.perf_counter() - t
    new = out[0, len(ids):].tolist()
    return new, 1e3 * seconds / max(1, len(new))


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: every core)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the numbers to this JSON file")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each configuration, interleaved; the median ms/token is kept (default 3)")
    args = parser.parse_args()
    if args.threads < 0:
        parser.error(f"--threads must be >= 0, not {args.threads}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, not {args.repeats}")
    torch.set_num_threads(args.threads or cores())
    spec = load_fast(measure=True)
    eos = spec.tokenizer.eos_id
    gguf = gguf_path()
    hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    rows = []
    for name, ids in workloads(spec.tokenizer, load_problems()).items():
        print(f"\n{name}: {len(ids)} prompt tokens", flush=True)
        hf_generate(hf, ids, eos)                                                  # warm-up
        demo.generate(spec, ids, "ArS", "-", 0, 0.0, None, 4, 0)
        runs = {}                                    # (side, K) -> [(tokens, ms/token, tokens per call)]
        for _ in range(args.repeats):                # interleaved: drift hits every configuration alike
            for K in (0,) + KS:
                for side, lookup in HF_SIDES.items():
                    if side != "hf" and not K:
                        continue  # one ArS serves every side
                    new, ms = hf_generate(hf, ids, eos, K or None, **lookup)
                    runs.setdefault((side, K), []).append((new, ms, None))
                for side, (draft, lookup_n) in SPECREF_SIDES.items():
                    if side != "specref" and not K:
                        continue
                    r = demo.generate(spec, ids, "SpS" if K else "ArS", draft if K else "-", K, 0.0, None,
                                      NEW_TOKENS, 0, eos, lookup_n=lookup_n)
                    runs.setdefault((side, K), []).append((r.tokens, r.stats.ms_per_token,
                                                           r.stats.tokens_per_target_call))

        def median_ms(side, K):
            return float(np.median([ms for _, ms, _ in runs[(side, K)]]))

        def all_equal(side, K, reference):
            return all(tokens == reference for tokens, _, _ in runs[(side, K)])

        hf_ars, ars_tokens = runs[("hf", 0)][0][0], runs[("specref", 0)][0][0]
        hf_ars_ms, ars_ms = median_ms("hf", 0), median_ms("specref", 0)
        row = {"workload": name, "prompt_tokens": len(ids), "repeats": args.repeats, "hf_ars_ms": hf_ars_ms,
               "specref_ars_ms": ars_ms, "same_greedy_prefix": common_prefix(hf_ars, ars_tokens),
               "outputs_identical": hf_ars == ars_tokens and all_equal("hf", 0, hf_ars) and all_equal("specref", 0, ars_tokens),
               "tokens": len(ars_tokens), **{side: {} for side in SIDES}}
        for K in KS:
            line = f"  K={K:>2}:"
            for side in HF_SIDES:
                hf_ms = median_ms(side, K)
                row[side][K] = {"ms": hf_ms, "ms_runs": [ms for _, ms, _ in runs[(side, K)]],
                                "speedup": hf_ars_ms / hf_ms, "identical": all_equal(side, K, hf_ars)}
                line += f" {side} {row[side][K]['speedup']:.2f}x ({hf_ms:.1f} ms/token) "
            for side in SPECREF_SIDES:
                sp_ms, per_call = median_ms(side, K), runs[(side, K)][0][2]
                row[side][K] = {"ms": sp_ms, "ms_runs": [ms for _, ms, _ in runs[(side, K)]],
                                "speedup": ars_ms / sp_ms, "identical": all_equal(side, K, ars_tokens),
                                "tokens_per_call": per_call}
                line += f"   {side} {row[side][K]['speedup']:.2f}x ({sp_ms:.1f} ms/token, {per_call:.2f} tokens/call)"
            print(line, flush=True)
        rows.append(row)
    key = machine_key(spec.weights)
    print(f"\nCPU {cpu_label(key)}, {cores()} cores; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"specref plan: {spec.fast.layout} layout; greedy, {NEW_TOKENS} new tokens")
    print(f"{'workload':<38} {'ArS ms/tok HF':>13} {'specref':>8} {'HF K=10':>8}"
          + "".join(f" {side + ' best':>21}" for side in SIDES) + f" {'outputs':>8}")
    for r in rows:
        best = {side: max(r[side].items(), key=lambda kv: kv[1]["speedup"]) for side in SIDES}
        same = "same" if r["outputs_identical"] and all(v["identical"] for side in SIDES for v in r[side].values()) \
            else f"{r['same_greedy_prefix']}/{r['tokens']}"
        print(f"{r['workload']:<38} {r['hf_ars_ms']:>13.1f} {r['specref_ars_ms']:>8.1f} "
              f"{r['hf'][HF_DEFAULT_K]['speedup']:>7.2f}x"
              + "".join(f" {best[side][1]['speedup']:>17.2f}x@{best[side][0]:<2}" for side in SIDES) + f" {same:>8}")
        for side in SIDES:
            r[side.replace("-", "_") + "_best"] = best[side][1]["speedup"]
    if args.json:
        write_text(args.json, json.dumps({"machine": key, "torch": torch.__version__,
                                         "torch_threads": torch.get_num_threads(), "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
