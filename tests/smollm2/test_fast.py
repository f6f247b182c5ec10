"""specref.fast: every way of multiplying gives the same numbers as the plain path, and plans are chosen, cached and checked.

Tolerances: the candidates add the same float32 products in different orders (GEMV, small GEMM,
chunks), so they agree to float32 rounding: products to rtol 1e-5 against a float64 reference,
model logits to 5e-4 absolute (logits are O(10) and pass through 30 layers; the largest
difference seen is 1.1e-4), next-token probabilities to 2e-5 (3e-6 seen), and greedy tokens exactly.  A negative control
shows that a split which loses one chunk of columns is caught by the same comparison.
"""

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import specref.fast
import specref.fast.cache
import specref.fast.machine
import specref.fast.plan
import specref.fast.planner
import specref.fast.split
from specref.fast import fast_model, load_fast
from specref.fast.cache import plan_for, plan_path
from specref.fast.kernels import (METHODS, PADS, PANEL, PRODUCTS, PanelWeights, from_panels, panel_product, shape_of,
                                  to_panels, written_rows)
from specref.fast.machine import LoadWatch, cpu_identity, machine_key
from specref.fast.plan import ANY, FFN, ROW_COUNTS, Plan, PlanError, in_layout, parse_shape, shape_name
from specref.fast.planner import THREADS_MARGIN, choose, choose_ffn, measure
from specref.fast.split import CALLER_LEAD, column_chunks, ffn_product, split_product, unit_chunks
from specref.fast.team import Team
from specref.smollm2.model import SmolLM2, glu
from specref.smollm2.weights import Config, LayerWeights, Weights

FORCED = [("panels", 1), ("panels", 2), ("gemm", 1), ("gemm", 2), ("rows", 1), ("rows", 2)]


def layout_of(method, w):  # [d_in, d_out] -> the matrix in method's layout
    return to_panels(w, PANEL) if METHODS[method] == "panels" else w


@pytest.fixture(scope="module")
def team():
    return Team(1)


@pytest.mark.parametrize("method,threads", FORCED)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 9, 18, 19, 40])
def test_every_method_and_split_computes_x_times_w(method, threads, n, team):
    rng = np.random.default_rng(n)
    w = rng.standard_normal((96, 40 * PANEL), dtype=np.float32)        # 491 KB: several chunks below
    x = rng.standard_normal((n, 96), dtype=np.float32)
    expected = x.astype(np.float64) @ w.astype(np.float64)
    m = layout_of(method, w)
    for pad in ([None] + [p for p in (2, 6, 8, 12, 18) if p >= n]) if method in PADS else [None]:
        if threads > 1:
            got = split_product(x, m, method, team, pad)
        else:
            got = PRODUCTS[method](x, m, pad)
        assert got.dtype == np.float32 and got.shape == (n, w.shape[1])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("method", ["panels", "gemm", "rows"])
@pytest.mark.parametrize("n,pad", [(1, None), (1, 2), (3, 6), (5, None), (9, 10), (19, None), (40, 12)])
def test_a_product_fills_a_block_of_a_wider_result_in_place_and_nothing_else(method, n, pad):
    """The `out` a split hands each thread: a block of columns of the whole result (for panels, a
    block of its panels), rows padded as the method pads them; the columns around it stay as they were."""
    rng = np.random.default_rng(n)
    w = rng.standard_normal((96, 8 * PANEL), dtype=np.float32)
    x = rng.standard_normal((n, 96), dtype=np.float32)
    pad = pad if method in PADS else None
    rows = written_rows(method, n, pad)
    whole = np.full((rows, 12 * PANEL), 7.0, np.float32)        # the block is columns 2..10 panels wide
    block = whole[:, 2 * PANEL:10 * PANEL]
    if method == "panels":
        panel_product(x, to_panels(w, PANEL), pad, out=whole.reshape(rows, 12, PANEL)[:, 2:10])
    else:
        PRODUCTS[method](x, w, pad, out=block)
    np.testing.assert_allclose(block[:n], x.astype(np.float64) @ w, rtol=1e-5, atol=1e-4)
    assert (whole[:, :2 * PANEL] == 7).all() and (whole[:, 10 * PANEL:] == 7).all()


def test_a_panel_product_refuses_an_out_of_the_wrong_shape():
    w = to_panels(np.ones((96, 4 * PANEL), np.float32), PANEL)
    x = np.ones((5, 96), np.float32)                                  # padded to 6 rows by default
    with pytest.raises(ValueError, match=r"need \(6, 4, 32\)"):
        panel_product(x, w, out=np.empty((5, 4, PANEL), np.float32))


def test_a_split_that_loses_a_chunk_is_caught(team, monkeypatch):
    """Negative control for the test above: drop the last chunk of columns; the comparison must fail."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 40 * PANEL), dtype=np.float32)
    x = rng.standard_normal((5, 96), dtype=np.float32)
    whole = column_chunks
    monkeypatch.setattr(specref.fast.split, "column_chunks", lambda w, method, parts: whole(w, method, parts)[:-1])
    got = split_product(x, to_panels(w, PANEL), "panels", team)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-4)


def swiglu64(x, w_gate_up, w_down):  # the feed-forward in float64, [d, 2f] and [f, d] plain
    x, w_gate_up, w_down = (a.astype(np.float64) for a in (x, w_gate_up, w_down))
    gate_up = x @ w_gate_up
    f = w_down.shape[0]
    gate = gate_up[:, :f]
    return (gate / (1 + np.exp(-gate)) * gate_up[:, f:]) @ w_down


def feed_forward_weights(seed=0, d=96, f=40 * PANEL):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((d, 2 * f), dtype=np.float32) * 0.1,
            rng.standard_normal((f, d), dtype=np.float32) * 0.1)


@pytest.mark.parametrize("method", ["panels", "gemm", "rows"])
@pytest.mark.parametrize("n", [1, 2, 5, 9, 19])
def test_the_feed_forward_split_as_a_whole_computes_swiglu(method, n, team):
    w_gate_up, w_down = feed_forward_weights(n)
    x = np.random.default_rng(100 + n).standard_normal((n, 96), dtype=np.float32)
    expected = swiglu64(x, w_gate_up, w_down)
    for pad in ([None] + [p for p in (2, 6, 12, 18) if p >= n]) if method in PADS else [None]:
        got = ffn_product(x, layout_of(method, w_gate_up), layout_of(method, w_down), glu, method, team, pad)
        assert got.dtype == np.float32 and got.shape == (n, 96)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_feed_forward_split_that_loses_a_partial_is_caught(team, monkeypatch):
    """Negative control for the test above: drop the last chunk of intermediate units; the comparison must fail."""
    w_gate_up, w_down = feed_forward_weights()
    x = np.random.default_rng(1).standard_normal((5, 96), dtype=np.float32)
    whole = unit_chunks
    monkeypatch.setattr(specref.fast.split, "unit_chunks", lambda units, parts: whole(units, parts)[:-1])
    got = ffn_product(x, to_panels(w_gate_up, PANEL), to_panels(w_down, PANEL), glu, "panels", team)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, swiglu64(x, w_gate_up, w_down), rtol=1e-5, atol=1e-5)


def test_a_feed_forward_of_mismatched_matrices_is_a_clear_error(team):
    w_gate_up, w_down = feed_forward_weights()
    x = np.zeros((2, 96), np.float32)
    with pytest.raises(ValueError, match="do not make a gated feed-forward"):
        ffn_product(x, w_gate_up[:, :-PANEL], w_down, glu, "gemm", team)


def test_team_runs_every_chunk_once_and_passes_errors_on():
    team = Team(1)
    for n_chunks in (1, 2, 7, 100):
        seen, lock = [], threading.Lock()

        def task(k):
            with lock:
                seen.append(k)

        team.run(n_chunks, task)
        assert sorted(seen) == list(range(n_chunks))

    def boom(k):
        if k == 3:
            raise ZeroDivisionError("chunk 3")

    with pytest.raises(ZeroDivisionError, match="chunk 3"):
        for _ in range(20):                    # whichever thread takes chunk 3, the caller raises
            team.run(8, boom)
    team.run(4, lambda k: None)                # and the team still works afterwards


def test_a_failed_job_leaves_no_error_for_the_next_one():
    # Every chunk raises: the caller raises at its first chunk while the worker may be raising at
    # another; both errors belong to this job, and the next job must run clean.  (Before the caller
    # waited for the workers on an error, a worker's error surfaced in the next job: 20 of 20 here.)
    team = Team(1)

    def boom(k):
        time.sleep(0.001)                      # long enough for the worker to take a chunk too
        raise ValueError(f"chunk {k}")

    for _ in range(20):
        with pytest.raises(ValueError, match="chunk"):
            team.run(8, boom)
        done = []
        team.run(4, done.append)
        assert sorted(done) == [0, 1, 2, 3]


def test_chunks_cover_the_columns_in_order_one_per_thread_the_callers_largest():
    w = np.zeros((576, 3072), np.float32)                                  # 96 panels
    for method in ("panels", "gemm"):
        m = layout_of(method, w)
        units = m.shape[0] if method == "panels" else m.shape[1]
        for parts in (1, 2, 3, 4):
            chunks = column_chunks(m, method, parts)
            assert len(chunks) == parts
            assert chunks[0][0] == 0 and chunks[-1][1] == units
            assert all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:]))
            sizes = [b - a for a, b in chunks]
            if parts > 1:                                  # the caller's chunk leads by CALLER_LEAD
                assert sizes[0] == round(units * (1 / parts + CALLER_LEAD))
                assert max(sizes[1:]) - min(sizes[1:]) <= 1
    assert column_chunks(np.zeros((3, 8, PANEL)), "panels", 4) == [(0, 1), (1, 2), (2, 3)]   # never an empty chunk
    assert column_chunks(np.zeros((2, 8, PANEL)), "panels", 2) == [(0, 1), (1, 2)]


def test_bad_plans_are_refused():
    good = {n: {ANY: ("panels", 1, None)} for n in ROW_COUNTS}
    with pytest.raises(PlanError, match="unknown layout"):
        Plan("columns", good)
    with pytest.raises(PlanError, match="does not run on"):
        Plan("plain", good)
    with pytest.raises(PlanError, match="threads"):
        Plan("panels", {**good, 1: {ANY: ("panels", 0, None)}})
    with pytest.raises(PlanError, match="pad"):
        Plan("panels", {**good, 1: {ANY: ("panels", 1, 99)}})
    with pytest.raises(PlanError, match="pad for 1 rows, shape 64x96"):
        Plan("panels", {**good, 1: {ANY: ("panels", 1, None), (64, 96): ("panels", 1, 0)}})
    with pytest.raises(PlanError, match="'rows' does not pad"):
        Plan("plain", {n: {ANY: ("rows", 1, 4 if n == 2 else None)} for n in ROW_COUNTS})
    with pytest.raises(PlanError, match="an entry for"):
        Plan("panels", {**good, 1: {(64, 96): ("panels", 1, None)}})
    with pytest.raises(PlanError, match="an entry for"):
        Plan("panels", {**good, 1: ("panels", 1, None)})          # the version-3 form, no shapes
    with pytest.raises(PlanError, match="unknown method"):
        Plan.fixed("strassen")
    with pytest.raises(PlanError, match="version"):
        Plan.from_json({"version": 0})
    with pytest.raises(PlanError, match="d_inxd_out"):
        parse_shape("576 by 960")


def test_bad_feed_forward_splits_are_refused():
    good = {n: {ANY: ("panels", 1, None)} for n in ROW_COUNTS}
    with pytest.raises(PlanError, match="integer >= 2 threads"):
        Plan("panels", good, ffn={5: (1, None)})
    with pytest.raises(PlanError, match="pad for 5 rows must be None or an integer 5..18"):
        Plan("panels", good, ffn={5: (2, 4)})
    with pytest.raises(PlanError, match="does not choose for"):
        Plan("panels", {1: good[1]}, ffn={5: (2, None)})


def test_a_plan_splits_the_feed_forward_only_where_it_says_and_round_trips():
    plan = Plan("panels", {n: {ANY: ("panels", 1, None)} for n in (1, 6, 64)}, ffn={6: (2, None)})
    back = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back.ffn == {6: (2, None)} and plan.on_one_thread().ffn == {}
    w_gate_up, w_down = (to_panels(w, PANEL) for w in feed_forward_weights())
    x = np.random.default_rng(0).standard_normal((5, 96), dtype=np.float32)
    calls = []
    whole = specref.fast.plan.ffn_product
    try:
        specref.fast.plan.ffn_product = lambda *a, **k: calls.append(a[0].shape[0]) or whole(*a, **k)
        for n in (1, 5, 7):                                    # 5 uses the plan for 6 rows; 1 and 7 do not split
            got = plan.feed_forward(x[:n] if n <= 5 else np.vstack([x, x[:2]]), w_gate_up, w_down, glu)
            assert got.shape == (n, 96)
    finally:
        specref.fast.plan.ffn_product = whole
    assert calls == [5]
    assert "feed-forward split as a whole, panels/2" in plan.describe()
    assert Plan.fixed("gemm", 2, split_ffn=True).ffn == {n: (2, None) for n in ROW_COUNTS}


def ffn_ms(single_products, split_products, saved):
    """Synthetic measurements at 1 row: gate_up and down at 10 + 5 ms times `single_products` on one
    thread and `split_products` on two, and a pass over the layers that the feed-forward split
    shortens by `saved` ms."""
    return {1: {"576x3072": {"panels/1": 10.0 * single_products, "panels/2": 10.0 * split_products},
                "1536x576": {"panels/1": 5.0 * single_products, "panels/2": 5.0 * split_products},
                FFN: {"products": 40.0, "split/2": 40.0 - saved}}}


def test_choose_ffn_costs_the_split_like_choose_does():
    shapes = ((576, 3072), (1536, 576))
    one = {1: {ANY: ("panels", 1, None)}}                    # the products on one thread: 15 ms
    margin = THREADS_MARGIN * 15.0
    assert choose_ffn(ffn_ms(1.0, 1.0, margin * 1.05), (1,), one, shapes) == {1: (2, None)}
    assert choose_ffn(ffn_ms(1.0, 1.0, margin * 0.95), (1,), one, shapes) == {}   # under the margin
    two = {1: {ANY: ("panels", 2, None)}}                    # the products already split: any saving counts
    assert choose_ffn(ffn_ms(1.0, 0.8, 0.1), (1,), two, shapes) == {1: (2, None)}
    assert choose_ffn(ffn_ms(1.0, 0.8, -0.1), (1,), two, shapes) == {}             # a loss never
    padded = {1: {ANY: ("panels", 1, None), (576, 3072): ("panels", 1, 6)}}
    ms = ffn_ms(1.0, 1.0, 5.0)
    ms[6] = ms[1]
    assert choose_ffn(ms, (1,), padded, shapes) == {1: (2, 6)}                     # padded as gate_up is


def test_pick_uses_the_next_planned_row_count_and_the_shapes_own_choice():
    plan = Plan("panels", {1: {ANY: ("panels", 1, 2), (576, 3072): ("panels", 2, None)},
                             6: {ANY: ("panels", 1, None)}, 64: {ANY: ("panels", 1, None)}})
    assert plan.pick(1) == ("panels", 1, 2)
    assert plan.pick(1, (576, 3072)) == ("panels", 2, None)
    assert plan.pick(1, (576, 576)) == ("panels", 1, 2)              # a shape not named: the ANY choice
    assert plan.pick(4, (576, 3072)) == ("panels", 1, None)
    assert plan.pick(30) == plan.pick(500) == ("panels", 1, None)
    back = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back.choice == plan.choice and back.pick(1, (576, 3072)) == ("panels", 2, None)


def test_shape_of_reads_both_layouts():
    w = np.zeros((96, 3 * PANEL), np.float32)
    assert shape_of(w) == shape_of(to_panels(w, PANEL)) == (96, 3 * PANEL)
    assert parse_shape(shape_name((96, 96))) == (96, 96) and parse_shape(ANY) == ANY


# --- measuring and caching, on a tiny random model -------------------------------------------------

def tiny_weights(seed=0) -> Weights:
    rng = np.random.default_rng(seed)
    c = Config(n_layers=2, d_model=64, n_heads=2, n_kv_heads=1, head_dim=32, d_ff=128, vocab_size=256,
               context_length=64, rms_eps=1e-5, rope_base=10000.0)

    def m(d_in, d_out):
        return rng.standard_normal((d_in, d_out), dtype=np.float32) * 0.1

    layers = tuple(LayerWeights(attn_norm=np.ones(c.d_model, np.float32), w_qkv=m(64, 128), w_o=m(64, 64),
                                ffn_norm=np.ones(c.d_model, np.float32), w_gate_up=m(64, 256), w_down=m(128, 64))
                   for _ in range(c.n_layers))
    return Weights(config=c, head=m(64, 256), layers=layers, output_norm=np.ones(c.d_model, np.float32))


def test_measure_keeps_the_fastest_candidate_for_every_row_count_and_shape():
    weights = tiny_weights()
    plan = measure(weights, counts=(1, 2, 5, 6, 64), repeats=1, threads=2, progress=lambda *a: None)
    shapes = {shape_of(m) for m in weights.matrices()}
    assert set(plan.choice) == {1, 2, 5, 6, 64}
    for n, per_shape in plan.choice.items():
        assert set(per_shape) == shapes | {ANY}
        for shape, (method, threads, pad) in per_shape.items():
            assert METHODS[method] == plan.layout
            padded = pad if pad else n
            name = shape_name(shape)
            chosen = plan.ms[padded][name][f"{method}/{threads}"]
            # no candidate on this layout at n rows was faster (a split over threads counted with its margin)
            def cost(cand, v):
                return v / (1 - THREADS_MARGIN) if not cand.endswith("/1") else v
            own = [cost(c, v) for c, v in plan.ms[n][name].items() if METHODS[c.split("/")[0]] == plan.layout]
            assert cost(f"{method}/{threads}", chosen) <= min(own)
            assert padded >= n and (padded == n or method in PADS)
        for cand, v in plan.ms[n][ANY].items():                  # ANY's times are the shapes' sums
            assert v == pytest.approx(sum(plan.ms[n][shape_name(s)][cand] for s in shapes))
    assert "decode" in plan.why and plan.key["cpu"]
    for n in plan.choice:                                      # the feed-forward split, timed in whole passes
        assert set(plan.ms[n][FFN]) == {"products", "split/2"}
    shapes = (shape_of(weights.layers[0].w_gate_up), shape_of(weights.layers[0].w_down))
    assert plan.ffn == choose_ffn(plan.ms, (1, 2, 5, 6, 64), plan.choice, shapes)
    assert len(plan.describe().splitlines()) == 2 + 5
    assert plan.describe().splitlines()[1].startswith(f"  measured on: {plan.key['cpu']} (family/model/stepping")


def times(one_thread, two_threads, gemm=100.0):
    """Synthetic measurements of one shape: panels on 1 and 2 threads, the plain layout far slower."""
    return {ANY: {"panels/1": one_thread, "panels/2": two_threads, "gemm/1": gemm, "gemm/2": gemm}}


def test_choose_needs_a_split_to_save_more_than_the_margin():
    margin = THREADS_MARGIN
    ms = {1: times(20.0, 19.0),                          # 5% saved: one thread
          2: times(40.0, 40.0 * (1 - margin) * 0.99),    # just over the margin: two threads
          3: times(60.0, 60.0 * (1 - margin) * 1.01)}    # just under it: one thread
    layout, choice, why = choose(ms, counts=(1, 2, 3))
    assert layout == "panels" and "threads only where" in why
    assert choice[1][ANY][:2] == ("panels", 1)
    assert choice[2][ANY][:2] == ("panels", 2)
    assert choice[3][ANY][:2] == ("panels", 1)
    # negative control: without the margin the 5% split would win, so the test above can tell
    plain_min = min((v, name) for name, v in ms[1][ANY].items())[1]
    assert plain_min == "panels/2"


def test_choose_pads_panels_to_a_cheaper_row_count_and_refuses_missing_candidates():
    ms = {1: times(25.0, 40.0), 2: times(20.0, 40.0), 3: times(30.0, 40.0)}
    _, choice, _ = choose(ms, counts=(1, 2, 3))
    assert choice[1][ANY] == ("panels", 1, 2)          # 1 row padded to 2: 20 ms < 25 ms
    assert choice[3][ANY] == ("panels", 1, 3)
    with pytest.raises(PlanError, match="no plain candidate"):
        choose({1: {ANY: {"panels/1": 1.0}}}, counts=(1,))


def test_choose_pads_gemm_rows_to_a_full_block_but_never_rows(monkeypatch):
    # an AVX2-like machine: the plain layout, GEMM cheap at 4 and 8 rows and dear in between
    gemm = {1: 20.0, 2: 30.0, 3: 39.0, 4: 31.0, 5: 40.0, 6: 41.0, 7: 51.0, 8: 37.0}
    rows = {1: 21.0, 2: 29.0, 3: 38.0, 4: 60.0}
    ms = {n: {ANY: {"gemm/1": g, "gemm/2": 1e3, "panels/1": 1e3, "panels/2": 1e3,
                      **({"rows/1": rows[n], "rows/2": 1e3} if n in rows else {})}} for n, g in gemm.items()}
    layout, choice, _ = choose(ms, counts=tuple(gemm))
    assert layout == "plain"
    assert choice[2][ANY] == ("rows", 1, None)          # 29 ms unpadded beats GEMM padded to 4 (31)
    assert choice[3][ANY] == ("gemm", 1, 4)             # 31 < rows' 38: rows cannot be padded
    assert [choice[n][ANY] for n in (5, 6, 7)] == [("gemm", 1, 8)] * 3
    assert choice[8][ANY] == ("gemm", 1, 8)
    plan = Plan(layout, choice, ms)
    assert "3 rows (31.0 ms): gemm/1 pad 4" in plan.describe()
    # negative control: with padding left to panels alone (the version-4 rule), 7 rows pay 51 ms
    monkeypatch.setattr(specref.fast.planner, "PADS", ("panels",))
    _, unpadded, _ = choose(ms, counts=tuple(gemm))
    assert unpadded[7][ANY] == ("gemm", 1, None)


def test_a_plan_on_one_thread_keeps_every_choice_but_the_threads():
    split = Plan("plain", {n: {ANY: ("gemm", 2, 8 if n == 5 else None), (576, 576): ("rows", 1, None)}
                             for n in ROW_COUNTS}, why="measured", key={"cpu": "x"})
    one = split.on_one_thread()
    assert one.layout == split.layout and one.key == split.key and "one thread" in one.why
    for n in ROW_COUNTS:
        assert one.pick(n) == ("gemm", 1, 8 if n == 5 else None)
        assert one.pick(n, (576, 576)) == ("rows", 1, None)
    assert split._team is not None and one._team is None           # no worker threads at all
    x = np.random.default_rng(0).standard_normal((5, 64), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((64, 96), dtype=np.float32)
    np.testing.assert_allclose(one.linear(x, w), split.linear(x, w), rtol=1e-5, atol=1e-5)


def test_choose_plans_each_shape_and_picks_the_layout_by_their_sum():
    # two shapes: a split pays on the big one only; the plain layout is faster on the small one
    # alone but slower in sum, so the layout is panels and each shape keeps its own best there
    ms = {1: {"576x576": {"panels/1": 2.0, "panels/2": 3.0, "gemm/1": 1.5, "gemm/2": 3.0},
              "576x3072": {"panels/1": 8.0, "panels/2": 6.5, "gemm/1": 9.5, "gemm/2": 9.5}}}
    ms[1][ANY] = {c: ms[1]["576x576"][c] + ms[1]["576x3072"][c] for c in ms[1]["576x576"]}
    layout, choice, why = choose(ms, counts=(1,))
    assert layout == "panels" and "8.5 ms" in why                     # 2.0 + 6.5 against 1.5 + 9.5
    assert choice[1][(576, 576)] == ("panels", 1, 1)
    assert choice[1][(576, 3072)] == ("panels", 2, 1)
    assert choice[1][ANY] == ("panels", 1, 1)                       # 10.0 vs 9.5 / 0.9: one thread


ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse sse2 sse4_1 sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni

processor\t: 1
model name\t: something else
"""


def test_two_cpus_with_one_model_name_get_different_plans(tmp_path, monkeypatch):
    """VMs on AMD EPYCs with and without AVX-512 both say "AMD EPYC": the plan's key must still differ."""
    zen4 = cpu_identity(ZEN4)
    assert zen4 == {"cpu": "AMD EPYC", "cpu_id": "25/17/1",
                    "simd": ["avx", "avx2", "avx512_vnni", "avx512bw", "avx512f", "fma", "sse4_1", "sse4_2"]}
    zen3 = cpu_identity(ZEN4.replace("model\t\t: 17", "model\t\t: 1").replace(" avx512f avx512bw avx512_vnni", ""))
    assert zen3["cpu"] == zen4["cpu"] and zen3["cpu_id"] == "25/1/1" and "avx512f" not in zen3["simd"]
    assert cpu_identity("") == {"cpu": "", "cpu_id": "?/?/?", "simd": []}
    w = tiny_weights()
    paths = []
    for cpu in (zen4, zen3):
        monkeypatch.setattr(specref.fast.machine, "cpu_identity", lambda text, cpu=cpu: dict(cpu))
        key = machine_key(w)
        assert {k: key[k] for k in cpu} == cpu
        paths.append(plan_path(w, tmp_path))
    assert paths[0] != paths[1]


def test_plan_is_cached_per_machine_and_remeasured_when_unreadable_or_stale(tmp_path, monkeypatch):
    w = tiny_weights()
    calls = []
    monkeypatch.setattr(specref.fast.cache, "measure", fake_measure(calls))
    monkeypatch.setattr(specref.fast.cache, "LoadWatch", lambda: types.SimpleNamespace(others=lambda: 0.0))   # a quiet machine
    messages = []
    first = plan_for(w, tmp_path, messages.append)
    path = plan_path(w, tmp_path)
    assert path.exists() and len(calls) == 1
    again = plan_for(w, tmp_path, messages.append)                   # read back, not measured
    assert len(calls) == 1 and again.choice == first.choice and again.layout == first.layout
    path.write_text("{ not json")                                      # unreadable: measured again
    plan_for(w, tmp_path, messages.append)
    assert len(calls) == 2 and any("cannot be read" in m for m in messages)
    stale = json.loads(path.read_text())
    stale["key"]["cpu"] = "another CPU"                                # written on another machine
    path.write_text(json.dumps(stale))
    plan_for(w, tmp_path, messages.append)
    assert len(calls) == 3 and any("another machine" in m for m in messages)
    assert json.loads(path.read_text())["key"] == machine_key(w)
    plan_for(w, tmp_path, messages.append, remeasure=True)
    assert len(calls) == 4
    assert not list(path.parent.glob("*.tmp*"))                         # nothing half-written left


def test_in_layout_round_trips_and_embeds_alike():
    w = tiny_weights()
    panels = in_layout(w, "panels")
    assert isinstance(panels, PanelWeights) and all(m.ndim == 3 for m in panels.matrices())
    back = in_layout(panels, "plain")
    assert type(back) is Weights
    for a, b in zip(w.matrices(), back.matrices()):
        np.testing.assert_array_equal(a, b)
    tokens = np.array([0, 5, 255, 31, 32])
    np.testing.assert_array_equal(w.embed(tokens), panels.embed(tokens))
    np.testing.assert_array_equal(panels.head_matrix(), w.head)
    np.testing.assert_array_equal(from_panels(panels.head), w.head)


def test_panels_round_trip_and_reject_ragged_widths():
    w = np.arange(6 * 64, dtype=np.float32).reshape(6, 64)
    p = to_panels(w, 32)
    assert p.shape == (2, 6, 32) and p.flags.c_contiguous
    np.testing.assert_array_equal(from_panels(p), w)
    with pytest.raises(ValueError, match="do not split"):
        to_panels(w, 48)


def tiny_model() -> SmolLM2:
    return SmolLM2(tiny_weights())


def fake_measure(calls):
    def measure(weights, progress=print, **kw):
        calls.append(1)
        return dataclasses.replace(Plan.fixed("panels"), key=machine_key(weights), why="measured")
    return measure


def test_a_library_load_never_measures_unless_asked(tmp_path, monkeypatch):
    calls, messages = [], []
    monkeypatch.setattr(specref.fast, "load_smollm2", lambda cache_dir=None, progress=print: tiny_model())
    monkeypatch.setattr(specref.fast.cache, "measure", fake_measure(calls))
    monkeypatch.setattr(specref.fast.cache, "LoadWatch", lambda: types.SimpleNamespace(others=lambda: 0.0))   # a quiet machine
    model = load_fast(tmp_path, messages.append)                         # no plan cached, not asked to measure
    assert model.fast is None and calls == [] and any("plain path" in m for m in messages)
    model = load_fast(tmp_path, messages.append, measure=True)          # asked: measured once, cached
    assert model.fast is not None and calls == [1] and model.weights.head.ndim == 3
    model = load_fast(tmp_path, messages.append)                         # the cached plan, no measuring
    assert model.fast is not None and calls == [1]
    model = load_fast(tmp_path, messages.append, measure=True)          # cached: not measured again
    assert calls == [1]


def test_a_plan_measured_under_other_openblas_kernels_is_not_reused(tmp_path, monkeypatch):
    """OPENBLAS_CORETYPE can force other kernels on the same CPU: the plan's key names the kernels that ran,
    so a plan measured under Haswell's is measured again under SkylakeX's, and each is kept apart."""
    w = tiny_weights()
    calls, messages = [], []
    monkeypatch.setattr(specref.fast.cache, "measure", fake_measure(calls))
    monkeypatch.setattr(specref.fast.cache, "LoadWatch", lambda: types.SimpleNamespace(others=lambda: 0.0))
    cores = {}
    for core in ("Haswell", "SkylakeX", "Haswell"):
        monkeypatch.setattr(specref.fast.machine, "openblas_info", lambda core=core: {"core": core})
        plan_for(w, tmp_path, messages.append)
        assert machine_key(w)["blas_core"] == core
        cores[core] = plan_path(w, tmp_path)
    assert len(calls) == 2 and cores["Haswell"] != cores["SkylakeX"]  # the second Haswell load read its own plan
    assert json.loads(cores["SkylakeX"].read_text())["key"]["blas_core"] == "SkylakeX"


def test_the_blas_thread_setting_does_not_change_the_machine_key(monkeypatch):
    w = tiny_weights()
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    unset = plan_path(w)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert plan_path(w) == unset and "openblas_num_threads" not in machine_key(w)


@pytest.mark.parametrize("others, cached", [(0.9, False), (0.1, True), (None, True)])
def test_a_plan_measured_on_a_busy_machine_is_used_but_not_cached(tmp_path, monkeypatch, others, cached):
    calls, messages = [], []
    monkeypatch.setattr(specref.fast.cache, "measure", fake_measure(calls))
    monkeypatch.setattr(specref.fast.cache, "LoadWatch", lambda: types.SimpleNamespace(others=lambda: others))
    w = tiny_weights()
    plan = plan_for(w, tmp_path, messages.append)
    assert isinstance(plan, Plan) and plan_path(w, tmp_path).exists() is cached
    assert any("not cached" in m for m in messages) is (not cached)
    plan_for(w, tmp_path, messages.append)
    assert len(calls) == (2 if not cached else 1)                       # a busy plan is measured again next time


def test_the_load_watch_sees_another_process_and_not_this_one():
    """A child process spinning for a second counts as load; this process's own work does not."""
    watch = LoadWatch()
    if watch.start is None:
        pytest.skip("no /proc/stat on this system: the load of other processes cannot be read")
    assert watch.others() is None                                       # too short to tell
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    child.wait()
    busy = watch.others()
    assert busy > 0.4, busy                                             # the child had most of a core
    mine = LoadWatch()
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:                                # this process spins: not "others"
        pass
    assert mine.others() < busy


# --- the real model under every forced plan ---------------------------------------------------------

@pytest.mark.default_cases("rows-1-False", "gemm-2-True", "panels-2-False")
@pytest.mark.parametrize("method,threads,split_ffn", [(m, t, False) for m, t in FORCED]
                         + [("panels", 2, True), ("gemm", 2, True)])
def test_the_model_gives_the_same_numbers_whichever_plan_runs(smollm2, method, threads, split_ffn):
    base = smollm2                                                      # the plain path
    plan = Plan.fixed(method, threads, split_ffn)
    model = fast_model(smollm2, plan)
    assert model.weights.head.ndim == (3 if plan.layout == "panels" else 2)
    prompt = np.array(smollm2.tokenizer.chat([{"role": "user", "content": "Write a haiku about rain."}]))
    np.testing.assert_allclose(model.logits(prompt), base.logits(prompt), atol=5e-4, rtol=0)
    tokens = list(prompt)
    for _ in range(6):                                                 # greedy decode, then score 5 rows
        nxt = int(np.argmax(model.next_logits(np.array(tokens))[0]))
        assert nxt == int(np.argmax(base.next_logits(np.array(tokens))[0]))
        tokens.append(nxt)
    scored = np.array(tokens + [100, 200, 300, 400, 500])
    np.testing.assert_allclose(model.next_probs(scored, 5), base.next_probs(scored, 5), atol=2e-5, rtol=0)


def test_a_measured_plan_covers_every_row_count_and_describes_itself():
    weights = tiny_weights()
    plan = measure(weights, repeats=1, threads=1, progress=lambda *a: None)
    assert set(plan.choice) == set(ROW_COUNTS)
    shapes = {shape_of(m) for m in weights.matrices()}
    assert all(set(per_shape) in ({ANY}, shapes | {ANY}) for per_shape in plan.choice.values())
    text = plan.describe()
    assert text.startswith(f"plan: weights in the {plan.layout} layout")
    assert len(text.splitlines()) == 2 + len(ROW_COUNTS)
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    fast = fast_model(tiny_model(), plan)
    np.testing.assert_allclose(fast.linear(x, fast.weights.layers[0].w_o), x @ weights.layers[0].w_o, rtol=1e-5, atol=1e-5)


def test_the_thread_experiments_run_every_variant_to_the_end():
    # tools/thread_experiments.py (docs/performance.md's measurements of where a second core could help):
    # every variant multiplies by every matrix and returns, twice in a row, on small panel matrices.
    from tools.thread_experiments import ReadAhead, variants
    rng = np.random.default_rng(0)
    mats = [to_panels(rng.standard_normal(shape).astype(np.float32), PANEL) for shape in [(64, 96), (64, 64), (96, 64)] * 3]
    team = Team(1)
    runs = variants(mats, team, ReadAhead(mats))
    assert sorted(runs) == sorted(["1 thread", "split each product", "halves, one hand-off", "row blocks", "read-ahead helper"])
    for n in (1, 3):
        x = {d: rng.standard_normal((n, d)).astype(np.float32) for d in (64, 96)}
        for name, run in runs.items():
            for _ in range(2):
                run(x, 2)


def test_the_gemm_cost_probe_times_every_row_count_both_ways(tmp_path, capsys):
    # tools/gemm_cost.py (docs/performance.md's measurement of what n rows cost with the weights in cache and
    # from memory): every row count gets a time and a rate for both kinds, the table shows them
    # against the fewest rows, --json writes the same numbers, and bad arguments are refused.
    from tools import gemm_cost
    out = tmp_path / "cost.json"
    gemm_cost.main(["--rows", "3", "1", "--rounds", "2", "--shape", "64", "96", "--matrices", "3", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["shape"] == [64, 96] and result["matrices"] == 3 and result["rounds"] == 2
    assert sorted(result["rows"]) == ["1", "3"]
    for n, r in result["rows"].items():
        for kind in ("hot", "cold"):
            assert r[f"{kind}_ms"] > 0
            assert r[f"{kind}_gflops"] == pytest.approx(2 * int(n) * 64 * 96 * 3 / r[f"{kind}_ms"] / 1e6)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["1", "3"]
    assert lines[2].split()[2] == lines[2].split()[5] == "1.00"                       # 1 row against itself
    for bad, message in ((["--rows", "0"], "row counts must be >= 1"), (["--rounds", "0"], "need rounds >= 1"),
                         (["--matrices", "0"], "need rounds >= 1"), (["--shape", "0", "5"], "shape of two positive")):
        with pytest.raises(SystemExit):
            gemm_cost.main(bad)
        assert message in capsys.readouterr().err


def test_the_ab_tool_extracts_a_base_version_that_imports_nothing_of_the_current_one(tmp_path):
    # tools/ab_model.py times the model at two commits in one process; that holds only if the
    # extracted base package (specref_base) uses its own modules throughout, never specref's.
    from tools import ab_model
    ab_model.extract("HEAD", tmp_path)
    assert (tmp_path / ab_model.BASE / "smollm2" / "model.py").is_file()
    probe = ("import sys; import specref_base.smollm2.model, specref_base.apps.costs, specref_base.mrs; "
             "leaked = sorted(m for m in sys.modules if m == 'specref' or m.startswith('specref.')); "
             "assert not leaked, leaked")
    subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                   env={**os.environ, "PYTHONPATH": str(tmp_path)})
    with pytest.raises(SystemExit, match="give a commit of this repository"):
        ab_model.extract("no-such-revision", tmp_path / "other")
