"""docs/performance.md's summary table is computed from the kept runs (tools/bench_summary.py): its kept output
must be what the tool computes from them now, and each row of the page's table must be a row of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import bench_summary

ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "figures" / "performance" / "summary.txt"


def test_the_kept_summary_is_what_the_runs_give(tmp_path, capsys):
    out = tmp_path / "summary.txt"
    bench_summary.main(["--out", str(out)])
    assert out.read_text() == KEPT.read_text(), "re-run python3 -m tools.bench_summary --out " + str(KEPT.relative_to(ROOT))


def test_every_row_of_the_page_comes_from_the_summary():
    page = (ROOT / "docs" / "performance.md").read_text()
    kept = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in KEPT.read_text().splitlines() if line.startswith("| ") and not line.startswith("| machine")}
    rows = [line for line in page.split("## Summary", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| ") and not line.startswith("| machine")]
    assert len(rows) == len(kept) == len(bench_summary.ROWS)
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:7] == kept[cells[0]][:7], cells[0]
        assert cells[7].split(" (")[0] == kept[cells[0]][7].split(" (")[0]


def test_a_file_that_is_not_benchs_output_is_refused_by_name(tmp_path, monkeypatch):
    # Negative control: a file without bench's table must not give a row of numbers.
    (tmp_path / "notes.txt").write_text("decode was fast today\n")
    monkeypatch.setattr(bench_summary, "DIR", tmp_path)
    with pytest.raises(ValueError, match=re.escape("notes.txt: no line matching")):
        bench_summary.bench_run("notes.txt")
