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
# # 03 · Distribution tests made visible: chi-square, false alarms and power
#
# **Run time** (Run All, measured on a 2-core machine): about 1.5 minutes when the machine is otherwise idle, nearly
# 4 minutes when other work shares it (the power study is the longest cell; it shows its progress); about 20 s
# with `SPECREF_QUICK=1`.
#
# The suite (`tests/core/test_mrs.py`, `tests/core/test_sampling.py`) proves by simulation that `mrs`, `verify` and whole
# speculative-sampling runs have the target's law. This notebook shows what those tests compute, how often they
# would cry wolf on a correct sampler (the false-alarm rate) and how surely they catch a broken one (the power).
# Letters are Chen et al.'s: `p` = draft, `q` = target, `K` = draft tokens per loop.
#
# **Pearson's chi-square.** Draw $n$ outcomes, count $O_k$ per outcome $k$, compare with the expected counts
# $E_k = n \cdot P(k)$ from the exact law: $X^2 = \sum_k (O_k - E_k)^2 / E_k$. If the sampler is right, $X^2$ is
# approximately $\chi^2$ with (bins $-$ 1) degrees of freedom (an outcome expected at least `stats.MIN_EXPECTED` $= 20$
# times is a bin of its own; rarer ones share bins of at least 20 expected, `stats.pooled_bins`), so the p-value $P(\chi^2 \ge X^2)$ is uniform on $[0, 1]$. A test that fails when
# $p < $ `stats.LEVEL` $= 10^{-3}$ therefore fails a correct sampler with probability $10^{-3}$ per seed; the
# suite's seeds are fixed, so its runs are reproducible. An outcome the law forbids is an immediate failure.
#
# All the machinery is `specref.proof.stats`; the deliberately broken samplers are `specref.proof.broken`.

# %%
import numpy as np
import matplotlib.pyplot as plt
from collections import Counter
from scipy import stats as sps

from specref.proof import broken, stats
from specref.notebooks.progress import Progress
from specref import mrs, sampling
from specref.notebooks import plots
from specref.runstats import RunStats
from specref.notebooks.quick import quick_mode

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")
print("LEVEL =", stats.LEVEL, " MIN_EXPECTED =", stats.MIN_EXPECTED, " quick" if QUICK else " full sizes")

# %% [markdown]
# ## One token: `mrs` on sharp and degenerate cases
#
# The edge cases are where implementations break: a draft that is nearly always wrong (the residual does all the
# work), $p = q$ (the residual is $0/0$), a target that forbids a token the draft likes, a one-hot draft (prompt
# lookup, greedy drafts). For each, $n$ draft tokens $x \sim p$ go through `mrs.mrs` and the outputs are tested
# against $q$. As a negative control the same draws go through `broken.resample_from_q` with $K = 1$ (it draws from
# $q$ instead of the residual after a rejection), keeping its first token.

# %%
cases = {
    "sharp: draft nearly always wrong": ([0.01, 0.97, 0.01, 0.01], [0.97, 0.01, 0.01, 0.01]),
    "p == q (residual 0/0)": ([0.2, 0.3, 0.5, 0.0], [0.2, 0.3, 0.5, 0.0]),
    "q forbids a drafted token": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0]),
    "one-hot draft": ([0.0, 1.0, 0.0, 0.0], [0.2, 0.3, 0.4, 0.1]),
    "tiny target mass": ([0.25, 0.25, 0.25, 0.25], [0.997, 0.001, 0.001, 0.001]),
}
n = 5_000 if QUICK else 50_000
print(f"{'case':34s} {'alpha':>6} {'mrs p-value':>12} {'resample_from_q p-value':>24}")
for name, (p, q) in cases.items():
    p, q = np.array(p), np.array(q)
    rng = np.random.default_rng(5)
    xs = rng.choice(len(p), size=n, p=p)
    good = Counter(mrs.mrs(int(x), p, q, rng)[0] for x in xs)
    bad = Counter(int(broken.resample_from_q(np.array([x]), p[None], np.stack([q, q]), rng)[0]) for x in xs)
    law = dict(enumerate(q))
    print(f"{name:34s} {mrs.acceptance_rate(p, q):6.3f} {stats.chi_square_gof(good, law)[2]:12.3g} "
          f"{stats.chi_square_gof(bad, law)[2]:24.3g}")

# %% [markdown]
# The broken sampler passes when $p = q$: nothing is ever rejected, so the bug never runs. A negative control only
# proves something on a case where the bug changes the law, which is why the suite runs every broken sampler on
# cases chosen so that each bug shows.
#
# ## One loop: `verify`'s whole output
#
# With $K$ drafts, `verify` returns the accepted prefix plus one token, so its outcomes are tuples of 1 to $K+1$
# tokens. When draft $t$ is drawn from a fixed row $p[t]$, the exact law is (`stats.verify_law`)
#
# $$P(x_1..x_a, y) = \prod_{t<a} \min(p_t, q_t)(x_t) \cdot \begin{cases} (1 - \alpha_a)\,(q_a - p_a)_+(y) & a < K \\ q_K(y) & a = K \end{cases}$$
#
# The case used for the power study (`plots.power_case()`): $K = 2$, $V = 3$, acceptance 0.9 at both positions.

# %%
p, q = plots.power_case()
law = stats.verify_law(p, q)
print("p =", p.tolist(), "\nq =", q.tolist())
print(f"{len(law)} possible outputs, total probability {sum(law.values()):.12f}; the most likely:")
for outcome, w in sorted(law.items(), key=lambda kv: -kv[1])[:6]:
    print("  ", outcome, round(w, 4))
print("P(a drafts accepted), a = 0..K:", stats.accepted_count_law(p, q).round(4))

# %%
n = 2_000 if QUICK else 20_000
print(f"n = {n} verify calls per sampler")
print(f"{'sampler':28s} {'chi-square':>11} {'dof':>4} {'p-value':>9}  verdict at LEVEL")
for name, f in plots.verify_samplers().items():
    counts = stats.sample_verify(f, p, q, n, np.random.default_rng(11))
    stat, dof, pval = stats.chi_square_gof(counts, law)
    print(f"{name:28s} {stat:11.1f} {dof:4d} {pval:9.3g}  {'REJECT' if pval < stats.LEVEL else 'pass'}")

# %% [markdown]
# ## Whole sequences: SpS against the target's law
#
# The strongest check is end to end: speculative sampling (`sampling.speculative_sampling`) with a draft and a target
# that are small Markov chains over $V = 3$ tokens: a target with sharp rows (Dirichlet concentration 0.3) and a
# draft that mixes 70% of the target with 30% of another sharp chain, $K = 3$, $N = 4$ new tokens. Every one of
# the $3^4 = 81$ sequences has an exact probability under the target (`stats.sequence_law`). Each broken `verify`
# is plugged into the same loop.
#
# The draft must be good: with a draft far from the target, all $K$ drafts are rarely accepted, the bonus token is
# rarely drawn, and a bug in the bonus (`bonus_wrong_row`) hides. A test case has to exercise the code it tests.

# %%
V, N, K = 3, 4, 3
target = stats.MarkovChain.random(V, order=1, rng=np.random.default_rng(21), concentration=0.3)
other = stats.MarkovChain.random(V, order=1, rng=np.random.default_rng(22), concentration=0.3)
draft = stats.MarkovChain(0.7 * target.table + 0.3 * other.table)
prompt = np.array([1])
seq_law = stats.sequence_law(target, prompt, N)
print("target rows:\n", target.table.round(3), "\ndraft rows:\n", draft.table.round(3))
print("acceptance rate per context:", mrs.acceptance_rate(draft.table, target.table).round(3))

runs = 2_000 if QUICK else 20_000
print(f"\n{runs} runs per sampler")
progress = Progress(len(plots.verify_samplers()), "samplers tested", unit="samplers")
for name, f in plots.verify_samplers().items():
    sampler = lambda r, f=f: sampling.speculative_sampling(prompt, draft, target, N, K, r, verify=f)
    counts = stats.sample_sequences(sampler, runs, len(prompt), np.random.default_rng(23))
    stat, dof, pval = stats.chi_square_gof(counts, seq_law)
    print(f"{name:28s} chi-square {stat:10.1f} on {dof:2d} dof, p-value {pval:9.3g}  "
          f"{'REJECT' if pval < stats.LEVEL else 'pass'}")
    progress.step(name)
progress.done()

# %% [markdown]
# `no_bonus` passes here, and rightly: dropping the bonus token loses speed, not correctness (notebook 01 explains
# why); the `verify`-level test above catches it. `one_uniform_reused` and `resample_from_q` need the most samples
# here: reusing one uniform only couples the decisions within a loop, and resampling from $q$ instead of the
# residual only matters after a rejection.
#
# ## False alarms and power
#
# Repeat each test many times with fresh seeds. For the correct `verify` the p-values spread uniformly over $[0, 1]$
# (so a fraction LEVEL of them fall below LEVEL: the false-alarm rate); for a broken one they pile up at 0. The lower
# panel is the power: the fraction of tests that reject, against the number of samples per test.

# %%
sizes = plots.chi_square_power_sizes(QUICK)
progress = Progress(plots.chi_square_power_tests(**sizes), "chi-square tests", unit="tests")
fig = plt.figure(figsize=(12, 6.5), layout="constrained")
pvalues, power = plots.plot_chi_square_power(fig, **sizes, on_test=progress.step)
progress.done()
plt.show()
for name, r in power.items():
    print(f"{name:28s} rejection rate by n:", ", ".join(f"{n}: {x:.2f}" for n, x in zip(sizes["ns"], r)))

# %% [markdown]
# ### The false-alarm rate, measured
#
# Under the correct sampler the p-values should be uniform: a Kolmogorov–Smirnov test of their distribution, and
# the observed fractions below a few thresholds. (With a few hundred repetitions a rate of $10^{-3}$ cannot be
# resolved; the point is that nothing piles up at 0.)

# %%
reps = 50 if QUICK else 500
pv = plots.verify_pvalues(mrs.verify, p, q, 400, reps, seed=99)
print(f"{reps} tests of n = 400: KS test of uniformity p = {sps.kstest(pv, 'uniform').pvalue:.3f}")
for thr in (0.5, 0.1, 0.05, 0.01, stats.LEVEL):
    print(f"  fraction of p-values < {thr:<6g}: {np.mean(pv < thr):.3f}")

# %% [markdown]
# ## Block verification: more tokens per call, the same law
#
# `mrs.verify_block` (Sun et al. 2025, block verification) takes exactly `verify`'s inputs but decides on the whole
# block: it carries the ratio along the block, $w_i = \min(1, w_{i-1}\, q_i(x_i) / p_i(x_i))$, so a draft the target
# likes *more* than the draft did can pay for an earlier one it liked less. The paper's toy example: a binary
# vocabulary $\{a, b\}$, draft $(2/3, 1/3)$, target $(1/3, 2/3)$, $K = 2$. Below, every draft block with its
# probability, the weights $w$ and stopping weights $h$, and how many drafts each verifier keeps on average, all in
# exact fractions (`stats.token_call_law`, `stats.block_call_law`).

# %%
from fractions import Fraction
from itertools import product
from specref.proof import lossy

K_toy = 2
p_toy = [[Fraction(2, 3), Fraction(1, 3)]] * K_toy
q_toy = [[Fraction(1, 3), Fraction(2, 3)]] * (K_toy + 1)
print(f"{'drafts':7} {'P(drafts)':>9} {'w_1, w_2':>10} {'h_1, h_2':>10}  {'E kept: token':>14} {'block':>6}")
for xs in product(range(2), repeat=K_toy):
    chance = p_toy[0][xs[0]] * p_toy[1][xs[1]]
    w, h, _ = stats.block_weights(list(xs), p_toy, q_toy)
    kept = {name: sum((len(out) - 1) * v for out, v in law(list(xs), p_toy, q_toy).items())
            for name, law in (("token", stats.token_call_law), ("block", stats.block_call_law))}
    print(f"{''.join('ab'[x] for x in xs):7} {str(chance):>9} {str(w[1]) + ', ' + str(w[2]):>10} "
          f"{str(h[1]) + ', ' + str(h[2]):>10}  {str(kept['token']):>14} {str(kept['block']):>6}")
for name, law in (("token-level", stats.token_call_law), ("block", stats.block_call_law)):
    call = stats.call_law(law, stats.fixed_rows(p_toy), stats.fixed_rows(q_toy), K_toy, 2)
    exact = stats.continued_law(call, stats.fixed_rows(q_toy), K_toy + 1) == stats.target_joint_law(
        stats.fixed_rows(q_toy), 2, K_toy + 1)
    print(f"{name:12s} drafts kept per call: {stats.expected_tokens(call) - 1} "
          f"(continued with target draws, exactly the target's law: {exact})")

# %% [markdown]
# Where the extra $1/9$ comes from: both verifiers may keep a drafted $a$ as the first token with total probability
# at most $q(a) = 1/3$ (more would break the law). Token-level verification spends that budget evenly, half of every
# block that starts with $a$: $\tfrac49 \cdot \tfrac12$ on "aa" and $\tfrac29 \cdot \tfrac12$ on "ab". Block
# verification spends it where it buys more: all $\tfrac29$ on "ab", because there $b$ ($q/p = 2$) lifts
# $w_2 = \min(1, \tfrac12 \cdot 2)$ to 1 and the second draft is kept too, and only $\tfrac19$ on "aa" (it keeps
# $1/2$ of a draft there instead of $3/4$). The weighted residual $\max(0, w_\tau q_{\tau+1} - p_{\tau+1})$ supplies
# exactly what is then missing, so the law stays the target's. Net: $11/9$ against $10/9$.
#
# ### Chi-square: block verification against a real-world lossy rule
#
# The same whole-sequence test as above, on the same Markov chains, with three verifiers: `mrs.verify`,
# `mrs.verify_block`, and Medusa's typical acceptance (`lossy.verify_typical`, **lossy**: it keeps a draft when the
# target gives it more than $\min(\epsilon, \delta e^{-H(q)})$, never looking at $p$). The two exact verifiers
# pass; typical acceptance is rejected: its output is not the target's. (Here $N = 4$ tokens per run cut the last
# call short, so tokens per call are only a rough view of the gain; the exact numbers are above and in the README.)

# %%
for name, f in (("verify (token-level)", mrs.verify), ("verify_block", mrs.verify_block),
                ("LOSSY verify_typical", lossy.verify_typical)):
    run_stats = RunStats()
    def sampler(r, f=f, run_stats=run_stats):
        return sampling.speculative_sampling(prompt, draft, target, N, K, r, verify=f, on_step=run_stats.add)
    counts = stats.sample_sequences(sampler, runs, len(prompt), np.random.default_rng(24))
    stat, dof, pval = stats.chi_square_gof(counts, seq_law)
    print(f"{name:22s} tokens per call {run_stats.tokens_per_target_call:.3f}  chi-square {stat:9.1f} on {dof:2d} dof, "
          f"p-value {pval:9.3g}  {'REJECT' if pval < stats.LEVEL else 'pass'}")

# %% [markdown]
# One call of `verify_block` against its exact law (`stats.call_law(stats.block_call_law, ...)`), next to the five
# misreadings of the algorithm in `broken.BROKEN_BLOCK` (each breaks exactness; the suite shows it by enumeration).

# %%
p3, q3 = np.random.default_rng(2025).dirichlet(np.ones(3), 3), np.random.default_rng(2026).dirichlet(np.ones(3), 4)
block_law = stats.call_law(stats.block_call_law, stats.fixed_rows(p3), stats.fixed_rows(q3), 3, 3)
n = 2_000 if QUICK else 20_000
for name, f in {"verify_block": mrs.verify_block, **broken.BROKEN_BLOCK}.items():
    counts = stats.sample_verify(f, p3, q3, n, np.random.default_rng(25))
    stat, dof, pval = stats.chi_square_gof(counts, block_law)
    print(f"{name:24s} chi-square {stat:9.1f} on {dof:2d} dof, p-value {pval:9.3g}  "
          f"{'REJECT' if pval < stats.LEVEL else 'pass'}")
