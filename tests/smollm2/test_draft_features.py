"""Several layers' features for the draft (specref.apps.draft_features, EAGLE-3's inputs) on a tiny random model.

The features are the residual after the listed blocks, RMS-normalised: block by block they must equal
what a model cut after that block gives as its final state (with a unit gain), and the pass must give
the final state the model's own cache holds.  A shard whose stored states are not this target's is
refused, and nothing is written for it.  A draft trained with features reads them: where the next
state depends on them, the ridge start fits it and the plain one cannot.
"""

import argparse
import dataclasses

import numpy as np
import pytest

from specref.apps import draft_eval as de
from specref.apps import draft_features as df
from specref.apps import train_draft as td
from specref.smollm2 import draft as nd
from specref.smollm2.model import SmolLM2
from tests.smollm2.test_draft_data import PROMPTS, tiny_model


def with_gain(model, seed=1):
    """The tiny model with a random output gain (its own is all ones, which would hide a missing gain)."""
    g = np.random.default_rng(seed).uniform(0.5, 2.0, model.config.d_model).astype(np.float32)
    return SmolLM2(dataclasses.replace(model.weights, output_norm=g), model.tokenizer)


def cut_after(model, blocks: int):
    """The model's first `blocks` blocks alone, with a unit output gain: its final state is norm(x after them)."""
    w = model.weights
    c = dataclasses.replace(w.config, n_layers=blocks)
    return SmolLM2(dataclasses.replace(w, config=c, layers=w.layers[:blocks],
                                       output_norm=np.ones(c.d_model, np.float32)), model.tokenizer)


def test_features_are_each_blocks_normalised_residual_and_the_pass_gives_the_final_state():
    model = with_gain(tiny_model(3))
    tokens = np.array(model.tokenizer.encode(PROMPTS[0]))
    feat, final = df.layer_states(model, tokens, (1, 2))
    d = model.config.d_model
    assert feat.shape == (len(tokens), 2 * d)
    np.testing.assert_allclose(final, model.final_states(tokens, len(tokens)), rtol=0, atol=1e-5)
    for j, blocks in enumerate((1, 2)):
        cut = cut_after(model, blocks)
        np.testing.assert_allclose(feat[:, j * d:(j + 1) * d], cut.final_states(tokens, len(tokens)), rtol=0, atol=1e-5)
    # the control: block 1's features are not block 2's (a pass that kept the wrong block would be caught)
    assert np.abs(feat[:, :d] - feat[:, d:]).max() > 0.1
    head, _ = df.layer_states(model, tokens[:5], (1, 2))   # causal: a prefix's features are the prefix of the whole's
    np.testing.assert_allclose(head, feat[:5], rtol=0, atol=1e-5)


def test_a_shard_of_this_target_gets_features_and_one_of_another_is_refused(tmp_path):
    model = tiny_model(3)
    data = de.make_eval_data(model, [model.tokenizer.encode(p) for p in PROMPTS], log=lambda _: None, batch=2)
    shard = tmp_path / ("gen-00000-%d.npz" % len(data["tok"]))
    np.savez(shard, **data)
    n, err = df.one_shard(model, shard, (1,))
    assert n == len(data["tok"]) and err <= df.MAX_STATE_ERROR
    feat = df.load_features([shard], (1,))
    assert feat.shape == (n, model.config.d_model) and feat.dtype == np.float16
    other = tiny_model(4)                                         # the control: another target's states
    with pytest.raises(RuntimeError, match="not this target's data"):
        df.one_shard(other, shard, (2,))
    assert not df.feature_path(shard, (2,)).exists()
    with pytest.raises(ValueError, match="no features features-2"):
        df.load_features([shard], (2,))


@pytest.mark.parametrize("text", ["", "0,3", "3,2", "2,2", "a"])
def test_bad_layer_lists_are_refused(text):
    with pytest.raises(ValueError, match="block numbers"):
        df.parse_layers(text)
    assert df.parse_layers("2,15,27") == (2, 15, 27)


def test_the_command_checks_the_blocks_against_the_target_s_header(smollm2, capsys):
    """Block 31 of a 30-block target is refused before anything runs (the count read from the GGUF header);
    block 30 passes the same check (the control)."""
    with pytest.raises(SystemExit) as stop:
        df.main(["--layers", "2,31"])
    assert stop.value.code == 2 and "each from 1 to 30" in capsys.readouterr().err
    assert df.check_layers(df.parse_layers("2,30"), smollm2.config.n_layers) == (2, 30)


def synthetic(n=2000, d=8, V=40, seed=0):
    """Data in which the next state is a fixed linear map of a feature that neither the state nor the token holds."""
    rng = np.random.default_rng(seed)
    feat = rng.standard_normal((n, d)).astype(np.float32)
    M = rng.standard_normal((d, d)).astype(np.float32)
    h = np.zeros((n, d), np.float32)
    h[1:] = feat[:-1] @ M
    E = rng.standard_normal((V, d)).astype(np.float32)
    z = h @ E.T
    lse = z.max(1) + np.log(np.exp(z - z.max(1, keepdims=True)).sum(1))
    return {"h": h.astype(np.float16), "feat": feat.astype(np.float16), "tok": rng.integers(0, V, n),
            "seq": np.repeat(np.arange(n // 100), 100), "kind": np.ones(n, np.int8), "lse": lse.astype(np.float32)}, E


def test_a_draft_with_features_reads_them():
    data, E = synthetic()
    i = td.chains(data, 1)
    A, b = td.ridge(data, E)
    d = data["h"].shape[1]
    assert A.shape == (3 * d, d)                                      # [s, feat, e] -> s
    fit = de.with_features(data, i, data["h"][i].astype(np.float32)) @ A[:2 * d] + E[data["tok"][i + 1]] @ A[2 * d:] + b
    target = data["h"][i + 1].astype(np.float32)
    plain = {k: v for k, v in data.items() if k != "feat"}           # the control: the same data without them
    A0, b0 = td.ridge(plain, E)
    assert A0.shape == (2 * d, d)
    fit0 = data["h"][i].astype(np.float32) @ A0[:d] + E[data["tok"][i + 1]] @ A0[d:] + b0
    err, err0 = np.abs(fit - target).mean(), np.abs(fit0 - target).mean()
    assert err < 0.1 * err0, (err, err0)


def test_training_with_features_shapes_and_a_features_draft_file_round_trips(tmp_path):
    data, E = synthetic(n=600)
    V, d = E.shape
    HN = np.ascontiguousarray(E.T[:, :20])
    config = dataclasses.replace(td.QUICK, steps=3, batch=8, hidden=16, data_positions=600, features=(3,))
    params, history = td.train(config, data, data, E, HN, tmp_path / "c.npz", log=lambda _: None)
    assert params["A"].shape == (3 * d, d) and params["W1"].shape == (3 * d, 16) and history[-1]["step"] == 3
    assert config.run_key() != dataclasses.replace(config, features=()).run_key()
    assert td.Config().run_key() == td._digest({k: v for k, v in dataclasses.asdict(td.Config()).items()
                                                 if k != "features"})   # plain runs keep their checkpoints' keys
    d, H, rng = nd.D_MODEL, 4, np.random.default_rng(0)           # a file at the real width, one feature layer
    shapes = {"A": (3 * d, d), "b": (d,), "W1": (3 * d, H), "b1": (H,), "W2": (H, d)}
    weights = nd.DraftWeights({k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()},
                              np.arange(20), {"config": dataclasses.asdict(config)})
    path = tmp_path / "f.npz"
    nd.save_draft(path, weights)
    loaded = nd.load_draft(path, V)
    assert nd.feature_layers(loaded.meta) == (3,)
    np.testing.assert_array_equal(loaded.params["A"], weights.params["A"])


def test_features_need_the_data_at_scale():
    parser = argparse.ArgumentParser()
    td.add_arguments(parser)
    for argv, message in ((["--features", "2"], "needs --data-positions"),
                          (["--features", "2,x", "--data-positions", "9"], "block numbers")):
        with pytest.raises(ValueError, match=message):
            td.check_args(parser.parse_args(argv))
    for argv in (["--features", "2,15", "--data-positions", "9"], ["--features", "2,15", "--data-positions", "9",
                                                                   "--install"]):
        args = parser.parse_args(argv)
        td.check_args(args)                                  # the shipped draft reads features since 2026-11-30
        assert args.features == (2, 15)


# ---- the features at run time: the target's cache keeps them, the draft reads them ----------------------------

def features_draft(model, layers=(1,), hidden=8, seed=0):
    d, rng = model.config.d_model, np.random.default_rng(seed)
    n_in = (2 + len(layers)) * d
    shapes = {"A": (n_in, d), "b": (d,), "W1": (n_in, hidden), "b1": (hidden,), "W2": (hidden, d)}
    params = {k: (rng.standard_normal(v) * 0.3).astype(np.float32) for k, v in shapes.items()}
    config = dataclasses.asdict(dataclasses.replace(td.Config(), features=layers))
    return nd.DraftWeights(params, np.arange(0, model.config.vocab_size, 2), {"config": config})


def reference_rows(model, weights, tokens, first, zero_features=False):
    """Rows first..n-1 as training reads them: from the target's true state and features at first - 1, then the
    draft's own states with those same features."""
    feat, final = df.layer_states(model, tokens[:first], nd.feature_layers(weights.meta))
    f = 0 * feat[first - 1] if zero_features else feat[first - 1]
    state, rows = final[first - 1], []
    for i in range(first, len(tokens)):
        state = nd.net_forward(weights.params, np.concatenate([state, f])[None], model.weights.embed(tokens[i:i + 1]))[0][0]
        rows.append(nd.softmax((state @ model.weights.head_matrix()[:, weights.kept]).astype(np.float64)))
    return np.array(rows)


def test_a_features_draft_drafts_what_training_chains():
    model = tiny_model(3)
    weights = features_draft(model)
    draft = nd.NeuralDraft(model, weights)
    assert model.cache.feature_layers == (1,)
    tokens = np.array(model.tokenizer.encode(PROMPTS[0]))[:20]
    got = draft.next_probs(tokens, 4)[:, weights.kept]            # the target has read tokens[:16], drafts 4
    np.testing.assert_allclose(got, reference_rows(model, weights, tokens, 16), rtol=0, atol=1e-5)
    assert (draft.computed, draft.folds) == (4, 1)                  # four rows from one target state: one fold
    blind = reference_rows(model, weights, tokens, 16, zero_features=True)   # the control: a draft blind to them
    assert np.abs(got - blind).max() > 1e-3
    model.final_states(tokens[:18], 1)                              # the target advances: the rows follow it
    np.testing.assert_allclose(draft.next_probs(tokens, 2)[:, weights.kept], reference_rows(model, weights, tokens, 18),
                               rtol=0, atol=1e-5)
    assert draft.folds == 2                                         # a new target state, a new fold
    other = features_draft(model, layers=(2,))
    with pytest.raises(nd.DraftError, match="keeps \\[1\\] for another draft"):
        nd.NeuralDraft(model, other)


def test_the_cache_keeps_features_through_growth_trees_and_batches():
    model = tiny_model(3)
    tokens = np.array(model.tokenizer.encode(PROMPTS[1]))
    model.cache = type(model.cache)(model.config, capacity=4)   # small: it must grow while keeping them
    model.cache.keep_features((1, 2))
    want, _ = df.layer_states(model, tokens, (1, 2))
    model.final_states(tokens[:3], 1)
    model.final_states(tokens, 1)                                 # grows past the capacity of 4
    np.testing.assert_allclose(model.cache.feat[:len(tokens)], want, rtol=0, atol=1e-5)
    n = 10                                                        # a tree below tokens[:n], then its path kept
    path_tokens = tokens[n:n + 2]
    model.tree_logits(tokens[:n], np.array([path_tokens[0], 7, path_tokens[1]]), np.array([-1, -1, 0]))
    model.keep_path([0, 2])
    np.testing.assert_allclose(model.cache.feat[:n + 2], want[:n + 2], rtol=0, atol=1e-5)
    from specref.smollm2.model import KVCache, decode_batch, forward
    caches = []
    for m in (5, 8):
        cache = KVCache(model.config, 16)
        cache.keep_features((1, 2))
        forward(tokens[:m], model.weights, cache, model.rot)
        caches.append(cache)
    decode_batch([tokens[5], tokens[8]], model.weights, caches, model.rot)
    np.testing.assert_allclose(caches[0].feat[5], want[5], rtol=0, atol=1e-5)
    np.testing.assert_allclose(caches[1].feat[8], want[8], rtol=0, atol=1e-5)
    plain = KVCache(model.config, 16)                              # caches that keep different features: refused
    with pytest.raises(ValueError, match="same features"):
        decode_batch([1, 2], model.weights, [caches[0], plain], model.rot)
    with pytest.raises(ValueError, match="block numbers"):
        plain.keep_features((3,))
