"""The reference ladder: our NumPy SmolLM2 against a recorded independent implementation.

tests/fixtures/smollm2_reference.npz was recorded once by tools/record_reference.py with Hugging Face
transformers (torch CPU, float64) on the same GGUF. Rungs, from loose to strict agreement:
1. logits within 1e-3 at the recorded positions (the last one over the full vocabulary);
2. the greedy continuation (20 tokens) equal token for token;
3. the decoded text equal.
The `smollm2` session fixture (tests/conftest.py) is `specref.smollm2.load_smollm2()`.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from specref.sampling import autoregressive_sampling
from specref.warps import Warped

TOLERANCE = 1e-3
REFERENCE = dict(np.load(Path(__file__).parent / "fixtures" / "smollm2_reference.npz"))
NAMES = [str(n) for n in REFERENCE["names"]]
VERSION = json.loads(str(REFERENCE["version"]))


def reference(name: str, key: str) -> np.ndarray:
    return REFERENCE[f"{name}/{key}"]


@pytest.fixture(scope="module")
def continuations(smollm2) -> dict[str, np.ndarray]:
    """Our greedy continuation of each prompt, as many tokens as the reference has."""
    out = {}
    for name in NAMES:
        ids = reference(name, "ids")
        n_new = len(reference(name, "greedy_ids"))
        tokens = autoregressive_sampling(ids, Warped(smollm2, temperature=0.0), n_new, np.random.default_rng(0))
        out[name] = np.asarray(tokens[len(ids):])
    return out


def test_reference_fixture_is_tagged():
    assert {"torch", "transformers", "gguf_sha256"} <= set(VERSION)
    assert len(NAMES) >= 4


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_reference(smollm2, name):
    """Rung 1: logits at the recorded positions within 1e-3 of the reference's."""
    ids, positions, expected = reference(name, "ids"), reference(name, "positions"), reference(name, "logits")
    smollm2.reset()  # a full recompute from an empty cache
    got = smollm2.logits(ids)[positions]  # [len(positions), V]
    assert got.dtype == np.float32 and got.shape == expected.shape
    diff = float(np.max(np.abs(got - expected)))
    print(f"{name}: {len(ids)} tokens, max |logit - reference| = {diff:.2e} at positions {positions.tolist()} "
          f"(tolerance {TOLERANCE:g}; the reference's own float32 run deviates by "
          f"{float(reference(name, 'float32_noise')):.1e})")
    assert diff < TOLERANCE


def test_logits_tolerance_is_discriminating(smollm2):
    """Negative control: the same prompt with its first token changed is far outside the tolerance."""
    ids = reference("english", "ids").copy()
    ids[0] = (ids[0] + 1) % smollm2.config.vocab_size
    got = smollm2.logits(ids)[-1]
    diff = float(np.max(np.abs(got - reference("english", "logits")[-1])))
    print(f"changed first token: max |logit - reference| = {diff:.2f}")
    assert diff > 100 * TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_greedy_continuation_matches_reference(continuations, name):
    """Rung 2: the greedy continuation token for token."""
    got, expected = continuations[name], reference(name, "greedy_ids")
    mismatch = np.flatnonzero(got != expected)
    margins = reference(name, "greedy_margins")
    print(f"{name}: {len(expected) - len(mismatch)}/{len(expected)} greedy tokens equal; the reference's smallest "
          f"top-2 logit margin is {margins.min():.3f}")
    assert mismatch.size == 0, (f"first difference at new token {mismatch[0]}: got {got[mismatch[0]]}, reference "
                                f"{expected[mismatch[0]]} (reference margin there {margins[mismatch[0]]:.4f})")


@pytest.mark.parametrize("name", NAMES)
def test_decoded_text_matches_reference(smollm2, continuations, name):
    """Rung 3: the decoded continuation equals the reference's text."""
    text = smollm2.tokenizer.decode(continuations[name])
    print(f"{name}: {text!r}")
    assert text == str(reference(name, "greedy_text"))


def test_chat_answer_is_the_known_one(smollm2, continuations):
    """Sanity check: greedy ChatML answer to the capital question."""
    text = smollm2.tokenizer.decode(continuations["chat_capital"])
    assert text.startswith("The capital of France is Paris.<|im_end|>")
