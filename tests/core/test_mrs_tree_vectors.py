"""The tree verifiers of specref/mrs_tree.py as a portable spec: named vectors (specref/proof/tree_vectors.json),
computed twice, that lone copies of mrs.py and mrs_tree.py reproduce.

Every check here has a negative control: a wrong token, a wrong number of uniforms, a uniform on a decision
boundary, every known bug of specref.proof.tree, and an importable `specref`.
"""

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specref import mrs, mrs_tree
from specref.proof import tree, tree_vectors, vectors
from specref.proof import tree_rule

MRS_PY = Path(mrs.__file__)
MRS_TREE_PY = Path(mrs_tree.__file__)
REPO = MRS_PY.parent.parent
DOC = json.loads(tree_vectors.PATH.read_text())
FUNCTION = {"tree-topk": "verify_tree_topk", "tree-mss": "verify_tree_mss", "tree-rrs": "verify_tree_rrs"}


def _case(name: str, doc: dict = DOC) -> dict:
    return next(c for c in doc["cases"] if c["name"] == name)


def test_committed_vectors_equal_what_the_generator_writes():
    assert tree_vectors.PATH.read_text() == tree_vectors.dumps(tree_vectors.build()), \
        "rerun: python3 -m specref.proof.tree_vectors"


def test_generator_refuses_a_wrong_verifier(monkeypatch):
    monkeypatch.setattr(mrs_tree, "verify_tree_rrs", tree.ALGORITHMS["tree-rrs"].bug["rrs_without_zeroing_p"])
    with pytest.raises(AssertionError, match="exact replay"):
        tree_vectors.build()


def test_vectors_format_and_coverage():
    assert DOC["format"] == tree_vectors.FORMAT and DOC["version"] == tree_vectors.VERSION == 1
    assert DOC["uniform_order"] == tree_vectors.uniform_order()  # the spec text of mrs_tree.RANDOMNESS and mrs.SAMPLING
    names = [c["name"] for c in DOC["cases"]]
    assert len(set(names)) == len(names)
    assert {c["function"] for c in DOC["cases"]} == set(tree_vectors.FUNCTIONS)
    for name in ["topk_none_accepted_recovered", "topk_children_cover_q_rounding", "mss_duplicate_siblings",
                 "mss_chain_is_verify", "mss_p_equals_q", "mss_all_zero_residual", "rrs_second_child_against_zeroed_p",
                 "rrs_large_vocabulary_two_level", "mss_q_zero_child_never_accepted"]:
        assert name in names


def test_uniforms_are_away_from_decision_boundaries_and_the_exact_replay_agrees():
    margins = []
    for case in DOC["cases"]:
        out, trace, margin = tree_vectors.exact_case(case)
        assert out == case["tokens_out"] and trace == case["trace"], case["name"]
        assert margin >= tree_vectors.MARGIN, case["name"]
        margins.append(margin)
    print(f"smallest distance of a uniform to a decision boundary: {min(margins):.3g}")
    case = copy.deepcopy(_case("topk_none_accepted_recovered"))  # negative controls: a test, then a draw, on a boundary
    case["uniforms"][0] = 0.3 + 1e-12
    assert tree_vectors.exact_case(case)[2] < tree_vectors.MARGIN
    case = copy.deepcopy(_case("topk_none_accepted_recovered"))
    case["uniforms"][2] = 0.4 + 1e-12  # the step of [0, 0, .4, .6]
    assert tree_vectors.exact_case(case)[2] < tree_vectors.MARGIN


def test_mrs_reproduces_every_vector():
    assert tree_vectors.mismatches(DOC) == []


def test_the_chain_vector_is_verify():
    case = _case("mss_chain_is_verify")
    listed = vectors.ListedUniforms(case["uniforms"])
    K = len(case["tokens"])
    out = mrs.verify(np.array(case["tokens"]), np.array(case["p"][:K]), np.array(case["q"]), listed)
    assert out.tolist() == case["tokens_out"]


def test_a_wrong_token_or_a_wrong_number_of_uniforms_is_reported():
    doc = copy.deepcopy(DOC)
    doc["cases"][0]["tokens_out"][-1] += 1
    _case("mss_duplicate_siblings", doc)["uniforms"].append(0.5)
    _case("rrs_all_rejected_recovered", doc)["uniforms"].pop()
    found = tree_vectors.mismatches(doc)
    print("\n".join(found))
    assert len(found) == 3 and found[0].startswith(doc["cases"][0]["name"])
    assert "drew 3 uniforms but the vector lists 4" in found[1] and "asked for uniform number 3" in found[2]


@pytest.mark.parametrize("algorithm, name", [(a, b.name) for a in tree.ALGORITHMS for b in tree.ALGORITHMS[a].bugs])
def test_vectors_reject_every_known_bug(algorithm, name):
    bug = tree.ALGORITHMS[algorithm].bug[name]
    found = tree_vectors.mismatches(DOC, SimpleNamespace(**{FUNCTION[algorithm]: bug}), only=FUNCTION[algorithm])
    print(f"{algorithm} {name}: {len(found)} mismatching vectors, first: {found[:1]}")
    assert found


@pytest.mark.parametrize("algorithm", list(tree.ALGORITHMS))
def test_the_proof_modules_float_walk_passes_every_vector(algorithm):
    """tree_rule.Rule.sample with the correct pieces (the walk every known bug's sampler changes one piece of) draws the
    documented uniforms and returns the documented tokens: each control is the reference plus its bug."""
    walk = tree.ALGORITHMS[algorithm].rule.sample
    assert tree_vectors.mismatches(DOC, SimpleNamespace(**{FUNCTION[algorithm]: walk}), only=FUNCTION[algorithm]) == []


# Runs with `python -I -S`: no user site, no PYTHON* variables, no site-packages and no .pth files (so no editable
# install of specref); sys.path is the copy's directory, the standard library and numpy's site-packages.
CHECK_COPY = r'''
import importlib.util, json, sys
here, numpy_site, vectors_json = sys.argv[1:4]
stdlib = [p for p in sys.path if p]
assert all("site-packages" not in p for p in stdlib), stdlib
sys.path[:] = [here] + stdlib + [numpy_site] + sys.argv[4:]
assert importlib.util.find_spec("specref") is None, "specref is importable: the check would not test the copy alone"
import numpy as np
import mrs_tree
assert mrs_tree.__file__.startswith(here) and mrs_tree.mrs.__file__.startswith(here), mrs_tree.mrs.__file__


class ListedUniforms:
    def __init__(self, uniforms):
        self.uniforms, self.used = list(uniforms), 0

    def random(self):
        if self.used >= len(self.uniforms):
            raise RuntimeError("asked for more uniforms than the vector lists")
        self.used += 1
        return self.uniforms[self.used - 1]


doc = json.load(open(vectors_json))
bad = []
for case in doc["cases"]:
    rng = ListedUniforms(case["uniforms"])
    try:
        got = [int(y) for y in getattr(mrs_tree, case["function"])(np.array(case["tokens"]), np.array(case["parents"]),
                                                             np.array(case["p"]), np.array(case["q"]), rng)]
        if rng.used != len(rng.uniforms):
            got = f"drew {rng.used} of {len(rng.uniforms)} uniforms"
    except Exception as e:
        got = f"{type(e).__name__}: {e}"
    if got != case["tokens_out"]:
        bad.append(f"MISMATCH {case['name']}: expected {case['tokens_out']}, got {got}")
print("\n".join(bad) or f"all {len(doc['cases'])} vectors match")
sys.exit(1 if bad else 0)
'''


def _run_copy(tmp_path: Path, vectors_json: Path, *extra_path: str) -> subprocess.CompletedProcess:
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(MRS_PY, lone / "mrs.py")  # exactly the two files a user copies for trees
    shutil.copy(MRS_TREE_PY, lone / "mrs_tree.py")
    numpy_site = str(Path(np.__file__).parent.parent)
    result = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", CHECK_COPY, str(lone), numpy_site,
                             str(vectors_json), *extra_path],
                            cwd=lone, capture_output=True, text=True, timeout=120,
                            env={"OPENBLAS_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "")})
    assert sorted(os.listdir(lone)) == ["mrs.py", "mrs_tree.py"]  # -B: the run left nothing behind
    print(result.stdout, result.stderr)
    return result


def test_lone_copies_of_mrs_py_and_mrs_tree_py_reproduce_every_tree_vector(tmp_path):
    result = _run_copy(tmp_path, tree_vectors.PATH)
    assert result.returncode == 0 and f"all {len(DOC['cases'])} vectors match" in result.stdout


def test_the_lone_copy_check_reports_a_wrong_token(tmp_path):
    doc = copy.deepcopy(DOC)
    _case("mss_duplicate_siblings", doc)["tokens_out"] = [1]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(doc))
    result = _run_copy(tmp_path, wrong)
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["MISMATCH mss_duplicate_siblings: expected [1], got [2]"]


def test_the_lone_copy_check_fails_if_specref_is_importable(tmp_path):
    result = _run_copy(tmp_path, tree_vectors.PATH, str(REPO))
    assert result.returncode == 1 and "specref is importable" in result.stderr
