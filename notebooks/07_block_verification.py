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
# # 07 · Block verification: more tokens per call, the same law
#
# **Run time** (Run All, measured on a 2-core machine while other work shared it): about 1 minute; about 15 s
# with `SPECREF_QUICK=1`.
#
# Token-level verification (`mrs.verify`, Chen's Algorithm 2) looks at the drafts one at a time and stops at the
# first rejection. Block verification (Sun, Mendlovic, Leviathan et al., "Block Verification Accelerates
# Speculative Decoding", ICLR 2025, their Algorithm 2; `mrs.verify_block`) takes exactly the same inputs (the $K$
# drafts, the $K$ draft rows they were drawn from, the $K + 1$ target rows of one target call) and decides on the
# whole block at once. Its output has exactly the target's law too, and it keeps at least as many drafts on
# average, for every draft and target. No extra model call: only the decision differs.
#
# This notebook: the rule; the paper's toy example worked by hand in exact fractions; an exercise; the whole
# verifier in NumPy; the chi-square against its exact law with five misreadings of the algorithm rejected; and
# the lossy rules used in practice to keep even more drafts, with what they cost in correctness. The statement
# of the algorithm in the project's letters is docs/block_verification.md. Letters are Chen's: `p` = draft,
# `q` = target, positions numbered from 1 as in the paper ($p_i$ is `p[i-1]`, $x_i$ is `x_draft[i-1]`,
# $q_{K+1}$ is `q[K]`).

# %%
from fractions import Fraction as F
from itertools import product

import matplotlib.pyplot as plt
import numpy as np

from specref import mrs, sampling
from specref.lessons import exercises
from specref.lessons.quick import quick_mode
from specref.proof import laws, power, stats
from specref.proof.bugs import broken, lossy
from specref.runstats import RunStats

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")

# %% [markdown]
# ## 1. The rule
#
# 1. **Carry the ratio along the block.** $w_0 = 1$ and, for $i = 1..K$,
#    $w_i = \min\left(1,\; w_{i-1}\, \dfrac{q_i(x_i)}{p_i(x_i)}\right)$.
#    Token-level verification keeps $x_1..x_i$ with probability $\prod_{l \le i} \min(1, q_l(x_l)/p_l(x_l))$;
#    here a draft the target likes *more* than the draft did ($q/p > 1$) can pay for an earlier one it liked less.
# 2. **Residuals and stopping weights.** $r_i(x) = \max(0,\, w_i\, q_{i+1}(x) - p_{i+1}(x))$ with mass
#    $s_i = \sum_x r_i(x)$; $h_0 = 1$, $h_K = w_K$, and $h_i = s_i / (s_i + 1 - w_i)$ for $0 < i < K$ (1 when
#    that is $0/0$).
# 3. **Choose how many drafts to keep.** Scan $i = K, K-1, \dots, 1$ with a fresh uniform $\eta_i$ each; $\tau$ is
#    the first $i$ with $\eta_i < h_i$ (so the largest such $i$), or 0 if none. The paper writes $\le$; the strict
#    $<$ has the same law and never stops where $h_i = 0$.
# 4. **Output** $x_1..x_\tau$, then one more token: from $q_{K+1}$ if $\tau = K$ (the bonus token), else from
#    the normalised residual $r_\tau$ (for $\tau = 0$ that is the familiar $(q_1 - p_1)_+$).
#
# ## 2. The paper's toy example, by hand
#
# Two tokens $\{a, b\}$; the draft always gives $p = (2/3, 1/3)$, the target always $q = (1/3, 2/3)$; $K = 2$.
# The ratio $q/p$ is $1/2$ for $a$ and 2 for $b$. For each of the four draft blocks, its chance under the draft,
# and the drafts each verifier keeps on average over its own coins, in exact fractions:

# %%
p_ab = [F(2, 3), F(1, 3)]  # the draft's row, at every position
q_ab = [F(1, 3), F(2, 3)]  # the target's row, at every position
ratio = [q_ab[x] / p_ab[x] for x in range(2)]  # q/p: 1/2 for a, 2 for b

print(f"{'drafts':7} {'chance':>6} | {'token-level kept':>16} | {'w_1':>4} {'w_2':>4} {'s_1':>4} {'h_1':>4} {'h_2':>4} "
      f"{'P(tau = 0, 1, 2)':>17} {'block kept':>10}")
kept_token, kept_block = F(0), F(0)
for x1, x2 in product(range(2), repeat=2):
    chance = p_ab[x1] * p_ab[x2]
    # token-level: keep x_1 with min(1, q/p), then x_2 with min(1, q/p), stop at the first rejection
    a1, a2 = min(1, ratio[x1]), min(1, ratio[x2])
    token = a1 * 1 + a1 * a2  # E[kept] = P(x_1 kept) + P(x_1 and x_2 kept)
    # block, step 1: the carried weights
    w1 = min(1, ratio[x1])
    w2 = min(1, w1 * ratio[x2])
    # step 2: the residual after x_1 and its mass; h_1, and h_2 = w_2
    s1 = sum(max(0, w1 * q_ab[y] - p_ab[y]) for y in range(2))
    h1 = s1 / (s1 + 1 - w1) if s1 + 1 - w1 > 0 else F(1)
    h2 = w2
    # step 3: scan from i = 2 down: stop at 2 with h_2, else at 1 with h_1, else tau = 0
    tau = [(1 - h2) * (1 - h1), (1 - h2) * h1, h2]
    block = 1 * tau[1] + 2 * tau[2]
    kept_token += chance * token
    kept_block += chance * block
    print(f"{'ab'[x1] + 'ab'[x2]:7} {str(chance):>6} | {str(token):>16} | {str(w1):>4} {str(w2):>4} {str(s1):>4} "
          f"{str(h1):>4} {str(h2):>4} {', '.join(map(str, tau)):>17} {str(block):>10}")
print(f"\ndrafts kept per call: token-level {kept_token}, block {kept_block}; "
      f"tokens per call (one more each): {kept_token + 1} and {kept_block + 1}")

# %% [markdown]
# Where the extra $1/9$ comes from: both verifiers may keep a drafted $a$ as the first token with total probability
# at most $q(a) = 1/3$ (more would break the law). Token-level verification spends that budget evenly, half of every
# block that starts with $a$: $\tfrac49 \cdot \tfrac12$ on "aa" and $\tfrac29 \cdot \tfrac12$ on "ab". Block
# verification spends it where it buys more: all $\tfrac29$ on "ab", because there $b$ ($q/p = 2$) lifts
# $w_2 = \min(1, \tfrac12 \cdot 2)$ to 1 and the second draft is kept too, and only $\tfrac19$ on "aa" (it keeps
# $1/2$ of a draft there instead of $3/4$: better on average, not block by block). The weighted residual
# $\max(0, w_\tau q_{\tau+1} - p_{\tau+1})$ supplies exactly what is then missing, so the law stays the target's.
#
# The library's exact laws say the same. `laws.block_weights` gives the same $w$ and $h$; `laws.chain_call_law` sums
# a verifier's law over every draft block (`laws.token_call_law` for `verify`, `laws.block_call_law` for
# `verify_block`), and `laws.continued_law` continues each output with target draws to $K + 1$ tokens, which
# must give the target's joint law exactly. `laws.verify_law` is the same sum in floats.

# %%
p_rows, q_rows = [p_ab] * 2, [q_ab] * 3
for xs in product(range(2), repeat=2):
    w, h, _ = laws.block_weights(list(xs), p_rows, q_rows)
    print(f"{'ab'[xs[0]] + 'ab'[xs[1]]}: laws.block_weights w = {', '.join(map(str, w))}; "
          f"h = {', '.join(map(str, h))}")
target_law = laws.target_joint_law(laws.fixed_rows(q_rows), 2, 3)
for name, law_given_drafts in (("token-level", laws.token_call_law), ("block", laws.block_call_law)):
    call = laws.chain_call_law(law_given_drafts, laws.fixed_rows(p_rows), laws.fixed_rows(q_rows), 2, 2)
    exact = laws.continued_law(call, laws.fixed_rows(q_rows), 3) == target_law
    print(f"{name:12s} tokens per call {laws.mean_output_length(call)} (drafts kept {laws.mean_output_length(call) - 1}); "
          f"continued, exactly the target's law: {exact}")
as_floats = (np.array([[2 / 3, 1 / 3]] * 2), np.array([[1 / 3, 2 / 3]] * 3))
print(f"laws.verify_law, in floats: {laws.mean_output_length(laws.verify_law(*as_floats)):.6f} tokens per call "
      f"(19/9 = {19 / 9:.6f}); laws.rows_call_law(laws.block_call_law, ...): "
      f"{laws.mean_output_length(laws.rows_call_law(laws.block_call_law, *as_floats)):.6f} (20/9 = {20 / 9:.6f})")

# %% [markdown]
# ## 3. Exercise: the weights
#
# Write `block_weights(x_draft, p, q)`: given the $K$ drafts `x_draft` [K], the draft rows `p` [K, V] and the
# target rows `q` [K+1, V] (NumPy arrays), return the weights $w_0..w_K$ of step 1 as an array [K+1]. One line
# grades it, exactly, on the 11 portable vectors of block verification and five edge cases, and names the mistake
# a failure matches. The attempt below is the most common one: it computes each $\min(1, q_i/p_i)$ on its own, as
# token-level verification does, and forgets to carry $w_{i-1}$. Fix it and run the cell again.

# %%
def block_weights(x_draft, p, q):  # [K], [K, V], [K+1, V] -> w [K+1]; your code here
    K = len(x_draft)
    w = np.ones(K + 1)
    for i in range(1, K + 1):
        x = x_draft[i - 1]
        w[i] = min(1.0, q[i - 1, x] / p[i - 1, x])  # this attempt forgets w[i - 1]
    return w


exercises.check_block_weights(block_weights)

# %% [markdown]
# A solution is in `notebooks/solutions/block_weights.py`; the grader passes it:

# %%
from solutions.block_weights import block_weights as solution

exercises.check_block_weights(solution)

# %% [markdown]
# ## 4. The whole verifier, in NumPy
#
# Steps 1 to 4 as code, drawing its uniforms in the order `specref/mrs.py` documents (the coins from the last
# position down, one more for the last token), so it returns the same tokens as `mrs.verify_block` for the same
# generator. A test keeps this cell and the library equal (`tests/apps/test_notebook_code.py`: the weights against
# `mrs._block_w`, the stopping weights against `mrs._block_h`, the tokens against `mrs.verify_block` and the portable
# vectors). The library computes $h_i$ only for the coins it draws, which changes the cost, not the result.

# %%
def sample(w, rng):  # [V] nonnegative weights -> one token id, by the inverse CDF of one uniform
    return int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right"))


def block_w(x_draft, p, q):  # [K], [K, V], [K+1, V] -> w [K+1]
    w = np.ones(len(x_draft) + 1)  # w_0 = 1
    for i in range(1, len(x_draft) + 1):
        x = x_draft[i - 1]
        w[i] = min(1.0, w[i - 1] * q[i - 1, x] / p[i - 1, x])  # step 1: carry the ratio, capped at 1
    return w


def block_residual(w_i, p_next, q_next):  # scalar, [V], [V] -> r_i [V], unnormalised
    return np.maximum(q_next * w_i - p_next, 0.0)  # step 2: max(0, w_i q_{i+1} - p_{i+1})


def block_h(w, p, q):  # w [K+1], [K, V], [K+1, V] -> h [K+1]
    K = len(w) - 1
    h = np.ones(K + 1)  # h_0 = 1
    for i in range(1, K):
        s = block_residual(w[i], p[i], q[i]).sum()  # s_i, the mass of r_i
        h[i] = s / (s + (1.0 - w[i])) if s + (1.0 - w[i]) > 0 else 1.0  # step 2; 0/0 is 1
    h[K] = w[K]  # h_K = w_K
    return h


def verify_block(x_draft, p, q, rng):  # [K], [K, V], [K+1, V] -> [n] tokens, 1 <= n <= K + 1
    K = len(x_draft)
    w = block_w(x_draft, p, q)
    h = block_h(w, p, q)
    tau = next((i for i in range(K, 0, -1) if rng.random() < h[i]), 0)  # step 3: scan down; strict <
    if tau == K:
        return np.append(x_draft, sample(q[K], rng))  # step 4: all K kept, the bonus token from q_{K+1}
    r = block_residual(w[tau], p[tau], q[tau])  # step 4: r_tau (for tau = 0, (q_1 - p_1)_+)
    return np.append(x_draft[:tau], sample(r if r.sum() > 0 else q[tau], rng))  # all zero only by rounding: q


p3 = np.random.default_rng(2025).dirichlet(np.ones(3), 3)  # [K, V]: K = 3 draft rows over V = 3 tokens
q3 = np.random.default_rng(2026).dirichlet(np.ones(3), 4)  # [K+1, V]
x3 = np.array([0, 2, 1])
print("w =", block_w(x3, p3, q3).round(4), " h =", block_h(block_w(x3, p3, q3), p3, q3).round(4))
same = all(verify_block(x3, p3, q3, np.random.default_rng(s)).tolist()
           == mrs.verify_block(x3, p3, q3, np.random.default_rng(s)).tolist() for s in range(200))
print("the same tokens as mrs.verify_block for 200 seeds:", same)

# %% [markdown]
# ## 5. The chi-square against the exact law, and five misreadings rejected
#
# One call of `verify_block` on the case above, drafts drawn from `p3`, against its exact law
# (`laws.chain_call_law(laws.block_call_law, ...)`, summed over every draft block), next to five plausible misreadings
# of the algorithm (`broken.BROKEN_BLOCK`). Each misreading breaks exactness: the column "exact TV" is the total
# variation of its output, continued to $K + 1$ tokens, from the target's joint law, computed by enumeration (the
# exact tier: any nonzero number is a proof). The last column is the number of calls a chi-square needs to see it
# with 95% power (`specref.proof.power`; notebook 03 explains it). Notebook 03 teaches the test itself.

# %%
K3, V3 = 3, 3
block_law = laws.chain_call_law(laws.block_call_law, laws.fixed_rows(p3), laws.fixed_rows(q3), K3, V3)
joint = laws.target_joint_law(laws.fixed_rows(q3), V3, K3 + 1)
n = 2_000 if QUICK else 20_000
print(f"{n} calls each; K = {K3}, V = {V3}; {len(block_law)} possible outputs")
print(f"{'verifier':24s} {'chi-square':>10} {'dof':>4} {'p-value':>9} {'verdict':>7} {'exact TV':>9} "
      f"{'calls for 95%':>14}")
for name, f in {"verify_block": mrs.verify_block, **broken.BROKEN_BLOCK}.items():
    law_f = block_law if f is mrs.verify_block else laws.chain_call_law(f.law, laws.fixed_rows(p3), laws.fixed_rows(q3),
                                                                   K3, V3)
    tv = stats.total_variation(laws.continued_law(law_f, laws.fixed_rows(q3), K3 + 1), joint)
    calls = power.smallest_n(lambda m: power.check_power(law_f, block_law, m, stats.LEVEL)) if tv > 1e-12 else np.inf
    counts = stats.sample_verify(f, p3, q3, n, np.random.default_rng(25))
    X2, dof, pval = stats.chi_square_gof(counts, block_law)
    print(f"{name:24s} {X2:10.1f} {dof:4d} {pval:9.3g} {'REJECT' if pval < stats.LEVEL else 'pass':>7} {tv:9.1e} "
          f"{'-' if calls == np.inf else f'{calls:.0f}':>14}")
for name, b in broken.BROKEN_BLOCK.items():
    print(f"  {name}: {b.about}")

# %% [markdown]
# ### Whole sequences
#
# The same test on whole runs of speculative sampling, the Markov chains of notebook 03 (a sharp target over
# $V = 3$ tokens, a draft that is 70% target, $K = 3$, $N = 4$ new tokens: 81 possible sequences, each with its
# exact probability, `laws.sequence_law`). The exact verifiers pass. Two lossy rules (section 6) are rejected:
# Medusa's typical acceptance (`lossy.verify_typical`) and Leviathan's lenient acceptance at $l = 0.5$
# (`mrs.verify_lenient`). (With $N = 4$ tokens per run the last call is cut short, so the tokens per call here
# are only a rough view of the gain; the exact numbers are in sections 2 and 6.)

# %%
V, N, K = 3, 4, 3
target = laws.MarkovChain.random(V, order=1, rng=np.random.default_rng(21), concentration=0.3)
other = laws.MarkovChain.random(V, order=1, rng=np.random.default_rng(22), concentration=0.3)
draft = laws.MarkovChain(0.7 * target.table + 0.3 * other.table)
prompt = np.array([1])
seq_law = laws.sequence_law(target, prompt, N)
runs = 2_000 if QUICK else 20_000
print(f"{runs} runs each")
for name, f in (("verify (token-level)", mrs.verify), ("verify_block", mrs.verify_block),
                ("LOSSY verify_typical", lossy.verify_typical), ("LOSSY lenient, l = 0.5", lossy.lenient(0.5))):
    run_stats = RunStats()

    def sampler(r, f=f, run_stats=run_stats):
        return sampling.speculative_sampling(prompt, draft, target, N, K, r, verify=f, on_step=run_stats.add)
    counts = stats.sample_sequences(sampler, runs, len(prompt), np.random.default_rng(24))
    X2, dof, pval = stats.chi_square_gof(counts, seq_law)
    print(f"{name:22s} tokens per call {run_stats.tokens_per_target_call:.3f}  chi-square {X2:9.1f} on {dof:2d} dof, "
          f"p-value {pval:9.3g}  {'REJECT' if pval < stats.LEVEL else 'pass'}")

# %% [markdown]
# ## 6. Lossy acceptance: more tokens, another law
#
# Block verification gets its extra tokens for free. Two rules used in practice get more by giving up the law,
# and both are **lossy**: their output is not the target's.
#
# - **Lenient acceptance** (Leviathan et al., appendix A.5; `mrs.verify_lenient`): accept a draft with
#   $\min(1, q(x) / (l\, p(x)))$ for a lenience $0 < l \le 1$, otherwise exactly `verify`. $l = 1$ is exact; smaller
#   $l$ keeps more drafts, and what survives of the guarantee is only that no token comes out with probability
#   above $q(x)/l$ at any position.
# - **Typical acceptance** (Medusa; `specref.proof.bugs.lossy.verify_typical`, kept out of `mrs.py`): keep a draft when
#   the target gives it more than $\min(\epsilon, \delta\, e^{-H(q)})$, never looking at $p$; after the first draft
#   not kept, draw from $q$. Medusa's defaults are $\epsilon = 0.09$, $\delta = 0.3$; below, both scaled by a
#   factor $c$.
#
# On a small case ($K = 3$ drafts over $V = 4$ tokens, fixed rows, a draft half target), every point below is
# exact, computed from the laws and not simulated: the expected tokens per call (`laws.mean_output_length`) against
# the total variation between the output, continued with target draws to $K + 1$ tokens, and the target's joint
# law (`stats.total_variation`).

# %%
rng = np.random.default_rng(7)
q4 = rng.dirichlet(np.full(4, 0.5), size=4)  # [K+1, V]: the target's rows
p4 = 0.5 * q4[:3] + 0.5 * rng.dirichlet(np.full(4, 0.5), size=3)  # [K, V]: the draft's, half the target
joint4 = laws.target_joint_law(laws.fixed_rows(q4), 4, 4)


def tokens_and_tv(law_given_drafts):  # a verifier's exact law for fixed drafts -> (E tokens per call, TV from q)
    call = laws.rows_call_law(law_given_drafts, p4, q4)
    continued = laws.continued_law(call, laws.fixed_rows(q4), 4)  # the output, continued to K + 1 tokens
    return laws.mean_output_length(call), stats.total_variation(continued, joint4)


exact = {"verify": tokens_and_tv(laws.token_call_law), "verify_block": tokens_and_tv(laws.block_call_law)}
leniences = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
lenient = [tokens_and_tv(lambda x, p, q, l=l: laws.lenient_call_law(x, p, q, l)) for l in leniences]
scales = [8, 4, 2, 1, 0.5, 0.25, 0.1]
typical = [tokens_and_tv(lambda x, p, q, c=c: lossy.typical_call_law(x, p, q, lossy.EPSILON * c, lossy.DELTA * c))
           for c in scales]

for name, (tokens, tv) in exact.items():
    print(f"{name:26s} tokens per call {tokens:.4f}   TV from the target {tv:.1e}  (exact)")
for l, (tokens, tv) in zip(leniences, lenient):
    print(f"{'LOSSY lenient, l = ' + f'{l:g}':26s} tokens per call {tokens:.4f}   TV from the target {tv:.4f}")
for c, (tokens, tv) in zip(scales, typical):
    print(f"{'LOSSY typical, c = ' + f'{c:g}':26s} tokens per call {tokens:.4f}   TV from the target {tv:.4f}")

fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
ax.plot([tv for _, tv in lenient], [t for t, _ in lenient], "o-", color="C1", label="LOSSY lenient acceptance")
for l, (t, tv) in zip(leniences, lenient):
    ax.annotate(f"l={l:g}", (tv, t), textcoords="offset points", xytext=(4, -10), fontsize=7, color="C1")
ax.plot([tv for _, tv in typical], [t for t, _ in typical], "s--", color="C3", label="LOSSY typical acceptance")
for c, (t, tv) in zip(scales, typical):
    ax.annotate(f"c={c:g}", (tv, t), textcoords="offset points", xytext=(-8, 6), fontsize=7, color="C3")
for (name, (t, tv)), marker in zip(exact.items(), ("D", "*")):
    ax.plot([tv], [t], marker, ms=11, color="C0" if name == "verify" else "C2", label=f"{name} (exact)", zorder=3)
ax.set_xlabel("total variation of the output from the target's law (K + 1 tokens)")
ax.set_ylabel("expected tokens per target call")
ax.set_title("What lossy acceptance buys, and costs (K = 3, V = 4; exact laws)")
ax.legend(fontsize=8, loc="lower right")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The trade is plain to see. Block verification sits on the vertical axis, above `verify`: its extra tokens cost
# nothing. Lenience buys more, and every step costs correctness; here block verification's gain is what a lenience
# between 0.8 and 0.7 buys, at no cost. Typical acceptance is not even a trade on this case: near Medusa's defaults
# it keeps *fewer* tokens than exact `verify` and still moves the law. It never looks at $p$: it keeps drafts by
# the target's row alone, and after a draft it does not keep it draws from $q$ rather than from the residual. Only
# a loose threshold (small $c$) keeps more, far from the target's law; a very strict one keeps nothing and draws
# every token from $q$: exact again, one token a call. The chi-square of section 5 rejects both lossy rules.
# `mrs.verify_lenient` is in the library for whoever takes the trade knowingly (its docstring says LOSSY); typical
# acceptance is kept out of `mrs.py`, in `specref/proof/bugs/lossy.py`, only to show that the tests catch it.
