"""specref.verifiers is the one list of verifiers: every other place that names them reads it, and the proofs hold,
for every name in it, the exact law of one call and the known bugs its checks are measured on."""

import argparse

import pytest

from specref import mrs, mrs_tree, trees, verifiers
from specref.apps import demo
from specref.proof import cases, conform, tree
from specref.proof.conform import chain
from specref.proof.bugs import broken
from specref.proof.bugs import tree as tree_bugs


def test_every_chain_verifier_has_its_exact_law():
    assert set(cases.CORRECT) == set(verifiers.references(verifiers.CHAINS)) == {"token", "block"}
    assert all(verifiers.law_of(name) in cases.CORRECT for name in verifiers.CHAINS)
    assert set(chain.SIGNATURES) == set(cases.CORRECT)  # and the known bugs its checks are measured on
    assert [verifiers.reference(name).function.__name__ for name in ("token", "block")] == ["verify", "verify_block"]


def test_every_tree_verifier_has_its_rule_its_bugs_and_its_way_of_drawing():
    assert set(tree.ALGORITHMS) == set(tree_bugs.BUGS) == set(verifiers.references(verifiers.TREES)) == set(verifiers.TREES)
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


# ---------------------------------------------------------------- docs/package.md's "Where to add", tried

def _register(monkeypatch, row: verifiers.Verifier) -> None:
    """Add `row` to the registry for one test, as a user adds a line to specref/verifiers.py."""
    monkeypatch.setitem(verifiers.REGISTRY, row.name, row)
    names = "TREES" if row.is_tree else "CHAINS"
    monkeypatch.setattr(verifiers, names, getattr(verifiers, names) + (row.name,))


def test_a_new_implementation_of_a_known_rule_needs_its_function_and_one_row(monkeypatch):
    """A chain verifier whose law is a reference's: its function and one registry row are all it takes for the
    checker to check it as that reference (the laws, known bugs, cases and vectors all found by the row's law), and
    for the commands' --verify to offer it; a broken one registered the same way is rejected (negative control)."""
    def verify_again(x_draft, p, q, rng):  # a second implementation of Algorithm 2's lines 9-14, the reference's uniforms
        return mrs.verify(x_draft, p, q, rng)

    _register(monkeypatch, verifiers.Verifier("token-again", verify_again, "chain", "token-level, again", law="token"))
    _register(monkeypatch, verifiers.Verifier("token-broken", broken.resample_from_q, "chain", "broken", law="token"))
    assert verifiers.law_of("token-again") == "token" and verifiers.references(verifiers.CHAINS) == ("token", "block")
    assert verifiers.reference("token-again") is verifiers.REGISTRY["token"]  # whose vectors it must reproduce
    good = conform.check(verify_again, algorithm="token-again", scale=0.1)
    assert good.passed, good.text()
    assert all(c.passed is not False for c in good.checks) and good.checks[0].passed  # the exact tier ran: the vectors
    bad = conform.check(broken.resample_from_q, algorithm="token-broken", scale=0.05)
    assert not bad.passed and bad.diagnosis.startswith("resample_from_q"), bad.text()
    case = conform.cases("token")[0]  # the single checks resolve the name too
    assert conform.one_call_check(verify_again, case, "token-again").passed
    assert [c.passed for c in conform.exact_checks(verify_again, "token-again")] == [True, True, True]
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert parser.parse_args(["--verify", "token-again"]).verify == "token-again"


def test_a_new_tree_implementation_is_checked_as_its_reference(monkeypatch):
    def verify_tree_again(tokens, parents, p, q, rng):
        return mrs_tree.verify_tree_rrs(tokens, parents, p, q, rng)

    _register(monkeypatch, verifiers.Verifier("tree-rrs-again", verify_tree_again, "without_replacement", "again",
                                              law="tree-rrs"))
    assert verifiers.for_drawing("without_replacement").function is mrs_tree.verify_tree_rrs  # the reference first
    assert verifiers.reference("tree-rrs-again").function is mrs_tree.verify_tree_rrs
    assert trees.DRAWINGS == ("topk", "iid", "without_replacement")
    report = conform.check(verify_tree_again, algorithm="tree-rrs-again", scale=0.1)
    assert report.passed, report.text()
    bug = tree.ALGORITHMS["tree-rrs"].bug["rrs_without_zeroing_p"]  # negative control: a known bug, registered alike
    _register(monkeypatch, verifiers.Verifier("tree-rrs-broken", bug, "without_replacement", "broken", law="tree-rrs"))
    bad = conform.check(bug, algorithm="tree-rrs-broken", scale=0.1)
    assert not bad.passed and bad.diagnosis.startswith("rrs_without_zeroing_p"), bad.text()


def test_a_row_must_name_a_reference_of_its_own_kind_as_its_law(monkeypatch):
    _register(monkeypatch, verifiers.Verifier("token-again", mrs.verify, "chain", "again", law="token"))
    _register(monkeypatch, verifiers.Verifier("chained", mrs.verify, "chain", "a law that is not a reference",
                                              law="token-again"))
    _register(monkeypatch, verifiers.Verifier("tree-as-token", mrs_tree.verify_tree_rrs, "without_replacement",
                                              "a tree checked as a chain", law="token"))
    with pytest.raises(ValueError, match="names the law 'token-again', which must be a reference"):
        verifiers.law_of("chained")
    with pytest.raises(ValueError, match=r"with the same drafts \('without_replacement'\)"):
        verifiers.law_of("tree-as-token")
    with pytest.raises(ValueError, match="verifier must be one of token, block, .*, got 'nothing'"):
        verifiers.law_of("nothing")
    with pytest.raises(ValueError, match="names the law 'token-again'"):
        conform.check(mrs.verify, algorithm="chained", scale=0.05)
