"""Trees of drafts through Chen's loop: `speculative_sampling(..., tree=Tree(...))` keeps the target's law.

The target is the suite's order-2 Markov chain (`laws.markov_pair`), so the law of every sequence of
N tokens is enumerated; whole sequences generated with a tree of drafts per call are compared with it
by chi-square at level stats.LEVEL (1e-3), fixed seeds (N = 4 new tokens, 1 500 runs), for each way of drawing children with its own
verifier (top-k children and verify_tree_topk, i.i.d. children and verify_tree_mss, children without
replacement and verify_tree_rrs) and two shapes each, and for prompt lookup's candidates.  Negative
controls, rejected by the same test: top-k children verified with the i.i.d. ratio rule, and children
drawn without replacement verified without zeroing p.  The chain is the tree with one child per node:
through verify_tree_mss it gives exactly the tokens of Algorithm 2 for the same seeds.  On a tiny
random SmolLM2 (tree attention, keep_path) greedy tree sampling equals greedy ArS and the cache holds
exactly the accepted tokens after every call.  Theorem 3.8's extension to trees (specref.speedup)
is checked against the exact expectation of verify_tree_topk's law.
"""

from fractions import Fraction

import numpy as np
import pytest

from specref import drafts, mrs_tree, sampling, speedup, trees
from specref.proof import laws, stats
from specref.proof import tree as prooftree
from specref.runstats import RunStats
from specref.trees import Tree
from specref.warps import Warped
from specref.proof import tree_rule
from tests.smollm2.test_tree_attention import tiny_model
from tools import tree_gain

V, PROMPT = laws.SEQ_V, laws.SEQ_PROMPT
N = 4                                         # 81 sequences: each run is two or three tree calls
TARGET, DRAFT = laws.markov_pair()
LAW = laws.sequence_law(TARGET, PROMPT, N)
RUNS = 1_500  # a second or two per test; the verifiers' own chi-square tiers (tests/proof) use more


def sequences(tree: Tree, seed: int, draft=DRAFT, verify_tree=None, runs: int = RUNS):
    def sampler(rng):
        return sampling.speculative_sampling(PROMPT, draft, TARGET, N, tree.size, rng, tree=tree,
                                             verify_tree=verify_tree)
    return stats.sample_sequences(sampler, runs, len(PROMPT), np.random.default_rng(seed))


@pytest.mark.default_cases("topk-2x1", "iid-2x2", "without_replacement-2x1")
@pytest.mark.parametrize("drawing,shape", [("topk", "2x1"), ("topk", "3+1"), ("iid", "2x2"), ("iid", "3+1"),
                                            ("without_replacement", "2x1"), ("without_replacement", "2+1+1")])
def test_tree_sequences_have_the_target_law(drawing, shape):
    tree = Tree.parse(shape, drawing)
    counts = sequences(tree, seed=300 + len(shape) + 7 * len(drawing))
    assert all(len(s) == N for s in counts)
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"{drawing} {shape}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.default_cases("draft0")
@pytest.mark.parametrize("draft", [drafts.PromptLookupDraft(V, n=2), drafts.PromptLookupDraft(V, n=2, adaptive=True),
                                   drafts.CopyOrModel(DRAFT, V, n=2)])
def test_trees_of_candidates_have_the_target_law(draft):
    """Prompt lookup's several matches (and a copy plus the model's top tokens) as top-k children."""
    counts = sequences(Tree.parse("3+1"), seed=310, draft=draft)
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"{draft!r}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.default_cases("without_replacement-3+1-verify_tree_mss")
@pytest.mark.parametrize("drawing,shape,wrong", [
    ("topk", "2x1", mrs_tree.verify_tree_mss),                  # ranked children, the i.i.d. ratio rule
    ("without_replacement", "3+1", mrs_tree.verify_tree_mss),   # drawn without replacement, p not zeroed
])
def test_the_sequence_test_rejects_a_tree_verified_by_the_wrong_rule(drawing, shape, wrong):
    counts = sequences(Tree.parse(shape, drawing), seed=320, verify_tree=wrong)
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"{drawing} {shape} verified by {wrong.__name__}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


@pytest.mark.parametrize("drawing,verify_tree", [("iid", mrs_tree.verify_tree_mss), ("without_replacement", mrs_tree.verify_tree_rrs)])
@pytest.mark.parametrize("K", [1, 3])
def test_a_chain_through_the_tree_loop_is_algorithm_2_token_for_token(K, drawing, verify_tree):
    for seed in range(30):
        chain = sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 40, K, np.random.default_rng(seed))
        tree = sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 40, K, np.random.default_rng(seed),
                                             tree=Tree.chain(K, drawing), verify_tree=verify_tree)
        np.testing.assert_array_equal(tree, chain)


# ---------------------------------------------------------------- drawing the children

def test_top_k_children_are_the_largest_p_ties_to_the_lower_id_never_p_0():
    p = np.array([0.1, 0.3, 0.0, 0.3, 0.2, 0.1])
    assert trees.draw_children(p, 2, "topk", None) == [1, 3]
    assert trees.draw_children(p, 4, "topk", None) == [1, 3, 4, 0]
    assert trees.draw_children(p, 9, "topk", None) == [1, 3, 4, 0, 5]      # p = 0 is never a child
    big = np.zeros(49152)
    big[[7, 40000, 123, 9]] = [0.25, 0.25, 0.4, 0.1]
    assert trees.draw_children(big, 3, "topk", None) == [123, 7, 40000]


def _by_inverse_cdf(row, width, children, uniforms):  # the documented draws, written out: one uniform per child
    row, out = [float(v) for v in row], []
    for _ in range(width if children == "iid" else min(width, sum(v > 0 for v in row))):
        u, c = next(uniforms), np.cumsum(row)
        out.append(int(np.searchsorted(c, u * c[-1], side="right")))
        if children == "without_replacement":
            row[out[-1]] = 0.0
    return out


@pytest.mark.parametrize("drawing", ["iid", "without_replacement"])
def test_children_are_drawn_by_the_inverse_cdf_of_one_uniform_each(drawing):
    """trees.draw_children (which the sampler and the proofs' draw_tree both use) maps each uniform to the
    smallest i with u * sum(row) < row[0] + ... + row[i], without replacement zeroing each drawn token."""
    row = np.array([0.1, 0.0, 0.45, 0.05, 0.4])
    for seed in range(200):
        got = trees.draw_children(row, 3, drawing, np.random.default_rng(seed))
        assert got == _by_inverse_cdf(row, 3, drawing, iter(np.random.default_rng(seed).random(3)))
    assert len(trees.draw_children(np.array([0.0, 1.0, 0.0]), 3, "without_replacement", np.random.default_rng(0))) == 1


def test_tree_names_and_shapes():
    assert Tree.parse("2x1").parents == (-1, -1, 0, 1) and Tree.parse("2x2").parents == (-1, -1, 0, 0, 1, 1)
    assert Tree.parse("3+1").parents == (-1, -1, -1, 0) and Tree.parse("2 + 1 + 1").parents == (-1, -1, 0, 2)
    assert Tree.parse("1x1x1x1").parents == Tree.parse("1+1+1+1").parents == Tree.chain(4).parents == (-1, 0, 1, 2)
    t = Tree.parse("4x3", "iid")
    assert (t.size, t.depth, t.rows, t.name, t.verifier) == (16, 2, 5, "4x3", mrs_tree.verify_tree_mss)
    assert Tree.parse("3+1").with_drawing("without_replacement").verifier is mrs_tree.verify_tree_rrs
    for bad in ["", "2x0", "2*2", "x2", "3+-1", "two"]:
        with pytest.raises(ValueError, match="a tree is written like"):
            Tree.parse(bad)
    with pytest.raises(ValueError, match="drawing must be one of"):
        Tree.parse("2x1", "sorted")
    with pytest.raises(ValueError, match="is not before node"):
        Tree((0, -1))
    with pytest.raises(ValueError, match="has 4 nodes: pass K = 4"):
        sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 5, 3, np.random.default_rng(0), tree=Tree.parse("2x1"))


def test_a_drawn_tree_leaves_out_what_its_parents_row_cannot_fill():
    """A one-hot draft has one top-k child per node: the shape 3+1 shrinks to a chain of 2."""
    draft = drafts.PromptLookupDraft(V, n=2)      # one-hot rows, and no candidates asked for with "iid"
    tokens, parents, p, calls = trees.draft_tree(draft, np.array([0, 1, 0]), Tree.parse("3+1", "without_replacement"),
                                                    np.random.default_rng(0))
    assert tokens.tolist() == [1, 0] and parents.tolist() == [-1, 0] and calls == 2
    assert p.shape == (3, V) and p[0, 1] == 1 and p[1, 0] == 1 and not p[2].any()   # the leaf's row is not drawn


def test_prompt_lookup_candidates_are_the_followers_of_every_match_latest_first():
    d = drafts.PromptLookupDraft(10, n=3)
    x = np.array([1, 2, 5, 1, 2, 6, 3, 2, 7, 1, 2])
    assert d.candidates(x, 4) == [6, 5, 7]        # after "1 2": 6 (the latest), 5; after "2": 7 (then 6, 5 again)
    assert d.candidates(x, 1) == [d.propose(x)]
    assert d.candidates(np.array([4, 5]), 3) == [5]                                        # no match: the last token
    assert drafts.PromptLookupDraft(10, adaptive=True).candidates(np.array([4, 5, 6]), 3) == []  # adaptive: nothing
    copy = drafts.CopyOrModel(drafts.NGramDraft.fit([[0, 1, 2, 2, 1, 0]], 3), 3, n=2)
    assert copy.candidates(np.array([0, 1, 2, 0, 1]), 3)[0] == 2 and len(copy.candidates(np.array([0, 1, 2, 0, 1]), 3)) == 3


def test_the_accepted_path_is_found_among_repeated_siblings_or_refused():
    tokens, parents = np.array([1, 1, 2, 0, 2]), np.array([-1, -1, 0, 1, 1])
    assert trees.path_nodes(tokens, parents, [1, 0]) == [1, 3]     # the second 1 holds the 0
    assert trees.path_nodes(tokens, parents, [1, 2]) == [0, 2]
    assert trees.path_nodes(tokens, parents, []) == []
    with pytest.raises(ValueError, match="not a path from the root"):
        trees.path_nodes(tokens, parents, [2])


class Recording:
    """The target, remembering every keep_path call and the tree it follows."""

    def __init__(self, model):
        self.model, self.kept, self.trees = model, [], []

    def next_probs(self, tokens, k):
        return self.model.next_probs(tokens, k)

    def score_tree(self, tokens, tree_tokens, parents):
        self.trees.append((np.array(tokens), np.array(tree_tokens), np.array(parents)))
        return trees.tree_distributions(self.model, tokens, tree_tokens, parents)

    def keep_path(self, nodes):
        self.kept.append(list(nodes))


def test_each_call_keeps_the_accepted_path_and_counts_the_levels_it_tested():
    target, trace = Recording(TARGET), RunStats()
    sampling.speculative_sampling(PROMPT, DRAFT, target, 60, 6, np.random.default_rng(5),
                                  tree=Tree.parse("2x2", "iid"), on_step=trace.add)
    assert len(target.kept) == len(target.trees) == trace.loops
    for (prefix, tokens, parents), nodes, step in zip(target.trees, target.kept, trace.steps):
        assert len(nodes) == step.n_accepted                                        # the path the verifier accepted
        assert [int(tokens[i]) for i in nodes][:len(step.tokens)] == step.tokens[:len(nodes)].tolist()
        assert all(parents[b] == a for a, b in zip([-1] + nodes, nodes))           # a path from the root
        ends_at_leaf = len(nodes) == 2
        assert step.n_examined == len(nodes) + (not ends_at_leaf) and step.n_drafted == 6 and step.draft_calls == 3
    assert 0 < trace.alpha_hat < 1


def test_on_the_tiny_model_greedy_tree_sampling_is_greedy_ars_and_the_cache_holds_the_tokens():
    """Tree attention and keep_path inside the loop: after every call the cache holds exactly the
    tokens so far but the last (the accepted path compacted, the rest of the tree dropped)."""
    model = tiny_model()
    prompt = np.array([3, 1, 4, 1, 5])
    want = sampling.autoregressive_sampling(prompt, Warped(model, 0.0), 30, np.random.default_rng(0))
    model.reset()
    draft = laws.MarkovChain.random(50, 1, np.random.default_rng(1), 0.3)
    seen = list(prompt)

    def check(step):
        seen.extend(int(t) for t in step.tokens)
        if len(seen) < len(prompt) + 30:                      # the last call may be cut to N
            assert model.cache.length == len(seen) - 1
            np.testing.assert_array_equal(model.cache.tokens[:model.cache.length], seen[:-1])

    got = sampling.speculative_sampling(prompt, draft, Warped(model, 0.0), 30, 4, np.random.default_rng(2),
                                        tree=Tree.parse("2x1", "topk"), on_step=check)
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- Eq. 1 and Theorem 3.8 for trees

def test_the_tree_extension_is_eq_1_and_theorem_3_8_on_a_chain():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for K in (1, 4):
            chain = Tree.chain(K).parents
            assert speedup.tree_expected_tokens(chain, [alpha]) == pytest.approx(speedup.expected_tokens(alpha, K))
            assert speedup.tree_walltime_improvement(chain, [alpha], 0.1, 1.9) == pytest.approx(
                speedup.walltime_improvement_measured(alpha, K, 0.1, 1.9))
    # 3+1 by hand: 1 + (a0 + a1 + a2) + a0 * a0; two draft rows (the root and its first child)
    assert speedup.tree_expected_tokens(Tree.parse("3+1").parents, [0.5, 0.2, 0.1]) == pytest.approx(1 + 0.8 + 0.25)
    assert trees.draft_rows(Tree.parse("3+1").parents) == 2 and trees.draft_rows(Tree.parse("2x2").parents) == 3
    assert speedup.tree_walltime_improvement(Tree.parse("3+1").parents, [0.5, 0.2, 0.1], 0.1, 2.0) == pytest.approx(2.05 / 2.2)
    with pytest.raises(ValueError, match="summing to at most 1"):
        speedup.tree_expected_tokens([-1, -1], [0.7, 0.5])


def test_the_tree_extension_takes_chances_by_depth():
    """accept[d][r] at depth d (depths past the last row use the last row); one row for every depth is the 1-D form."""
    t = Tree.parse("2+1+1").parents                                  # root: 2 children; then a chain of 2 below the first
    assert speedup.tree_expected_tokens(t, [[0.5, 0.2]]) == speedup.tree_expected_tokens(t, [0.5, 0.2])
    # 1 + (a00 + a01) + a00 a10 + a00 a10 a20, the last depth repeated past the table
    assert speedup.tree_expected_tokens(t, [[0.5, 0.2], [0.9]]) == pytest.approx(1 + 0.7 + 0.45 + 0.405)
    assert speedup.tree_expected_tokens(t, [[0.5, 0.2], [0.9], [0.1]]) == pytest.approx(1 + 0.7 + 0.45 + 0.045)
    assert speedup.tree_walltime_improvement(t, [[0.5, 0.2], [0.9]], 0.1, 2.0) == pytest.approx(2.555 / 2.3)
    for bad in ([], [[0.5], 0.3], [[0.7, 0.5]], [[0.5], []], ["x"]):
        with pytest.raises(ValueError, match="one such list per depth"):
            speedup.tree_expected_tokens(t, bad)


@pytest.mark.parametrize("shape", ["2x1", "3+1", "2x2", "1x1x1"])
def test_the_profile_model_is_exact_for_top_k_children_when_rows_do_not_depend_on_the_context(shape):
    """With the same rows after every prefix, Leviathan's iid assumption holds exactly: the expected
    tokens of verify_tree_topk's exact law (specref.proof.tree) equal tree_expected_tokens with
    accept[r] = q(c_r), the target's mass on the draft's r-th most likely token."""
    p_row = [Fraction(4, 10), Fraction(3, 10), Fraction(2, 10), Fraction(1, 10)]
    q_row = [Fraction(3, 10), Fraction(45, 100), Fraction(1, 10), Fraction(15, 100)]   # the Qualcomm toy rows
    tree = Tree.parse(shape)
    tokens, parents = trees.draft_tree(laws.MarkovChain(np.array([float(v) for v in p_row])), np.array([0]),
                                          tree, None)[:2]
    law = tree_rule.TOPK.law(tokens, parents, [p_row] * (len(tokens) + 1), [q_row] * (len(tokens) + 1))
    exact = laws.mean_output_length(law)
    accept = [q_row[0], q_row[1], q_row[2]]                 # the draft ranks 0, 1, 2, 3
    assert float(exact) == pytest.approx(speedup.tree_expected_tokens(tree.parents, [float(a) for a in accept]))


@pytest.mark.parametrize("algorithm", sorted(prooftree.ALGORITHMS))
def test_the_exact_expectations_of_tools_tree_gain_are_those_of_the_proofs_laws(algorithm):
    """tools/tree_gain.py's recursion (its exact tables) against the expected length of the exact call law that
    specref.proof.tree enumerates, tree by tree, on context-dependent rows in fractions."""
    A = prooftree.ALGORITHMS[algorithm]
    draft_row, target_row = prooftree.context_rows(5, V=4, close=True)
    for name, widths in [("2x2", (2, 2)), ("3", (3,)), ("1x1x1", (1, 1, 1))]:
        want = laws.mean_output_length(A.call_law(draft_row, target_row, widths))
        got = tree_gain.expected_tokens(Tree.parse(name, A.drawing), draft_row, target_row)
        assert got == pytest.approx(float(want), abs=1e-12)
