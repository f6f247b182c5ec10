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
# # 01 · Theorem 1: why modified rejection sampling gives exactly the target's law
#
# **Run time** (Run All, measured on a 2-core machine): about 30 s; about 10 s with `SPECREF_QUICK=1`.
#
# Letters are **Chen et al. 2023**'s: `p` is the **draft** distribution, `q` the **target** distribution,
# `K` the number of draft tokens per loop. (Leviathan et al. 2023 swap `p` and `q`.)
#
# Modified rejection sampling (MRS) takes one draft token $\tilde x \sim p$ and returns one token $X$:
#
# 1. accept $\tilde x$ with probability $\min\left(1, \frac{q(\tilde x)}{p(\tilde x)}\right)$;
# 2. otherwise draw $X$ from the residual $(q - p)_+ = \frac{\max(0,\, q - p)}{\sum_x \max(0,\, q(x) - p(x))}$.
#
# **Theorem 1** (Chen et al., appendix): $P(X = x) = q(x)$ for every $x$. A token can come out in two ways:
#
# $$P(X = x) = \underbrace{p(x)\min\left(1, \tfrac{q(x)}{p(x)}\right)}_{\text{drafted and accepted} \;=\; \min(p(x),\, q(x))}
#   \;+\; \underbrace{P(\text{reject})}_{\sum_{x'} \max(0,\, p(x') - q(x'))} \cdot (q - p)_+(x)$$
#
# This notebook checks every step with exact fractions, then with `specref.mrs` in floating point, then by
# simulation, and finally extends the argument from one token to whole sequences.

# %%
import os
from collections import Counter
from fractions import Fraction as F

import matplotlib.pyplot as plt
import numpy as np

from specref.proof import laws, stats
from specref.proof.bugs import broken
from specref import mrs, sampling
from specref.lessons import plots
from specref.lessons.quick import quick_mode

QUICK = quick_mode()  # SPECREF_QUICK=1 shrinks the simulations (CI); unset for the full sizes
print("quick mode" if QUICK else "full sizes")

# %% [markdown]
# ## A small case, in exact fractions
#
# Four tokens. The draft over-proposes `a` and `b`, under-proposes `c`, and cannot propose `d` at all
# ($p(d) = 0$): MRS must produce `d` purely through rejections.

# %%
names = ["a", "b", "c", "d"]
p = [F(1, 2), F(1, 3), F(1, 6), F(0)]   # draft
q = [F(1, 4), F(1, 4), F(1, 4), F(1, 4)]  # target
assert sum(p) == 1 and sum(q) == 1

accept_and_keep = [min(pi, qi) for pi, qi in zip(p, q)]       # P(draft x, accept it) = p(x) min(1, q/p) = min(p, q)
beta = sum(accept_and_keep)                                    # P(accept) for this pair of rows (Leviathan's beta)
over = [max(F(0), pi - qi) for pi, qi in zip(p, q)]            # mass the draft puts too much on
under = [max(F(0), qi - pi) for pi, qi in zip(p, q)]           # mass the draft puts too little on
p_reject = sum(pi * (1 - min(F(1), qi / pi)) for pi, qi in zip(p, q) if pi > 0)
residual = [u / sum(under) for u in under]                     # (q - p)_+

print(f"{'x':>2} {'p':>5} {'q':>5} {'min(p,q)':>9} {'max(0,p-q)':>11} {'max(0,q-p)':>11} {'(q-p)+':>7}")
for row in zip(names, p, q, accept_and_keep, over, under, residual):
    print(f"{row[0]:>2} " + " ".join(f"{str(v):>{w}}" for v, w in zip(row[1:], (5, 5, 9, 11, 11, 7))))
print("(q-p)+ is the residual: max(0, q - p) normalised to sum to 1")
print(f"\nbeta = sum min(p, q) = {beta}")
print(f"P(reject) = sum p(x)(1 - min(1, q/p)) = {p_reject}")
print(f"          = sum max(0, p - q) = {sum(over)}")
print(f"          = sum max(0, q - p) = {sum(under)}   (both equal 1 - beta = {1 - beta})")

# %% [markdown]
# The two ways a token comes out, added up. Note $P(\text{reject}) \cdot (q-p)_+(x) = \max(0, q(x) - p(x))$, because
# $P(\text{reject})$ is exactly the normaliser of the residual — that is the whole trick.

# %%
total = [k + p_reject * r for k, r in zip(accept_and_keep, residual)]
for x, k, r, t, qi in zip(names, accept_and_keep, residual, total, q):
    print(f"P(X = {x}) = {k} + {p_reject} * {r} = {t}   q({x}) = {qi}")
assert total == q  # exact equality of fractions, not a tolerance
print("Theorem 1 holds exactly.")

# %% [markdown]
# ## The same numbers from `specref.mrs` (float64)

# %%
p64 = np.array([float(v) for v in p])
q64 = np.array([float(v) for v in q])
print("acceptance_rate:", mrs.acceptance_rate(p64, q64), " exact:", float(beta))
print("residual:       ", mrs.residual(p64, q64), " exact:", [float(v) for v in residual])
print("output_law:     ", mrs.output_law(p64, q64), " = q:", q64)
assert np.allclose(mrs.output_law(p64, q64), q64, atol=1e-15)

# %% [markdown]
# ## The picture
#
# Each bar of height $q(x)$ is made of the green part, $\min(p, q)$ (the draft proposed $x$ and it was kept), and the
# orange part, $(1 - \beta)\,(q-p)_+(x)$ (some draft was rejected and $x$ was drawn from the residual). The dashed
# outline is $p$: wherever it sticks out above $q$, that excess is exactly what gets rejected, and the rejected mass
# is poured into the orange parts.

# %%
fig, ax = plt.subplots(figsize=(7, 4))
plots.plot_overlap(ax, p64, q64, names)
plt.show()

# %% [markdown]
# ### Move p and q yourself
#
# The sliders below set the weights of $p$ and $q$ token by token (each row is normalised to sum to 1) and redraw
# the picture, with $\beta = \sum_x \min(p(x), q(x))$ printed: the chance that a draft from $p$ is accepted (the
# $\alpha$ of a draft whose rows were these at every position). Try making $p$ equal to $q$, putting all of $p$ on a
# token $q$ forbids, or moving one token's mass from $q$ to $p$: the green part is always $\min(p, q)$, and the
# orange part always fills the rest of $q$. The sliders need a running kernel; the figure after them shows three
# settings for a reader on GitHub.

# %%
from specref.lessons import widgets

widgets.interactive_overlap([float(v) for v in p], [float(v) for v in q], names)

# %%
settings = [("p = q: every draft is kept", [0.25] * 4),
            ("the rows above", [float(v) for v in p]),
            ("p mostly on a token q gives 1/4", [0.85, 0.05, 0.05, 0.05])]
fig, axes = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
for ax, (title, weights) in zip(axes, settings):
    p_row, q_row, beta_row = widgets.overlap_rows(weights, [float(v) for v in q])
    plots.plot_overlap(ax, p_row, q_row, names)
    ax.set_title(f"{title}: beta = {beta_row:.3f}", fontsize=9)
    print(f"{title}: p = {np.round(p_row, 3).tolist()}, beta = sum min(p, q) = {beta_row:.3f}")
plt.show()

# %% [markdown]
# ## By simulation
#
# Draw $\tilde x \sim p$, run `mrs.accept_or_resample`, count. The chi-square goodness-of-fit test compares the counts
# with $q$: Pearson's $X^2 = \sum_k (O_k - E_k)^2 / E_k$ adds the squared misses of the observed counts $O_k$ from the
# expected ones $E_k = n\,q(k)$, and its p-value is the chance that a correct sampler misses by at least as much
# (notebook 00 states it in brief, notebook 03 builds it step by step). The p-value is uniform on $[0, 1]$ when the
# sampler is right; the suite rejects below $10^{-3}$.

# %%
n = 20_000 if QUICK else 200_000
rng = np.random.default_rng(2023)
counts = Counter()
accepted = 0
for x_draft in rng.choice(4, size=n, p=p64):
    x, ok = mrs.accept_or_resample(int(x_draft), p64, q64, rng)
    counts[x] += 1
    accepted += ok
freq = np.array([counts[i] / n for i in range(4)])
print("empirical frequencies:", freq.round(4), " q:", q64)
print(f"empirical acceptance rate {accepted / n:.4f}, beta = {float(beta):.4f}")
stat, dof, pval = stats.chi_square_gof(counts, dict(enumerate(q64)))
print(f"chi-square {stat:.2f} on {dof} dof, p-value {pval:.3f}")

# %% [markdown]
# ## From one token to whole sequences
#
# Speculative sampling (Chen's Algorithm 2) drafts $K$ tokens, scores them with one target call, then runs MRS at
# each position in turn (`mrs.verify`). Why is the law of the **whole sequence** the target's?
#
# Argue one output token at a time, conditioning on everything already emitted (the prefix $x_{1..n}$):
#
# * **Position 1 of a loop.** The draft token was drawn from $p(\cdot \mid x_{1..n})$ and is checked against
#   $q(\cdot \mid x_{1..n})$: Theorem 1 says the emitted token has law $q(\cdot \mid x_{1..n})$.
# * **After an acceptance at position $t$.** The emitted token *is* the draft $\tilde x_t$, so the next draft was
#   drawn from $p(\cdot \mid x_{1..n}, \tilde x_{1..t})$ — the draft's law given exactly the emitted prefix — and is
#   checked against the target's row for the same prefix. Theorem 1 again: the next token has the target's
#   conditional law given everything emitted so far.
# * **After a rejection.** The remaining drafts are thrown away (they were conditioned on a token that was not
#   emitted); the next loop starts from the emitted prefix, which is the first case again.
# * **All $K$ accepted.** The bonus token is drawn from $q(\cdot \mid x_{1..n}, \tilde x_{1..K})$ directly — the
#   target's conditional law for the emitted prefix.
#
# So every emitted token has the target's conditional law given the emitted prefix, whichever way it came out, and
# by the chain rule the sequence has probability $\prod_i q(x_i \mid x_{<i})$: exactly the target's law. The
# bookkeeping matters: a draft must be checked against **the same position's** target row, the bonus needs the
# row **after** the last draft, and rejected drafts must not survive into the next loop.
#
# ### Checked on a model small enough to enumerate
#
# A target and a draft that are Markov chains over 3 tokens (`specref.proof.laws.MarkovChain`): every sequence of
# $N = 3$ new tokens has a known probability (`laws.sequence_law`). SpS with $K = 2$ must reproduce it; the same
# test on a variant that draws the bonus token from the wrong row, $q[K-1]$ instead of $q[K]$
# (`specref.proof.bugs.broken.bonus_wrong_row`), must fail.

# %%
V, N, K = 3, 3, 2
target = laws.MarkovChain.random(V, order=1, rng=np.random.default_rng(1))
draft = laws.MarkovChain.random(V, order=1, rng=np.random.default_rng(2))
prompt = np.array([0])
law = laws.sequence_law(target, prompt, N)
print(f"{len(law)} possible sequences; the 5 most likely:")
for seq, w in sorted(law.items(), key=lambda kv: -kv[1])[:5]:
    print("  ", seq, round(w, 4))


def sps(rng, verify=mrs.verify):
    return sampling.speculative_sampling(prompt, draft, target, N, K, rng, verify=verify)


runs = 3_000 if QUICK else 30_000
counts_sps = stats.sample_sequences(sps, runs, len(prompt), np.random.default_rng(3))
counts_bad = stats.sample_sequences(lambda r: sps(r, broken.bonus_wrong_row), runs, len(prompt), np.random.default_rng(3))
counts_nobonus = stats.sample_sequences(lambda r: sps(r, broken.no_bonus), runs, len(prompt), np.random.default_rng(3))
for label, c in (("SpS (mrs.verify)", counts_sps), ("SpS with broken.bonus_wrong_row", counts_bad),
                 ("SpS with broken.no_bonus", counts_nobonus)):
    stat, dof, pval = stats.chi_square_gof(c, law)
    print(f"{label:32s} chi-square {stat:9.1f} on {dof:2d} dof, p-value {pval:.3g}")

# %% [markdown]
# The wrong bonus row is caught. Dropping the bonus token (`no_bonus`) is **not** caught at the level of whole
# sequences, and should not be: when all $K$ drafts are accepted and the bonus is dropped, the next loop simply
# starts from the accepted prefix, and the argument above still holds. That bug costs speed (up to one token per
# loop), not correctness; the test of `verify`'s own output law in notebook 03 does catch it.

# %%
seqs = sorted(law, key=lambda s: -law[s])
xs = np.arange(len(seqs))
fig, ax = plt.subplots(figsize=(10, 3.5))
ax.bar(xs, [law[s] for s in seqs], color="lightgray", label="exact target law  prod q(x_i | x_<i)")
ax.plot(xs, [counts_sps[s] / runs for s in seqs], "o", ms=4, label=f"SpS, K={K} ({runs} runs)")
ax.plot(xs, [counts_bad[s] / runs for s in seqs], "x", ms=5, label="SpS with broken.bonus_wrong_row")
ax.set_xticks(xs, ["".join(map(str, s)) for s in seqs], rotation=90, fontsize=7)
ax.set_xlabel("sequence of N = 3 new tokens (token ids)")
ax.set_ylabel("probability / frequency")
ax.set_title("Whole-sequence law: SpS vs the target (Chen's letters; V = 3 Markov chains)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Exercise: write `verify`
#
# Write Chen's Algorithm 2, lines 9-14, as `my_verify(x_draft, p, q, rng)`: `x_draft` holds $K$ draft tokens, `p`
# their $K$ draft rows, `q` the target's $K + 1$ rows; return the accepted drafts plus one more token. Draw your
# uniforms as `specref.mrs` documents (one `rng.random()` per accept test, one per draw, a draw by the inverse CDF:
# `mrs.sample`), and the grader can replay the portable vectors on it too. One line grades it: vectors, the exact
# law of one call, and a chi-square; a failure names the mistake it matches. The attempt below forgets the bonus
# token, so its verdict shows what a failure looks like; the cell after it grades the reference answer.

# %%
from specref.lessons import exercises


def my_verify(x_draft, p, q, rng):  # your code here; this attempt has no bonus token
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t, x] / p[t, x]:
            out.append(x)
        else:
            out.append(mrs.sample(np.maximum(q[t] - p[t], 0), rng))
            break
    return np.array(out)


exercises.check_verify(my_verify)

# %%
from solutions.verify import verify as solution

exercises.check_verify(solution)

