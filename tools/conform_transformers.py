"""Run the conformance checker on Hugging Face transformers' own speculative-sampling verification.

Optional, outside CI (it needs torch and transformers, which are not project dependencies):

    python3 -m tools.conform_transformers [--venv /tmp/specref-transformers] [--seed 0] [--json out.json]

Without torch and transformers importable, it makes a virtual environment under /tmp (`python3 -m
venv`; `pip install torch==2.13.0 transformers numpy scipy`: torch 2.13.0 is the CPU build) and
runs itself there, with this repository on PYTHONPATH.

The function checked is `transformers.generation.utils._speculative_sampling`, which assisted
generation calls with do_sample=True (Leviathan's Algorithm 1, in Leviathan's letters: their q is
the draft, their p the target).  It takes the candidate ids [1, n + K] (of which the last
K = candidate_length are the drafts), the draft's logits [1, K, V] and the target's logits
[1, K + 1, V], draws from torch's global generator (torch.rand_like, torch.multinomial), and
returns (valid_tokens [1, m], n_matches).  The adapter passes the drafts as the candidate ids,
log p and log q in float32 as the logits (softmax(log p) = p), and a seed that the wrapper hands to
torch.manual_seed; it has no way to inject uniforms, so the statistical tier runs.

Two probes need a chosen uniform; they replace torch.rand_like for one call:
- r = 0 with q(x) = 0: transformers accepts iff r <= ratio (not r < ratio);
- a rejection whose residual clamp(p - q, 0) is all zero in float32 (draft and target logits a
  rounding apart), as in vLLM's advisory GHSA-8wr5-jm2h-8r4f.
The lossy `assistant_ensemble_weight` (DIVERSE, w = 0.5) is checked too, with a quarter of the
samples, as a negative control on the same code: its docstring says it biases the output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from unittest import mock

import numpy as np

from specref.files import write_text
from specref.proof import conform

try:  # present only inside the tool's virtual environment
    import torch
    from transformers.generation.utils import _speculative_sampling
except ImportError:
    torch = _speculative_sampling = None

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["torch==2.13.0", "transformers", "numpy", "scipy"]


def ensure_venv(venv: Path) -> Path:
    """The virtual environment's python, created with torch (CPU) and transformers if it is not there yet."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    check = subprocess.run([str(python), "-c", "import torch, transformers, scipy"], capture_output=True)
    if check.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PACKAGES], check=True)
    return python


def transformers_verify(x_draft, log_p, log_q, seed, ensemble_weight=None):  # [1, K], [1, K, V], [1, K+1, V], int
    """transformers' verification on specref's rows: the drafts as candidate ids, log p and log q as float32 logits."""
    torch.manual_seed(seed)
    valid_tokens, n_matches = _speculative_sampling(x_draft, log_p.float(), x_draft.shape[1], log_q.float(),
                                                    assistant_ensemble_weight=ensemble_weight)
    return valid_tokens  # [1, n_matches + 1]


def ensemble_verify(x_draft, log_p, log_q, seed):
    """The same with DIVERSE's static ensemble weight w = 0.5 (lossy by design)."""
    return transformers_verify(x_draft, log_p, log_q, seed, ensemble_weight=0.5)


ADAPTER = conform.Adapter(batch=True, log_probs=True, rng="seed", array=torch.from_numpy if torch else np.asarray)


def _with_uniform(value: float, function, *args):
    """function(*args) with torch.rand_like returning `value` everywhere."""
    with mock.patch.object(torch, "rand_like", lambda t, **kw: torch.full_like(t, value)):
        return function(*args)


def probe_q_zero() -> dict:
    """r = 0 for a draft the target gives probability 0: kept or not."""
    log_p = torch.log(torch.tensor([[[0.5, 0.5, 0.0, 0.0]]]))  # [1, 1, 4] the draft
    log_q = torch.log(torch.tensor([[[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]]]))  # [1, 2, 4] the target
    valid, n = _with_uniform(0.0, _speculative_sampling, torch.tensor([[0]]), log_p, 1, log_q)
    return {"probe": "q(x) = 0, r = 0", "tokens": valid[0].tolist(), "kept_draft_with_q_zero": int(n) == 1,
            "chance_of_r_0_per_draft": 2.0 ** -24}


def find_rounding_pair(rng, V: int = 8, tries: int = 200_000):
    """Float32 draft and target logits a rounding apart: ratio p_t(x) / p_d(x) < 1 - 2^-24 yet clamp(p_t - p_d, 0) == 0."""
    for _ in range(tries):
        z = torch.tensor(rng.normal(size=V), dtype=torch.float32)
        bump = torch.zeros(V)
        bump[0] = float(rng.integers(1, 4)) * 2.0 ** -22  # the draft logit of token 0 a few ulps up
        p_draft, p_target = torch.softmax(z + bump, -1), torch.softmax(z, -1)
        if (p_target[0] / p_draft[0] < 1 - 2.0 ** -24) and torch.clamp(p_target - p_draft, min=0).sum() == 0:
            return (z + bump), z
    return None


def probe_all_zero_residual(rng) -> dict:
    """A forced rejection where transformers' residual clamp(p - q, 0) is all zero: what comes out."""
    pair = find_rounding_pair(rng)
    if pair is None:
        return {"probe": "all-zero residual", "found_inputs": False}
    draft_logits, target_logits = pair
    log_p = draft_logits[None, None]  # [1, 1, V]
    log_q = torch.stack([target_logits, target_logits])[None]  # [1, 2, V]
    try:
        valid, n = _with_uniform(1 - 2.0 ** -24, _speculative_sampling, torch.tensor([[0]]), log_p, 1, log_q)
        return {"probe": "all-zero residual", "found_inputs": True, "tokens": valid[0].tolist(), "n_matches": int(n),
                "outside_vocabulary": bool(((valid < 0) | (valid >= log_p.shape[-1])).any())}
    except Exception as e:  # noqa: BLE001  (what it does is the finding)
        return {"probe": "all-zero residual", "found_inputs": True, "raised": f"{type(e).__name__}: {e}"}


def inside(args) -> int:
    versions = {name: metadata.version(name) for name in ("transformers", "torch", "numpy")}
    print(f"transformers {versions['transformers']}, torch {versions['torch']}, numpy {versions['numpy']}")
    print("checking transformers.generation.utils._speculative_sampling (float32 logits, global torch RNG) ...",
          flush=True)
    report = conform.check(transformers_verify, ADAPTER, seed=args.seed, name="transformers _speculative_sampling",
                           progress=lambda c: print(c.line(), flush=True))
    print(report.text().splitlines()[-1] + (f"\ndiagnosis: {report.diagnosis}" if report.diagnosis else ""))
    probes = [probe_q_zero(), probe_all_zero_residual(np.random.default_rng(args.seed))]
    for p in probes:
        print("probe:", json.dumps(p))
    print("\nnegative control: the same function with assistant_ensemble_weight = 0.5 (DIVERSE, lossy) ...", flush=True)
    lossy = conform.check(ensemble_verify, ADAPTER, seed=args.seed, name="transformers _speculative_sampling, w = 0.5",
                          progress=lambda c: print(c.line(), flush=True), scale=0.25)  # a quarter of the samples
    print(lossy.text().splitlines()[-1] + (f"\ndiagnosis: {lossy.diagnosis}" if lossy.diagnosis else ""))
    if args.json:
        write_text(args.json, json.dumps({"versions": versions, "report": report.to_json(), "probes": probes,
                                         "ensemble_w_0.5": lossy.to_json()}, indent=1) + "\n")
    return 0 if report.passed else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/specref-transformers"), help="where to make the environment")
    ap.add_argument("--seed", type=int, default=0, help="the checker's seed (default 0)")
    ap.add_argument("--json", help="also write the reports and probes to this file")
    args = ap.parse_args()
    if torch is not None and _speculative_sampling is not None:
        start = time.time()
        status = inside(args)
        print(f"{time.time() - start:.0f} s")
        return status
    return run_in_venv("tools.conform_transformers", args.venv)


def run_in_venv(module: str, venv: Path) -> int:
    """Run `python -m module` with this command's arguments in the torch environment (`ensure_venv`); its status."""
    python = ensure_venv(venv)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(python), "-m", module, *sys.argv[1:]], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
