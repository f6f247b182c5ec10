"""The demo's tree row: the chances by rank it measures, the tree it chooses from measured costs, and what it prints.

`root_chances` is checked against the exact node law of specref.proof.tree (in fractions), `TreeProfile` against
running the verifier, `pilot.best_tree` against Theorem 3.8 for trees over every shape, and the table and verdicts say
where no tree pays.  humaneval's choice is the demo's, stored with the results and kept on resume (on a cheap n-gram
target: seconds).
"""

import types
from fractions import Fraction

import numpy as np
import pytest

from specref import mrs_tree, speedup
from specref.apps import demo, pilot as pilots
from specref.trees import Tree
from specref.proof import tree_rule


def test_the_shapes_are_trees_of_at_most_8_nodes_no_wider_than_4_and_no_chains():
    shapes = pilots.tree_shapes()
    assert {"2", "2x1", "3+1", "2+1+1", "4", "2x2", "4x1", "4+2+1+1"} <= set(shapes)
    assert len(set(shapes)) == len(shapes)
    for name in shapes:
        t = Tree.parse(name)
        assert 2 <= t.size <= 8 and t.depth < t.size
        assert max(t.parents.count(j) for j in set(t.parents)) <= 4


def test_children_are_top_k_greedily_and_for_prompt_lookup_else_without_replacement():
    assert demo.tree_drawing("neural", 0.0) == demo.tree_drawing("prompt-lookup", 0.8) == "topk"
    assert demo.tree_drawing("prompt-lookup-adaptive", 0.8) == "topk"
    assert demo.tree_drawing("neural+lookup", 0.8) == demo.tree_drawing("ngram", 1.0) == "without_replacement"


P = [Fraction(4, 10), Fraction(3, 10), Fraction(2, 10), Fraction(1, 10), Fraction(0)]
Q = [Fraction(1, 10), Fraction(45, 100), Fraction(0), Fraction(15, 100), Fraction(3, 10)]


@pytest.mark.parametrize("children,test", [("topk", "topk"), ("iid", "mss"), ("without_replacement", "rrs")])
@pytest.mark.parametrize("xs", [(0, 1, 2), (2, 0), (1, 3, 0, 2)])
def test_root_chances_are_the_exact_chances_of_each_child_being_accepted(children, test, xs):
    if children == "iid":
        xs = xs + (xs[0],)                                  # i.i.d. children may repeat
    accepts, _, _ = tree_rule.Rule(test).node(xs, P, Q)
    want = [0.0] * len(xs)
    for chance, k in accepts:
        want[k] = float(chance)
    got = pilots.root_chances(np.array(xs), np.array([float(v) for v in P]), np.array([float(v) for v in Q]), children)
    assert got == pytest.approx(want, abs=1e-12)


def test_tree_profile_verifies_exactly_and_averages_the_root_chances():
    profile = demo.TreeProfile("without_replacement")
    p, q = np.array([float(v) for v in P]), np.array([float(v) for v in Q])
    tokens, parents = np.array([0, 1, 3]), np.array([-1, -1, 0])
    rows_p, rows_q = np.stack([p] * 4), np.stack([q] * 4)
    for seed in range(3):
        got = profile(tokens, parents, rows_p, rows_q, np.random.default_rng(seed))
        np.testing.assert_array_equal(got, mrs_tree.verify_tree_rrs(tokens, parents, rows_p, rows_q, np.random.default_rng(seed)))
    assert profile.calls == 3
    assert profile.profile[0] == pytest.approx(pilots.root_chances(np.array([0, 1]), p, q, profile.drawing))


def base():
    return demo.Run("ArS", "-", 0, 0.8, 0.95, [1], types.SimpleNamespace(target_ms_per_call=10.0, ms_per_token=10.0))


ZEN3 = [1.7, 1.8, 1.9, 2.0, 2.2, 2.3, 2.4, 2.5]                 # scoring N + 1 tokens, in decode steps
FREE = [1.0] * 8


def test_the_chosen_tree_is_theorem_3_8_s_best_over_every_shape():
    profile = [0.35, 0.12, 0.07, 0.05]
    choice = pilots.best_tree(profile, "without_replacement", 0.05, FREE)
    scores = {n: speedup.tree_walltime_improvement(Tree.parse(n).parents, profile, 0.05, 1.0) for n in pilots.tree_shapes()}
    assert choice.predicted == pytest.approx(max(scores.values())) and scores[choice.tree] == choice.predicted
    assert choice.pays and f"tree {choice.tree} predicts" in choice.why() and "rrs children" in choice.why()


def test_where_no_tree_pays_the_choice_the_table_and_the_verdicts_say_so():
    chain = pilots.KChoice(1, 0.3, 0.1, 0.7, 0.8)
    choice = pilots.best_tree([0.3, 0.1, 0.05, 0.03], "without_replacement", 0.1, ZEN3, chain)
    assert not choice.pays and choice.predicted < 1 and "no tree pays (best tree" in choice.why()
    assert choice.why().endswith("(the chain: K = 1 predicts 0.70x)")
    stats = types.SimpleNamespace(ms_per_token=10.0, alpha_hat=0.3, tokens_per_target_call=1.3, target_ms_per_call=17.0,
                                  draft_ms_per_call=1.0, n_examined=10, calls_by_drafted=[0, 5])
    chain = demo.Run("SpS", "neural", 1, 0.8, 0.95, [1, 2], stats, verify="token", why_tree=choice.why(),
                        speedup=0.8, model_check=0.8)
    text = demo.table([chain])
    assert "Trees per draft" in text and "no tree pays" in text
    assert any(line.startswith("No tree pays for neural") for line in demo.verdicts([chain]))


def test_a_tree_row_is_checked_by_theorem_3_8_for_trees_and_shown_as_a_tree():
    stats = types.SimpleNamespace(ms_per_token=8.0, alpha_hat=0.4, tokens_per_target_call=1.6, target_ms_per_call=20.0,
                                  draft_ms_per_call=0.5, n_examined=10, calls_by_drafted=[0, 0, 0, 0, 5])
    r = demo.Run("SpS", "neural", 4, 0.8, 0.95, [1, 2], stats, verify="rrs", tree="3+1",
                    drawing="without_replacement", profile=[0.35, 0.12, 0.07])
    demo.fill_model_check(r, base())
    assert r.model_check == pytest.approx(speedup.tree_walltime_improvement(Tree.parse("3+1").parents, [0.35, 0.12, 0.07],
                                                                          0.05, 2.0))
    assert "     3+1 rrs " in demo.table([r]).splitlines()[2]
    assert "tree 3+1 (4 nodes), rrs verification" in demo.verdicts([r])[0]


def test_tree_profile_adds_the_chances_at_each_node_the_walk_reaches_by_depth():
    """The root's chances in every call; a node's at depth 1 only in the calls whose walk reached it; a depth no
    walk reached has no row."""
    from specref.proof.vectors import ListedUniforms

    q0, q1 = np.array([0.5, 0.2, 0.3, 0.0]), np.array([0.1, 0.1, 0.2, 0.6])  # the root's row; node 0's row
    rows_q = np.stack([q0, q1, q0, q0])
    tokens, parents = np.array([0, 1, 3]), np.array([-1, -1, 0])      # node 2 (token 3) below node 0 (token 0)
    profile = demo.TreeProfile("topk")
    # u = 0 accepts node 0, then node 2 (a leaf); the bonus token from u = .5
    assert profile(tokens, parents, rows_q, rows_q, ListedUniforms([0.0, 0.0, 0.5])).tolist()[:2] == [0, 3]
    # u = .9 rejects node 0 (q = .5), u = 0 accepts node 1, a leaf: the walk does not reach node 0's children
    assert profile(tokens, parents, rows_q, rows_q, ListedUniforms([0.9, 0.0, 0.5])).tolist()[0] == 1
    root, depth1 = pilots.root_chances(np.array([0, 1]), q0, q0, "topk"), pilots.root_chances(np.array([3]), q1, q1, "topk")
    assert profile.calls == 2 and [reached for reached, _ in profile.deeper] == [1]
    assert len(profile.profile) == 2
    assert profile.profile[0] == pytest.approx(root) and profile.profile[1] == pytest.approx(depth1)
    # Theorem 3.8's count of tokens for a tree takes the table: node 2 is reached with chance q0(0) q1(3)
    assert speedup.tree_expected_tokens(parents, profile.profile) == pytest.approx(1 + 0.5 + 0.2 + 0.5 * 0.6)
    assert pilots.chances_text(profile.profile) == "0.50 0.20; depth 1: 0.60"


def test_a_depth_no_walk_reached_ends_the_table_and_old_records_add_to_the_root_only():
    from specref.apps.humaneval.report import tree_profile

    assert demo.profile_table(0, [], []) == []
    assert demo.profile_table(2, [1.0, 0.4], [[1, [0.9]], [0, []]]) == [[0.5, 0.2], [0.9]]
    old = {"profile_calls": 2, "profile_sums": [1.0, 0.4]}                 # stored before depths were measured
    new = {"profile_calls": 2, "profile_sums": [1.2, 0.2], "profile_deeper": [[2, [1.6, 0.2]], [1, [1.0]]]}
    got = tree_profile([old, new])
    assert len(got) == 3 and all(row == pytest.approx(want) for row, want in zip(got, [[0.55, 0.15], [0.8, 0.1], [1.0, 0.0]]))


def test_a_tree_of_n_nodes_is_priced_as_scoring_n_plus_1_tokens():
    # every other test gives all sizes one cost, so pricing N nodes as N tokens (costs[N - 2]) went unseen
    profile, rising = [0.35, 0.12, 0.07, 0.05], [1.0 + 0.5 * k for k in range(8)]  # costs[K - 1]: K + 1 tokens
    choice = pilots.best_tree(profile, "without_replacement", 0.05, rising)
    tree = Tree.parse(choice.tree)
    assert choice.predicted == pytest.approx(speedup.tree_walltime_improvement(tree.parents, profile, 0.05,
                                                                               rising[tree.size - 1]))
    scores = {n: speedup.tree_walltime_improvement(Tree.parse(n).parents, profile, 0.05, rising[Tree.parse(n).size - 1])
              for n in pilots.tree_shapes(len(rising))}
    assert choice.tree == max(scores, key=lambda n: (scores[n], -Tree.parse(n).size))
    cheaper = speedup.tree_walltime_improvement(tree.parents, profile, 0.05, rising[tree.size - 2])
    assert cheaper > choice.predicted  # the control: one token fewer would predict more
