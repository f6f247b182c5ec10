"""How well a pilot of a few HumanEval problems predicts a whole run's acceptance:
`python3 -m tools.pilot_subsets RESULTS.jsonl [--sizes 8,16,24,32]`.

Reads the per-problem records of a `python3 -m specref humaneval --json` run and prints, for each SpS chain
row, the acceptance (accepted drafts / drafts examined) over the whole run, over its first N problems (the
pilot `humaneval` used until 2026-11-29) and over N problems spread evenly across the run (problem i * n // N,
the pilot it uses since).  Greedy rows are exact for a greedy pilot, whose text is the run's own ArS text;
sampled rows draw their own text, so for them the subsets show the spread between problems, not the pilot's.
"""

import argparse
import json
import pathlib
import sys


def acceptance(records: list[dict]) -> float:
    examined = sum(r["n_examined"] for r in records)
    if not examined:
        raise ValueError("no drafts examined in these records")
    return sum(r["n_accepted"] for r in records) / examined


def subsets(path: pathlib.Path, sizes: list[int]) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_method: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("method", "").startswith("SpS[") and ",K=" in r["method"]:
            by_method.setdefault(r["method"], []).append(r)
    if not by_method:
        raise ValueError(f"{path} holds no SpS chain rows (expected a humaneval --json run's .jsonl)")
    lines = []
    for method, records in by_method.items():
        records.sort(key=lambda r: int(r["task_id"].split("/")[1]))
        n = len(records)
        parts = [f"all {n}: {acceptance(records):.3f}"]
        for k in sizes:
            if k > n:
                raise ValueError(f"--sizes {k} is more than the run's {n} problems")
            parts.append(f"first {k}: {acceptance(records[:k]):.3f}")
            parts.append(f"spread {k}: {acceptance([records[i * n // k] for i in range(k)]):.3f}")
        lines.append(f"{method}: " + "; ".join(parts))
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a humaneval run's per-problem .jsonl")
    parser.add_argument("--sizes", default="8,16,24,32", help="pilot sizes, comma-separated (default 8,16,24,32)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(k) for k in args.sizes.split(",")]
    except ValueError:
        sys.exit(f"--sizes must be whole numbers separated by commas, got {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        sys.exit(f"--sizes must be at least 1 each, got {args.sizes!r}")
    path = pathlib.Path(args.results)
    if not path.is_file():
        sys.exit(f"{path} is not a file")
    try:
        print("\n".join(subsets(path, sizes)))
    except ValueError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
