"""The draft's inverse temperature beta (specref.apps.draft_calibrate): the choice finds a beta it was given, the
rows it scores are the draft's chain and the target's warped distribution, and a bad beta or file is refused.

No statistics here: every check is exact arithmetic on fixed inputs, so none has a false-alarm rate; each has a
control that the same check rejects."""

import json

import numpy as np
import pytest

from specref.apps import draft_calibrate as dc
from specref.apps.draft_data import WARP
from specref.smollm2 import draft as nd


def logits(seed=0, m=300, N=30):
    return (2.0 * np.random.default_rng(seed).standard_normal((m, N))).astype(np.float32)


@pytest.mark.parametrize("beta", [0.9, 1.5, 2.0])
def test_the_choice_finds_the_beta_the_target_rows_were_made_with(beta):
    """If the target's rows are the warp of softmax(beta z), beta is the one that makes every draft row equal to
    them (alpha 1) and the choice must return it; beta 1, the control, must score below 1."""
    z = logits()
    q = WARP(nd.softmax((beta * z).astype(np.float64)))
    chosen, table = dc.choose({1: z, 3: z}, q)
    assert chosen == beta
    assert max(table) == pytest.approx(1.0, abs=1e-9)
    assert table[dc.GRID.index(1.0)] < 0.99


def held_set(n=600, d=8, V=40, seed=1):
    """Held-out data of a random 'target' with tied head E.T: states, tokens, sequences of 50, log-sum-exps, and
    every other position one of its sampled tokens."""
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((V, d)).astype(np.float32)
    h = rng.standard_normal((n, d)).astype(np.float16)
    z = h.astype(np.float32) @ E.T
    lse = (z.max(1) + np.log(np.exp(z - z.max(1, keepdims=True)).sum(1))).astype(np.float32)
    held = {"h": h, "tok": rng.integers(0, V, n), "seq": np.repeat(np.arange(n // 50), 50),
            "kind": (np.arange(n) % 2).astype(np.int8), "lse": lse}
    hidden = 6
    shapes = {"A": (2 * d, d), "b": (d,), "W1": (2 * d, hidden), "b1": (hidden,), "W2": (hidden, d)}
    params = {k: (0.4 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    return held, params, E


def test_the_rows_are_the_draft_chain_over_true_tokens_and_the_target_s_warped_distribution():
    held, params, E = held_set()
    head, kept = np.ascontiguousarray(E.T), np.arange(0, 40, 3)
    z, q = dc.held_rows(params, held, E, head, kept, max_positions=40)
    assert len(q) == 40 and set(z) == {1, 2, 3}
    p = np.flatnonzero(held["kind"] == 1)
    p = p[(p % 50) >= 3]                                   # three positions of its sequence before it
    chosen = np.sort(np.random.default_rng(dc.SEED).choice(p, 40, replace=False))
    off_by_one = 0.0
    for r in (0, 17, 39):
        pos = chosen[r]
        full = np.exp(held["h"][pos].astype(np.float32) @ head - held["lse"][pos]).astype(np.float64)
        np.testing.assert_allclose(q[r], WARP(full[None])[0, kept], rtol=1e-6, atol=1e-9)
        for k in (1, 2, 3):
            state = held["h"][pos - k].astype(np.float32)[None]
            wrong = state
            for j in range(1, k + 1):
                state = nd.net_forward(params, state, E[held["tok"][pos - k + j]][None])[0]
                wrong = nd.net_forward(params, wrong, E[held["tok"][pos - k + j - 1]][None])[0]   # the control
            np.testing.assert_allclose(z[k][r], (state @ head[:, kept])[0], rtol=1e-5, atol=1e-5)
            off_by_one = max(off_by_one, float(np.abs(z[k][r] - (wrong @ head[:, kept])[0]).max()))
    assert off_by_one > 1e-2, "a chain reading the token before each step gives the same rows"


def test_held_out_data_without_a_usable_position_is_refused():
    held, params, E = held_set()
    held["kind"][:] = 0                                    # no sampled token at all
    with pytest.raises(ValueError, match="no sampled token"):
        dc.held_rows(params, held, E, np.ascontiguousarray(E.T), np.arange(40))


def small_draft(meta: dict, d=nd.D_MODEL, hidden=4) -> nd.DraftWeights:
    rng = np.random.default_rng(0)
    shapes = {"A": (2 * d, d), "b": (d,), "W1": (2 * d, hidden), "b1": (hidden,), "W2": (hidden, d)}
    return nd.DraftWeights({k: (0.01 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()},
                           np.arange(0, 400, 2), meta)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), 11.0, "1.2", True, None])
def test_a_draft_file_with_a_bad_logit_scale_is_refused(tmp_path, bad):
    path = tmp_path / "d.npz"
    nd.save_draft(path, small_draft({"logit_scale": bad}))
    with pytest.raises(nd.DraftError, match="logit_scale must be a number in \\(0, 10\\]"):
        nd.load_draft(path)
    nd.save_draft(path, small_draft({"logit_scale": 1.2}))   # the control: a valid one loads
    assert nd.load_draft(path).scale == 1.2
    nd.save_draft(path, small_draft({}))                     # and a file without one drafts at beta 1
    assert nd.load_draft(path).scale == 1.0


def test_the_command_refuses_a_draft_of_the_small_data_and_a_non_draft_and_leaves_them_as_they_were(tmp_path, capsys):
    small = tmp_path / "small.npz"
    nd.save_draft(small, small_draft({"config": {"data_positions": None}}))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a draft")
    before = {p: p.read_bytes() for p in (small, junk)}
    for path, why in ((small, "trained on the small standard-library data"), (junk, "not a readable draft file")):
        with pytest.raises(SystemExit) as stop:
            dc.main([str(path)])
        assert stop.value.code == 2 and why in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before


def test_the_calibration_is_recorded_with_its_table():
    held, params, E = held_set()
    w = nd.DraftWeights(params, np.arange(0, 40, 3), {"config": {}})
    out = dc.calibrate(w, held, np.ascontiguousarray(E.T), log=lambda *a: None)
    table = out.meta["calibration"]["alpha"]
    assert out.meta["logit_scale"] == dc.GRID[int(np.argmax(table))] and len(table) == len(dc.GRID)
    assert out.params is w.params and "logit_scale" not in w.meta
    json.dumps(out.meta)                                   # the meta goes into the file as JSON
