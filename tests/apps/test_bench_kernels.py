"""`bench` names the OpenBLAS kernels it ran, and when OPENBLAS_CORETYPE forces them it measures the same
costs under OpenBLAS's own choice (a child process with the variable unset) and prints both.

The model, the measurement and the child are replaced by fakes here: the test is about what bench does
with what they return (the variable itself is never set or unset by the suite)."""

import json
import types

import pytest

from specref.apps import bench

COSTS = {"decode_ms_per_token": 65.0, "decode_over_stream": 1.41, "score_ratio": {1: 1.30, 4: 1.98},
         "weights_stream_ms": 40.0}
NATIVE = {"decode_ms_per_token": 27.0, "decode_over_stream": 1.23, "score_ratio": {"1": 1.05, "4": 1.21},
          "openblas": {"core": "Zen", "forced_core": None}}


def run_bench(monkeypatch, tmp_path, forced):
    info = {"version": "scipy-openblas 0.3.31", "core": "Haswell" if forced else "Zen", "threads": 1,
            "forced_core": "Haswell" if forced else None, "threads_var": None}
    model = types.SimpleNamespace(fast=types.SimpleNamespace(describe=lambda: "plan: fake"))
    children = []
    monkeypatch.setattr(bench.blas, "openblas_info", lambda: info)
    monkeypatch.setattr(bench, "load_fast", lambda **kw: model)
    monkeypatch.setattr(bench, "measure_costs", lambda m, repeats: dict(COSTS))
    monkeypatch.setattr(bench, "format_table", lambda costs: "table")
    monkeypatch.setattr(bench, "native_kernel_costs", lambda args: children.append(args) or NATIVE)
    out = tmp_path / "costs.json"
    args = types.SimpleNamespace(cache_dir=None, replan=False, one_thread=False, repeats=1, costs_only=True,
                                 json=str(out))
    assert bench.run(args) == 0
    return json.loads(out.read_text()), children


def test_forced_kernels_are_measured_against_openblas_s_own_choice(monkeypatch, tmp_path, capsys):
    costs, children = run_bench(monkeypatch, tmp_path, forced=True)
    text = capsys.readouterr().out
    assert len(children) == 1
    assert "Haswell kernels (forced by OPENBLAS_CORETYPE=Haswell)" in text
    assert costs["openblas"]["forced_core"] == "Haswell" and costs["native_kernels"]["openblas"]["core"] == "Zen"
    line = next(row for row in text.splitlines() if "score 5 tokens" in row)
    assert line.split()[-2:] == ["1.98", "1.21"], line   # forced, then OpenBLAS's own choice


def test_kernels_chosen_by_openblas_are_named_and_not_measured_twice(monkeypatch, tmp_path, capsys):
    costs, children = run_bench(monkeypatch, tmp_path, forced=False)
    text = capsys.readouterr().out
    assert children == [] and "native_kernels" not in costs
    assert "Zen kernels (OpenBLAS's choice for this CPU)" in text and costs["openblas"]["core"] == "Zen"


def test_the_comparison_needs_every_scoring_cost_of_both_runs():
    forced = {**COSTS, "openblas": {"core": "Haswell", "forced_core": "Haswell"}}
    with pytest.raises(KeyError):
        bench.format_kernel_comparison(forced, {**NATIVE, "score_ratio": {"1": 1.05}})
