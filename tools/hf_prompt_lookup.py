"""Prompt-lookup decoding, greedy: specref's speedup over its own ArS beside Hugging Face's over its own.

Three workloads, 128 new tokens each, greedy:
- chat: "add type hints and a docstring" to HumanEval/0's function (its body, untyped signature);
- chat: "rename idx to i" in HumanEval/0's function (prompt and canonical body);
- raw: HumanEval/5's prompt, continued.
Both sides get the same token ids (specref's tokenizer).  Hugging Face transformers runs the GGUF
dequantized by transformers, `generate(do_sample=False)` without and with
`prompt_lookup_num_tokens=K` (its default K = 10 and the same K list as specref); specref runs
ArS and SpS with the prompt-lookup draft and with its adaptive variant (`prompt-lookup-adaptive`,
which drafts only as far as the copy reaches, as Hugging Face's candidates do), K = 2, 4, 8, 10.  Each side's speedup is its ArS
ms/token over its SpS ms/token in the same run (medians of --repeats interleaved runs); the two
sides' greedy outputs are compared.

Run outside CI, in the virtual environment of tools/torch_reference.py plus transformers:

    /tmp/torchenv/bin/pip install transformers accelerate scipy
    PYTHONPATH=. /tmp/torchenv/bin/python tools/hf_prompt_lookup.py [--json PATH] [--threads N] [--repeats 3]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # what `python -m specref` sets for specref

import argparse  # noqa: E402
import ast  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from specref.apps import demo  # noqa: E402
from specref.apps.humaneval import load_problems  # noqa: E402
from specref.smollm2.model import load_smollm2  # noqa: E402
from specref.smollm2.plan import cores, cpu_label, machine_key  # noqa: E402
from specref.smollm2.weights import gguf_path  # noqa: E402

NEW_TOKENS = 128
KS = (2, 4, 8, 10)
HF_DEFAULT_K = 10


def workloads(tokenizer, problems) -> dict:
    """name -> prompt token ids."""
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


def hf_generate(model, ids, eos, k=None):
    """(new token ids, ms per new token) of one greedy generate() call."""
    inputs = torch.tensor([ids])
    extra = {"prompt_lookup_num_tokens": k} if k else {}
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
    spec = load_smollm2()
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
                new, ms = hf_generate(hf, ids, eos, K or None)
                runs.setdefault(("hf", K), []).append((new, ms, None))
                for side, draft in (("specref", "prompt-lookup"), ("specref-adaptive", "prompt-lookup-adaptive")):
                    if side == "specref-adaptive" and not K:
                        continue  # one ArS serves both
                    r = demo.generate(spec, ids, "SpS" if K else "ArS", draft if K else "-", K, 0.0, None,
                                      NEW_TOKENS, 0, eos)
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
               "tokens": len(ars_tokens), "hf": {}, "specref": {}, "specref-adaptive": {}}
        for K in KS:
            hf_ms = median_ms("hf", K)
            row["hf"][K] = {"ms": hf_ms, "ms_runs": [ms for _, ms, _ in runs[("hf", K)]],
                            "speedup": hf_ars_ms / hf_ms, "identical": all_equal("hf", K, hf_ars)}
            line = f"  K={K:>2}: HF {row['hf'][K]['speedup']:.2f}x ({hf_ms:.1f} ms/token)"
            for side in ("specref", "specref-adaptive"):
                sp_ms, per_call = median_ms(side, K), runs[(side, K)][0][2]
                row[side][K] = {"ms": sp_ms, "ms_runs": [ms for _, ms, _ in runs[(side, K)]],
                                "speedup": ars_ms / sp_ms, "identical": all_equal(side, K, ars_tokens),
                                "tokens_per_call": per_call}
                line += f"   {side} {row[side][K]['speedup']:.2f}x ({sp_ms:.1f} ms/token, {per_call:.2f} tokens/call)"
            print(line, flush=True)
        rows.append(row)
    key = machine_key(spec.weights)
    print(f"\nCPU {cpu_label(key)}, {cores()} cores; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"specref plan: {spec.plan.layout} layout; greedy, {NEW_TOKENS} new tokens")
    print(f"{'workload':<38} {'ArS ms/tok HF':>13} {'specref':>8} {'HF K=10':>8} {'HF best':>8} "
          f"{'specref best':>13} {'adaptive best':>14} {'outputs':>8}")
    for r in rows:
        hf_best = max(r["hf"].items(), key=lambda kv: kv[1]["speedup"])
        sp_best = max(r["specref"].items(), key=lambda kv: kv[1]["speedup"])
        ad_best = max(r["specref-adaptive"].items(), key=lambda kv: kv[1]["speedup"])
        same = "same" if r["outputs_identical"] and all(v["identical"] for side in ("hf", "specref", "specref-adaptive")
                                                       for v in r[side].values()) \
            else f"{r['same_greedy_prefix']}/{r['tokens']}"
        print(f"{r['workload']:<38} {r['hf_ars_ms']:>13.1f} {r['specref_ars_ms']:>8.1f} "
              f"{r['hf'][HF_DEFAULT_K]['speedup']:>7.2f}x {hf_best[1]['speedup']:>5.2f}x@{hf_best[0]:<2} "
              f"{sp_best[1]['speedup']:>8.2f}x@{sp_best[0]:<3} {ad_best[1]['speedup']:>9.2f}x@{ad_best[0]:<3} {same:>8}")
        r["hf_best"], r["specref_best"] = hf_best[1]["speedup"], sp_best[1]["speedup"]
        r["specref_adaptive_best"] = ad_best[1]["speedup"]
    if args.json:
        args.json.write_text(json.dumps({"machine": key, "torch": torch.__version__,
                                         "torch_threads": torch.get_num_threads(), "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
