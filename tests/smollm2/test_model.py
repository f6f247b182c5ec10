"""specref.smollm2.model and specref.smollm2.weights: the NumPy SmolLM2, its KV cache, and its errors.

The real-model tests use the session fixture `smollm2` (tests/conftest.py): the plain path, the
code a reader reads (tests/smollm2/test_fast.py checks the fast path against it).  Tolerances: the
cache tests compare float32 logits of the same computation done in different row groupings, so
they agree to ~1e-5; 1e-4 is the bound asked for, and a negative control shows that a cache
holding the wrong prefix misses it by far.
"""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specref.fast.plan import in_layout
from specref.smollm2.model import KVCache, SmolLM2, glu, linear, rms_norm, rope, rope_rotations, softmax, swiglu
from specref.smollm2.weights import WeightsError, gguf_path, load_weights

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


# --- pieces, on small random arrays -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


FAST_MODULES = ("specref.fast.blas", "specref.fast.cache", "specref.fast.kernels", "specref.fast.machine", "specref.fast.plan",
                "specref.fast.planner", "specref.fast.split", "specref.fast.team")    # every module of the fast path


def test_the_model_file_imports_no_threads_and_no_planner():
    """What a reader reads is what runs: model.py (and weights.py) pull in no threads, no planner."""
    assert set(FAST_MODULES) == {f"specref.fast.{p.stem}" for p in (ROOT / "specref" / "fast").glob("*.py")
                                 if p.stem != "__init__"}                  # the list above is not stale
    code = "import sys, specref.smollm2.model; print(sorted(m for m in sys.modules if m.startswith('specref.fast')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
    # NumPy and gguf may import threading themselves; what is pinned for threads is the source
    for path in ("specref/smollm2/model.py", "specref/smollm2/weights.py"):
        assert imported_modules(ROOT / path).isdisjoint({"threading", "queue", "concurrent.futures", "specref.fast",
                                                         *FAST_MODULES}), path


def imported_modules(path) -> set:
    """Every module a Python file imports (import x / from x import y), read from its syntax tree."""
    names = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_import_check_sees_a_planner_import(tmp_path):
    """Negative control for the test above: a file that imports the planner is caught."""
    bad = tmp_path / "model.py"
    bad.write_text("import numpy as np\nfrom specref.fast.plan import Plan\nimport threading\n")
    assert {"specref.fast.plan", "threading"} <= imported_modules(bad)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_linear_and_swiglu_are_the_formulas(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 16), dtype=np.float32)
    w = rng.standard_normal((16, 24), dtype=np.float32)
    np.testing.assert_allclose(linear(x, w), x @ w, rtol=1e-6, atol=1e-6)
    w_gate_up, w_down = rng.standard_normal((16, 2 * 12), dtype=np.float32), rng.standard_normal((12, 16), dtype=np.float32)
    gate, up = x @ w_gate_up[:, :12], x @ w_gate_up[:, 12:]
    expected = (gate / (1 + np.exp(-gate)) * up) @ w_down                  # silu(gate) * up, then down
    np.testing.assert_allclose(swiglu(x, w_gate_up, w_down), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(glu(gate, up), gate / (1 + np.exp(-gate)) * up, rtol=1e-5, atol=1e-6)


def test_the_plain_model_refuses_weights_in_a_fast_layout(smollm2):
    with pytest.raises(ValueError, match="fast path's layout"):
        SmolLM2(in_layout(smollm2.weights, "panels"), smollm2.tokenizer)


def test_rope_rotates_adjacent_pairs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 8), dtype=np.float32)      # [n, h, hd]
    rot = rope_rotations(10, 8, 10000.0)[[0, 4, 9]]           # positions 0, 4, 9
    got = rope(x, rot)
    np.testing.assert_allclose(got[0], x[0], atol=1e-6)       # position 0: no rotation
    m, j = 4, 1                                               # explicit formula for one pair
    angle = m * 10000.0 ** (-2 * j / 8)
    x0, x1 = x[1, :, 2 * j], x[1, :, 2 * j + 1]
    np.testing.assert_allclose(got[1, :, 2 * j], x0 * np.cos(angle) - x1 * np.sin(angle), atol=1e-5)
    np.testing.assert_allclose(got[1, :, 2 * j + 1], x0 * np.sin(angle) + x1 * np.cos(angle), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_rms_norm_and_softmax_keep_float32():
    x = np.random.default_rng(1).standard_normal((4, 16), dtype=np.float32)
    y = rms_norm(x, np.ones(16, np.float32), 1e-5)
    assert y.dtype == np.float32
    np.testing.assert_allclose(np.sqrt((y * y).mean(-1)), 1.0, rtol=1e-4)
    s = softmax(x)
    assert s.dtype == np.float32
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-6)
    # float32 logits to float64 probabilities: the same numbers as converting the logits first
    wide = softmax(x * 20, np.float64)
    assert wide.dtype == np.float64 and np.array_equal(wide, softmax((x * 20).astype(np.float64)))
    assert not np.array_equal(wide, softmax(x * 20).astype(np.float64))    # control: float32 softmax differs


# --- weights --------------------------------------------------------------------------------------

def test_config_and_weights_match_the_published_model(smollm2):
    c = smollm2.config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff) == (30, 576, 9, 3, 64, 1536)
    assert (c.vocab_size, c.context_length, c.rope_base) == (49152, 8192, 100000.0)
    assert abs(c.rms_eps - 1e-5) < 1e-9
    w = smollm2.weights
    layer = w.layers[0]
    assert smollm2.fast is None                                # the fixture runs the plain path
    assert layer.w_qkv.shape == (576, 576 + 2 * 192)
    assert layer.w_o.shape == (576, 576)
    assert layer.w_gate_up.shape == (576, 2 * 1536)
    assert layer.w_down.shape == (1536, 576)
    assert w.head.shape == (576, 49152)
    for m in w.matrices() + [w.output_norm] + [layer.attn_norm for layer in w.layers]:
        assert m.dtype == np.float32 and m.flags.c_contiguous
    assert sum(m.nbytes for m in w.matrices()) == pytest.approx(538e6, rel=0.01)


def test_truncated_gguf_is_a_clear_error(smollm2, tmp_path):
    source = gguf_path(progress=lambda *_: None)  # already cached by the fixture: no network
    truncated = tmp_path / "truncated.gguf"
    with open(source, "rb") as f:
        truncated.write_bytes(f.read(300_000))              # cut inside the vocabulary
    with pytest.raises(WeightsError, match="truncated or corrupt: delete it and rerun") as info:
        load_weights(truncated)
    assert str(truncated) in str(info.value)


def test_corrupt_and_missing_gguf_are_clear_errors(tmp_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"this is not a GGUF file at all" * 10)
    with pytest.raises(WeightsError, match="delete it and rerun"):
        load_weights(garbage)
    with pytest.raises(WeightsError, match="no GGUF file at"):
        load_weights(tmp_path / "missing.gguf")


@pytest.mark.slow  # writes a cut copy of the weights, about 4 s; test_truncated_gguf_is_a_clear_error is the fast one
def test_a_gguf_whose_tensor_data_was_cut_short_is_a_clear_error(smollm2, tmp_path):
    source = gguf_path(progress=lambda *_: None)
    cut = tmp_path / "cut.gguf"
    shutil.copy(source, cut)
    with open(cut, "r+b") as f:
        f.truncate(cut.stat().st_size - 1_000_000)            # lose the end of the last tensors
    with pytest.raises(WeightsError, match="delete it and rerun"):
        load_weights(cut)


# --- the real model -----------------------------------------------------------------------------

def test_chat_sanity_check_capital_of_france(smollm2):
    """Greedy decoding of the ChatML prompt gives the known answer."""
    tok = smollm2.tokenizer
    x = list(tok.chat(FRANCE))
    n_prompt = len(x)
    for _ in range(12):
        nxt = int(np.argmax(smollm2.next_probs(np.array(x), 1)[0]))
        x.append(nxt)
        if nxt == 2:  # <|im_end|>
            break
    assert tok.decode(x[n_prompt:]) == "The capital of France is Paris.<|im_end|>"


def test_incremental_decode_equals_full_recompute(smollm2):
    tokens = np.array(smollm2.tokenizer.chat(FRANCE) + [504, 3575, 282, 4649, 314, 7042, 30])
    smollm2.reset()
    full = smollm2.logits(tokens)                              # [n, V] from an empty cache
    smollm2.reset()
    n0 = len(tokens) - 7
    rows = [smollm2.next_logits(tokens[:n0], 3)]               # a prefix, then one token at a time
    for i in range(n0 + 1, len(tokens) + 1):
        rows.append(smollm2.next_logits(tokens[:i], 1))
        assert smollm2.cache.length == i
    incremental = np.concatenate(rows)                         # positions n0-3 .. n-1
    err = np.abs(incremental - full[n0 - 3:]).max()
    print(f"max |incremental - full| = {err:.2e}")
    assert err < 1e-4
    assert full.dtype == np.float32


def test_rollback_of_rejected_tokens_equals_full_recompute(smollm2):
    prefix = smollm2.tokenizer.chat(FRANCE)
    rejected = [9, 99, 999, 9999]
    accepted = [504, 3575]
    smollm2.reset()
    smollm2.next_probs(np.array(prefix + rejected), 5)         # the target scored 4 drafts
    assert smollm2.cache.length == len(prefix) + 4
    got = smollm2.next_logits(np.array(prefix + accepted), 3)  # 2 accepted differently: roll back 4
    assert smollm2.cache.length == len(prefix) + 2
    smollm2.reset()
    want = smollm2.logits(np.array(prefix + accepted))[-3:]
    err = np.abs(got - want).max()
    print(f"max |after rollback - full| = {err:.2e}")
    assert err < 1e-4


def test_cache_with_a_wrong_prefix_misses_the_tolerance(smollm2):
    """Negative control for the two tests above: a cache that lies about its prefix is caught."""
    prefix = smollm2.tokenizer.chat(FRANCE)
    smollm2.reset()
    smollm2.next_probs(np.array(prefix), 1)
    other = list(prefix)
    other[5] = 1234                                            # the tokens we will ask about
    smollm2.cache.tokens[5] = 1234                             # the cache claims it computed them
    got = smollm2.next_logits(np.array(other + [504]), 1)
    smollm2.reset()
    want = smollm2.next_logits(np.array(other + [504]), 1)
    assert np.abs(got - want).max() > 1e-2


def test_repeated_call_reuses_the_cache(smollm2):
    tokens = np.array(smollm2.tokenizer.chat(FRANCE))
    smollm2.reset()
    a = smollm2.next_probs(tokens, 2)
    length = smollm2.cache.length
    b = smollm2.next_probs(tokens, 2)                          # nothing new: the head only
    assert smollm2.cache.length == length
    np.testing.assert_array_equal(a, b)


def test_a_cache_that_grows_keeps_what_it_held(smollm2):
    """Positions computed before the cache grew (keys are kept transposed) give the same logits after."""
    tokens = np.array(smollm2.tokenizer.chat(FRANCE))
    smollm2.reset()
    whole = smollm2.next_logits(tokens, 4)
    kept = smollm2.cache
    try:
        smollm2.cache = KVCache(smollm2.config, capacity=3)
        for n in range(3, len(tokens), 5):                     # grows several times on the way
            smollm2.next_logits(tokens[:n], 1)
        assert 3 < smollm2.cache.length < len(tokens) - 3 < smollm2.cache.capacity
        held = smollm2.cache
        lost = KVCache(smollm2.config, capacity=held.capacity)   # control: the same positions, tokens
        lost.length = held.length                                # and states, but keys and values lost
        lost.tokens[:], lost.h[:] = held.tokens, held.h
        np.testing.assert_allclose(smollm2.next_logits(tokens, 4), whole, rtol=1e-4, atol=1e-4)
        smollm2.cache = lost
        assert not np.allclose(smollm2.next_logits(tokens, 4), whole, rtol=1e-4, atol=1e-4)
    finally:
        smollm2.cache = kept
        smollm2.reset()


def test_next_probs_and_call_are_distributions(smollm2):
    tokens = np.array(smollm2.tokenizer.chat(FRANCE))
    q = smollm2.next_probs(tokens, 4)
    assert q.shape == (4, 49152) and q.dtype == np.float64
    np.testing.assert_allclose(q.sum(axis=1), 1.0, atol=1e-12)
    assert (q >= 0).all()
    allq = smollm2(tokens)
    assert allq.shape == (len(tokens), 49152)
    # the head multiplies 4 rows here and all of them there: BLAS's float32 sums may round
    # differently by row count (results agree to float32 rounding, not bit for bit)
    np.testing.assert_allclose(allq[-4:], q, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("tokens, k, message", [
    ([], 1, "empty"),
    ([1, 2, 49152], 1, "token id 49152 is out of range"),
    ([1, -3], 1, "token id -3 is out of range"),
    ([[1, 2]], 1, "1-D"),
    ([1.0, 2.0], 1, "integers"),
    ([1, 2, 3], 0, "k = 0"),
    ([1, 2, 3], 4, "k = 4"),
])
def test_bad_input_is_a_clear_error(smollm2, tokens, k, message):
    with pytest.raises(ValueError, match=message):
        smollm2.next_probs(tokens, k)


def test_longer_than_the_context_is_a_clear_error(smollm2):
    with pytest.raises(ValueError, match="8193 tokens exceed the model's context of 8192"):
        smollm2.logits(np.ones(8193, dtype=np.int64))


def test_cache_rollback_bounds(smollm2):
    cache = KVCache(smollm2.config, capacity=4)
    with pytest.raises(ValueError, match="cannot roll back 1 positions of a cache holding 0"):
        cache.rollback(1)
    cache.reserve(10)
    assert cache.capacity >= 10
