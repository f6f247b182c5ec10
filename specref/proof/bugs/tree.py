"""The known bugs of tree verification: each a `TreeBug`, its docstring naming where it shipped.

Called like `mrs_tree.verify_tree_mss` a TreeBug samples; `.law(tokens, parents, p, q)` is its exact law for
a fixed tree.  Most are a correct rule (`specref.proof.tree_rule`) with one piece changed.  BUGS lists, for
each tree verifier of `specref.verifiers`, the bugs its checks are measured on.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

import numpy as np

from specref import mrs, mrs_tree
from specref.proof.bugs import Bug
from specref.proof.bugs.shipped import REQUEST_TEMPERATURE, unwarped
from specref.proof.tree_rule import MSS, Coin, Rule, _as_float, _normalised, _q_without
from specref.trees import children_of


class TreeBug(Bug):
    """A known way to get tree verification wrong: call it like `mrs_tree.verify_tree_mss` to sample it; `.law(tokens,
    parents, p, q)` is its exact law for a fixed tree (over its uniforms)."""

    def __call__(self, tokens, parents, p, q, rng):
        return self.sample(tokens, parents, p, q, rng)


def rule_bug(name: str, about: str, rule: Rule, sample: Callable | None = None) -> TreeBug:
    """A TreeBug whose law is `rule.law` and whose sampler is `rule.sample` (or `sample`, a verifier of specref.mrs)."""
    return TreeBug(name, about, sample or rule.sample, rule.law)


def _previous_row(row: int, children, parents) -> int:  # node i reads q[i], not q[i + 1]; the root q[0]
    return max(row - 1, 0)


def _first_sibling_row(row: int, children, parents) -> int:  # node i reads the row of its parent's first child
    return row if row == 0 else children[parents[row - 1] + 1][0] + 1


def _unwarped_bonus(q_row):  # the bonus token from softmax(logits): the rows without the request's temperature
    return unwarped(_as_float(q_row))


def _stale_residual(q_row, p_row, tried):  # [V], [V], tried tokens -> [V] weights
    # SGLang's kernel draws the recovered token from relu(q - draft_probs), where draft_probs holds q(c) at each
    # rejected child and, before the fix, whatever the buffer held elsewhere (empty_like): modelled as the
    # draft's own row p.  An all-zero relu gives the kernel's initial id, V - 1.
    if isinstance(q_row, np.ndarray):  # the sampler's float rows, in O(V) array operations
        stale, tried = np.array(p_row, dtype=np.float64), list(tried)
        stale[tried] = q_row[tried]
        r = np.maximum(q_row - stale, 0.0)
        if r.sum() > 0:
            return r
        r[-1] = 1.0
        return r
    stale = [q_row[y] if y in tried else v for y, v in enumerate(p_row)]
    r = [max(0 * v, v - u) for u, v in zip(stale, q_row)]
    return r if sum(r) > 0 else [0 * v for v in q_row[:-1]] + [1 + 0 * q_row[-1]]


def stale_draft_probs() -> TreeBug:
    """SGLang #12561 (the fix of issue #12512, output repetition): `draft_probs = torch.empty_like(target_probs)` in
    the spec v2 sampling path (eagle_info_v2.py), so tree_speculative_sampling_target_only built the recovered token's weights relu(q - draft_probs) from
    uninitialised memory; only the rejected children's entries were written (with q).  Modelled deterministically:
    the buffer holds the draft's rows p of the same call (a caching allocator handing back the block the draft's
    probabilities were just freed from), so the recovered token comes from max(0, q - p) with the rejected
    children removed.  Checked as tree-topk."""
    return rule_bug("stale_draft_probs", "draws the recovered token from max(0, q - draft_probs) with a draft_probs "
                    "buffer that was never cleared (stale rows, modelled as the draft's p; SGLang #12561)",
                    Rule("topk", recovered=_stale_residual))


def inclusive_zero_coin(test: str) -> TreeBug:
    """SGLang #35771 (fixed by PR #35798): tree_speculative_sampling_target_only accepted when `coin <= prob_acc /
    threshold_acc`, and torch.rand's float32 coin can be exactly 0, so a child the target gives probability 0 was
    accepted (EAGLE's evaluate_posterior tests `r <= acp` the same way, with Python's random(), which is 0 with chance
    2^-53).  Modelled with a coin on float32's grid (SGLang's torch.rand: 0 with chance 2^-24) and `<=`: the law
    moves by about 2^-24, which the exact tier sees and the u = 0 edge test catches for certain; a chi-square of
    20 000 calls cannot."""
    return rule_bug("inclusive_zero_coin", "accepts iff coin <= ratio with a coin that can be exactly 0 (torch.rand's "
                    "float32 coin with chance 2^-24, Python's random() with chance 2^-53): a child "
                    "the target gives probability 0 can be accepted (SGLang #35771, fixed by PR #35798)",
                    Rule(test, coin=Coin(inclusive=True)))


def wrong_logits_slice(test: str) -> TreeBug:
    """TensorRT-LLM #15098 (TRTLLM-13319): EAGLE3 dynamic-tree rejection sampling (added by PR #12588) verified
    with an incorrect slice of the target's logits until this fix.  Modelled as an off-by-one in the flattened rows: the children of
    node i are tested, and its last token drawn, against q[i] (the previous node's row: its parent's for node 0, a
    sibling's or a cousin's for the others) instead of q[i + 1]; the root's row is right."""
    return rule_bug("wrong_logits_slice", "reads the target row one before the node's own (q[i] for node i, an "
                    "off-by-one slice of the tree's logits; TensorRT-LLM #15098)", Rule(test, q_row=_previous_row))


def sibling_row(test: str) -> TreeBug:
    """Reading a sibling's row: every node reads the target row of its parent's first child, the row a chain
    verifier indexes by depth would read (right for first children, a sibling's row for the others)."""
    return rule_bug("sibling_row", "reads the target row of the node's first sibling (indexing rows by depth, as "
                    "for a chain), not its own", Rule(test, q_row=_first_sibling_row))


def bonus_unwarped(test: str) -> TreeBug:
    """EAGLE from commit 6aa1ed8 until its fix in 50fc246 / c892473 (eagle/model/utils.py, evaluate_posterior, in
    EAGLE-1 and EAGLE-2 alike): after the deepest accepted node the token
    came from torch.softmax(logits) without the request's logits processor (temperature, top-p), while every test
    used the processed rows.  Modelled with temperature 0.7 (`REQUEST_TEMPERATURE`): the bonus token after
    a node without children is drawn from softmax(logits) = norm(q ** 0.7) instead of q."""
    return rule_bug("bonus_unwarped", f"draws the bonus token from the target row without the request's temperature "
                    f"{REQUEST_TEMPERATURE:g} (softmax of the raw logits; EAGLE from 6aa1ed8 until 50fc246 / c892473)",
                    Rule(test, bonus=_unwarped_bonus))


def iid_rule_on_ranked_children() -> TreeBug:
    """Ranked (top-k) children verified with the i.i.d. ratio rule, min(1, q(c) / p(c)) and q <- norm(max(0, q - p)):
    exact only for children drawn i.i.d. from p, not for the draft's most likely tokens (llama.cpp's
    examples/speculative ranks the children of its draft tree and verifies them with the ratio rule).  The sampler is
    verify_tree_mss itself, handed top-k trees.  Checked as tree-topk."""
    return rule_bug("iid_rule_on_ranked_children", "verifies deterministic top-k children with SpecInfer's i.i.d. "
                    "ratio rule (min(1, q / p), residual max(0, q - p)): exact only for i.i.d. children", MSS,
                    mrs_tree.verify_tree_mss)


def rrs_without_zeroing_p() -> TreeBug:
    """Recursive rejection sampling without its second step: after a rejection q <- norm(max(0, q - p)) but p is
    not zeroed at the rejected token, so the next child (drawn without replacement, from p without the earlier
    ones) is tested against the wrong draft law.  The sampler is verify_tree_mss itself, handed trees drawn
    without replacement.  Checked as tree-rrs."""
    return rule_bug("rrs_without_zeroing_p", "verifies children drawn without replacement with SpecInfer's rule: "
                    "p is not zeroed at a rejected token, so later children are tested against the wrong draft law",
                    MSS, mrs_tree.verify_tree_mss)


def merged_repeated_siblings() -> TreeBug:
    """Duplicate siblings under SpecInfer: i.i.d. children repeat, and testing a token only once per node (a
    shortcut: a repeat of a rejected token would be rejected anyway) skips the second update
    q <- norm(max(0, q - p)) that the repeat's draw requires; merging identical siblings of a token tree (as trees
    built from several drafts' sequences merge common prefixes) loses it the same way.  Checked as tree-mss."""
    return rule_bug("merged_repeated_siblings", "tests a repeated i.i.d. sibling only once (identical siblings "
                    "merged): the repeat's residual update max(0, q - p) is skipped", Rule("mss", merge_repeats=True))


def _last_token_at_slot(tokens, node: int, accepted: int, last: int) -> int:
    # The last token is written at index `accepted` of the node buffer, and the path is then read from the buffer:
    # the accepted node whose index equals the path's length reads the last token instead of its own.
    return last if node == accepted else tokens[node]


def last_token_over_accepted_node(test: str) -> TreeBug:
    """Sequoia (Infini-AI-Lab/Sequoia, Tree/SpecTree.py and Tree/SpecInferTree.py, `verify`, as of its commit
    0ff3ff7): with the accepted nodes' buffer indices in accept_list (the prefix's positions, then one per
    accepted node), it writes the last token, recovered or bonus, at `tokens[accept_length]`, accept_length =
    len(accept_list), and only then gathers the path with `tokens[:accept_length] = tokens[accept_list]`.  A node's
    buffer index is the prefix's length plus its number, so the last token lands on node m's slot (node numbering
    from 0, m the number of accepted nodes); when node m is on the accepted path, the gathered path reads the last
    token there instead of the node's own.  Level-by-level numbering puts node m on a path often: in a 2x2 tree
    node 1 (the root's second child) when one node is accepted, node 2 (the first child of node 0) when two are.
    Found by running this checker on Sequoia's code through an adapter; we found no report of it upstream.  The
    walk and the accept tests are the correct rule's; only the output is gathered after the write.  Checked as
    tree-mss (SpecInferTree: i.i.d. children) and tree-rrs (SpecTree: children without replacement)."""
    return rule_bug("last_token_over_accepted_node", "writes the last token at index m of the node buffer (m = the "
                    "number of accepted nodes) before gathering the accepted path from that buffer, so the accepted "
                    "node numbered m outputs the last token instead of its own (Sequoia's verify: "
                    "tokens[accept_length] is written before tokens[accept_list] is gathered; found by this checker, "
                    "no upstream report found)", Rule(test, path_token=_last_token_at_slot))


class SGLangThresholds(TreeBug):
    """SGLang's tree_speculative_sampling_target_only with --speculative-accept-threshold-single and -acc below 1:
    lossy by design.  At each node one coin u; walking the children c_1, c_2, ... with the cumulative target mass
    S_i = q(c_1) + ... + q(c_i), child c_i is accepted if u < S_i / threshold_acc or q(c_i) >= threshold_single;
    if none is, the token comes from q without the children.  At thresholds 1 this is exactly verify_tree_topk
    (the negative control); below 1 children are accepted too often.  Checked as tree-topk."""

    def __init__(self, single: float = 1.0, acc: float = 1.0):
        self.single, self.acc = Fraction(single), Fraction(acc)
        name = f"sglang_thresholds_single_{single:g}_acc_{acc:g}"
        super().__init__(name, f"SGLang's target-only tree sampler with threshold_single {single:g} and threshold_acc "
                               f"{acc:g}: accepts a child if u < S_i / {acc:g} or q(c_i) >= {single:g} (lossy below 1)")

    def _node(self, xs, q_row):  # [k], [V] -> [(chance c_k is the one accepted, k)], chance none is
        accepts, below, cum = [], 0, 0  # below: P(u < S_{i-1} / acc), already accepted
        for k, x in enumerate(xs):
            cum = cum + q_row[x]
            if q_row[x] > 0 and Fraction(q_row[x]) >= self.single:
                accepts.append((1 - below, k))
                return accepts, 0
            reach = min(1, cum / self.acc) if q_row[x] > 0 else below  # a q = 0 child is never accepted (PR #35798)
            accepts.append((reach - below, k))
            below = reach
        return accepts, 1 - below

    def law(self, tokens, parents, p, q) -> dict[tuple, object]:  # [N], [N], [N+1][V], [N+1][V]
        tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
        children = children_of(parents)

        def at(row):
            kids = children[row]
            if not kids:
                return {(y,): v for y, v in enumerate(q[row]) if v > 0}
            accepts, none = self._node([tokens[i] for i in kids], q[row])
            law = {}
            for chance, k in accepts:
                if chance > 0:
                    for rest, v in at(kids[k] + 1).items():
                        law[(tokens[kids[k]],) + rest] = law.get((tokens[kids[k]],) + rest, 0) + chance * v
            if none > 0:
                for y, v in enumerate(_normalised(_q_without(q[row], None, [tokens[i] for i in kids]))):
                    if v > 0:
                        law[(y,)] = law.get((y,), 0) + none * v
            return law

        return at(0)

    def sample(self, tokens, parents, p, q, rng) -> np.ndarray:  # [N], [N], [N+1, V], [N+1, V] -> [n]
        tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
        q = np.asarray(q, dtype=np.float64)
        children = children_of(parents)
        single, acc = float(self.single), float(self.acc)
        out, row = [], 0
        while True:
            kids, coin, cum, accepted = children[row], rng.random(), 0.0, None  # one coin per node, as the kernel
            for i in kids:
                cum += q[row, tokens[i]]
                if q[row, tokens[i]] > 0 and (coin < cum / acc or q[row, tokens[i]] >= single):
                    accepted = i
                    break
            if accepted is None:
                out.append(mrs.sample(_as_float(_q_without(q[row], None, [tokens[i] for i in kids])), rng))
                return np.array(out, dtype=np.int64)
            out.append(tokens[accepted])
            row = accepted + 1


# SGLang's lossy thresholds at the settings the issue measures (both thresholds at once, as the flags are set).
THRESHOLDS = (SGLangThresholds(0.5, 0.5), SGLangThresholds(0.9, 0.9))

# The known bugs of each tree verifier (by its name in specref.verifiers), the ones its checks are measured on.
BUGS = {
    "tree-topk": (stale_draft_probs(), inclusive_zero_coin("topk"), wrong_logits_slice("topk"), bonus_unwarped("topk"),
                  *THRESHOLDS, iid_rule_on_ranked_children(), sibling_row("topk")),
    "tree-mss": (inclusive_zero_coin("mss"), wrong_logits_slice("mss"), bonus_unwarped("mss"), sibling_row("mss"),
                 merged_repeated_siblings(), last_token_over_accepted_node("mss")),
    "tree-rrs": (inclusive_zero_coin("rrs"), wrong_logits_slice("rrs"), bonus_unwarped("rrs"), sibling_row("rrs"),
                 rrs_without_zeroing_p(), last_token_over_accepted_node("rrs")),
}
