"""The summary table of docs/performance.md, computed from the kept raw outputs of every run behind it.

    python3 -m tools.bench_summary [--out figures/performance/summary.txt]

Each row of ROWS names the runs of one machine on one day, as kept under figures/performance/: `bench`'s idle
runs (its --json output, or its printed table where no JSON was kept), `bench` with another process spinning on
one core ("busy"), `tools/torch_reference.py` and `tools/hf_prompt_lookup.py`.  For each row it prints the median
and the range over the idle runs of the decode step, decode / floor and scoring 5 and 9 tokens in decode steps;
the median of the busy runs; specref's and PyTorch eager's decode step; and, per workload of the prompt-lookup
comparison, whether specref's adaptive lookup's best speedup over its own ArS reached Hugging Face's, run by run.
Nothing is measured here: it only reads files, so the table changes only when a kept run does.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

DIR = Path(__file__).resolve().parents[1] / "figures" / "performance"

# label -> the kept runs behind it (file names under figures/performance/)
ROWS = {
    "Zen 4 (family 25 model 17), first machine": dict(
        idle=["bench_zen4_v6_quiet_1.json", "bench_zen4_v6_quiet_2.json", "bench_zen4_v6_quiet_3.json"],
        busy=["bench_zen4_v6_busy_1.json"], torch=["torch_reference_zen4_v6_t2.json"],
        hf=["hf_prompt_lookup_zen4_v6_1.json", "hf_prompt_lookup_zen4_v6_2.json"], lookup_n=3),
    "Zen 4, fourth machine": dict(
        idle=["bench_zen4_host2_v6_quiet_0.txt", "bench_zen4_host2_v6_quiet_1.json", "bench_zen4_host2_v6_quiet_2.json",
              "bench_zen4_host2_v6_quiet_3.json"],
        busy=["bench_zen4_host2_v6_busy_1.json"], torch=["torch_reference_zen4_host2_v6_t2.json"],
        hf=["hf_prompt_lookup_zen4_host2_v6_n8_1.json", "hf_prompt_lookup_zen4_host2_v6_n8_2.json"], lookup_n=8),
    "Zen 4, fourth machine, a later day, products written in place": dict(
        idle=["bench_zen4_host2_v6_inplace_1.json", "bench_zen4_host2_v6_inplace_2.json",
              "bench_zen4_host2_v6_inplace_3.json"],
        busy=["bench_zen4_host2_v6_inplace_busy.json"], torch=["torch_reference_zen4_host2_v6_inplace_t2.json"],
        hf=["hf_prompt_lookup_zen4_host2_v6_inplace_1.json"], lookup_n=8),
    "Zen 4, fourth machine, a third day": dict(
        idle=["bench_zen4_host2_v6_third_day_1.json", "bench_zen4_host2_v6_third_day_2.json",
              "bench_zen4_host2_v6_third_day_3.json", "bench_zen4_host2_v6_third_day_rounds.json"],
        busy=[], torch=[], hf=[]),
    "Zen 3 (family 25 model 1), second machine": dict(
        idle=["bench_zen3_quiet_1.json", "bench_zen3_quiet_2.json", "bench_zen3_quiet_3.json"],
        busy=["bench_zen3_busy_1.json", "bench_zen3_busy_2.json"],
        torch=["torch_reference_zen3_quiet_t1.json", "torch_reference_zen3_quiet_t2.json",
               "torch_reference_zen3_quiet_t2_passive.json"],
        hf=["hf_prompt_lookup_zen3.json"], lookup_n=3),
    "Zen 3, third machine, slow day": dict(
        idle=["bench_zen3_host2_v6_quiet_1.json", "bench_zen3_host2_v6_quiet_2.json", "bench_zen3_host2_v6_quiet_3.json"],
        busy=["bench_zen3_host2_v6_busy_1.json"], torch=["torch_reference_zen3_host2_v6_t2.json"],
        hf=["hf_prompt_lookup_zen3_host2_v6.json"], lookup_n=3),
    "Zen 3, third machine, a later day": dict(
        idle=["bench_zen3_host2_v6_day2_quiet_1.json", "bench_zen3_host2_v6_day2_quiet_2.json"],
        busy=["bench_zen3_host2_v6_day2_busy_1.json"], torch=[], hf=["hf_prompt_lookup_zen3_host2_v6_day2.json"], lookup_n=3),
    "Zen 3, third machine, a third day (slow again)": dict(
        idle=["bench_zen3_host2_v6_day3_quiet_1.json", "bench_zen3_host2_v6_day3_quiet_2.json",
              "bench_zen3_host2_v6_day3_quiet_3.json"],
        busy=["bench_zen3_host2_v6_day3_busy.json"], torch=[], hf=["hf_prompt_lookup_zen3_host2_v6_day3_n8_1.json"], lookup_n=8),
    "Zen 3, third machine, the third day, OpenBLAS's own threads (bench --blas-threads 2)": dict(
        idle=["bench_zen3_host2_v6_day3_blas2_quiet_1.json", "bench_zen3_host2_v6_day3_blas2_quiet_2.json",
              "bench_zen3_host2_v6_day3_blas2_quiet_3.json"],
        busy=["bench_zen3_host2_v6_day3_blas2_busy.json"], torch=[], hf=[]),
    "Xeon family 6 model 85, OPENBLAS_CORETYPE unset": dict(
        idle=["bench_xeon85_2026-11-28_coretype_unset.txt"], busy=[], torch=[], hf=[]),
    "Xeon family 6 model 85, OPENBLAS_CORETYPE=Haswell": dict(
        idle=["bench_xeon85_2026-11-28_coretype_haswell.txt"], busy=[], torch=[], hf=[]),
    "Xeon family 6 model 167": dict(
        idle=["bench_xeon167_2026-11-29_a.txt", "bench_xeon167_2026-11-29_b.txt"], busy=[], torch=[], hf=[]),
    "Xeon family 6 model 167, a later hour, OPENBLAS_CORETYPE=Haswell": dict(
        idle=["bench_xeon167_2026-11-29_coretype_haswell.txt"], busy=[], torch=[], hf=[]),
    "Xeon family 6 model 167, the same run's child, OPENBLAS_CORETYPE unset": dict(
        idle=["bench_xeon167_2026-11-29_coretype_haswell.txt:unset"], busy=[], torch=[], hf=[]),
    "Zen 4 (family 25 model 17), fifth machine, 2026-11-30": dict(
        idle=["bench_zen4_2026-11-30_a.json", "bench_zen4_2026-11-30_b.json"], busy=[], torch=[], hf=[]),
    "Zen 4, fifth machine, the same hour, OPENBLAS_CORETYPE=Haswell": dict(
        idle=["bench_zen4_2026-11-30_coretype_haswell.txt"], busy=[], torch=[], hf=[]),
    "Zen 4, fifth machine, the same run's child, OPENBLAS_CORETYPE unset": dict(
        idle=["bench_zen4_2026-11-30_coretype_haswell.txt:unset"], busy=[], torch=[], hf=[]),
    "Zen 4, fifth machine, a later hour, before rows were warped from the logits": dict(
        idle=["bench_zen4_2026-11-30_c_before_logits_warp.json"], busy=[], torch=[], hf=[]),
    "Zen 4, fifth machine, the same hour, after": dict(
        idle=["bench_zen4_2026-11-30_d_after_logits_warp.json"], busy=[], torch=[], hf=[]),
}

_TXT = {"decode": r"decode step \(ms/token\)\s+([\d.]+)", "floor": r"decode / floor\s+([\d.]+)",
        "score5": r"score 5 tokens / decode \(K=4\)\s+([\d.]+)", "score9": r"score 9 tokens / decode \(K=8\)\s+([\d.]+)"}


def bench_run(name: str) -> dict:
    """decode ms, decode / floor, scoring 5 and 9 tokens in decode steps, from one kept `bench` run; NAME:unset
    reads the costs its child process measured with OPENBLAS_CORETYPE unset (the kernels' comparison)."""
    name, _, part = name.partition(":")
    path = DIR / name
    if part == "unset":
        return _unset_column(path)
    if path.suffix == ".json":
        d = json.loads(path.read_text())
        return {"decode": d["decode_ms_per_token"], "floor": d["decode_over_stream"],
                "score5": d["score_ratio"]["4"], "score9": d["score_ratio"]["8"]}
    text, out = path.read_text(), {}
    for key, pattern in _TXT.items():
        found = re.search(pattern, text)  # the run's own table comes first (a comparison of kernels may follow)
        if found is None:
            raise ValueError(f"{path}: no line matching {pattern!r}: is it the output of python3 -m specref bench?")
        out[key] = float(found[1])
    return out


def _unset_column(path: Path) -> dict:
    """The second column of the comparison `bench` prints when OPENBLAS_CORETYPE forces the kernels."""
    text = path.read_text()
    head = text.find("OpenBLAS kernels: OPENBLAS_CORETYPE=")
    if head < 0:
        raise ValueError(f"{path}: no comparison of OpenBLAS kernels (bench prints one when OPENBLAS_CORETYPE is set)")
    out = {}
    for key, pattern in _TXT.items():
        found = re.search(pattern + r"\s+([\d.]+)", text[head:])
        if found is None:
            raise ValueError(f"{path}: the kernels' comparison has no line matching {pattern!r}")
        out[key] = float(found[2])
    return out


def spread(values: list[float], digits: int) -> str:
    """'median (lowest-highest)' of several runs, the value of one."""
    f = f"{{:.{digits}f}}"
    if len(values) == 1:
        return f.format(values[0])
    return f"{f.format(statistics.median(values))} ({f.format(min(values))}-{f.format(max(values))})"


def lookup_verdicts(names: list[str], lookup_n: int) -> str:
    """Per workload: in how many runs specref's adaptive lookup (matching up to `lookup_n` tokens) reached Hugging
    Face's best speedup, with each run's pair (specref / Hugging Face) and by how much it missed where it did."""
    runs = [json.loads((DIR / name).read_text())["rows"] for name in names]
    parts = []
    for k in range(len(runs[0])):
        pairs = [(rows[k]["specref_adaptive_best"], rows[k]["hf_best"]) for rows in runs]
        met = sum(s >= h for s, h in pairs)
        each = ", ".join(f"{s:.2f}x/{h:.2f}x" + (f" missed by {h - s:.3f}x" if s < h else "") for s, h in pairs)
        parts.append(f"{runs[0][k]['workload'].split(' (')[0]}: met in {met} of {len(pairs)} ({each})")
    return f"matching up to {lookup_n}: " + "; ".join(parts)


def row(label: str, spec: dict) -> list[str]:
    idle = [bench_run(name) for name in spec["idle"]]
    cells = [label, str(len(idle))]
    cells += [spread([r["decode"] for r in idle], 1)] + [spread([r[k] for r in idle], 2)
                                                         for k in ("floor", "score5", "score9")]
    busy = [bench_run(name) for name in spec["busy"]]
    cells.append(f"{statistics.median(r['decode'] for r in busy):.1f} ms, " +
                 ", ".join(f"{statistics.median(r[k] for r in busy):.2f}" for k in ("floor", "score5", "score9"))
                 if busy else "")
    torch = [json.loads((DIR / name).read_text()) for name in spec["torch"]]
    cells.append(f"{spread([t['decode_ms']['specref'] for t in torch], 1)} / {spread([t['decode_ms']['torch'] for t in torch], 1)}"
                 f" (PyTorch / specref {spread([t['decode_ms']['torch'] / t['decode_ms']['specref'] for t in torch], 2)}x;"
                 f" PyTorch scores 5 tokens for {spread([t['score_ratio']['4']['torch'] for t in torch], 2)} of its"
                 f" decode steps)" if torch else "")
    cells.append(lookup_verdicts(spec["hf"], spec["lookup_n"]) if spec["hf"] else "")
    return cells


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    header = ["machine", "idle runs", "decode step, ms", "decode / floor", "scoring 5 tokens / decode",
              "scoring 9 tokens / decode", "busy: decode step, decode / floor, scoring 5, scoring 9",
              "decode step, ms: specref / PyTorch eager", "adaptive prompt lookup against Hugging Face's"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row(label, spec)) + " |" for label, spec in ROWS.items()]
    lines += ["", "runs behind each row (figures/performance/):"]
    lines += [f"  {label}: " + ", ".join(spec["idle"] + spec["busy"] + spec["torch"] + spec["hf"])
              for label, spec in ROWS.items()]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
