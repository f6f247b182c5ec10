"""Run the whole-pipeline check (`specref.proof.pipeline`) on Hugging Face transformers' assisted generation.

Optional, outside CI (it needs torch and transformers, which are not project dependencies):

    python3 -m tools.conform_hf_pipeline [--venv /tmp/specref-transformers] [--samples 5000] [--json out.json]
                                         [--only RUN ...]

Without torch and transformers importable it makes the same virtual environment as
tools/conform_transformers.py (`ensure_venv`: torch 2.13.0, the CPU build, and transformers from
PyPI) and runs itself there, with this repository on PYTHONPATH.

No model hub: the target and the draft are tiny random Llamas built from configs (one layer,
hidden size 16) with the same small vocabulary, different seeds, and their output layers scaled
so that the draft's acceptance lands between 0.3 and 0.8.  For each case, GENERATE is
`target.generate(prompt, assistant_model=draft, do_sample=True, ...)`, one sequence a call (assisted
generation takes batch size 1), with K = 2 drafts a call (constant schedule, no confidence
threshold), and PLAIN is `target.generate(prompt, do_sample=True, ...)` with the same settings,
the n sequences in one batch; both with eos_token_id None, so every sequence has L new tokens.

The pipeline-form signatures run through the same adapter: a wrapper around
transformers.generation.utils._speculative_sampling (which assisted generation calls with the
drafts, the draft's processed logits and the target's processed logits) changes one thing:
- unfiltered_draft_rows (transformers #47932): the verifier gets the draft's raw logits
  (a forward pass of the draft on the same ids) instead of the processed ones it sampled from;
- target_not_warped (vLLM #9834): the verifier gets the target's raw logits;
- argmax_after_filters (mistral.rs PR #2424): torch.multinomial returns the argmax during the call,
  so the target's token after a rejection, or the bonus, is the argmax of its filtered row.
Two more change the drafting, through a wrapper around AssistedCandidateGenerator.get_candidates
(the assistant's own generate call); the logits it hands on are untouched:
- greedy_draft (transformers #32867): the assistant's torch.multinomial returns the argmax, so it
  decodes greedily while its sampling logits go to the verifier;
- bf16_draft (DeepSpec #31): the assistant's torch.multinomial draws from its probabilities rounded
  to bfloat16, while the verifier gets the float32 ones.  The wrapper sums the L1 distance between
  the rounded (renormalised) and the float32 rows, the size of the bias.
The same wrapper counts accepted drafts (acceptance), and compares the draft logits handed over
with the draft's raw logits processed once and twice by the target's warpers (what the framework
does to the draft's processors).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import metadata
from pathlib import Path
from unittest import mock

import numpy as np

from specref.files import write_text
from specref.proof import pipeline
from tools.conform_transformers import run_in_venv

try:  # present only inside the tool's virtual environment
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.generation import utils as generation_utils
    from transformers.generation.candidate_generator import AssistedCandidateGenerator
except ImportError:
    torch = transformers = None

PROMPT = [1, 2, 3]
K = 2
L = 3

# name -> (vocabulary, sampling settings passed to generate); top_k None leaves the generation config's default (50)
CASES = {
    "T 1.0": (16, {"temperature": 1.0, "top_k": 0}),
    "T 0.7, top-k 5": (16, {"temperature": 0.7, "top_k": 5}),
    "top-p 0.8": (16, {"temperature": 1.0, "top_k": 0, "top_p": 0.8}),
    "default top-k, V 64": (64, {"temperature": 1.0}),
}
BUG_CASE = "T 0.7, top-k 5"
SCALE, NOISE = 30.0, 0.15  # the output layer's scale, and the draft's perturbation (acceptance 0.3-0.8)
BUGS = ("unfiltered_draft_rows", "target_not_warped", "argmax_after_filters", "greedy_draft", "bf16_draft")


def tiny_llama(V: int, seed: int, scale: float, noise: float = 0.0, noise_seed: int = 0):
    """A random one-layer Llama over V tokens (no hub), its output layer's weights times `scale`; with `noise`,
    every weight w then gets noise * std(w) * N(0, 1) added (seeded by noise_seed): a different model near it."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
        if noise:
            generator = torch.Generator().manual_seed(noise_seed)
            for w in model.parameters():
                if w.ndim > 1:
                    w.add_(noise * w.std() * torch.randn(w.shape, generator=generator))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


class Harness:
    """One case: the target, the draft, the settings; generate() and plain() for check_pipeline; the wrapper's counts."""

    def __init__(self, V: int, settings: dict, bug: str | None = None, scale: float = SCALE, noise: float = NOISE):
        self.V, self.settings, self.bug = V, settings, bug
        self.target = tiny_llama(V, 1, scale)
        self.draft = tiny_llama(V, 1, scale, noise=noise, noise_seed=2)  # the target's weights, perturbed
        self.draft.generation_config.num_assistant_tokens = K
        self.draft.generation_config.num_assistant_tokens_schedule = "constant"
        self.draft.generation_config.assistant_confidence_threshold = 0.0
        self.drafted = self.accepted = self.calls = 0
        self.once = self.twice = 0.0  # summed |softmax(handed) - softmax(raw processed once / twice)|_1 over draft rows
        self.rows = 0
        self.drawn = 0  # rows the assistant drew a token from
        self.rounding = 0.0  # summed |bf16 row, renormalised - float32 row|_1 over them (bf16_draft)

    def _warpers(self):
        config = self.target.generation_config
        from transformers.generation import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, \
            TopPLogitsWarper
        top_k = self.settings.get("top_k", config.top_k)
        out = LogitsProcessorList()
        if self.settings.get("temperature", 1.0) != 1.0:
            out.append(TemperatureLogitsWarper(self.settings["temperature"]))
        if top_k:
            out.append(TopKLogitsWarper(top_k))
        if self.settings.get("top_p", 1.0) < 1.0:
            out.append(TopPLogitsWarper(self.settings["top_p"]))
        return out

    def _wrapped(self, original):
        def speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, *rest, **kw):
            ids = candidate_input_ids
            with torch.no_grad():
                raw_draft = self.draft(ids).logits[:, -candidate_length - 1:-1].float()  # [1, K, V]
            warp = self._warpers()
            once, twice = raw_draft.clone(), raw_draft.clone()
            for i in range(candidate_length):
                prefix = ids[:, : ids.shape[1] - candidate_length + i]
                once[:, i] = warp(prefix, raw_draft[:, i].clone())
                twice[:, i] = warp(prefix, warp(prefix, raw_draft[:, i].clone()))
            handed = torch.softmax(candidate_logits.float(), -1)
            self.once += float((handed - torch.softmax(once, -1)).abs().sum())
            self.twice += float((handed - torch.softmax(twice, -1)).abs().sum())
            self.rows += candidate_length
            if self.bug == "unfiltered_draft_rows":
                candidate_logits = raw_draft
            elif self.bug == "target_not_warped":
                with torch.no_grad():
                    new_logits = self.target(ids).logits[:, -candidate_length - 1:].float()
            if self.bug == "argmax_after_filters":
                with mock.patch.object(torch, "multinomial", lambda probs, num_samples=1, **k: probs.argmax(-1, keepdim=True)):
                    valid, n = original(candidate_input_ids, candidate_logits, candidate_length, new_logits, *rest, **kw)
            else:
                valid, n = original(candidate_input_ids, candidate_logits, candidate_length, new_logits, *rest, **kw)
            self.calls += 1
            self.drafted += int(candidate_length)
            self.accepted += int(n)
            return valid, n
        return speculative_sampling

    def _drafting(self, original):
        multinomial = torch.multinomial

        def draw(probs, num_samples=1, **kw):  # the assistant's token draw, changed by greedy_draft and bf16_draft
            self.drawn += probs.shape[0]
            if self.bug == "greedy_draft":
                return probs.argmax(-1, keepdim=True)
            if self.bug == "bf16_draft":
                rounded = probs.to(torch.bfloat16).float()
                rounded = rounded / rounded.sum(-1, keepdim=True)
                self.rounding += float((rounded - probs.float()).abs().sum())
                return multinomial(rounded, num_samples, **kw)
            return multinomial(probs, num_samples, **kw)

        def get_candidates(generator, input_ids, **kw):
            with mock.patch.object(torch, "multinomial", draw):
                return original(generator, input_ids, **kw)
        return get_candidates

    def generate(self, n: int, seed: int) -> np.ndarray:  # -> [n, L]
        torch.manual_seed(seed)
        prompt = torch.tensor([PROMPT])
        out = np.zeros((n, L), dtype=np.int64)
        original = generation_utils._speculative_sampling
        drafting = self._drafting(AssistedCandidateGenerator.get_candidates)
        with mock.patch.object(generation_utils, "_speculative_sampling", self._wrapped(original)), \
                mock.patch.object(AssistedCandidateGenerator, "get_candidates", drafting), torch.no_grad():
            for i in range(n):
                ids = self.target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=self.draft,
                                           do_sample=True, max_new_tokens=L, **self.settings)
                out[i] = ids[0, len(PROMPT):].numpy()
        return out

    def plain(self, n: int, seed: int) -> np.ndarray:  # -> [n, L]
        torch.manual_seed(seed)
        prompt = torch.tensor([PROMPT] * n)
        with torch.no_grad():
            ids = self.target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=L,
                                       **self.settings)
        return ids[:, len(PROMPT):].numpy()


def inside(args) -> int:
    versions = {name: metadata.version(name) for name in ("transformers", "torch", "numpy")}
    print(f"transformers {versions['transformers']}, torch {versions['torch']}, numpy {versions['numpy']}; "
          f"K = {K}, L = {L}, {args.samples} sequences each", flush=True)
    runs = [(name, None) for name in CASES] + [(BUG_CASE, bug) for bug in BUGS]
    if args.only:
        runs = [(name, bug) for name, bug in runs if (bug or name) in args.only]
    results, status = [], 0
    for name, bug in runs:
        V, settings = CASES[name]
        h = Harness(V, settings, bug)
        start = time.time()
        report = pipeline.check_pipeline(h.generate, h.plain, new_tokens=L, samples=args.samples, seed=args.seed,
                                         vocabulary=V, name=f"assisted {name}" + (f" [{bug}]" if bug else ""),
                                         reference_name=f"plain {name}")
        last = report.checks[-1]
        row = {"case": name, "bug": bug, "V": V, "settings": settings, "passed": report.passed,
               "statistic": last.detail, "pvalue": last.pvalue, "acceptance": h.accepted / max(h.drafted, 1),
               "calls": h.calls, "draft_rows_vs_processed_once_L1": h.once / max(h.rows, 1),
               "draft_rows_vs_processed_twice_L1": h.twice / max(h.rows, 1),
               "assistant_draws": h.drawn, "bf16_rounding_L1": h.rounding / max(h.drawn, 1) if bug == "bf16_draft" else None,
               "seconds": time.time() - start}
        results.append(row)
        print(json.dumps(row), flush=True)
        if bug is None and not report.passed:
            status = 1
    if args.json:
        write_text(args.json, json.dumps({"versions": versions, "K": K, "L": L, "samples": args.samples,
                                          "seed": args.seed, "results": results}, indent=1) + "\n")
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/specref-transformers"), help="where to make the environment")
    ap.add_argument("--samples", type=int, default=5000, help="sequences from each generator (default 5000)")
    ap.add_argument("--seed", type=int, default=0, help="the checker's seed (default 0)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--only", nargs="+", choices=[*CASES, *BUGS], metavar="RUN",
                    help=f"run only these cases or bugs (cases: {', '.join(CASES)}; bugs: {', '.join(BUGS)})")
    args = ap.parse_args()
    if torch is not None:
        start = time.time()
        status = inside(args)
        print(f"{time.time() - start:.0f} s")
        return status
    return run_in_venv("tools.conform_hf_pipeline", args.venv)


if __name__ == "__main__":
    sys.exit(main())
