"""Time PyTorch (eager, CPU) on SmolLM2-135M's weights beside specref's NumPy model, in one run.

The same float32 weights (dequantized by specref's loader) run through a plain PyTorch Llama
forward pass with a KV cache, written here the way a PyTorch user would write it, with every
core (`torch.set_num_threads`); specref's model runs with its machine plan, as the command line
runs it.  Both are timed the way `python -m specref bench` times specref: a decode step (one new
token after 64 cached ones, softmax in float64 included) and scoring K + 1 new tokens, medians
over interleaved repeats.  Before timing, the two models' logits on a prompt are compared, so the
numbers are for the same computation.

Run outside CI (torch is not a project dependency), in its own virtual environment:

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0 numpy gguf     # the CPU wheel
    PYTHONPATH=. /tmp/torchenv/bin/python tools/torch_reference.py [--json PATH] [--repeats 9]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # what `python -m specref` sets for specref

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from specref.files import write_text  # noqa: E402
from specref.fast import load_fast  # noqa: E402
from specref.fast.kernels import from_panels  # noqa: E402
from specref.fast.machine import cores, cpu_label, machine_key  # noqa: E402

PREFIX = 64
KS = (1, 2, 3, 4, 8)


class TorchLlama:
    """SmolLM2 in PyTorch eager mode: the same weights and pair-layout RoPE as specref.smollm2.model."""

    def __init__(self, weights, capacity: int = 512):
        c = self.c = weights.config
        t = lambda a: torch.from_numpy(np.array(a))  # noqa: E731  (a writable copy)
        self.head = t(from_panels(weights.head))                                   # [d, V]
        self.layers = [dict(attn_norm=t(l.attn_norm), w_qkv=t(from_panels(l.w_qkv)), w_o=t(from_panels(l.w_o)),
                            ffn_norm=t(l.ffn_norm), w_gate_up=t(from_panels(l.w_gate_up)),
                            w_down=t(from_panels(l.w_down))) for l in weights.layers]
        self.output_norm = t(weights.output_norm)
        theta = c.rope_base ** (-torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim)
        angles = torch.arange(capacity, dtype=torch.float64)[:, None] * theta[None, :]
        self.rot = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)  # [ctx, hd/2]
        self.k = [torch.zeros(c.n_kv_heads, capacity, c.head_dim) for _ in self.layers]
        self.v = [torch.zeros(c.n_kv_heads, capacity, c.head_dim) for _ in self.layers]
        self.length = 0

    def rms_norm(self, x, g):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.c.rms_eps) * g

    def rope(self, x, rot):  # [n, h, hd]
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(z * rot[:, None, :]).reshape(x.shape)

    @torch.inference_mode()
    def forward(self, tokens):  # new tokens [n] after self.length cached -> final states [n, d]
        c, n, start = self.c, len(tokens), self.length
        x = self.head[:, tokens].T.contiguous()                                   # [n, d]
        rot = self.rot[start:start + n]
        T = start + n
        mask = torch.arange(T)[None, :] > (start + torch.arange(n))[:, None]      # [n, T]
        g = c.n_heads // c.n_kv_heads
        for i, L in enumerate(self.layers):
            qkv = self.rms_norm(x, L["attn_norm"]) @ L["w_qkv"]
            q = qkv[:, :c.q_dim].reshape(n, c.n_heads, c.head_dim)
            k = qkv[:, c.q_dim:c.q_dim + c.kv_dim].reshape(n, c.n_kv_heads, c.head_dim)
            v = qkv[:, c.q_dim + c.kv_dim:].reshape(n, c.n_kv_heads, c.head_dim)
            q, k = self.rope(q, rot), self.rope(k, rot)
            self.k[i][:, start:T] = k.transpose(0, 1)
            self.v[i][:, start:T] = v.transpose(0, 1)
            qg = q.reshape(n, c.n_kv_heads, g, c.head_dim).permute(1, 2, 0, 3).reshape(c.n_kv_heads, g * n, c.head_dim)
            s = (qg @ self.k[i][:, :T].transpose(1, 2)) / c.head_dim ** 0.5      # [Hkv, g*n, T]
            s = s.reshape(c.n_kv_heads, g, n, T).masked_fill(mask, float("-inf"))
            a = (torch.softmax(s, -1).reshape(c.n_kv_heads, g * n, T) @ self.v[i][:, :T])
            x = x + a.reshape(c.n_kv_heads, g, n, c.head_dim).permute(2, 0, 1, 3).reshape(n, c.q_dim) @ L["w_o"]
            gu = self.rms_norm(x, L["ffn_norm"]) @ L["w_gate_up"]
            x = x + (torch.nn.functional.silu(gu[:, :c.d_ff]) * gu[:, c.d_ff:]) @ L["w_down"]
        self.length = T
        return self.rms_norm(x, self.output_norm)

    @torch.inference_mode()
    def next_probs(self, tokens, k):  # all tokens; the cache keeps `self.length` of them -> [k, V] float64
        h = self.forward(torch.as_tensor(tokens[self.length:]))
        return torch.softmax((h[-k:] @ self.head).double(), -1)


def time_both(spec, torch_model, repeats):
    """n -> (specref ms, torch ms) for n new tokens after PREFIX cached ones, medians of interleaved repeats."""
    prefix = list(range(1000, 1000 + PREFIX))
    spec.reset()
    spec.next_probs(np.array(prefix), 1)
    torch_model.length = 0
    torch_model.next_probs(prefix, 1)
    counts = [1] + [K + 1 for K in KS]
    times = {(who, n): [] for who in ("specref", "torch") for n in counts}
    rng = np.random.default_rng(0)
    fresh = 5000
    for _ in range(repeats):
        for n in rng.permutation(counts).tolist():
            fresh += 1                                  # a first new token unlike the cached one
            tokens = prefix + [fresh] + list(range(2000, 2000 + n - 1))
            t = time.perf_counter()
            spec.next_probs(np.array(tokens), n)
            times[("specref", n)].append(time.perf_counter() - t)
            torch_model.length = PREFIX                                   # roll back to the prefix
            t = time.perf_counter()
            torch_model.next_probs(tokens, n)
            times[("torch", n)].append(time.perf_counter() - t)
    return {key: 1e3 * float(np.median(v)) for key, v in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats (median taken; default 9)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: every core)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the numbers to this JSON file")
    args = parser.parse_args()
    if args.repeats < 1 or args.threads < 0:
        parser.error(f"--repeats must be >= 1 and --threads >= 0, not {args.repeats} and {args.threads}")
    torch.set_num_threads(args.threads or cores())
    spec = load_fast(measure=True)
    torch_model = TorchLlama(spec.weights)
    prompt = spec.tokenizer.chat([{"role": "user", "content": "Write a Python function that reverses a list."}])
    ours = spec.logits(np.array(prompt))
    theirs = (torch_model.forward(torch.as_tensor(prompt)) @ torch_model.head).numpy()
    gap = float(np.abs(ours - theirs).max())
    print(f"logits on a {len(prompt)}-token prompt: largest difference {gap:.2e} (float32 rounding)")
    if gap > 1e-2:
        raise SystemExit(f"the two models disagree (largest logit difference {gap:.3g}); not timing them")
    ms = time_both(spec, torch_model, args.repeats)
    key = machine_key(spec.weights)
    print(f"CPU {cpu_label(key)}, {cores()} cores; torch {torch.__version__} with {torch.get_num_threads()} threads; "
          f"NumPy {np.__version__}, {key['blas']}, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; "
          f"specref plan: {spec.fast.layout} layout")
    print(f"{'quantity':<34} {'specref':>9} {'torch':>9} {'specref/torch':>14}")
    d_s, d_t = ms[("specref", 1)], ms[("torch", 1)]
    print(f"{'decode step (ms)':<34} {d_s:>9.1f} {d_t:>9.1f} {d_s / d_t:>14.2f}")
    rows = {"decode_ms": {"specref": d_s, "torch": d_t}, "score_ratio": {}}
    for K in KS:
        s, t = ms[("specref", K + 1)] / d_s, ms[("torch", K + 1)] / d_t
        rows["score_ratio"][K] = {"specref": s, "torch": t}
        print(f"{f'score {K + 1} tokens / decode (K={K})':<34} {s:>9.2f} {t:>9.2f}")
    if args.json:
        write_text(args.json, json.dumps({"machine": key, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                                         "python": platform.python_version(), "logit_gap": gap,
                                         "repeats": args.repeats, **rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
