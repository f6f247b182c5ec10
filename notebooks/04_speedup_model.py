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
# # 04 · The speedup model, with sliders
#
# **Run time** (Run All, measured on a 2-core machine): about 20 s; about 5 s with `SPECREF_QUICK=1`.
#
# Letters here are **Leviathan et al. 2023**'s (section 3), as in `specref.speedup`:
#
# | symbol | meaning |
# |---|---|
# | $\beta$ | acceptance probability at one prefix: $\beta = \sum_x \min(p(x), q(x))$ for that prefix's two rows (Def. 3.1, Thm 3.5) |
# | $\alpha$ | acceptance rate: $\alpha = E[\beta]$, the average of $\beta$ over the prefixes met (Def. 3.2) |
# | $\gamma$ | draft tokens per target call (Chen's $K$) |
# | $c$ | time of one draft step / time of one target decode step (Def. 3.7) |
# | $\hat c$ | arithmetic operations per token, draft / target (Def. 3.10) |
#
# `mrs.acceptance_rate(p, q)` computes $\beta$ for one pair of rows; a run's $\alpha$ averages it over the prefixes
# it meets. The formulas, all under Leviathan's simplifying assumption that the $\beta$s are i.i.d. with mean
# $\alpha$ (each draft token accepted independently with probability $\alpha$):
#
# * Eq. 1, tokens per target call: $\dfrac{1 - \alpha^{\gamma+1}}{1 - \alpha}$
# * Thm 3.8, walltime improvement: $\dfrac{1 - \alpha^{\gamma+1}}{(1 - \alpha)(\gamma c + 1)}$
# * Thm 3.11, arithmetic operations factor: $\dfrac{(1 - \alpha)(\gamma \hat c + \gamma + 1)}{1 - \alpha^{\gamma+1}}$
# * Cor. 3.9: if $\alpha > c$, then $\gamma = 1$ already gives $\dfrac{1 + \alpha}{1 + c} > 1$.
#
# Thm 3.8 assumes that scoring $\gamma + 1$ tokens in one target call costs the same as one decode step (true on an
# accelerator with spare parallelism). On a CPU it does not. As in notebook 00, the **scoring cost**
# $\mathrm{score\_cost}(\gamma)$ is what one target call that scores $\gamma + 1$ tokens costs, in decode steps
# (`score_cost` in `specref.speedup`), and `speedup.walltime_improvement_measured` gives
# $\dfrac{1 - \alpha^{\gamma+1}}{(1 - \alpha)(\gamma c + \mathrm{score\_cost}(\gamma))}$. The panel draws it as a
# straight line, $\mathrm{score\_cost}(\gamma) = 1 + \mathrm{score\_slope} \cdot \gamma$: its slider `score_slope` is
# the extra decode steps each additional scored token adds. Notebooks 00 and 05 measure the scoring cost for
# SmolLM2 on this machine.

# %%
import numpy as np
import matplotlib.pyplot as plt
from IPython.display import display

from specref.lessons import widgets
from specref import speedup
from specref.lessons import plots
from specref.lessons.quick import quick_mode

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")

# %% [markdown]
# ## The panel
#
# Move the sliders (drag them, or click one and use the arrow keys). The left plot is the walltime improvement
# against $\gamma$ (stars: the optimal $\gamma$; the vertical line: the slider's $\gamma$); $\alpha$, $\gamma$, $c$
# and `score_slope` move it. $\hat c$ counts arithmetic, not time, so it moves only the right plot, Thm 3.11's
# operations factor, and the line "arithmetic operations factor" in the text below them. Both y axes stay fixed
# while the curves fit in them, so what a slider changes is the curve moving, not the axis.
# The callbacks are `specref.lessons.widgets.speedup_panel`, `plot_speedup` and `plot_operations` (tests call them
# directly). The sliders need a live kernel; the next cell prints the same numbers for fixed settings.

# %%
panel = widgets.interactive_speedup(alpha=0.7, gamma=4, c=0.05, c_hat=0.05, score_slope=0.25)
display(panel)

# %% [markdown]
# **What the sliders do**, drawn once for readers without a live kernel: each panel moves one slider from the
# setting above ($\alpha = 0.7$, $c = 0.05$, `score_slope` 0.25) and draws the walltime improvement against $\gamma$
# (Thm 3.8 with the scoring cost; stars: the best $\gamma$ of each curve).

# %%
gammas = np.arange(1, 17)
moves = [("alpha", (0.5, 0.7, 0.9)), ("c", (0.0, 0.05, 0.2)), ("score_slope", (0.0, 0.25, 0.6))]
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True, layout="constrained")
for ax, (name, values) in zip(axes, moves):
    for v in values:
        setting = {"alpha": 0.7, "c": 0.05, "score_slope": 0.25} | {name: v}
        cost = widgets.score_cost(gammas, setting["score_slope"])
        y = speedup.walltime_improvement_measured(setting["alpha"], gammas, setting["c"], cost)
        line, = ax.plot(gammas, y, "o-", ms=3, label=f"{name} = {v}")
        ax.plot(gammas[np.argmax(y)], y.max(), "*", ms=12, color=line.get_color())
    ax.axhline(1, color="gray", ls="--", lw=1)
    ax.set_title(f"moving {name}", fontsize=10)
    ax.set_xlabel("gamma (draft tokens per call)")
    ax.legend(fontsize=8)
axes[0].set_ylabel("walltime improvement over ArS (x)")
plt.show()

# %% [markdown]
# The same numbers without sliders, for a few settings:

# %%
for setting in [(0.6, 2, 0.0, 0.0, 0.0), (0.8, 5, 0.02, 0.02, 0.0), (0.8, 5, 0.02, 0.02, 0.3), (0.34, 3, 0.0, 0.0, 0.3)]:
    print(widgets.format_panel(widgets.speedup_panel(*setting)), end="\n\n")

# %% [markdown]
# ## Leviathan's Table 1, recomputed
#
# Table 1 lists the improvement in speed and in arithmetic operations for a few $(\alpha, \gamma)$ with
# $c = \hat c = 0$. The printed values are copied from the paper only to compare against.

# %%
table1 = [  # alpha, gamma, printed operations factor, printed speed
    (0.6, 2, 1.53, 1.96), (0.7, 3, 1.58, 2.53), (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69), (0.9, 2, 1.11, 2.71), (0.9, 10, 1.60, 6.86),
]
print(f"{'alpha':>5} {'gamma':>5} {'operations':>10} {'(paper)':>8} {'speed':>7} {'(paper)':>8}")
for a, g, ops_paper, speed_paper in table1:
    ops = speedup.operations_factor(a, g, 0.0)
    w = speedup.walltime_improvement(a, g, 0.0)
    print(f"{a:5.1f} {g:5d} {ops:9.2f}x {ops_paper:7.2f}x {w:6.2f}x {speed_paper:7.2f}x")
    assert abs(ops - ops_paper) < 0.006 and abs(w - speed_paper) < 0.006

# %% [markdown]
# ## The walltime surface and the optimal $\gamma$
#
# Thm 3.8 over $\alpha \times \gamma$ ($\gamma$ up to 16, as on the sliders) for three costs $c$. The white lines are
# contours, labelled on the line: the solid one is 1x (no gain), and below-left of it the draft only costs time; the
# dotted ones are 2x, 3x and 4x. The red line is the optimal $\gamma$ for each $\alpha$ (section 3.5), drawn where it
# lies inside the grid. With $c = 0$ the draft is free: no setting falls below 1x, so that panel has no 1x line, and
# every larger $\gamma$ gains a little more, so there is no optimal $\gamma$ to draw.

# %%
cs = (0.0, 0.05, 0.2)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True, layout="constrained")
for ax, c in zip(axes, cs):
    im = plots.plot_speedup_surface(ax, c)
fig.colorbar(im, ax=axes, label="walltime improvement over ArS (x)")
plt.show()

# %% [markdown]
# Leviathan's Figure 3 shows the optimal $\gamma$ against $\alpha$ for several $c$; next to it, the improvement it
# buys, with the ceiling $1 / (1 - \alpha)$ of a free draft and unbounded $\gamma$.

# %%
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
plots.plot_optimal_gamma(a)
plots.plot_optimal_improvement(b)
plt.show()

# %% [markdown]
# ## Corollary 3.9, checked on a grid
#
# Whenever $\alpha > c$, $\gamma = 1$ gives $(1 + \alpha)/(1 + c) > 1$, and the optimal $\gamma$ does at least as well.

# %%
worst = np.inf
alphas = np.arange(1, 100) / 100
costs = np.arange(0, 50) / 50
for a in alphas:
    for c in costs[costs < a - 1e-9]:  # Cor. 3.9 needs alpha > c
        bound = speedup.improvement_lower_bound(a, c)
        assert abs(speedup.walltime_improvement(a, 1, c) - bound) < 1e-12  # gamma = 1 meets it exactly
        best = speedup.walltime_improvement(a, speedup.optimal_gamma(a, c), c)
        assert bound > 1 and best >= bound - 1e-12
        worst = min(worst, best - bound)
print(f"checked: gamma = 1 meets the bound exactly and the optimal gamma never falls below it (margin {max(worst, 0.0):.3g} at worst)")

# %% [markdown]
# ## Eq. 1 against simulation
#
# Eq. 1 counts tokens per target call when every draft token is accepted independently with probability
# $\alpha$. `plots.constant_pair(alpha)` builds a draft and a target whose rows never change and overlap by exactly
# $\alpha$ (so the assumption holds), and real SpS loops (`specref.sampling.speculative_sampling`) are counted.
# With a real language model the acceptances are **not** i.i.d.: $\beta$ varies from prefix to prefix (easy
# stretches and hard ones), which is one reason measured speedups drift from Thm 3.8, in either direction
# (Leviathan A.3); notebooks 05 and 06 compare on SmolLM2.

# %%
loops = 300 if QUICK else 4000
gammas = (1, 3, 7)
sim = plots.simulate_expected_tokens(np.linspace(0.1, 0.9, 5), gammas, loops, seed=0)
for (a, g), (m, se) in sorted(sim.items()):
    eq1 = speedup.expected_tokens(a, g)
    print(f"alpha {a:.1f} gamma {g}: simulated {m:.3f} +- {se:.3f}, Eq. 1 {eq1:.3f}, z = {(m - eq1) / se:+.2f}")
fig, ax = plt.subplots(figsize=(6, 4))
plots.plot_expected_tokens(ax, gammas, sim)
plt.show()

# %% [markdown]
# ## Exercise: write Eq. 1 yourself
#
# Write `expected_tokens(alpha, gamma)`: the expected number of tokens one target call produces when each of the
# $\gamma$ drafts is accepted independently with probability $\alpha$ (the accepted prefix, plus the one token
# every call adds). Hint: the call yields at least $i + 1$ tokens iff the first $i$ drafts are all accepted. Mind
# $\alpha = 1$. One line grades it against `specref.speedup` and the simulation above; the attempt below is a
# common wrong one, so its verdict shows what a failure looks like. A solution is in `solutions/expected_tokens.py`.

# %%
from specref.lessons import exercises


def expected_tokens(alpha, gamma):  # your code here; this attempt forgets the token every call adds
    return sum(alpha ** i for i in range(1, gamma + 1))


exercises.check_expected_tokens(expected_tokens)

# %%
from solutions.expected_tokens import expected_tokens as solution

exercises.check_expected_tokens(solution)

