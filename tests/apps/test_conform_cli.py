"""`python -m specref conform MODULE:FUNCTION`: the target is checked before any check runs (one error line,
status 2), the exit status is 0 when every check passes and 1 when any fails, and the report can go to JSON.
(Bad option values are in tests/apps/test_cli.py's BAD table.)"""

import importlib
import importlib.util
import json

import pytest

from specref.apps import conform as command
from specref.proof import conform

from tests.apps.test_cli import assert_one_error_line, python

PROG = "python -m specref conform"


@pytest.mark.parametrize("target, message", [
    ("specref.mrs", "expected MODULE:FUNCTION"),
    ("specref.mrs:", "expected MODULE:FUNCTION"),
    (":verify", "expected MODULE:FUNCTION"),
    ("specref mrs:verify", "expected MODULE:FUNCTION"),
    ("specref.no_such_module:verify", "importing specref.no_such_module failed: ModuleNotFoundError"),
    ("specref.mrs:no_such_function", "specref.mrs has no no_such_function"),
    ("specref.mrs:TOL", "is not callable"),
    ("{dir}/missing.py:verify", "no file"),
    ("{dir}/broken_syntax.py:verify", "failed: SyntaxError"),
])
def test_a_bad_target_is_one_line_and_status_2(capsys, tmp_path, target, message):
    (tmp_path / "broken_syntax.py").write_text("def verify(:\n")
    cli = importlib.import_module("specref.__main__")
    with pytest.raises(SystemExit) as exit:
        cli.main(["conform", target.format(dir=tmp_path)])
    assert exit.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in assert_one_error_line(err, PROG, "MODULE:FUNCTION")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_torch_options_without_torch_say_so_in_one_line(capsys):
    cli = importlib.import_module("specref.__main__")
    for option in (["--rng", "torch"], ["--arrays", "torch"]):
        with pytest.raises(SystemExit) as exit:
            cli.main(["conform", "specref.mrs:verify", *option])
        assert exit.value.code == 2
        assert "torch is not installed" in assert_one_error_line(capsys.readouterr().err, PROG)


def _report(passed: bool) -> conform.Report:
    report = conform.Report("x", "token", 0, [conform.Check("one call: random", "statistical", passed, "chi2=1.0 dof=1",
                                                            0.5 if passed else 0.0, 1e-4, 10)], 1.0)
    report.diagnosis = "" if passed else "resample_from_q: resamples from q"
    return report


@pytest.mark.parametrize("passed, status", [(True, 0), (False, 1)])
def test_exit_status_and_json(monkeypatch, capsys, tmp_path, passed, status):
    seen = {}

    def fake_check(function, adapter, **kwargs):
        seen.update(kwargs, function=function, adapter=adapter)
        return _report(passed)

    monkeypatch.setattr(conform, "check", fake_check)
    cli = importlib.import_module("specref.__main__")
    out_json = tmp_path / "report.json"
    argv = ["conform", "specref.proof.broken:no_bonus", "--algorithm", "block", "--log-probs", "--batch", "--rng", "seed",
            "--returns", "count-and-token", "--seed", "5", "--no-vectors", "--json", str(out_json)]
    assert cli.main(argv) == status
    from specref.proof import broken
    assert seen["function"] is broken.no_bonus and seen["algorithm"] == "block" and seen["seed"] == 5
    assert seen["vectors_tier"] is False
    adapter = seen["adapter"]
    assert (adapter.batch, adapter.log_probs, adapter.rng, adapter.returns) == (True, True, "seed", "count_and_token")
    assert json.loads(out_json.read_text())["passed"] is passed
    out = capsys.readouterr().out
    assert ("PASSED" if passed else "FAILED") in out and ("diagnosis: resample_from_q" in out) is not passed


def test_a_real_process_with_a_crashing_verifier_fails_every_check_with_status_1(tmp_path):
    (tmp_path / "theirs.py").write_text("def verify(x_draft, p, q, rng):\n    raise RuntimeError('not implemented')\n")
    r = python("-m", "specref", "conform", f"{tmp_path}/theirs.py:verify")
    print(r.stdout)
    assert r.returncode == 1, r.stderr
    assert "FAIL  vectors (verify)" in r.stdout and "raised RuntimeError: not implemented" in r.stdout
    assert "FAILED" in r.stdout and "pass " not in r.stdout
    assert command.TARGET.match("a.b:c.d")
