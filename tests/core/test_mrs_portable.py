"""specref/mrs.py as a portable spec: named test vectors, a copy that runs alone, NumPy-only imports.

Every check here has a negative control: the same checking function is shown to report a
deliberately wrong vector, a broken sampler, a uniform on a decision boundary, a foreign
import, or an importable `specref`.
"""

import ast
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

from specref import mrs
from specref.proof import vectors
from specref.proof.bugs import broken

MRS_PY = Path(mrs.__file__)
REPO = MRS_PY.parent.parent
DOC = json.loads(vectors.PATH.read_text())


def _case(name: str, doc: dict = DOC) -> dict:
    return next(c for c in doc["cases"] if c["name"] == name)


# ---------------------------------------------------------------- (a) the committed JSON is current

def test_committed_vectors_equal_what_the_generator_writes():
    assert vectors.PATH.read_text() == vectors.dumps(vectors.build()), "rerun: python3 -m specref.proof.vectors"


def test_generator_refuses_a_wrong_verify(monkeypatch):
    # negative control: the generator cross-checks mrs against its exact replay
    monkeypatch.setattr(mrs, "verify", broken.bonus_wrong_row)
    with pytest.raises(AssertionError, match="exact replay"):
        vectors.build()


def test_vectors_format_and_coverage():
    assert DOC["format"] == vectors.FORMAT and DOC["version"] == vectors.VERSION == 2
    assert DOC["uniform_order"] == vectors.uniform_order()  # the spec text of mrs.RANDOMNESS and mrs.SAMPLING
    names = [c["name"] for c in DOC["cases"]]
    assert len(set(names)) == len(names)
    assert {c["function"] for c in DOC["cases"]} == {"verify", "verify_block", "verify_lenient", "verify_greedy", "accept_or_resample"}
    for name in ["accept_all_with_bonus", "reject_at_first", "reject_in_middle", "p_equals_q", "disjoint_supports",
                 "one_hot_p", "one_hot_q", "zeros_in_both_target_zero_rejected", "large_vocabulary_two_level"]:
        assert name in names


def test_uniforms_are_away_from_decision_boundaries_and_the_exact_replay_agrees():
    smallest = min(vectors.exact_walk(c)[2] for c in DOC["cases"])
    print(f"smallest distance of a uniform to a decision boundary: {smallest:.3g}")
    for case in DOC["cases"]:
        out, _, margin = vectors.exact_walk(case)
        assert out == vectors.expected(case), case["name"]
        assert margin >= vectors.MARGIN, case["name"]
    # negative controls: a uniform just above the accept ratio 0.75, and one just above a residual step 0.75
    case = copy.deepcopy(_case("reject_at_first"))
    case["uniforms"][0] = 0.75 + 1e-12
    assert vectors.exact_walk(case)[2] < vectors.MARGIN
    case = copy.deepcopy(_case("reject_at_first"))
    case["uniforms"][1] = 0.75 + 1e-12
    assert vectors.exact_walk(case)[2] < vectors.MARGIN


# ---------------------------------------------------------------- (b) mrs reproduces every vector

def test_mrs_reproduces_every_vector():
    assert vectors.mismatches(DOC) == []


def test_a_wrong_token_is_reported():
    doc = copy.deepcopy(DOC)
    doc["cases"][0]["tokens"][-1] += 1
    doc["cases"][-1]["accepted"] = not doc["cases"][-1]["accepted"]
    found = vectors.mismatches(doc)
    print("\n".join(found))
    assert len(found) == 2
    assert found[0].startswith(doc["cases"][0]["name"]) and found[1].startswith(doc["cases"][-1]["name"])


def test_a_wrong_number_of_uniforms_is_reported():
    doc = copy.deepcopy(DOC)
    _case("reject_at_first", doc)["uniforms"].append(0.5)  # one more than verify draws
    _case("mrs_reject_then_residual", doc)["uniforms"].pop()  # one fewer
    found = vectors.mismatches(doc)
    assert len(found) == 2
    assert "drew 2 uniforms but the vector lists 3" in found[0]
    assert "asked for uniform number 2" in found[1]


@pytest.mark.parametrize("name", list(broken.BROKEN))
def test_vectors_reject_every_broken_sampler(name):
    found = vectors.mismatches(DOC, SimpleNamespace(verify=broken.BROKEN[name]), only="verify")
    print(f"{name}: {len(found)} mismatching vectors, first: {found[:1]}")
    assert found


@pytest.mark.parametrize("name", list(broken.BROKEN_BLOCK))
def test_vectors_reject_every_block_misreading(name):
    found = vectors.mismatches(DOC, SimpleNamespace(verify_block=broken.BROKEN_BLOCK[name]), only="verify_block")
    print(f"{name}: {len(found)} mismatching vectors, first: {found[:1]}")
    assert found


def test_listed_uniforms():
    rng = vectors.ListedUniforms([0.25, 0.5])
    assert (rng.random(), rng.random()) == (0.25, 0.5)
    rng.check_all_used()
    with pytest.raises(RuntimeError, match="lists only 2"):
        rng.random()
    rng = vectors.ListedUniforms([0.25, 0.5])
    rng.random()
    with pytest.raises(RuntimeError, match="drew 1 uniforms"):
        rng.check_all_used()


# ---------------------------------------------------------------- (c) a lone copy of mrs.py passes the vectors

# Runs with `python -I -S`: no user site, no PYTHON* variables, no site-packages and no .pth
# files (so no editable install of specref); sys.path is set to the copy's directory, the
# standard library and numpy's site-packages, and nothing else.
CHECK_COPY = r'''
import importlib.util, json, sys
here, numpy_site, vectors_json = sys.argv[1:4]
stdlib = [p for p in sys.path if p]
assert all("site-packages" not in p for p in stdlib), stdlib
sys.path[:] = [here] + stdlib + [numpy_site] + sys.argv[4:]
assert importlib.util.find_spec("specref") is None, "specref is importable: the check would not test the copy alone"
import numpy as np
import mrs
assert mrs.__file__.startswith(here), mrs.__file__


class ListedUniforms:
    def __init__(self, uniforms):
        self.uniforms, self.used = list(uniforms), 0

    def random(self):
        if self.used >= len(self.uniforms):
            raise RuntimeError("asked for more uniforms than the vector lists")
        self.used += 1
        return self.uniforms[self.used - 1]


def run(case):
    rng = ListedUniforms(case["uniforms"])
    if case["function"] == "accept_or_resample":
        y, accepted = mrs.accept_or_resample(case["x"], np.array(case["p"]), np.array(case["q"]), rng)
        out = {"tokens": [int(y)], "accepted": bool(accepted)}
    elif case["function"] == "verify_greedy":
        out = {"tokens": [int(y) for y in mrs.verify_greedy(np.array(case["x_draft"]), np.array(case["q"]))]}
    else:
        args = (np.array(case["x_draft"]), np.array(case["p"]), np.array(case["q"]), rng)
        extra = (case["lenience"],) if case["function"] == "verify_lenient" else ()
        out = {"tokens": [int(y) for y in getattr(mrs, case["function"])(*args, *extra)]}
    if rng.used != len(rng.uniforms):
        raise RuntimeError(f"drew {rng.used} of {len(rng.uniforms)} uniforms")
    return out


doc = json.load(open(vectors_json))
bad = []
for case in doc["cases"]:
    want = {k: case[k] for k in ("tokens", "accepted") if k in case}
    try:
        got = run(case)
    except Exception as e:
        got = f"{type(e).__name__}: {e}"
    if got != want:
        bad.append(f"MISMATCH {case['name']}: expected {want}, got {got}")
print("\n".join(bad) or f"all {len(doc['cases'])} vectors match")
sys.exit(1 if bad else 0)
'''


def _run_copy(tmp_path: Path, vectors_json: Path, *extra_path: str) -> subprocess.CompletedProcess:
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(MRS_PY, lone / "mrs.py")
    assert os.listdir(lone) == ["mrs.py"]
    numpy_site = str(Path(np.__file__).parent.parent)
    result = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", CHECK_COPY, str(lone), numpy_site,
                             str(vectors_json), *extra_path],
                            cwd=lone, capture_output=True, text=True, timeout=120,
                            env={"OPENBLAS_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "")})
    assert os.listdir(lone) == ["mrs.py"]  # -B: the run left nothing behind
    print(result.stdout, result.stderr)
    return result


def test_a_lone_copy_of_mrs_py_reproduces_every_vector(tmp_path):
    result = _run_copy(tmp_path, vectors.PATH)
    assert result.returncode == 0 and f"all {len(DOC['cases'])} vectors match" in result.stdout


def test_the_lone_copy_check_reports_a_wrong_token(tmp_path):
    doc = copy.deepcopy(DOC)
    _case("reject_in_middle", doc)["tokens"] = [1, 2]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(doc))
    result = _run_copy(tmp_path, wrong)
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["MISMATCH reject_in_middle: expected {'tokens': [1, 2]}, got {'tokens': [1, 0]}"]


def test_the_lone_copy_check_fails_if_specref_is_importable(tmp_path):
    result = _run_copy(tmp_path, vectors.PATH, str(REPO))  # the repository on sys.path
    assert result.returncode == 1 and "specref is importable" in result.stderr


# ---------------------------------------------------------------- (d) mrs.py imports only numpy and the stdlib

def foreign_imports(source: str) -> list[str]:
    """Modules `source` imports other than numpy, __future__ and the standard library (relative imports too)."""
    allowed = set(sys.stdlib_module_names) | {"numpy", "__future__"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                "__import__", "import_module"):
            names = ["<dynamic import>"]
        else:
            continue
        found += [n for n in names if n.startswith((".", "<")) or n.split(".")[0] not in allowed]
    return found


def test_mrs_py_imports_only_numpy_and_the_standard_library():
    assert foreign_imports(MRS_PY.read_text()) == []


def test_foreign_imports_are_found():
    source = ("import os, numpy.linalg\nfrom __future__ import annotations\nimport scipy.stats\n"
              "from specref import sampling\nfrom . import stats\ndef f():\n    import torch\n"
              "importlib.import_module('jax')\n")
    assert foreign_imports(source) == ["scipy.stats", "specref", ".", "torch", "<dynamic import>"]
