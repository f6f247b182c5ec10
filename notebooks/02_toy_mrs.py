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
# # 02 · The toy example: four tokens through modified rejection sampling
#
# **Run time** (Run All, measured on a 2-core machine): about 20 s; about 5 s with `SPECREF_QUICK=1`.
#
# The Qualcomm post on speculative decoding, ["Quadruple LLM Decoding Performance with Speculative Decoding (SpD)
# and Microscaling (MX) Formats"](https://quic.github.io/cloud-ai-sdk-pages/latest/blogs/Speculative_Decode/spec_decode_ai100/index.html)
# (N. Vaidhyanathan and A. Gokhale), walks MRS through a 4-token vocabulary (its Figure 10):
# draft $P_D = [0.4, 0.3, 0.2, 0.1]$, target $P_T = [0.30, 0.45, 0.10, 0.15]$.
# In Chen et al.'s letters (used by `specref`): $p = P_D$ is the draft, $q = P_T$ the target.
#
# First the step itself, written out in NumPy; then the same numbers from `specref.mrs`, the file people copy.

# %%
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np

from specref import mrs, warps
from specref.lessons import plots
from specref.proof import stats
from specref.lessons.quick import quick_mode

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")
names = ["t1", "t2", "t3", "t4"]
p = np.array([0.4, 0.3, 0.2, 0.1])     # P_D, the draft
q = np.array([0.30, 0.45, 0.10, 0.15])  # P_T, the target

# %% [markdown]
# ## Figure 10's table, recomputed
#
# The post's table has two columns both headed $\max(0, P_T - P_D)$ and a third headed $(P_T - P_D)$; from their
# values they are $\max(0, P_T - P_D)$, $\max(0, P_D - P_T)$ and the normalised residual $(P_T - P_D)_+$.

# %%
res = mrs.residual(p, q)
print(f"{'token':>5} {'P_D':>5} {'P_T':>5} {'max(0,P_T-P_D)':>15} {'max(0,P_D-P_T)':>15} {'(P_T-P_D)+':>11} {'accept prob':>12}")
for i, name in enumerate(names):
    print(f"{name:>5} {p[i]:5.2f} {q[i]:5.2f} {max(0, q[i] - p[i]):15.2f} {max(0, p[i] - q[i]):15.2f} "
          f"{res[i]:11.2f} {min(1, q[i] / p[i]):12.2f}")
beta = mrs.acceptance_rate(p, q)  # P(accept) for this pair of rows: Leviathan's beta (his alpha averages it)
print(f"\nbeta = sum min(P_D, P_T) = {beta:.2f}: a drafted token is kept 80% of the time")

# %% [markdown]
# ## The step, in NumPy
#
# Modified rejection sampling of one draft token is two short functions (Chen's Algorithm 2, lines 10-12): the
# residual, and the accept-or-resample step. `specref.mrs.residual` and `specref.mrs.accept_or_resample` compute the same (a test
# keeps them equal), with input checks around them.

# %%
def residual(p, q):  # [V], [V] -> [V]: (q - p)_+ = max(0, q - p), normalised
    excess = np.maximum(q - p, 0.0)
    total = excess.sum()
    return excess / total if total > 0 else q  # p == q: nothing to resample, and never needed (always accepted)


def accept_or_resample(x, p, q, rng):  # a draft token x ~ p -> (a token ~ q, whether x was kept)
    if rng.random() < q[x] / p[x]:  # line 11: keep x with probability min(1, q(x) / p(x)); strict <
        return x, True
    return mrs.sample(residual(p, q), rng), False  # line 12: else draw from the residual


print("residual:", residual(p, q), "  mrs.residual:", mrs.residual(p, q))
rng = np.random.default_rng(0)
print("ten draft tokens from p, each accepted or resampled:",
      [accept_or_resample(mrs.sample(p, rng), p, q, rng) for _ in range(10)])

# %% [markdown]
# ## Case 1: the draft proposes a token it **over**-proposes ($P_D(t) > P_T(t)$): `t1`
#
# `t1` must come out with probability 0.30 but the draft offers it with probability 0.40. MRS keeps it with
# probability $0.30 / 0.40 = 0.75$, so it is effectively emitted via this route with $0.4 \times 0.75 = 0.30$.
# On a rejection (probability 0.25) it draws from the residual: `t2` with 0.75, `t4` with 0.25.
# Run `mrs.accept_or_resample` many times on the draft token `t1`:

# %%
n = 20_000 if QUICK else 200_000
rng = np.random.default_rng(10)
out = Counter(mrs.accept_or_resample(0, p, q, rng) for _ in range(n))
kept = out[(0, True)] / n
print(f"t1 kept:               {kept:.4f}   (theory q/p = {q[0] / p[0]:.2f})")
rej = n - out[(0, True)]
for i in (1, 3):
    print(f"rejected, then {names[i]}:   {out[(i, False)] / rej:.4f} of rejections   (residual {res[i]:.2f})")
print("anything else:", {k: v for k, v in out.items() if k not in {(0, True), (1, False), (3, False)}})

# %% [markdown]
# ## Case 2: the draft proposes a token it **under**-proposes ($P_D(t) \le P_T(t)$): `t2`
#
# `t2` is always kept ($q/p = 1.5 \ge 1$), but that only gives it $0.30$; it needs $0.45$. The missing $0.15$ comes
# from rejections of `t1` and `t3`: the total rejected mass is $\sum \max(0, P_D - P_T) = 0.1 + 0.1 = 0.2$, and
# the residual sends $0.75$ of it to `t2`: $0.2 \times 0.75 = 0.15$. Needed and available mass match because
# $\sum \max(0, P_T - P_D) = \sum \max(0, P_D - P_T)$.

# %%
out2 = Counter(mrs.accept_or_resample(1, p, q, rng) for _ in range(n))
print("draft t2 ->", {f"{names[k[0]]}, accepted={k[1]}": v / n for k, v in out2.items()})
via_draft = np.minimum(p, q)                 # drafted and kept
via_residual = (1 - beta) * res              # rejected somewhere, then drawn from the residual
for i, name in enumerate(names):
    print(f"P({name}) = {via_draft[i]:.2f} (kept) + {via_residual[i]:.2f} (from rejections) = "
          f"{via_draft[i] + via_residual[i]:.2f}   P_T = {q[i]:.2f}")

# %% [markdown]
# ## Many draws: the empirical frequencies against $P_T$

# %%
drafts = rng.choice(4, size=n, p=p)
results = [mrs.accept_or_resample(int(x), p, q, rng) for x in drafts]
counts = Counter(x for x, _ in results)
freq = np.array([counts[i] / n for i in range(4)])
acc = np.mean([a for _, a in results])
stat, dof, pval = stats.chi_square_gof(counts, dict(enumerate(q)))
print("frequencies:", freq.round(4), "  P_T:", q, "  P_D:", p)
print(f"acceptance {acc:.4f} (beta {beta:.2f}); chi-square {stat:.2f} on {dof} dof, p-value {pval:.3f}")

x = np.arange(4)
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
a.bar(x - 0.25, p, 0.25, label="P_D (draft p)")
a.bar(x, q, 0.25, label="P_T (target q)")
se = np.sqrt(freq * (1 - freq) / n)
a.bar(x + 0.25, freq, 0.25, yerr=3 * se, label=f"MRS output, {n} draws (+-3 s.e.)")
a.set_xticks(x, names)
a.set_xlabel("token")
a.set_ylabel("probability / frequency")
a.set_title("Qualcomm Figure 10 example through mrs.accept_or_resample")
a.set_ylim(0, 1.6 * max(p.max(), q.max(), (freq + 3 * se).max()))  # headroom: the legend sits above the bars
a.legend(fontsize=8, loc="upper right")
plots.plot_overlap(b, p, q, names)
b.set_title("where each token's mass comes from", fontsize=10)
plt.show()

# %% [markdown]
# ## The greedy special case (one-hot distributions)
#
# With temperature 0 both models are one-hot at their argmax (`specref.warps.greedy`). Then
# $\min(1, q/p)$ is 1 if the draft's token is the target's argmax and 0 otherwise, and the residual of one-hot $q$
# minus one-hot $p$ is one-hot at the target's argmax: MRS reduces to "keep the draft iff it matches the target's
# greedy token, else take the target's". `mrs.verify_greedy` implements that rule directly; the two agree.

# %%
p_g, q_g = warps.greedy(p), warps.greedy(q)
print("greedy draft p:", p_g, "  greedy target q:", q_g)
draft_token = int(np.argmax(p_g))  # t1
outcomes = Counter(mrs.accept_or_resample(draft_token, p_g, q_g, rng) for _ in range(1000))
print(f"mrs on draft {names[draft_token]}: ", {f"{names[k[0]]}, accepted={k[1]}": v for k, v in outcomes.items()})
print("verify_greedy on draft t1:", [names[i] for i in mrs.verify_greedy(np.array([0]), np.stack([q_g, q_g]))])
print("verify_greedy on draft t2:", [names[i] for i in mrs.verify_greedy(np.array([1]), np.stack([q_g, q_g]))],
      "(accepted, then the bonus token)")

# %% [markdown]
# With $K$ drafts, `verify_greedy` keeps the longest prefix that matches the target's argmax at each position and
# appends one target token. The same happens through `mrs.verify` with one-hot rows (no randomness is used):

# %%
q_rows = warps.greedy(np.array([[0.1, 0.6, 0.2, 0.1],    # target argmax t2
                                [0.5, 0.2, 0.2, 0.1],    # target argmax t1
                                [0.1, 0.1, 0.1, 0.7]]))  # target argmax t4 (the bonus row)
for x_draft in ([1, 0], [1, 2], [3, 0]):
    x_draft = np.array(x_draft)
    p_rows = np.eye(4)[x_draft]  # one-hot draft rows at the drafted tokens
    a = mrs.verify(x_draft, p_rows, q_rows, np.random.default_rng(0))
    b = mrs.verify_greedy(x_draft, q_rows)
    print(f"draft {[names[i] for i in x_draft]} -> verify {[names[i] for i in a]}, verify_greedy {[names[i] for i in b]}")
    assert a.tolist() == b.tolist()

# %% [markdown]
# ## Exercise: the residual
#
# Write `my_residual(p, q)`: the distribution drawn from after a rejection. One line grades it with the suite's own
# proofs (exact law, chi-square, the edge cases p == q and disjoint supports) and names the mistake a failure
# matches. The attempt below draws from q itself, which gives again the mass that acceptances already gave (look at
# case 1: `t1` would come out too often). Fix it and run the cell again. A solution is in `solutions/residual.py`.

# %%
from specref.lessons import exercises


def my_residual(p, q):  # your code here; this attempt resamples from q
    return q / q.sum()


exercises.check_residual(my_residual)

# %%
from solutions.residual import residual as solution

exercises.check_residual(solution)

# %% [markdown]
# ## The mistakes people actually make
#
# Each row is a way speculative sampling has been got wrong in public code, run through the same chi-square against
# the target's exact law that the correct code passes. Every one fails, and the diagnosis printed is the checker's
# (`specref.lessons.exercises.show_mistakes`; the code of each is in `specref/lessons/exercises/gallery.py`).

# %%
exercises.show_mistakes()

