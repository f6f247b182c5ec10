"""Speculative sampling on the real model (SmolLM2-135M in NumPy).

- Greedy SpS gives exactly the greedy ArS tokens, for several prompts, drafts and K.
- Sampled SpS: the first generated token has the warped target's distribution
  (chi-square at level specref.proof.stats.LEVEL = 1e-3 over the top-k tokens, fixed seed),
  and the same test rejects broken verifiers (negative controls).
- The demo's workloads run end to end and report consistent statistics.
The first three take minutes on a 2-core machine: they are marked slow (`python3 -m pytest --slow`).
"""

import argparse

import numpy as np
import pytest

from specref.proof import stats
from specref.proof.bugs import broken
from specref.apps import demo, pilot
from specref import drafts, mrs, sampling
from specref.sampling import next_distributions
from specref.warps import Warped

PROMPTS = [
    "What is the capital of France?",
    "Add a comment above every line of this Python function and return it:\n\n"
    "def square(x):\n    y = x * x\n    return y",
]


@pytest.fixture(scope="module")
def prompt_ids(smollm2):
    return [np.array(smollm2.tokenizer.chat([{"role": "user", "content": p}])) for p in PROMPTS]


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_greedy_sps_equals_greedy_ars(smollm2, prompt_ids, i):
    x = prompt_ids[i]
    V = smollm2.config.vocab_size
    target = Warped(smollm2, 0.0)
    expected = sampling.autoregressive_sampling(x, target, 24, np.random.default_rng(0))
    for draft in [drafts.PromptLookupDraft(V), drafts.PromptLookupDraft(V, adaptive=True),
                  drafts.NGramDraft.fit([x], V, n=2), drafts.UniformDraft(V)]:
        for K in [1, 4]:
            got = sampling.speculative_sampling(x, Warped(draft, 0.0), target, 24, K, np.random.default_rng(K))
            np.testing.assert_array_equal(got, expected, err_msg=f"{draft!r}, K={K}")


class Memo:
    """Remembers a model's rows per (tokens, k): the first token of SpS with a top-k draft
    only ever needs a handful of distinct target calls, so thousands of runs stay cheap."""

    def __init__(self, model):
        self.model, self.rows = model, {}

    def next_probs(self, tokens, k):  # [n] -> [k, V]
        key = (tuple(int(t) for t in tokens), k)
        if key not in self.rows:
            self.rows[key] = next_distributions(self.model, tokens, k)
        return self.rows[key]

    def __call__(self, tokens):  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))


@pytest.fixture(scope="module")
def first_token_setup(smollm2, prompt_ids):
    x = prompt_ids[0]
    base = Memo(smollm2)
    target = Warped(base, 1.0, top_k=8)  # the law under test: the target's top 8, renormalised
    draft = Warped(base, 2.0, top_k=8)  # a flatter draft on the same support: some drafts are rejected
    q0 = next_distributions(target, x, 1)[0]
    p0 = next_distributions(draft, x, 1)[0]
    law = {(int(y),): float(q0[y]) for y in np.flatnonzero(q0)}
    return x, draft, target, law, mrs.acceptance_rate(p0, q0)


def _first_tokens(setup, verify, n=3000, seed=0):
    x, draft, target, _, _ = setup
    return stats.sample_sequences(lambda rng: sampling.speculative_sampling(x, draft, target, 1, 2, rng, verify=verify),
                                  n, len(x), np.random.default_rng(seed))


@pytest.mark.slow
def test_first_sampled_token_has_the_target_law(first_token_setup):
    law, alpha = first_token_setup[3], first_token_setup[4]
    assert 0.2 < alpha < 0.95, f"alpha {alpha:.2f}: the test needs both accepts and rejects"
    stat, dof, pvalue = stats.chi_square_gof(_first_tokens(first_token_setup, mrs.verify), law)
    print(f"first token: alpha={alpha:.2f} chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.slow
@pytest.mark.parametrize("name", ["always_accept", "resample_from_q"])
def test_first_token_test_rejects_broken_verifiers(first_token_setup, name):
    stat, dof, pvalue = stats.chi_square_gof(_first_tokens(first_token_setup, broken.BROKEN[name]),
                                             first_token_setup[3])
    print(f"{name}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


@pytest.mark.slow
def test_demo_workloads_run_and_agree(smollm2, prompt_ids):
    x = list(prompt_ids[1])
    lines = []
    results = demo.run_workloads(smollm2, x, [(0.0, None), (0.8, 0.95)], ["prompt-lookup", "ngram"], 4, 12, 0,
                                 eos=smollm2.tokenizer.eos_id, log=lines.append)
    assert [(r.method, r.draft, r.temperature) for r in results] == [
        ("ArS", "-", 0.0), ("SpS", "prompt-lookup", 0.0), ("SpS", "ngram", 0.0),
        ("ArS", "-", 0.8), ("SpS", "prompt-lookup", 0.8), ("SpS", "ngram", 0.8)]
    assert results[1].tokens == results[0].tokens == results[2].tokens  # greedy: identical text
    for r in results:
        assert 1 <= len(r.tokens) <= 12 and r.stats.ms_per_token > 0 and r.speedup > 0 and r.model_check > 0
        if r.method == "SpS":
            assert 0 <= r.stats.alpha_hat <= 1 and 1 <= r.stats.tokens_per_target_call <= 5
    text = demo.table(results)
    footnote = any(r.score_noise for r in results)  # timing noise adds a line that explains the '*'
    # header, rule, one row per run, the two lines that say what "predicted" and "model check" are, and the
    # line that explains "none" (K is given here, so no SpS row has a prediction made before the run)
    assert text.count("\n") == 2 + len(results) + 2 + 1 + footnote - 1 and "prompt-lookup" in text
    assert "none: no a-priori prediction" in text and all(r.apriori is None for r in results if r.method == "SpS")
    assert ("timing noise" in text) is footnote
    assert len(demo.verdicts(results)) == 4


@pytest.mark.slow
def test_the_demo_chooses_K_per_draft_from_costs_measured_in_the_run(smollm2, prompt_ids):
    """K = None: the scoring costs are measured, a pilot run measures alpha and c, K follows Theorem 3.8."""
    lines = []
    results = demo.run_workloads(smollm2, list(prompt_ids[1]), [(0.8, 0.95)], ["prompt-lookup"], None, 8, 0,
                                 eos=smollm2.tokenizer.eos_id, log=lines.append)
    assert any(line.startswith("  in decode steps: K=1 ") for line in lines)
    sps = results[1]
    assert 1 <= sps.K <= pilot.K_CHOICES and sps.why_K.startswith("alpha ")
    assert (f"K = {sps.K} predicts" in sps.why_K) or ("no K pays" in sps.why_K)
    assert "K per draft" in demo.table(results)


def test_demo_rejects_a_prompt_longer_than_the_context(smollm2, monkeypatch, capsys):
    monkeypatch.setattr(demo, "load_fast", lambda cache_dir=None, measure=False: smollm2)
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    args = parser.parse_args(["--prompt", "word " * 9000, "--max-new-tokens", "4"])
    with pytest.raises(SystemExit, match="exceeds the context"):
        demo.run(args)
