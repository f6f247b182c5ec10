"""The draft's yardstick (specref.apps.draft_eval) on a tiny random model, against direct computation.

A chain that returns the target's own next state is a perfect draft: with every token kept its alpha
is 1 in every setting.  A chain that returns a wrong state must get the alpha computed row by row
from the dense distributions (the warp applied to whole rows), and a draft that keeps only some
tokens loses exactly the target's mass on the others at temperature 1.
"""

import numpy as np
import pytest

from specref.apps import draft_eval as de
from specref.smollm2.model import softmax
from tests.smollm2.test_draft_data import PROMPTS, tiny_model


@pytest.fixture(scope="module")
def setup():
    model = tiny_model(3)
    prompts = [model.tokenizer.encode(p) for p in PROMPTS]
    data = de.make_eval_data(model, prompts, log=lambda _: None, batch=2)
    return model, data


def true_chain(data, i, ahead):
    for j in range(1, ahead + 1):
        yield data["h"][i + j].astype(np.float32)


def wrong_chain(data, i, ahead):  # the state one position too early: a plausible bug
    for j in range(1, ahead + 1):
        yield data["h"][i + j - 1].astype(np.float32)


def dense_alphas(data, chain, head, kept, k):
    """alpha k ahead row by row, from dense distributions over the whole vocabulary."""
    i = de.starts(data, k)
    *_, state = chain(data, i, k)
    V = head.shape[1]
    t1, nuc, greedy = [], [], []
    for r, pos in enumerate(i + k):
        q = softmax(data["h"][pos].astype(np.float64) @ head)
        z = np.full(V, -np.inf)
        z[kept] = state[r].astype(np.float64) @ head[:, kept]
        p = softmax(z)
        t1.append(np.minimum(p, q).sum())
        nuc.append(np.minimum(de.WARP(p), de.WARP(q)).sum())
        greedy.append(float(p.argmax() == q.argmax()))
    return np.mean(t1), np.mean(nuc), np.mean(greedy)


def test_recorded_positions_include_sampled_tokens(setup):
    _, data = setup
    assert data["kind"].sum() > 20
    assert len(de.starts(data, 3)) > 10
    with pytest.raises(ValueError, match="HumanEval prompts"):
        de.load_eval_data(None, None, [object()] * 3, n_prompts=4)


def test_perfect_draft_with_every_token_kept_has_alpha_one(setup):
    model, data = setup
    head = model.weights.head_matrix()
    kept = np.arange(head.shape[1])
    got = de.alphas(true_chain, data, head, kept)
    for setting in de.SETTINGS:
        for k in (1, 2, 3):
            # 1e-3: the states are stored as float16 and the log-sum-exp from the float32 state, so the
            # target's row sums to 1 within about 1e-4 (the training data has the same rounding)
            assert got[setting][k] == pytest.approx(1.0, abs=1e-3), (setting, k)


@pytest.mark.parametrize("kept_every", [1, 3])
def test_alphas_equal_dense_computation(setup, kept_every):
    """The wrong chain (the negative control of the test above): alpha below 1, equal to the dense value."""
    model, data = setup
    head = model.weights.head_matrix()
    kept = np.arange(0, head.shape[1], kept_every)
    got = de.alphas(wrong_chain, data, np.ascontiguousarray(head[:, kept]), kept)
    for k in (1, 3):
        t1, nuc, greedy = dense_alphas(data, wrong_chain, head, kept, k)
        assert got["t1"][k] == pytest.approx(t1, abs=1e-5)
        assert got["nucleus"][k] == pytest.approx(nuc, abs=1e-5)
        assert got["greedy"][k] == pytest.approx(greedy, abs=1e-9)
        assert t1 < 0.999


def test_perfect_draft_on_some_tokens_loses_exactly_the_rest(setup):
    model, data = setup
    head = model.weights.head_matrix()
    kept = np.arange(0, head.shape[1], 2)
    got = de.alphas(true_chain, data, np.ascontiguousarray(head[:, kept]), kept, aheads=(1,))
    i = de.starts(data, 1) + 1
    q = softmax(data["h"][i].astype(np.float64) @ head)
    mass = q[:, kept].sum(1)
    # p is q renormalised on the kept tokens, so min(p, q) = q there: alpha is q's kept mass
    assert got["t1"][1] == pytest.approx(mass.mean(), abs=1e-5)


def fake_shard(n, seq_len, start):
    seq = np.repeat(np.arange(n // seq_len), seq_len)
    return {"tok": np.arange(start, start + len(seq), dtype=np.int32) % 256, "h": np.zeros((len(seq), 4), np.float16),
            "lse": np.zeros(len(seq), np.float32), "amax": np.zeros(len(seq), np.int32), "seq": seq.astype(np.int32),
            "kind": np.zeros(len(seq), np.int8)}


def test_training_reads_a_prefix_of_the_data_at_scale(tmp_path):
    """`train-draft --data-positions N` takes the first shards in the build's order, cut at a sequence
    end at or after N, and says how to make more when the build has not reached N."""
    from specref.apps import draft_build as db
    from specref.apps.draft_data import write_npz
    from specref.apps.train_draft import scale_data
    spec = db.BuildSpec()
    folder = tmp_path / "draft-data" / f"scale-{spec.key()}"
    folder.mkdir(parents=True)
    start = 0
    for s in range(spec.held_shards + 5):                    # 4 held-out shards, then t, t, g, t, t
        kind, index = db.shard_kind(spec, s)
        write_npz(folder / f"{kind}-{index:05d}-100.npz", fake_shard(100, 10, start))
        start += 100
    got = scale_data(tmp_path, 250)
    assert len(got["train"]["tok"]) == 250 and len(got["held"]["tok"]) == 400
    # the training positions are those of the first training shards in order (tf 0, tf 1, gen 0)
    assert list(got["train"]["tok"][[0, 100, 200]]) == [400 % 256, 500 % 256, 600 % 256]
    assert len(scale_data(tmp_path, 255)["train"]["tok"]) == 260      # rounded up to a sequence's end
    assert len(np.unique(got["train"]["seq"])) == 25                    # sequences of different shards stay apart
    with pytest.raises(ValueError, match="holds 500 training positions.*draft-data --positions 600"):
        scale_data(tmp_path, 600)
