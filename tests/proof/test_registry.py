"""specref.verifiers is the one list of verifiers: every other place that names them reads it, and the proofs hold,
for every name in it, the exact law of one call and the known bugs its checks are measured on."""

import pytest

from specref import mrs, mrs_tree, trees, verifiers
from specref.proof import cases, tree
from specref.proof.bugs import tree as tree_bugs


def test_every_chain_verifier_has_its_exact_law():
    assert set(cases.CORRECT) == set(verifiers.CHAINS)


def test_every_tree_verifier_has_its_rule_its_bugs_and_its_way_of_drawing():
    assert set(tree.ALGORITHMS) == set(tree_bugs.BUGS) == set(verifiers.TREES)
    for name in verifiers.TREES:
        row, alg = verifiers.REGISTRY[name], tree.ALGORITHMS[name]
        assert (alg.verifier, alg.drawing) == (row.function, row.drafts)
        assert trees.Tree.parse("2x1", row.drafts).verifier is row.function
    assert trees.DRAWINGS == ("topk", "iid", "without_replacement")


def test_each_verifier_has_one_name_and_one_function():
    functions = [v.function for v in verifiers.REGISTRY.values()]
    assert len(set(map(id, functions))) == len(functions)
    assert verifiers.REGISTRY["token"].function is mrs.verify
    assert verifiers.REGISTRY["tree-rrs"].function is mrs_tree.verify_tree_rrs


def test_an_unknown_way_of_drawing_children_is_refused_by_name():
    with pytest.raises(ValueError, match="drawing must be one of topk, iid, without_replacement, got 'sorted'"):
        verifiers.for_drawing("sorted")
    with pytest.raises(ValueError, match="drawing must be one of topk, iid, without_replacement"):
        trees.Tree.parse("2x1", "sorted")
