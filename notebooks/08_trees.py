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
# # 08 · Trees of drafts: several candidates per call, the same law
#
# **Run time** (Run All, measured on a 2-core machine while other work shared it): about 35 s; about 15 s with
# `SPECREF_QUICK=1`.
#
# Chen's Algorithm 2 drafts one chain of $K$ tokens and the target checks it in one call. Many systems draft a
# *tree* instead: several candidates at a node, each with its own continuation, all scored by one target
# call under a tree attention mask (SpecInfer, EAGLE-2's dynamic trees, Sequoia, SGLang, TensorRT-LLM). The walk
# down the tree keeps at most one child per node, so the output is still one path plus one more token, and it must
# still have exactly the target's law.
#
# This notebook: the tree and the three exact ways to verify it, written out in NumPy; why several candidates raise
# acceptance (the coupling view: $1 - \mathrm{TV}(p, q)$ is the ceiling for one candidate, and more candidates
# lift it); a toy example in exact fractions for each verifier; the chi-square against the exact law, with the tree
# bugs that shipped in real systems rejected; the attention mask that scores the tree in one call, and why the
# accepted path's keys can be kept without recomputing them; and the tokens per call of a chain of $K$ against
# trees of $K$ nodes. No model is loaded. Letters are Chen's: `p` = draft, `q` = target.

# %%
from fractions import Fraction as F
from itertools import permutations, product

import matplotlib.pyplot as plt
import numpy as np

from specref import mrs_tree
from specref.lessons.quick import quick_mode
from specref.proof import laws, power, stats, tree
from specref.proof.vectors import ListedUniforms

QUICK = quick_mode()
print("quick mode (SPECREF_QUICK=1): small samples; unset SPECREF_QUICK for the full sizes" if QUICK else "full sizes")

# %% [markdown]
# ## 1. A tree of drafts, and three ways to verify it
#
# A tree of $N$ drafted tokens is two arrays, nodes in topological order (a parent before its children):
# `tokens[i]`, the token of node $i$, and `parents[i]`, $-1$ for a child of the root (the last token of the prefix),
# else the index $j < i$ of its parent. One target call gives $N + 1$ rows `q`: row 0 at the root, row $i + 1$
# after node $i$'s root-to-node path. `p` has the same rows for the draft: node $i$'s children were drawn from
# `p[i + 1]`, the root's from `p[0]`. A chain of $K$ drafts is `parents = [-1, 0, 1, ..., K-2]`.
#
# The verifier walks down from the root. At each node it tests the children one by one; an accepted child's token
# is output and the walk goes on from it. When a node has no children (the **bonus** token) or all its children
# were rejected (the **recovered** token), one more token is drawn and the call ends. What is tested, and what is
# left to draw from after a rejection, depends on how the children were drawn, and each rule is exact only for
# its own way:
#
# | `specref.mrs_tree` | children | accept child $c_i$ with probability | after a rejection |
# |---|---|---|---|
# | `verify_tree_topk` | distinct, chosen without looking at the target (EAGLE-2's top-$k$ of the draft) | $q(c_i) / (1 - q(c_1) - \dots - q(c_{i-1}))$ | at the end, $q$ without the children's mass |
# | `verify_tree_mss` | i.i.d. from $p$ (SpecInfer's multi-step speculative sampling) | $\min(1, q(c)/p(c))$ | $q \leftarrow \mathrm{norm}(\max(0, q - p))$ |
# | `verify_tree_rrs` | from $p$ without replacement (recursive rejection sampling, Jeon et al. 2024; EAGLE-1, Sequoia) | $\min(1, q(c)/p(c))$ | as mss, and $p \leftarrow \mathrm{norm}(p \text{ without } c)$ |
#
# The top-$k$ rule needs no draft probabilities at all: in effect it draws $y \sim q$ and follows $y$ if $y$ is a
# child, which is why it is exact however the children were chosen. The other two are modified rejection sampling
# (notebook 02) repeated at one node: each rejected candidate leaves the residual for the next.
#
# ### Exercise: write the top-k verifier
#
# Before reading the code below, write the first row of the table as a function, `verify_tree(tokens, parents, p,
# q, rng)`: walk down from the root; at a node with children $c_1, c_2, \dots$ (in ascending node index), accept
# $c_i$ with probability $q(c_i) / (1 - q(c_1) - \dots - q(c_{i-1}))$ and go on from it; when every child is
# rejected, draw the last token from $q$ with the children's entries set to 0; at a node without children, draw
# the bonus token from $q$. Return the accepted path and that last token. Mind which row of `q` belongs to which
# node, and draw one `rng.random()` per child tested, then one for the last token. One line grades it: the exact
# law of one call on five small trees (enumerated over uniforms the grader chooses, against the rule's law in
# exact fractions), a uniform of exactly 0 on a child the target forbids, a chi-square on the suite's tree case,
# and the portable vectors; a wrong answer is told which known mistake it makes, or which output's probability
# it gets wrong.

# %%
from specref.lessons import exercises


def my_verify_tree(tokens, parents, p, q, rng):  # your code here
    raise NotImplementedError


exercises.check_tree_topk(my_verify_tree)

# %% [markdown]
# The reference answer, graded by the same line:

# %%
from solutions.tree_topk import tree_topk as solution

exercises.check_tree_topk(solution)

# %% [markdown]
# Here are all three in NumPy, drawing their uniforms in the order `specref/mrs_tree.py` documents (its RANDOMNESS
# constant: one per child tested, one for the last token), so they return the same tokens as the library's
# for the same generator. A test keeps this cell and the library equal (`tests/apps/test_notebook_code.py`, on
# random trees and on the portable vectors `specref/proof/tree_vectors.json`). The library keeps the residual
# unnormalised to save divisions and checks its inputs; the decisions are the same, uniform for uniform.

# %%
def sample(w, rng):  # [V] nonnegative weights -> one token id, by the inverse CDF of one uniform
    return int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right"))


def children_of(parents):  # [N] -> N + 1 lists: children[row], the nodes under row (0: the root, i + 1: node i)
    children = [[] for _ in range(len(parents) + 1)]
    for i, j in enumerate(parents):
        children[j + 1].append(i)
    return children


def verify_tree(tokens, parents, p, q, rng, rule):  # [N], [N], [N+1, V], [N+1, V] -> [n]; rule: topk, mss or rrs
    children = children_of(parents)
    out, row = [], 0                              # row: the current node's row, 0 at the root, i + 1 after node i
    while True:
        w, d = q[row].copy(), p[row].copy()       # the current q and p at this node (they change after rejections)
        rest = 1.0                                # topk: 1 - q(c_1) - ... - q(c_{i-1}), the mass not yet tried
        for i in children[row]:
            x, u = tokens[i], rng.random()        # one uniform per child tested, in ascending node index
            if rule == "topk":
                accept = u * max(rest, 0.0) < q[row, x]  # u < q(c_i) / rest, without dividing; strict
                rest -= q[row, x]
            else:
                accept = u < w[x] / d[x]          # min(1, q(c) / p(c)); strict, so q(c) = 0 never passes
            if accept:
                out.append(x)                     # the walk goes on from c
                row = i + 1
                break
            if rule != "topk":
                r = np.maximum(w - d, 0.0)        # rejected: q <- norm(max(0, q - p))
                if r.sum() > 0:                   # (all zero only by rounding: w stays)
                    w = r / r.sum()
                if rule == "rrs":                 # drawn without replacement: p <- norm(p without c)
                    d[x] = 0.0
                    if d.sum() > 0:               # (else no child is left to test)
                        d = d / d.sum()
        else:                                     # a leaf, or every child rejected
            if rule == "topk" and children[row]:
                w[tokens[children[row]]] = 0.0    # the recovered token: q without the children's mass
                if not w.sum() > 0:
                    w = q[row]
            out.append(sample(w, rng))            # the recovered token, or the bonus token from the leaf's row
            return np.array(out)


def dirichlet_model(seed, V=6, concentration=0.3):  # -> row(prefix): its own Dirichlet row for every context
    cache = {}

    def row(prefix):
        if prefix not in cache:
            cache[prefix] = np.random.default_rng([seed, len(prefix), *prefix]).dirichlet(np.full(V, concentration))
        return cache[prefix]
    return row


def random_trees(children, count, seed):  # -> (tokens, parents, p, q) of trees drawn the way `children` says
    rng = np.random.default_rng(seed)
    for _ in range(count):
        V = int(rng.integers(2, 7))
        draft_row, target_row = (dirichlet_model(int(s), V, 0.5) for s in rng.integers(1 << 30, size=2))
        widths = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(1, 4)))]  # children per node, by depth
        tokens, parents = tree.draw_tree(children, draft_row, widths, rng)
        yield (np.array(tokens), np.array(parents), np.array(tree.tree_rows(tokens, parents, draft_row)),
               np.array(tree.tree_rows(tokens, parents, target_row)))


LIBRARY = {"topk": mrs_tree.verify_tree_topk, "mss": mrs_tree.verify_tree_mss, "rrs": mrs_tree.verify_tree_rrs}
DRAWN = {"topk": "topk", "mss": "iid", "rrs": "without_replacement"}  # how each rule's children are drawn
for rule, library in LIBRARY.items():
    same = all(verify_tree(*args, np.random.default_rng(s), rule).tolist()
               == library(*args, np.random.default_rng(s)).tolist()
               for s, args in enumerate(random_trees(DRAWN[rule], 200, 8)))
    print(f"verify_tree(..., {rule!r}) returns the tokens of mrs_tree.{library.__name__} on 200 random trees: {same}")

# %% [markdown]
# ## 2. Why several candidates raise acceptance: the coupling view
#
# **One candidate.** Draft $X \sim p$; the verifier outputs $Y$, which must have law $q$. Whatever the verifier
# does, $P(Y = X) = \sum_x P(X = x, Y = x) \le \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q)$: the coupling
# inequality (Levin, Peres and Wilmer, *Markov Chains and Mixing Times*, section 4.2). Modified rejection sampling
# reaches it for every token at once, $P(X = x \text{ and accepted}) = p(x) \min(1, q(x)/p(x)) = \min(p(x), q(x))$:
# it is a *maximal coupling* of $p$ and $q$. So $1 - \mathrm{TV}$ is not just what MRS happens to accept; no
# single-draft verifier with the target's law can accept more (SpecTr, Sun et al. 2023, starts from the same
# observation).
#
# **Several candidates.** With a set $S$ of candidates the verifier succeeds when $Y \in S$, and the same argument
# gives $P(Y \in S) \le \sum_x \min(q(x), \pi(x))$ with $\pi(x) = P(x \in S)$. One candidate has $\pi = p$. Two
# i.i.d. candidates have $\pi = 1 - (1 - p)^2$, which is larger wherever $0 < p < 1$: the ceiling itself rises, and
# the verifiers above climb with it. For the top-$k$ set, $\pi$ is 1 on the set and 0 elsewhere, and
# `verify_tree_topk` reaches its ceiling $q(S)$ exactly; but a top-1 "set" can be far below $1 - \mathrm{TV}$, since
# it throws away what $p$ knows beyond its argmax.
#
# The chance that one node accepts one of its $k$ children, exactly (over the children's draws and the verifier's
# coins), for a target row over $V = 6$ tokens and a draft that is half the target and half something else:

# %%
def top_k(p, k):  # [V] -> the k tokens with the largest p (ties to the lowest id; never a token with p = 0)
    return np.argsort(-p, kind="stable")[:min(k, np.count_nonzero(p))]


def accept_chance(p, q, k, children):  # [V], [V], k children drawn as `children` says -> P(one is accepted)
    if children == "topk":                            # verify_tree_topk: y ~ q, followed when y is a child
        return float(q[top_k(p, k)].sum())

    def tests(w, d, m):                               # m children left, each drawn from d, tested against w
        if m == 0 or not d.sum() > 0:
            return 0.0
        total = 0.0
        for x in np.flatnonzero(d):
            a = min(1.0, w[x] / d[x])                 # x drawn (chance d[x]) and accepted (chance a)
            total += d[x] * a
            if a < 1.0:                               # x rejected: q <- norm(max(0, q - p)) ...
                r = np.maximum(w - d, 0.0)
                w_next = r / r.sum() if r.sum() > 0 else w  # (all zero only by rounding)
                d_next = d.copy()
                if children == "without_replacement":  # ... and p <- norm(p without x)
                    d_next[x] = 0.0
                    d_next = d_next / d_next.sum() if d_next.sum() > 0 else d_next
                total += d[x] * (1.0 - a) * tests(w_next, d_next, m - 1)
        return total

    return tests(q, p, k)


def inclusion(p, k, children):  # [V] -> [V]: pi(x) = P(token x is among the k children)
    if children == "iid":
        return 1.0 - (1.0 - p) ** k
    if children == "topk":
        return np.isin(np.arange(len(p)), top_k(p, k)).astype(float)
    pi = np.zeros(len(p))                             # without replacement: every ordered draw of k tokens
    for xs in permutations(range(len(p)), k):
        chance = np.prod([p[x] / (1.0 - p[list(xs[:t])].sum()) for t, x in enumerate(xs)])
        pi[list(xs)] += chance
    return pi


g = np.random.default_rng(5)
q6 = g.dirichlet(np.full(6, 0.5))                      # the target's row
p6 = 0.5 * q6 + 0.5 * g.dirichlet(np.full(6, 0.5))    # the draft's: half the target, half another row
tv = 0.5 * np.abs(p6 - q6).sum()
print("p =", p6.round(3), "\nq =", q6.round(3))
print(f"1 - TV(p, q) = {1 - tv:.4f} = sum min(p, q); one MRS draft is accepted with exactly this chance\n")
WAYS = {"iid": "i.i.d. (mss)", "without_replacement": "w/o repl. (rrs)", "topk": "top-k (topk)"}
ks = range(1, 7)
chances = {c: [accept_chance(p6, q6, k, c) for k in ks] for c in WAYS}
ceilings = {c: [float(np.minimum(q6, inclusion(p6, k, c)).sum()) for k in ks] for c in WAYS}
print(f"{'k':>2} " + " ".join(f"{WAYS[c]:>17} {'ceiling':>8}" for c in WAYS))
for k in ks:
    print(f"{k:>2} " + " ".join(f"{chances[c][k - 1]:17.4f} {ceilings[c][k - 1]:8.4f}" for c in WAYS))

# %% [markdown]
# With $k = 1$, i.i.d. and without-replacement are both plain MRS and accept exactly $1 - \mathrm{TV}$; top-1 accepts
# only $q(\arg\max p)$, far less, but top-2 already beats one MRS draft. Every extra candidate raises all three.
# Without replacement beats i.i.d. (a repeat of a rejected token is wasted: it is rejected again) and reaches 1 at
# $k = V$, when every token is a candidate. The ceiling $\sum_x \min(q(x), \pi(x))$ is an upper bound, not a
# promise: here it is 1 from $k = 2$ on, and the i.i.d. rule stays well below it; how close an exact verifier can
# come is a question of its own (an optimal-transport problem, as SpecTr frames it).
#
# `specref.proof.tree` computes the same numbers another way, from the exact law of one call (a tree of depth 1
# with $k$ children; the call outputs two tokens when a child is accepted):

# %%
worst = max(abs(sum(v for out, v in tree.fresh_children_law(c, lambda prefix: p6, lambda prefix: q6, (k,)).items()
                    if len(out) == 2) - chances[c][k - 1]) for c in WAYS for k in ks)
print(f"largest difference from tree.fresh_children_law over the 18 numbers above: {worst:.1e}")

fig, ax = plt.subplots(figsize=(6.5, 3.6))
for (c, label), color in zip(WAYS.items(), ("C0", "C1", "C2")):
    ax.plot(ks, chances[c], "o-", color=color, label=label)
    ax.plot(ks, ceilings[c], ":", color=color, alpha=0.7)
ax.axhline(1 - tv, color="k", ls="--", lw=1, label="1 - TV(p, q): one candidate's ceiling")
ax.plot([], [], "k:", label="each way's ceiling, sum min(q, pi)")
ax.set(xlabel="candidates k at the node", ylabel="P(a child is accepted)", ylim=(0, 1.05),
       title="One node, V = 6: acceptance against the number of candidates")
ax.legend(loc="lower right", fontsize=8)
plt.show()

# %% [markdown]
# ## 3. A toy example in exact fractions, for each verifier
#
# Three tokens $a, b, c$; at the root the draft has $p = (1/2, 1/3, 1/6)$ and the target $q = (1/6, 1/2, 1/3)$, so
# $1 - \mathrm{TV} = 2/3$. The tree is two children of the root and nothing below them, so after an accepted child
# the call draws its bonus token from the target's row after that child. One node's rule, in fractions, returning
# each child's chance of being the accepted one and what is left to draw from if none is (the code below is the
# rule of section 1 in exact arithmetic; a test keeps it equal to `specref.proof.tree`'s):

# %%
def norm(row):
    return [v / sum(row) for v in row]


def node(xs, p, q, rule):  # children xs, rows p, q (fractions) -> [P(child k accepted)], P(none), last row, steps
    accepted, none, steps = [], F(1), []                # none: P(no child accepted so far)
    w, d, rest = list(q), list(p), F(1)                 # the current q and p; rest: topk's untried target mass
    for x in xs:
        if rule == "topk":
            a = q[x] / rest if rest > 0 else F(0)       # q(c_i) / (1 - q(c_1) - ... - q(c_{i-1}))
            rest -= q[x]
        else:
            a = min(F(1), w[x] / d[x])                  # min(1, q(c) / p(c)) with the current q and p
        accepted.append(none * a)
        none *= 1 - a
        if rule != "topk":
            r = [max(F(0), wy - dy) for wy, dy in zip(w, d)]
            w = norm(r) if sum(r) > 0 else w            # q <- norm(max(0, q - p))
            if rule == "rrs":
                d = [F(0) if y == x else dy for y, dy in enumerate(d)]  # p <- norm(p without x)
                d = norm(d) if sum(d) > 0 else d
        steps.append((x, a, w, d))
    if rule == "topk":
        w = [F(0) if y in xs else qy for y, qy in enumerate(q)]  # q without the children's mass
        w = norm(w) if sum(w) > 0 else list(q)          # (nothing left only when P(none) = 0)
    return accepted, none, w, steps


names = "abc"
p_root = [F(1, 2), F(1, 3), F(1, 6)]
q_root = [F(1, 6), F(1, 2), F(1, 3)]
q_after = {0: [F(1, 2), F(1, 4), F(1, 4)], 1: [F(1, 4), F(1, 4), F(1, 2)], 2: [F(1, 3)] * 3}  # the bonus rows
p_after = {x: [F(1, 3)] * 3 for x in range(3)}  # the draft's rows below the children (not read: they are leaves)


def draft_row(prefix):
    return p_root if prefix == () else p_after[prefix[-1]]


def target_row(prefix):
    return q_root if prefix == () else q_after[prefix[-1]]


def fmt(row):
    return "(" + ", ".join(str(v) for v in row) + ")"


def one_call_law(draws, rule):  # [(chance, children's tokens)] -> law of the output (path, then one token)
    law = {}
    for chance, xs in draws:
        accepted, none, last, _ = node(xs, p_root, q_root, rule)
        for x, a in zip(xs, accepted):
            for y, v in enumerate(q_after[x]):            # accepted child x, then the bonus token from its row
                if a * v:
                    law[(x, y)] = law.get((x, y), 0) + chance * a * v
        for y, v in enumerate(last):                      # every child rejected: the recovered token
            if none * v:
                law[(y,)] = law.get((y,), 0) + chance * none * v
    return law


def first_token(law):
    return [sum(v for out, v in law.items() if out[0] == y) for y in range(3)]


# top-k: the two tokens the draft likes best, a and b, tested in that order; p is not read
xs = tuple(int(x) for x in top_k(np.array(p_root, dtype=float), 2))
accepted, none, last, steps = node(xs, p_root, q_root, "topk")
print("top-k: children", ", ".join(names[x] for x in xs))
tried = F(0)
for x, a, _, _ in steps:
    print(f"  child {names[x]}: accept with q({names[x]}) / (1 - {tried}) = {a}")
    tried += q_root[x]
print(f"  P(child accepted) = {', '.join(map(str, accepted))}; P(none) = {none}; "
      f"then the recovered token from {fmt(last)}")
law_topk = one_call_law([(1, xs)], "topk")
print(f"  first token: {fmt(first_token(law_topk))} = q {fmt(q_root)}: {first_token(law_topk) == q_root}")

# %% [markdown]
# Top-$k$ accepts $1/6 + 1/2 = 2/3$ here, as much as one MRS draft. The chance of $b$ is $(5/6) \cdot (3/5) = 1/2$:
# the division by what is left undoes the first rejection, which is how each child ends up accepted with exactly
# $q$ of its token.
#
# **mss** (children i.i.d. from $p$). $p$ never changes, so the residual after one rejection,
# $\mathrm{norm}(\max(0, q - p))$, and after two, are the same whatever was drawn; the table goes over the nine
# ordered draws. "P(2nd acc.)" is the chance that the second child is the one accepted (the first rejected, then
# the second accepted), so the three chances of a row add up to 1.

# %%
draws_mss = [(p_root[x1] * p_root[x2], (x1, x2)) for x1, x2 in product(range(3), repeat=2)]
_, _, _, steps = node((0, 0), p_root, q_root, "mss")
print(f"after one rejection q <- norm(max(0, q - p)) = {fmt(steps[0][2])}; after two: {fmt(steps[1][2])}")
print(f"{'draw':5} {'chance':>6} {'P(1st acc.)':>11} {'P(2nd acc.)':>11} {'P(none)':>8}  first token given the draw")
for chance, xs in draws_mss:
    accepted, none, last, _ = node(xs, p_root, q_root, "mss")
    given = first_token(one_call_law([(1, xs)], "mss"))
    print(f"{names[xs[0]] + names[xs[1]]:5} {str(chance):>6} {str(accepted[0]):>11} {str(accepted[1]):>11} "
          f"{str(none):>8}  {fmt(given)}")
law_mss = one_call_law(draws_mss, "mss")
print(f"P(a child is accepted) = {sum(v for out, v in law_mss.items() if len(out) == 2)} (one draft: 2/3)")
print(f"first token, over the draws: {fmt(first_token(law_mss))} = q: {first_token(law_mss) == q_root}")

# %% [markdown]
# Given one draw the first token is *not* distributed as $q$ (draw "cc" gives $c$ for sure); only the average over
# the draws is. That is why the rule is exact only for children drawn i.i.d. from the very $p$ it divides by.
#
# **rrs** (children drawn without replacement). Now $p$ loses the rejected token, so the residual after the second
# rejection depends on the first child; six ordered draws:

# %%
draws_rrs = [(p_root[x1] * p_root[x2] / (1 - p_root[x1]), (x1, x2)) for x1, x2 in permutations(range(3), 2)]
print(f"{'draw':5} {'chance':>6} {'P(1st acc.)':>11} {'p after 1st rej.':>16} {'P(2nd acc.)':>11} {'P(none)':>8} "
      f"{'recovered from':>15}")
for chance, xs in draws_rrs:
    accepted, none, last, steps = node(xs, p_root, q_root, "rrs")
    print(f"{names[xs[0]] + names[xs[1]]:5} {str(chance):>6} {str(accepted[0]):>11} {fmt(steps[0][3]):>16} "
          f"{str(accepted[1]):>11} {str(none):>8} {fmt(last):>15}")
law_rrs = one_call_law(draws_rrs, "rrs")
print(f"P(a child is accepted) = {sum(v for out, v in law_rrs.items() if len(out) == 2)} (i.i.d.: "
      f"{sum(v for out, v in law_mss.items() if len(out) == 2)}, one draft: 2/3)")
print(f"first token, over the draws: {fmt(first_token(law_rrs))} = q: {first_token(law_rrs) == q_root}")

# %% [markdown]
# `specref.proof.tree` computes the law of one call independently (`tree.tree_call_law`: every tree the drawing can give,
# with its chance, times the rule's exact law on it); continued with target draws to two tokens, each law must be
# the target's two-token law, cell by cell:

# %%
for rule, law in (("topk", law_topk), ("mss", law_mss), ("rrs", law_rrs)):
    exact = tree.tree_call_law({"topk": tree.TOPK, "mss": tree.MSS, "rrs": tree.RRS}[rule].law, DRAWN[rule],
                          draft_row, target_row, (2,))
    continued = tree.continued(exact, target_row, 2)
    print(f"{rule}: the hand law is tree.tree_call_law's: {law == exact}; continued, it is the target's: "
          f"{continued == tree.target_law(target_row, 2)}; tokens per call {laws.mean_output_length(exact)}")

# %% [markdown]
# ## 4. The chi-square against the exact law, and the tree bugs that shipped
#
# The suite's one-call case (`tree.CASES["close"]`: $V = 4$, two children per node, depth 2, six nodes; rows with
# zeros that depend on the context, and a draft that mostly agrees with the target and sometimes proposes a token
# the target forbids). For each algorithm: its exact law of one call with the tree drawn its way, then a chi-square
# of sampled calls against it (notebook 03 teaches the test; level $10^{-3}$, fixed seeds), for the library's
# verifier, this notebook's, and every known bug of `specref.proof.tree`. Each bug is sampled at the number of
# calls that gives the test 99.9% power against it, computed from the two exact laws (`specref.proof.power`).
# "exact TV" is the total variation of the call's output, continued to three tokens, from the target's law:
# any nonzero number proves the rule wrong.
#
# **Predict, then run.** Every bug below changes the law of one call. Will the chi-square reject each of them at the
# sample size chosen for it? Is there one whose exact TV is so small that no affordable sample could see it, and
# if so, what would catch it instead?

# %%
case_draft, case_target = tree.case_rows("close")
length = len(tree.WIDTHS) + 1                                  # the longest output: the whole path, then one token
target3 = tree.target_law(case_target, length)
n_exact = 1_000 if QUICK else 20_000


def as_float(law):
    return {k: float(v) for k, v in law.items()}


def notebook_verifier(rule):
    return lambda tokens, parents, p, q, rng: verify_tree(tokens, parents, p, q, rng, rule)


print(f"{'algorithm':9} {'verifier':37} {'calls':>6} {'chi-square':>10} {'p-value':>9} {'verdict':>7} {'exact TV':>9}")
for name, alg in tree.ALGORITHMS.items():
    law = alg.call_law(case_draft, case_target, tree.WIDTHS)
    rows = [("mrs_tree." + alg.verifier.__name__, alg.verifier, law, n_exact),
            ("verify_tree (this notebook)", notebook_verifier(alg.rule.test), law, n_exact)]
    for bug in alg.bugs:
        bug_law = alg.call_law(case_draft, case_target, tree.WIDTHS, bug.law)
        calls = power.smallest_n(lambda m: power.check_power(as_float(bug_law), as_float(law), m, stats.LEVEL),
                                 target=0.999, n_max=1e6)
        rows.append((bug.name, bug, bug_law, 2_000 if np.isinf(calls) else int(np.ceil(calls / 100) * 100)))
    for label, sampler, own_law, n in rows:
        counts = tree.sample_calls(sampler, alg.drawing, case_draft, case_target, tree.WIDTHS, n,
                                   np.random.default_rng(34))
        X2, dof, pval = stats.chi_square_gof(counts, as_float(law))
        tv = stats.total_variation(as_float(tree.continued(own_law, case_target, length)), as_float(target3))
        print(f"{name:9} {label[:37]:37} {n:6d} {X2:10.1f} {pval:9.3g} {'REJECT' if pval < stats.LEVEL else 'pass':>7} "
              f"{tv:9.2g}")

# %% [markdown]
# This notebook's `verify_tree` gives the library's counts exactly: the same tokens for the same uniforms. A
# chi-square of `inf` (p-value 0) means the sample holds an output the exact law gives probability 0: a token the
# target forbids, say. What the bugs are (each docstring in `specref/proof/bugs/tree.py` says how it is modelled).
# Six are in real systems' code:
#
# - **sglang #12561** (`stale_draft_probs`): `draft_probs` allocated with `empty_like` instead of zeros, so the
#   recovered token was drawn from $\max(0, q - \text{draft\_probs})$ built on uninitialised memory.
# - **sglang #35771, fixed by #35798** (`inclusive_zero_coin`): the test was `coin <= ratio`, and a float32 coin can
#   be exactly 0, so a child the target gives probability 0 could be accepted.
# - **TensorRT-LLM #15098** (`wrong_logits_slice`): dynamic-tree rejection sampling read the wrong slice of the
#   target's logits (modelled as node $i$ reading row $i$ instead of $i + 1$).
# - **EAGLE from commit 6aa1ed8 until 50fc246 / c892473** (`bonus_unwarped`): the bonus token was drawn from
#   `softmax(logits)` without the request's temperature and top-p.
# - **Sequoia's `verify`** (`last_token_over_accepted_node`, tree-mss and tree-rrs): the last token is written at
#   index $m$ of the node buffer ($m$ nodes accepted) before the accepted path is gathered from it, so with nodes
#   numbered level by level the accepted node numbered $m$ outputs the last token. Found by running this checker on
#   Sequoia's code; we found no report of it upstream.
# - **SGLang's `threshold_single` / `threshold_acc` below 1** (`sglang_thresholds_*`): lossy by design; the exact TV
#   is how far each setting moves the output from the target.
#
# The others are misreadings the same tests must catch: ranked children verified with the i.i.d. ratio rule,
# recursive rejection sampling without zeroing $p$, reading a sibling's row (indexing rows by depth, as for a
# chain), and merging repeated i.i.d. siblings.
#
# One shipped bug passes every chi-square above: `inclusive_zero_coin` moves the law by about $2^{-24}$ (its exact
# TV is that small but not 0), far below what any affordable sample can see. The exact tier sees it, and so does the
# edge test with an injected uniform of exactly 0 on a child the target forbids:

# %%
q_forbids = [0.0, 0.5, 0.25, 0.25]                     # the target gives token 0 probability 0
args = (np.array([0, 1]), np.array([-1, -1]), np.full((3, 4), 0.25), np.array([q_forbids] * 3))
for name, alg in tree.ALGORITHMS.items():
    bug = alg.bug["inclusive_zero_coin"]
    wrong = bug(*args, ListedUniforms([0.0, 0.3])).tolist()              # u = 0 accepts node 0; then the bonus
    right = alg.verifier(*args, ListedUniforms([0.0, 0.0, 0.3])).tolist()  # node 0 rejected, node 1 accepted, bonus
    print(f"{name}: u = 0 on a child with q = 0: inclusive_zero_coin outputs {wrong} (accepted it); "
          f"mrs_tree.{alg.verifier.__name__} outputs {right}")

# %% [markdown]
# ## 5. Scoring the tree in one call: the attention mask
#
# In the speculative loop a chain of $K$ drafts is scored by one forward pass over $K + 1$ new positions with the
# causal mask: the last call's final token (not in the KV cache yet) and the $K$ drafts, giving $K + 1$ rows. A
# tree of $N$ nodes is scored by one forward pass over $N + 1$ new positions too, that token (the tree's root) and
# the $N$ nodes, giving $N + 1$ rows, with two changes:
#
# - **the mask**: node $i$ may attend to the whole prefix (the root's token included) and to the nodes on its own
#   root-to-node path (itself and its ancestors), never to another branch;
# - **the positions**: node $i$ gets the RoPE position it would have in the chain of its own path,
#   (prefix length) + (its depth below the root), so siblings share a position.
#
# Then every node's row is exactly the row the model would give after that node's path alone. Both are a few lines
# (`specref/smollm2/model.py` has the same `tree_mask`, as 0 / $-\infty$ added to the scores, and `tree_depths`;
# a test keeps them equal):

# %%
def tree_mask(parents):  # [N] -> bool [N, N]: sees[i, j] = node i may attend to node j (j is i or an ancestor)
    sees = np.eye(len(parents), dtype=bool)
    for i, j in enumerate(parents):
        if j >= 0:
            sees[i] |= sees[j]                 # j < i, so node j's row is already complete
    return sees


def tree_depths(parents):  # [N] -> [N]: 0 for a child of the root
    depth = np.zeros(len(parents), dtype=np.int64)
    for i, j in enumerate(parents):
        depth[i] = 0 if j < 0 else depth[j] + 1
    return depth


prefix_words = ["the", "cat"]
node_words = ["sat", "is", "on", "down", "here", "the"]
node_parents = [-1, -1, 0, 0, 1, 2]            # sat, is | sat -> on, down | is -> here | on -> the
n_prefix = len(prefix_words)
positions = n_prefix + tree_depths(node_parents)
visible = np.hstack([np.ones((len(node_words), n_prefix), dtype=bool), tree_mask(node_parents)])  # [N, prefix + N]
print(f"{'node':>4} {'token':6} {'parent':>6} {'depth':>5} {'position':>8}  sees")
for i, word in enumerate(node_words):
    seen = [w for w, s in zip(prefix_words + node_words, visible[i]) if s]
    print(f"{i:>4} {word:6} {node_parents[i]:>6} {tree_depths(node_parents)[i]:>5} {positions[i]:>8}  {' '.join(seen)}")

fig, ax = plt.subplots(figsize=(6, 3.6))
ax.imshow(visible, cmap="Greys", vmin=0, vmax=1.6)
labels = [f"{w}\n@{i}" for i, w in enumerate(prefix_words)] + [f"{w}\n@{pos}" for w, pos in zip(node_words, positions)]
ax.set_xticks(range(len(labels)), labels, fontsize=8)
ax.set_yticks(range(len(node_words)),
              [f"node {i}: {w} @{pos}" for i, (w, pos) in enumerate(zip(node_words, positions))], fontsize=8)
ax.axvline(n_prefix - 0.5, color="C3", lw=1)
ax.set_title("who attends to whom (dark: 1); @ = RoPE position", fontsize=9)
plt.show()

# %% [markdown]
# **Keeping the accepted path without recomputing it.** The tree's keys and values are written to the cache after
# the prefix, in node order. Say the verifier accepts "sat on the" (nodes 0, 2, 5): `SmolLM2.keep_path([0, 2, 5])`
# moves those nodes' keys, values and final states to the slots right after the prefix, 2, 3 and 4, and drops the
# rest. That compaction is valid because node $i$ at depth $d$ was computed at position prefix + $d$, *the very slot
# it moves to*, so its RoPE rotation is already the right one; and it attended to the prefix and its ancestors,
# exactly what precedes it there. A key rotated for its node index (2 + 5 = 7 for "the") instead of its depth would
# be wrong after the move.
#
# To see it without a model, one attention layer with RoPE in NumPy and random weights: the path's outputs and keys
# from scoring the whole tree equal those from scoring the chain "the cat sat on the" alone; with positions by node
# index they do not. (Every layer is this layer again on the previous one's outputs, so what holds for one holds for
# all.)

# %%
def rope(x, pos):  # [n, d], [n] -> [n, d]: rotate each pair (x[2i], x[2i+1]) by the angle pos * 10000^(-2i/d)
    angle = pos[:, None] * 10000.0 ** (-np.arange(0, x.shape[1], 2) / x.shape[1])  # [n, d/2]
    out = np.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * np.cos(angle) - x[:, 1::2] * np.sin(angle)
    out[:, 1::2] = x[:, 0::2] * np.sin(angle) + x[:, 1::2] * np.cos(angle)
    return out


def attend(x, pos, sees, W):  # [T, d] inputs, [T] positions, bool [T, T] -> outputs [T, d], keys [T, d]
    q, k, v = rope(x @ W[0], pos), rope(x @ W[1], pos), x @ W[2]
    scores = np.where(sees, q @ k.T / np.sqrt(x.shape[1]), -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v, k


rng = np.random.default_rng(0)
vocab = sorted(set(prefix_words + node_words))
embed = {word: rng.normal(size=8) for word in vocab}          # a toy embedding, d = 8
W = rng.normal(size=(3, 8, 8)) / np.sqrt(8)                    # the query, key and value weights
T = n_prefix + len(node_words)
sees_all = np.zeros((T, T), dtype=bool)                       # the prefix causally, then the tree under its mask
sees_all[:n_prefix, :n_prefix] = np.tril(np.ones((n_prefix, n_prefix), dtype=bool))
sees_all[n_prefix:] = visible
x_tree = np.array([embed[w] for w in prefix_words + node_words])
path = [0, 2, 5]
chain_words = prefix_words + [node_words[i] for i in path]
out_chain, k_chain = attend(np.array([embed[w] for w in chain_words]), np.arange(len(chain_words)),
                            np.tril(np.ones((len(chain_words),) * 2, dtype=bool)), W)
def gap(a, b):  # the largest difference, or "< 1e-12": float64 rounding, whose last bits vary with the CPU's BLAS
    d = np.abs(a - b).max()
    return "< 1e-12" if d < 1e-12 else f"{d:.1e}"


for label, pos in (("positions prefix + depth", np.concatenate([np.arange(n_prefix), positions])),
                   ("positions by node index", np.arange(T))):
    out_tree, k_tree = attend(x_tree, pos, sees_all, W)
    rows = [n_prefix + i for i in path]                        # the path's nodes in the tree's layout
    print(f"{label:25}: the path's outputs differ from the chain's by "
          f"{gap(out_tree[rows], out_chain[n_prefix:])}, its keys by {gap(k_tree[rows], k_chain[n_prefix:])}")

# %% [markdown]
# ## 6. Tokens per call: a chain of $K$ against trees of $K$ nodes
#
# A tree of $N$ nodes is scored by one call over $N + 1$ new positions (the root's token and the nodes), exactly
# what a chain of $K = N$ drafts costs ($K + 1$ positions), so the fair comparison is at equal nodes. The expected
# number of tokens one call outputs can be computed exactly by walking the tree shape: at a node, each way of
# drawing and testing its children is followed with its chance, and an accepted child continues below it. Rows
# depend on the whole context: every prefix has its own Dirichlet(0.3) row for the target over $V = 6$ tokens, and
# the draft is $\lambda \cdot$ target + $(1 - \lambda) \cdot$ another such model, so $\lambda$ sets how good the
# draft is. Shapes with $K = 4$ nodes (parents lists in the cell): a chain, "2x1" (two children of the root, one
# under each), "2+1+1" (two children, then a chain under the first), "3+1", and "4" (four children of the root).
#
# **Predict, then run.** With a good draft ($\lambda$ near 1), which shape yields the most tokens per call: the
# chain, or a tree that spends nodes on second candidates? And with a poor draft? Write down your ranking of the
# five shapes for both before reading the table.

# %%
SHAPES = {"chain": [-1, 0, 1, 2], "2x1": [-1, -1, 0, 1], "2+1+1": [-1, -1, 0, 2], "3+1": [-1, -1, -1, 0],
          "4": [-1, -1, -1, -1]}


def expected_tokens(parents, children, draft_row, target_row):  # exact E[tokens output by one call]
    kids, memo = children_of(parents), {}

    def at(row, prefix):  # expected tokens from the node of `row` on, reached after the tokens `prefix`
        if (row, prefix) not in memo:
            under = kids[row]
            if not under:
                memo[row, prefix] = 1.0                       # a leaf: the bonus token
            elif children == "topk":                          # y ~ q, followed when y is a child
                q, xs = target_row(prefix), top_k(draft_row(prefix), len(under))
                memo[row, prefix] = 1.0 + sum(q[x] * at(i + 1, prefix + (int(x),)) for i, x in zip(under, xs))
            else:
                memo[row, prefix] = tests(under, prefix, target_row(prefix), draft_row(prefix))
        return memo[row, prefix]

    def tests(under, prefix, w, d):  # the children `under` left: each drawn from d, tested against w
        if not under or not d.sum() > 0:
            return 1.0                                        # every child rejected: the recovered token
        total = 0.0
        for x in np.flatnonzero(d):
            a = min(1.0, w[x] / d[x])
            total += d[x] * a * (1.0 + at(under[0] + 1, prefix + (int(x),)))  # accepted: x, then the walk below
            if a < 1.0:
                r = np.maximum(w - d, 0.0)
                d_next = d.copy()
                if children == "without_replacement":
                    d_next[x] = 0.0
                    d_next = d_next / d_next.sum() if d_next.sum() > 0 else d_next
                total += d[x] * (1.0 - a) * tests(under[1:], prefix, r / r.sum() if r.sum() > 0 else w, d_next)
        return total

    return at(0, ())


def mixture(lam, a, b):  # -> row(prefix) = lam a(prefix) + (1 - lam) b(prefix)
    cache = {}

    def row(prefix):
        if prefix not in cache:
            cache[prefix] = lam * a(prefix) + (1 - lam) * b(prefix)
        return cache[prefix]
    return row


# the recursion against specref.proof.tree's exact law of one call, on the shapes it can draw (widths per depth)
target_m, other_m = dirichlet_model(100), dirichlet_model(200)
draft_m = mixture(0.5, target_m, other_m)
worst = 0.0
for shape, widths in (("chain", (1, 1, 1, 1)), ("2x1", (2, 1)), ("4", (4,))):
    for children, rule in (("topk", tree.TOPK), ("iid", tree.MSS), ("without_replacement", tree.RRS)):
        law = tree.tree_call_law(rule.law, children, draft_m, target_m, widths)
        ours = expected_tokens(SHAPES[shape], children, draft_m, target_m)
        worst = max(worst, abs(laws.mean_output_length(law) - ours))
print(f"largest difference from laws.mean_output_length(tree.tree_call_law(...)) over 9 shapes and drawings: {worst:.1e}")

# %%
lams = np.linspace(0.0, 1.0, 6 if QUICK else 11)
pairs = 3 if QUICK else 8
models = [(dirichlet_model(100 + s), dirichlet_model(200 + s)) for s in range(pairs)]  # (target, other) pairs
results = {(children, shape): [] for children in WAYS for shape in SHAPES}  # -> mean tokens per call at each lam
for lam in lams:
    drafts = [mixture(lam, target, other) for target, other in models]
    for (children, shape), values in results.items():
        values.append(np.mean([expected_tokens(SHAPES[shape], children, draft, target)
                               for draft, (target, _) in zip(drafts, models)]))
chain_mrs = results["iid", "chain"]  # Chen's Algorithm 2: a chain of i.i.d. drafts, verified by mrs.verify
top_mass = np.mean([target(prefix).max() for target, _ in models for prefix in [(), *product(range(6), repeat=2)]])
print(f"mean over {pairs} random pairs per lambda; K = 4 nodes; the chain through mss is Algorithm 2; the target "
      f"puts {top_mass:.2f} of its mass on its most likely token, on average")
print(f"{'children':17} {'shape':6} " + " ".join(f"{lam:5.2f}" for lam in lams))
for (children, shape), values in results.items():
    print(f"{WAYS[children]:17} {shape:6} " + " ".join(f"{v:5.2f}" for v in values))

fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), sharey=True)
for ax, children in zip(axes, WAYS):
    for shape in SHAPES:
        ax.plot(lams, results[children, shape], "o-" if shape == "chain" else ".-", label=shape)
    if children != "iid":
        ax.plot(lams, chain_mrs, "k--", lw=1, label="chain, Algorithm 2")
    ax.set(title=f"children {WAYS[children]}", xlabel="lambda (how good the draft is)")
    ax.legend(fontsize=8)
axes[0].set_ylabel("expected tokens per target call")
fig.suptitle("K = 4 nodes per call, V = 6, exact expectation; draft = lambda target + (1 - lambda) other",
             fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# What the exact numbers say, on this model. With i.i.d. children a tree of four nodes gains a little over the chain
# only for the poorest drafts, and loses from there on. Without replacement, the trees beat the chain by more while
# the draft is poor (small $\lambda$), and lose once it is good. The reason is the same for both: the chain's
# second draft adds about $\alpha^2$ tokens per call (its parent accepted, then itself), while a second candidate at
# the root adds only what the first one left, $1 - \alpha$ times the residual's acceptance; the better the draft, the
# larger $\alpha^2$ and the smaller $1 - \alpha$. "2+1+1" (width at the root, depth below) sits between.
# Without replacement is never worse than i.i.d. here.
#
# Top-$k$ children verified by the target alone stay near two tokens per call whatever $\lambda$ is, below
# Algorithm 2 almost everywhere. That rule accepts a child with the target's probability of it, $q(c)$, not with
# $\min(1, q(c)/p(c))$, so even a perfect draft is accepted only as often as the target's mass on the candidates
# allows (its most likely token carries a little over half of it here, as printed). With a peaked target (a low
# temperature, greedy decoding) that mass approaches 1 and top-$k$ trees fare much better.
#
# These are expectations for one random context model; what the trained draft does on real prompts is measured on
# HumanEval in [`docs/trees.md`](../docs/trees.md).
#
# ## 7. What a tree costs on a CPU
#
# Tokens per call are half the story. The wall-clock improvement over plain decoding is Leviathan's Theorem 3.8 with
# the tree put in: (expected tokens per call) / (draft calls $\times c$ + the cost of the target call), with $c$ one
# draft call and the target call (scoring $N + 1$ new positions, the root's token and the $N$ nodes: $N + 1$ rows)
# both counted in decode steps of the target. Against a chain of $K = N$ drafts:
#
# - **The target call costs the same**: $N + 1$ new positions, whatever the tree's shape (the mask changes which
#   scores are $-\infty$, not how many are computed). Speculative sampling's premise is that this costs about one
#   decode step, as it does for a few positions on a GPU. On a CPU it is more, and it grows with $N$: notebook 00
#   times one forward pass over 1 to 9 positions, and [`docs/performance.md`](../docs/performance.md#summary) has
#   the scoring cost machine by machine. Where scoring more rows costs much more, a tree of $N$ nodes pays it
#   exactly as a chain of $N$ drafts does, and both can lose to plain decoding.
# - **The draft is called less**: once at the root and once per node that has children (all of a node's children
#   come from its one row), so a wide tree needs fewer draft calls than a chain of the same size (the "4" tree: one;
#   the chain: four).
#
# The measured tokens per call, scoring costs and wall clock of trees on this project's CPUs, with the CPU named,
# are in [`docs/trees.md`](../docs/trees.md); they are measurements of one machine, so they live there and not here.
#
# ## Summary
#
# - One candidate can be accepted with chance at most $1 - \mathrm{TV}(p, q)$, and MRS reaches it (a maximal
#   coupling). A tree offers several candidates, which raises that ceiling; i.i.d., without-replacement and top-$k$
#   children each have an exact verifier that climbs with it.
# - Each verifier is exact only for children drawn its way; given one draw the output is not the target's law,
#   only the average over draws is.
# - One target call scores the whole tree: node $i$ sees the prefix and its ancestors, at position prefix + depth,
#   so the accepted path's keys are already where `keep_path` moves them.
# - At equal nodes, in the exact model above, trees beat the chain when the draft is weak and lose when it is
#   strong; target-only top-$k$ needs a peaked target. On a CPU a tree and a chain of the same size pay the same
#   cost of scoring more rows.
# - The bugs that shipped each fail the tests here, all but one by chi-square; the zero coin needs the exact law or
#   a uniform of exactly 0.
