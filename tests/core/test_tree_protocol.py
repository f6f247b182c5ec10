"""The tree entry points of the model protocol: specref.trees.check_tree and tree_distributions, specref.sampling.keep_path.

A model without score_tree gets its tree rows one root-to-node path at a time; one with it is
asked once.  Both give row 0 after the prefix and row i+1 after node i's path, checked here
on an order-2 Markov chain (rows that depend on the last two tokens, so a row read after the wrong
path differs), exactly.
"""

import numpy as np
import pytest

from specref.proof.laws import MarkovChain
from specref.sampling import keep_path
from specref.trees import check_tree, tree_distributions

PARENTS = [-1, -1, 0, 0, 1, 2, 2]      # the root has children 0 and 1, node 0 has 2 and 3, node 2 has 5 and 6
TOKENS = [0, 1, 2, 0, 2, 1, 3]
PATHS = [[0], [1], [0, 2], [0, 0], [1, 2], [0, 2, 1], [0, 2, 3]]


def test_tree_rows_of_a_model_without_score_tree_are_its_rows_after_each_path():
    chain = MarkovChain.random(4, order=2, rng=np.random.default_rng(3))
    prefix = np.array([3, 1])
    rows = tree_distributions(chain, prefix, TOKENS, PARENTS)
    assert rows.shape == (8, 4)
    np.testing.assert_array_equal(rows[0], chain.table[3, 1])
    for i, path in enumerate(PATHS):
        last_two = (list(prefix) + path)[-2:]
        np.testing.assert_array_equal(rows[i + 1], chain.table[tuple(last_two)], err_msg=f"node {i}")


class TreeScorer:
    """A model offering score_tree and keep_path, recording the calls."""

    def __init__(self, V=5):
        self.V, self.calls = V, []

    def score_tree(self, tokens, tree_tokens, parents):
        self.calls.append(("score_tree", list(tokens), tree_tokens.tolist(), parents.tolist()))
        return np.full((len(tree_tokens) + 1, self.V), 1.0 / self.V)

    def keep_path(self, nodes):
        self.calls.append(("keep_path", list(nodes)))


def test_a_model_with_score_tree_is_asked_once_and_told_the_kept_path():
    model = TreeScorer()
    rows = tree_distributions(model, [4, 4], TOKENS, PARENTS)
    assert rows.shape == (8, 5) and model.calls == [("score_tree", [4, 4], TOKENS, PARENTS)]
    keep_path(model, [0, 2])
    assert model.calls[-1] == ("keep_path", [0, 2])
    keep_path(MarkovChain.random(4, order=1, rng=np.random.default_rng(0)), [0, 2])   # no keep_path: nothing to do


def test_rows_of_the_wrong_shape_are_a_clear_error():
    model = TreeScorer()
    model.score_tree = lambda tokens, t, parents: np.zeros((len(t), 5))   # one row short
    with pytest.raises(ValueError, match=r"returned shape \(7, 5\) for a tree of 7 nodes; expected \[8, V\] rows"):
        tree_distributions(model, [1], TOKENS, PARENTS)


def test_check_tree_returns_int64_arrays():
    t, p = check_tree((3, 4, 5), np.array([-1, 0, 0], np.int32), V=6)
    assert t.dtype == p.dtype == np.int64 and t.tolist() == [3, 4, 5] and p.tolist() == [-1, 0, 0]


@pytest.mark.parametrize("tokens, parents, message", [
    ([], [], "the tree is empty"),
    ([1, 2, 3], [-1, 2, 0], r"parents\[1\] = 2 is not before node 1: nodes must be in topological order"),
    ([1, 2], [0, -1], r"parents\[0\] = 0 is not before node 0"),
    ([1, 2], [-1, 2], r"parents\[1\] = 2 is out of range: -1 for a child of the root, else a node index in \[0, 2\)"),
    ([1, 2], [-1, -7], r"parents\[1\] = -7 is out of range"),
    ([1, 9], [-1, 0], r"token id 9 is out of range in tree tokens; token ids must be in \[0, 6\)"),
    ([1, 2], [-1, 0, 1], "parents must be a 1-D sequence of 2 integers, one per tree token"),
    ([1, 2], [[-1, 0]], "parents must be a 1-D sequence of 2 integers"),
    ([1, 2], [-1, 0.5], "parents must be a 1-D sequence of 2 integers"),
    ([1.0], [-1], "integers"),
])
def test_a_bad_tree_is_a_clear_error(tokens, parents, message):
    with pytest.raises(ValueError, match=message):
        check_tree(tokens, parents, V=6)
    if "token id" not in message:                # the vocabulary is the model's to check
        with pytest.raises(ValueError, match=message):
            tree_distributions(TreeScorer(6), [1], tokens, parents)
