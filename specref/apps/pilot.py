"""The a-priori pilot: what each draft would do on the target's own text, measured before the run.

Leviathan et al. 2023 predict a speedup from alpha (Definition 3.1), the draft's cost c and the cost
of one target call (Theorem 3.8).  The commands choose K and a tree from such a prediction, so its
inputs must be measured before the run, on text like the run's.  A short sampled run at the start of
the answer is not such text: code answers begin by copying their prompt, and alpha there overstates
the whole answer's.  This pilot instead reads the target's own text:

1. The target completes the prompt alone (ArS, with the run's warp and stop rule, at a seed of its
   own): `texts`.  Its decode steps are timed there; over several prompts (HumanEval's pilot problems)
   c's unit is their mean over all of them.
2. Each draft is replayed over that completion as drafting would meet it, teacher forced.  For a
   call whose first draft token is token t, the target has processed tokens[:t - 1] (the newest
   token is not yet scored), and the draft proposes row after row over the true tokens t, t+1, ...,
   chaining its own predictions past the target's last state, exactly as in a call that accepted
   them (`replay`).  accept[n, j - 1] = min(1, p(x) / q(x)) at the j-th row, x the text's own token
   there, both rows warped as the run warps them: the chance that the j-th draft token was accepted,
   given the first j - 1 were and given that the text goes on with x.  A call that accepts a draft
   outputs it, so P(accepted and x) = min(p(x), q(x)), and over x ~ q its mean is Definition 3.1's
   alpha = sum_x min(p(x), q(x)); but alpha itself, the chance before the token is known, forgets
   that the text and the acceptances go together (a copy draft is accepted exactly where the text
   copies), and a replay with alpha at every position predicted other calls than speculative
   sampling made on the same kind of text (a test measures both).  Where the replay's row gives x no
   mass (its rows are computed in one pass, the text's one at a time, and a near-tie or the edge of
   the top-p nucleus can fall either way), the chance before the token stands in.  The rows are timed as a call
   meets them: at every TIMED_EVERY-th position the target first makes the decode step the loop
   would have made just before (it streams the target's weights through the CPU's caches, and a
   draft row read right after one costs about twice a row read after other draft rows), then the
   draft decides how far to draft and computes its rows, each timed: c per row depth
   (`Replay.c_by_depth`), the first row the dearest.
3. The calls are followed in expectation over the completion (`call_mass`): a call that starts at
   n and drafts k tokens yields t <= k tokens with probability a_1..a_{t-1} (1 - a_t), and k + 1
   with a_1..a_k; the next call starts t tokens later.  Each call costs its k rows (c_1 + ... + c_k,
   `draft_cost`) plus the measured cost of scoring k + 1 tokens (`chain_speedup`).  Correlations along the text (a copied line accepts
   run after run) are kept, which one average alpha loses.

Given its text, speculative sampling's acceptances are independent with the chances of step 2, so the
expected calls of step 3 are exactly those of a run that wrote that text, and over texts sampled as
the run samples them, those of the run.  Greedy decoding with a deterministic draft has every accept
0 or 1, and the calls are then exactly those speculative sampling makes on that completion (a test
checks this on the real model).  Under sampling the pilot reads a few draws of the target's text:
the run's own text differs, and a prediction is only as good as the pilot's texts are typical.

A tree's chances by rank at each depth (`specref.apps.demo.TreeProfile`'s `profile`) come from the
same replay: at each depth of each call the draft's children are drawn as the tree would draw them
from the row there, and their chances (`root_chances`) are averaged, weighted by the chance
that the walk got that deep and by how often a call starts at that position (the expected calls of
a chain of k_max drafts: a call that accepts a copied run skips the positions inside it).  They are
measured at every depth a chosen tree can reach (TREE_DEPTHS): a depth not measured would take the
deepest measured one's chances, and in copied text, where a walk that got three deep nearly always
goes on, that promised a deep spine tokens the text's copied runs do not have.  Unlike a chain's,
these chances are the ones before the text's token is known (alpha's kind, not step 2's): the tree
formula multiplies one table of chances along every path, which only the text's own path could
condition.  Children drawn top-k (greedy decoding, prompt lookup) need no formula: given the text,
the walk goes on exactly where the text's next token is a child in the tree, so the replay keeps
that token's rank at each depth of each call (`Replay.ranks`) and `tree_calls` counts a shape's calls
over the text, exactly (greedily) or exactly in expectation (sampled texts), as step 3 does for a
chain.  Tested: the chances multiplied along paths missed those calls (they forget where the calls
start, which in copied text decides how deep they go).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np

from specref import speedup
from specref.sampling import check_tokens, draft_length, next_distributions
from specref.trees import Tree, check_parents, children_of, depth, draft_rows, draw_children
from specref.warps import Warp

K_CHOICES = 8    # K is chosen among 1..K_CHOICES
TREE_DEPTHS = K_CHOICES  # depths of a tree's profile measured (the root and depths 1 to 7): as deep as a chosen
                         # tree reaches, so that no depth takes a shallower one's chances (module docstring)
TREE_WIDTH = 4   # children ranked at each depth, and the widest node a chosen tree may have
TREE_VERIFY = {"topk": "topk", "iid": "mss", "without_replacement": "rrs"}  # the verify column of a tree row
TIMED_EVERY = 4  # the draft's rows are timed at every 4th position of a pilot text, each after a target decode step


@dataclass
class Replay:
    """One draft replayed over the pilot's completions (module docstring)."""

    accept: list = field(default_factory=list)   # per completion: [L, k_max], nan past the completion's end
    drafted: list = field(default_factory=list)  # per completion: [L, k_max] ints, tokens drafted when allowed K = j + 1
    tree_sums: np.ndarray = field(default_factory=lambda: np.zeros((TREE_DEPTHS, TREE_WIDTH)))  # chances by
                                                 # [depth, rank], each weighted by the chance the walk got there
    tree_weights: np.ndarray = field(default_factory=lambda: np.zeros(TREE_DEPTHS))  # [depth] the weights' sums
    draft_seconds: float = 0.0   # time of the timed rows (warped as the run warps them; module docstring, step 2)
    rows: int = 0                # rows timed
    decode_seconds: float = 0.0  # the target's decode steps in the pilot's ArS runs, their time in all
    decode_steps: int = 0        # and their number: c's unit is their mean
    depth_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [j]: time of the timed rows at depth
                                 # j + 1 of a call (the first's with the draft's decision how far to draft)
    depth_rows: np.ndarray = field(default_factory=lambda: np.zeros(0))     # [j]: how many rows that was
    ranks: list = field(default_factory=list)  # per completion, for children drawn top-k: [L, TREE_DEPTHS] ints, the
                                               # rank of the text's token among the children drawn at depth d of a
                                               # call at n, -1 if none is it (`tree_calls`); empty otherwise

    @property
    def c(self) -> float:
        """One draft row / one decode step (the mean over every pilot completion pooled in)."""
        if not self.rows or not self.decode_steps or not self.decode_seconds > 0:
            raise ValueError("the replay has no timed rows or no decode step to compare them with")
        return self.draft_seconds / self.rows / (self.decode_seconds / self.decode_steps)

    @property
    def c_by_depth(self) -> list[float]:
        """[j]: the draft's row at depth j + 1 of a call / one decode step, for the depths timed (their first rows
        after a target call, as the loop meets them); [c] where the replay timed no depth apart."""
        c = self.c                                                # raises where nothing was timed
        step = self.decode_seconds / self.decode_steps
        return [float(s / n / step) for s, n in zip(self.depth_seconds, self.depth_rows) if n > 0] or [c]

    @property
    def alpha(self) -> float:
        """The one-step-ahead acceptance averaged over the completions' positions, given each position's token (module
        docstring, step 2): over texts sampled as the run samples them, its mean is Definition 3.1's alpha."""
        first = np.concatenate([a[:, 0] for a in self.accept]) if self.accept else np.zeros(0)
        return float(first.mean()) if first.size else 0.0

    @property
    def tokens(self) -> int:
        """Tokens of the completions replayed."""
        return int(sum(len(a) for a in self.accept))

    @property
    def profile(self) -> list[list[float]]:
        """The tree's chances by rank at each depth reached (the `accept` of `speedup.tree_expected_tokens`)."""
        out = []
        for sums, w in zip(self.tree_sums, self.tree_weights):
            if not w > 0:
                break
            out.append([float(v) for v in sums / w])
        return out

    def add(self, other: "Replay") -> "Replay":
        """This replay with another completion's pooled in (rows, times and decode steps added up)."""
        return Replay(self.accept + other.accept, self.drafted + other.drafted, self.tree_sums + other.tree_sums,
                      self.tree_weights + other.tree_weights, self.draft_seconds + other.draft_seconds,
                      self.rows + other.rows, self.decode_seconds + other.decode_seconds,
                      self.decode_steps + other.decode_steps, _plus(self.depth_seconds, other.depth_seconds),
                      _plus(self.depth_rows, other.depth_rows), self.ranks + other.ranks)

    @staticmethod
    def pooled(replays: "list[Replay]") -> "Replay":
        """One draft's replays over several completions, pooled into one (`add`); ValueError for none."""
        if not replays:
            raise ValueError("no replay to pool: the pilot read no completion")
        return functools.reduce(Replay.add, replays)


def _plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # [m], [n] -> [max(m, n)]: summed, the shorter padded with 0
    out = np.zeros(max(len(a), len(b)))
    out[:len(a)] += a
    out[:len(b)] += b
    return out


def draft_cost(c, k: int) -> float:
    """What drafting k rows costs, in decode steps: k c for one c per row, or c[0] + ... + c[k - 1] for costs by row
    depth (`Replay.c_by_depth`; depths past the last timed cost as the last)."""
    if np.ndim(c) == 0:
        return k * float(c)
    c = [float(v) for v in c]
    if not c:
        raise ValueError("no draft cost per row depth: need at least one")
    return sum(c[:k]) + max(0, k - len(c)) * c[-1]


def call_mass(accept: np.ndarray, drafted: np.ndarray) -> np.ndarray:  # [L, >= k], [L] -> [L]
    """mass[n]: the expected number of calls that start at position n of a completion of L tokens (the
    first call at 0), when a call at n drafts drafted[n] tokens accepted with accept[n, :] (module
    docstring, step 3).  A call near the end drafts past the completion; only its rows inside count."""
    L = len(drafted)
    mass = np.zeros(L + int(np.max(drafted, initial=0)) + 2)
    mass[0] = 1.0
    for n in range(L):
        m = mass[n]
        if m == 0.0:
            continue
        k = min(int(drafted[n]), L - n)
        reach = 1.0
        for t in range(1, k + 1):
            a = float(accept[n, t - 1])
            mass[n + t] += m * reach * (1.0 - a)
            reach *= a
        mass[n + k + 1] += m * reach
    return mass[:L]


def chain_speedup(replay: Replay, K: int, c, costs) -> float:
    """The predicted speedup over ArS of a chain of at most K drafts: tokens over the calls' cost in decode
    steps, each call draft_cost(c, k) + costs[k - 1] (k rows drafted, then k + 1 tokens scored; a call that drafts
    nothing is one decode step).  c: one draft row's cost, or the costs by row depth (`draft_cost`)."""
    costs = np.asarray(costs, dtype=np.float64)
    if not 1 <= K <= len(costs):
        raise ValueError(f"K = {K}: the scoring costs cover K = 1 to {len(costs)}")
    if not replay.accept:
        raise ValueError("the replay read no completion")
    if any(a.shape[1] < K for a in replay.accept):
        raise ValueError(f"K = {K} is more than the {replay.accept[0].shape[1]} rows the replay drafted per call")
    score = np.concatenate([[1.0], costs])          # score[k]: a call that drafted k tokens
    drafting = np.array([draft_cost(c, k) for k in range(K + 1)])  # drafting[k]: its k rows
    tokens = cost = 0.0
    for accept, drafted in zip(replay.accept, replay.drafted):
        k = drafted[:, K - 1]
        mass = call_mass(accept, k)
        tokens += len(k)
        cost += float(mass @ (drafting[k] + score[k]))
    return tokens / cost


def best_K(replay: Replay, c, costs) -> tuple[int, float]:
    """(K, predicted speedup) for the K in 1..len(costs) that `chain_speedup` predicts fastest (the smallest on ties)."""
    k_max = min(len(costs), min(a.shape[1] for a in replay.accept))
    pred = [chain_speedup(replay, K, c, costs) for K in range(1, k_max + 1)]
    best = int(np.argmax(pred))
    return best + 1, pred[best]


def replay(target, draft, prompt, completion, warp: Warp, k_max: int, drawing: str | None = None,
           rng: np.random.Generator | None = None, decode_seconds: float = 0.0, decode_steps: int = 0,
           timed_every: int = TIMED_EVERY) -> Replay:
    """Replay `draft` over the target's own `completion` of `prompt` (module docstring, step 2).

    Every call position n of the completion gets up to k_max rows; drawing (a tree's way of drawing
    children, `specref.trees.draw_children`, or None) also measures a tree's chances by rank at depths
    0 to TREE_DEPTHS - 1.  A target with a KV cache (`target.cache`) is rolled back so that at each call
    it holds exactly what it would hold then: the draft reads the target's states only from there.
    At positions n divisible by timed_every the rows are timed as a call meets them: right after the
    target's decode step of the token before (module docstring); the other positions are not timed.
    decode_seconds, decode_steps: the target's time and steps in the ArS run that sampled the completion
    (their mean is the unit of c; `Replay.add` pools them over completions)."""
    prompt, completion = check_tokens(prompt, name="the prompt"), check_tokens(completion, name="the completion")
    if int(timed_every) != timed_every or timed_every < 1:
        raise ValueError(f"timed_every must be a whole number >= 1, got {timed_every}")
    full = np.concatenate([prompt, completion])
    P, L = len(prompt), len(completion)
    q = warp(next_distributions(target, full, L + 1)[:L])      # [L, V] q[i]: the target's row for completion token i
    cache = getattr(target, "cache", None)
    accept = np.full((L, k_max), np.nan)                    # given the text's tokens (module docstring, step 2)
    alphas = np.full((L, k_max), np.nan)                    # before them, as a tree's chances are
    drafted = np.zeros((L, k_max), np.int64)
    chances_at = np.zeros((L, TREE_DEPTHS, TREE_WIDTH))      # [n, depth, rank] chances, times the reach
    reach_at = np.zeros((L, TREE_DEPTHS))                   # [n, depth] the chance the walk got there
    candidates = getattr(draft, "candidates", None) if drawing == "topk" else None
    ranks = np.full((L, TREE_DEPTHS), -1, np.int64)           # top-k children: the text token's rank (`tree_calls`)
    rng = rng if rng is not None else np.random.default_rng(0)
    depth_seconds, depth_rows = np.zeros(k_max), np.zeros(k_max)
    for n in range(L - 1, -1, -1):                          # later calls first: the cache only shrinks
        t = P + n                                           # the call's first draft token
        timed = n % timed_every == 0 and t >= 2
        if cache is not None and cache.length > t - 1 - timed:
            cache.rollback(cache.length - (t - 1 - timed))
        if timed:                                           # the loop's target call just before this one
            next_distributions(target, full[:t - 1], 1)
            start = time.perf_counter()
            drafted[n, k_max - 1] = draft_length(draft, full[:t], k_max)
            depth_seconds[0] += time.perf_counter() - start  # deciding how far to draft is part of drafting
        reach, rows = 1.0, []
        for j in range(1, min(k_max, L - n) + 1):
            context = full[:t + j - 1]
            start = time.perf_counter()
            raw = next_distributions(draft, context, 1)[0]
            p = warp(raw[None])[0]
            rows.append(time.perf_counter() - start)
            x, qx = completion[n + j - 1], q[n + j - 1]
            alphas[n, j - 1] = float(np.minimum(p, qx).sum())  # before the text's token (Definition 3.1)
            accept[n, j - 1] = min(1.0, float(p[x] / qx[x])) if qx[x] > 0 else alphas[n, j - 1]  # given it (step 2)
            d = j - 1
            if drawing is not None and d < TREE_DEPTHS and (reach > 0 or drawing == "topk"):
                if candidates is not None:
                    kids = [int(v) for v in candidates(context, TREE_WIDTH)]
                else:
                    kids = [int(v) for v in draw_children(raw if drawing == "topk" else p, TREE_WIDTH, drawing, rng)]
                if drawing == "topk" and x in kids:
                    ranks[n, d] = kids.index(x)
                chances = root_chances(kids, p, qx, drawing)
                chances_at[n, d, :len(chances)] = reach * np.asarray(chances)
                reach_at[n, d] = reach
            reach *= alphas[n, j - 1]
        if timed:
            depth_seconds[:len(rows)] += rows
            depth_rows[:len(rows)] += 1
        for K in range(1, k_max + 1 - timed):
            drafted[n, K - 1] = draft_length(draft, full[:t], K)
    # Calls do not start at every position: one that accepts a run of drafts skips it, so the positions
    # after a rejection start more calls than those inside a copied run.  Each position's chances count
    # as often as a call starts there, in expectation, with a chain of k_max drafts (`call_mass`), all of
    # it with the chances before each token is known, as the tree's own chances are.
    starts = call_mass(alphas, drafted[:, k_max - 1])        # [L]
    sums, weights = np.einsum("n,ndw->dw", starts, chances_at), starts @ reach_at
    return Replay([accept], [drafted], sums, weights, float(depth_seconds.sum()), int(depth_rows.sum()),
                  decode_seconds, decode_steps, depth_seconds, depth_rows, [ranks] if drawing == "topk" else [])


def tree_calls(ranks: np.ndarray, parents) -> int:  # [L, D], [N] -> int
    """The target calls a tree of drafts of this shape, children drawn top-k, makes to write a text of L tokens,
    given ranks[n, d]: the rank of the text's token among the children drawn at depth d of a call whose first draft
    token is token n (-1 if none is it; `Replay.ranks`).  Top-k children are the draft's best, so given the text the
    walk is certain: at each node it goes on to the child whose token the text has next, if that child is in the
    tree, and a call that stops at depth d writes d + 1 tokens.  So the count is exact, greedily and, over sampled
    texts, in expectation: `best_tree` predicts a top-k tree's speedup from it rather than from the chances by rank,
    whose product along a path forgets where the calls start (a test counts the calls both ways)."""
    ranks = np.asarray(ranks)
    children = children_of(check_parents(parents).tolist())
    L, D = ranks.shape
    if depth(parents) > D:
        raise ValueError(f"a tree {depth(parents)} deep needs ranks at {depth(parents)} depths; the replay has {D}")
    calls = n = 0
    while n < L:
        calls, node, d = calls + 1, -1, 0
        while d < D and n + d < L and 0 <= ranks[n, d] < len(children[node + 1]):
            node, d = children[node + 1][ranks[n, d]], d + 1
        n += d + 1
    return calls


# ---------------------------------------------------------------- the chances of a tree's children

def root_chances(children_tokens, p: np.ndarray, q: np.ndarray, drawing: str) -> list[float]:  # [k], [V], [V] -> [k]
    """The chance that the tree verifier for `drawing` accepts each child of the root, in order, exactly over
    its uniforms (the rules of `specref.mrs`'s verify_tree_topk, _mss, _rrs): P(walk goes on to the child of rank r)."""
    if drawing == "topk":
        return [float(q[x]) for x in children_tokens]       # y ~ q, followed when it is a child
    out, stay, w, d = [], 1.0, q.copy(), p.copy()           # w, d: the target's and the draft's rows as the tests leave them
    for x in children_tokens:
        a = min(1.0, w[x] / d[x]) if d[x] > 0 else 0.0
        out.append(stay * a)
        stay *= 1.0 - a
        r = np.maximum(w - d, 0.0)
        if r.sum() > 0:
            w = r / r.sum()
        if drawing == "without_replacement":
            d[x] = 0.0
            if d.sum() > 0:
                d = d / d.sum()
    return out


def chances_text(profile) -> str:
    """A profile in a line: the root's chances by rank, then each deeper depth's (one list: the same at every depth)."""
    table = profile if all(np.ndim(row) == 1 for row in profile) else [profile]
    rows = [" ".join(f"{v:.2f}" for v in row) for row in table if len(row)] or ["none measured"]
    return rows[0] + "".join(f"; depth {d}: {row}" for d, row in enumerate(rows[1:], 1))


# ---------------------------------------------------------------- what the pilot chooses

@dataclass
class KChoice:
    """K for one draft and setting, from Leviathan's model with measured costs: `choose_K_replayed` (the calls over
    the pilot's text), or `specref.apps.demo.choose_K` (Theorem 3.8 from one alpha and c)."""

    K: int
    alpha: float  # measured in the pilot (one step ahead, averaged over its text)
    c: float  # one draft step / one decode step, measured in the pilot (a replayed choice: its first row's, `Replay.c_by_depth`)
    predicted: float  # the a-priori prediction: the model's speedup at K from the pilot and the scoring costs
                      # measured before the run (the table's "predicted")
    needed: float  # the smallest alpha at which some K pays (`speedup.alpha_needed`: one alpha for every token)
    replayed: bool = False  # predicted from the calls over the pilot's text (`choose_K_replayed`), not one alpha

    @property
    def pays(self) -> bool:
        return self.predicted > 1.0

    def why(self) -> str:
        head = f"alpha {self.alpha:.2f}, c {self.c:.3f}: "
        if self.pays:
            return head + f"K = {self.K} predicts {self.predicted:.2f}x"
        if self.needed >= 1:
            return head + (f"no K pays (best K = {self.K} predicts {self.predicted:.2f}x); no alpha would: every call "
                           f"costs more than it can yield")
        if self.replayed:  # the text's acceptance is uneven: its mean alone does not decide
            return head + (f"no K pays on the pilot's text (best K = {self.K} predicts {self.predicted:.2f}x); with "
                           f"one alpha for every token it would take alpha >= {self.needed:.2f}")
        return head + f"no K pays (best K = {self.K} predicts {self.predicted:.2f}x); it would take alpha >= {self.needed:.2f}"


def choose_K_replayed(replay: Replay, costs: list[float]) -> KChoice:
    """K predicted fastest (`specref.apps.pilot.best_K`) from a draft's replay over the pilot's text, its rows'
    costs by depth (`Replay.c_by_depth`) and the measured scoring costs; alpha in the choice is the replay's, c its
    first row's (the one every call that drafts pays)."""
    c = replay.c_by_depth
    K, predicted = best_K(replay, c, costs)
    return KChoice(K, replay.alpha, c[0], predicted, speedup.alpha_needed(c[0], costs), replayed=True)


def tree_shapes(max_nodes: int = K_CHOICES, max_width: int = TREE_WIDTH) -> list[str]:
    """The shapes `best_tree` considers: spines "a+b+..." (a >= 2, non-increasing) and widths "axb..."
    (a >= 2, b... non-increasing) with at most max_nodes nodes and no node wider than max_width; chains
    are left to the choice of K."""
    def spines(left, top):  # non-increasing parts, each <= top, summing to at most `left`
        for a in range(1, min(top, left) + 1):
            yield [a]
            for rest in spines(left - a, a):
                yield [a] + rest

    names = {"+".join(map(str, s)) for s in spines(max_nodes, max_width) if s[0] >= 2}
    for s in spines(max_nodes, max_width):  # widths: the nodes at depth d are the product of the first d
        if s[0] >= 2 and sum(int(np.prod(s[:d + 1])) for d in range(len(s))) <= max_nodes and len(s) > 1:
            names.add("x".join(map(str, s)))
    return sorted(names, key=lambda n: (Tree.parse(n).size, n))


@dataclass
class TreeChoice:
    """A tree for one draft and setting, from Theorem 3.8 for trees with measured costs (`best_tree`)."""

    tree: str  # the best shape of `tree_shapes()`
    drawing: str
    profile: list  # chances by rank at each depth, measured in the pilot (`specref.apps.pilot`)
    c: float  # one draft row / one decode step, measured in the pilot (replayed: the first row's, `Replay.c_by_depth`)
    predicted: float  # the a-priori prediction: the model's speedup for that tree from the pilot's chances and c
                      # and the scoring costs measured before the run (the table's "predicted")
    chain: "KChoice | None" = None  # the chain chosen for the same draft and setting, to compare with

    @property
    def pays(self) -> bool:
        return self.predicted > 1.0

    def why(self) -> str:
        head = f"{TREE_VERIFY[self.drawing]} children, chances by rank {chances_text(self.profile)}, c {self.c:.3f}: "
        than = "" if self.chain is None else f" (the chain: K = {self.chain.K} predicts {self.chain.predicted:.2f}x)"
        if self.pays:
            return head + f"tree {self.tree} predicts {self.predicted:.2f}x" + than
        return head + f"no tree pays (best tree {self.tree} predicts {self.predicted:.2f}x)" + than


def choose_tree_replayed(replay: Replay, drawing: str, costs: list[float], chain: KChoice | None = None
                         ) -> TreeChoice:
    """`best_tree` with the chances by rank and the rows' costs by depth of a draft's replay over the pilot's text,
    and for children drawn top-k the text tokens' ranks (`Replay.ranks`)."""
    return best_tree(replay.profile, drawing, replay.c_by_depth, costs, chain,
                     replay.ranks if drawing == "topk" else None)


def best_tree(profile, drawing: str, c, costs: list[float], chain: KChoice | None = None,
              ranks: list | None = None) -> TreeChoice:
    """The tree of `tree_shapes()` predicted fastest from the draft's cost per row (c, or its costs by row depth:
    `draft_cost`), the scoring costs (costs[N - 1]: a tree of N nodes, as `speedup.tree_cost_curve` prices it where
    the tree's own cost was measured, else a chain of N + 1 tokens) and its tokens per call: with `ranks` (children
    drawn top-k, one [L, D] array per pilot text) the calls it makes over those texts (`tree_calls`), otherwise
    `speedup.tree_walltime_improvement`'s from the chances by rank at each depth (`profile`)."""
    profile = profile or [0.0]
    if ranks is not None and drawing != "topk":
        raise ValueError(f"ranks give a tree's calls only for children drawn top-k, not {drawing!r}")

    def predicted(name: str) -> float:
        tree = Tree.parse(name)
        rows = draft_rows(tree.parents)
        if ranks:
            tokens, calls = sum(len(r) for r in ranks), sum(tree_calls(r, tree.parents) for r in ranks)
            return tokens / calls / (draft_cost(c, rows) + float(costs[tree.size - 1]))
        return speedup.tree_walltime_improvement(tree.parents, profile, draft_cost(c, rows) / max(rows, 1),
                                                 costs[tree.size - 1])

    best = max(tree_shapes(len(costs)), key=lambda n: (predicted(n), -Tree.parse(n).size))
    return TreeChoice(best, drawing, profile, float(draft_cost(c, 1)), predicted(best), chain)
