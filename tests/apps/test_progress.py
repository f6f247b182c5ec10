"""The notebooks' progress line and the flag on an implausible scoring cost (notebook 05)."""

import pytest

from specref import speedup
from specref.apps import figures
from specref.lessons.progress import Progress


def test_progress_line_counts_and_estimates(capsys):
    progress = Progress(4, "runs of something", min_interval=0.0)
    assert progress.handle is None  # not in a kernel: lines go to stderr
    progress.step("first")
    assert progress.text().startswith("runs of something: 1 of 4 runs")
    assert "s left" in progress.text()
    for _ in range(3):
        progress.step()
    assert "s left" not in progress.text()  # all done: nothing left to estimate
    progress.done()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("runs of something: 1 of 4 runs (first)")
    assert err[-1].startswith("runs of something: 4 runs in ")


def test_progress_messages_without_a_count(capsys):
    log = Progress(0, "training", min_interval=0.0)
    log.message("step 10/120")
    log.done()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("training: step 10/120 (") and err[-1].startswith("training: done in ")


def _records(alpha=0.6, draft_ms=0.1):
    out = [{"K": 0, "seconds": 2.0, "tokens": 100, "loops": 100, "alpha": float("nan"), "draft_ms": 0.0}]
    for K in (1, 2):
        out.append({"K": K, "seconds": 1.5, "tokens": 100, "loops": 60, "alpha": alpha, "draft_ms": draft_ms})
    return out


def test_scoring_cost_below_one_step_is_flagged_and_not_used():
    costs = {"decode_ms_per_token": 20.0, "score_ratio": {1: 0.9, 2: 1.3}}
    rows = {r["K"]: r for r in figures.predicted_vs_measured(_records(), costs)}
    assert rows[1]["score_noise"] and rows[1]["score_measured"] == 0.9 and rows[1]["score_cost"] == 1.0
    assert rows[1]["predicted"] == pytest.approx(rows[1]["predicted_ideal"])  # never above free scoring
    assert not rows[2]["score_noise"] and rows[2]["score_cost"] == 1.3
    assert rows[2]["predicted"] == pytest.approx(speedup.walltime_improvement_measured(0.6, 2, 0.1 / 20.0, 1.3))
    for r in rows.values():
        assert r["predicted"] <= r["predicted_ideal"] + 1e-12


def test_loop_split_counts_K_draft_calls_per_loop():
    split = {r["K"]: r for r in figures.loop_split(_records(draft_ms=0.1))}
    assert split[0]["draft_ms"] == 0.0 and split[0]["loop_ms"] == pytest.approx(20.0)
    assert split[2]["draft_ms"] == pytest.approx(0.2) and split[2]["loop_ms"] == pytest.approx(25.0)
