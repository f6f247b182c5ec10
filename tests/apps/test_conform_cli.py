"""`python -m specref conform MODULE:FUNCTION`: the target is checked before any check runs (one error line,
status 2), the exit status is 0 when every check passes and 1 when any fails, and the report can go to JSON.
(Bad option values are in tests/apps/test_cli.py's BAD table.)"""

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from specref.apps import conform as command
from specref.proof import conform, pipeline
from specref import mrs_tree

from tests.apps.test_cli import ROOT, assert_one_error_line, python

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
    argv = ["conform", "specref.proof.bugs.broken:no_bonus", "--algorithm", "block", "--log-probs", "--batch", "--rng", "seed",
            "--returns", "count-and-token", "--seed", "5", "--no-vectors", "--json", str(out_json)]
    assert cli.main(argv) == status
    from specref.proof.bugs import broken
    assert seen["function"] is broken.no_bonus and seen["algorithm"] == "block" and seen["seed"] == 5
    assert seen["vectors_tier"] is False
    adapter = seen["adapter"]
    assert (adapter.batch, adapter.log_probs, adapter.rng, adapter.returns) == (True, True, "seed", "count_and_token")
    assert json.loads(out_json.read_text())["passed"] is passed
    out = capsys.readouterr().out
    assert ("PASSED" if passed else "FAILED") in out and ("diagnosis: resample_from_q" in out) is not passed
    assert "bugs that shipped (docs/shipped_bugs.md) this run catches with >= 95% power: " in out


def test_a_real_process_with_a_crashing_verifier_fails_every_check_with_status_1(tmp_path):
    (tmp_path / "theirs.py").write_text("def verify(x_draft, p, q, rng):\n    raise RuntimeError('not implemented')\n")
    r = python("-m", "specref", "conform", f"{tmp_path}/theirs.py:verify")
    print(r.stdout)
    assert r.returncode == 1, r.stderr
    assert "FAIL  vectors (verify)" in r.stdout and "raised RuntimeError: not implemented" in r.stdout
    assert "FAILED" in r.stdout and "pass " not in r.stdout
    assert command.TARGET.match("a.b:c.d")


# ---------------------------------------------------------------- a verdict in bounded time, whatever the verifier does

HOSTILE = '''
import time
import numpy as np

def empty(x_draft, p, q, rng):
    return np.array([], dtype=np.int64)

def huge(x_draft, p, q, rng):
    return np.array([10**9])

def nan(x_draft, p, q, rng):
    return np.array([np.nan])

def raising(x_draft, p, q, rng):
    raise RuntimeError("not implemented")

def too_many(x_draft, p, q, rng):
    return np.zeros(len(x_draft) + 2, dtype=np.int64)

def floats(x_draft, p, q, rng):
    return np.array([0.5])

def sleeps(x_draft, p, q, rng):
    time.sleep(60)

def spins(x_draft, p, q, rng):
    while True:
        pass
'''


@pytest.mark.parametrize("name, check, message", [
    ("empty", "contract", "returned 0 tokens for K = 1 (must be 1 to K + 1 = 2)"),
    ("huge", "contract", "returned [1000000000]: a token id outside the vocabulary [0, 4)"),
    ("nan", "contract", "returned [nan]: not integer token ids"),
    ("too_many", "contract", "returned 3 tokens for K = 1 (must be 1 to K + 1 = 2)"),
    ("floats", "contract", "returned [0.5]: not integer token ids"),
    ("sleeps", "time limit", "verifier call 1 did not return within its time limit of 1 s"),
])
def test_a_hostile_verifier_fails_at_once_with_what_was_wrong(capsys, tmp_path, name, check, message):
    (tmp_path / "hostile.py").write_text(HOSTILE)
    cli = importlib.import_module("specref.__main__")
    start = time.monotonic()
    status = cli.main(["conform", f"{tmp_path}/hostile.py:{name}", "--call-limit", "1"])
    seconds = time.monotonic() - start
    out = capsys.readouterr().out
    print(out, f"{seconds:.2f} s")
    assert status == 1 and f"FAIL  {check}" in out and message in out and f"diagnosis: {check}: " in out
    assert seconds < 5.0  # the stated limit is 1 s a call; the rest is loading the module


def test_a_raising_verifier_is_reported_as_raising_not_as_keeping_a_draft(capsys, tmp_path):
    (tmp_path / "hostile.py").write_text(HOSTILE)
    cli = importlib.import_module("specref.__main__")
    start = time.monotonic()
    assert cli.main(["conform", f"{tmp_path}/hostile.py:raising", "--call-limit", "1"]) == 1
    out = capsys.readouterr().out
    print(out)
    assert time.monotonic() - start < 30.0
    assert "FAIL  edge q(x) = 0, u = 0" in out and "raised RuntimeError: not implemented" in out
    assert "a kept draft the target never emits" not in out
    assert "diagnosis: the verifier raised (RuntimeError: not implemented)" in out


def test_the_run_time_limit_ends_a_slow_but_correct_verifier(capsys):
    cli = importlib.import_module("specref.__main__")
    start = time.monotonic()
    assert cli.main(["conform", "specref.mrs:verify", "--time-limit", "2"]) == 1
    out = capsys.readouterr().out
    assert time.monotonic() - start < 4.0
    assert "FAIL  time limit" in out and "the run passed its time limit of 2 s during verifier call" in out


def test_a_verifier_that_never_returns_does_not_hang_a_real_process(tmp_path):
    # a busy loop in a separate process, the test's own timeout as a backstop: the checker must end it
    (tmp_path / "hostile.py").write_text(HOSTILE)
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "specref", "conform", f"{tmp_path}/hostile.py:spins", "--call-limit", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - start
    print(r.stdout, f"{seconds:.2f} s")
    assert r.returncode == 1 and "FAIL  time limit" in r.stdout
    assert "verifier call 1 did not return within its time limit of 2 s" in r.stdout and seconds < 20


def test_limits_hold_outside_the_main_thread_too():
    # no SIGALRM there: the call runs in a daemon thread that is abandoned when its time is up
    namespace = {}
    exec(HOSTILE, namespace)
    result = {}

    def run():
        start = time.monotonic()
        report = conform.check(namespace["sleeps"], call_limit=1.0)
        result.update(report=report, seconds=time.monotonic() - start)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and result["seconds"] < 3.0
    assert result["report"].checks[-1].name == "time limit" and not result["report"].passed


# ---------------------------------------------------------------- --pipeline

PIPE = "specref.proof.pipeline"


@pytest.mark.parametrize("generate, status", [("TOY", 0), ("target_not_warped", 1)])
def test_pipeline_mode_status_and_json(capsys, tmp_path, generate, status):
    cli = importlib.import_module("specref.__main__")
    out_json = tmp_path / "report.json"
    argv = ["conform", "--pipeline", f"{PIPE}:{generate}.generate", "--reference", f"{PIPE}:{generate}.plain",
            "--new-tokens", "4", "--samples", "5000", "--seed", "3", "--vocabulary", "6", "--json", str(out_json)]
    assert cli.main(argv) == status
    out = capsys.readouterr().out
    print(out)
    report = json.loads(out_json.read_text())
    assert report["passed"] is (status == 0) and report["checks"][-1]["samples"] == 5000
    assert ("PASSED" if status == 0 else "FAILED") in out and "sequences of 4 tokens" in out


def test_pipeline_mode_a_generator_past_its_limit_fails_with_status_1(capsys, tmp_path):
    (tmp_path / "gen.py").write_text("import time\ndef generate(n, seed):\n    time.sleep(60)\n")
    cli = importlib.import_module("specref.__main__")
    start = time.monotonic()
    assert cli.main(["conform", "--pipeline", f"{tmp_path}/gen.py:generate", "--reference", f"{PIPE}:TOY.plain",
                     "--call-limit", "1"]) == 1
    assert time.monotonic() - start < 5.0
    assert "pipeline call 1 did not return within its time limit of 1 s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, option, message", [
    (["--pipeline", f"{PIPE}:TOY.generate"], "--reference", "--pipeline needs --reference MODULE:PLAIN"),
    ([], "MODULE:FUNCTION", "required (or --pipeline MODULE:GENERATE --reference MODULE:PLAIN)"),
    (["specref.mrs:verify", "--samples", "10"], "--samples", "only with --pipeline"),
    (["specref.mrs:verify", "--reference", f"{PIPE}:TOY.plain"], "--reference", "only with --pipeline"),
    (["specref.mrs:verify", "--pipeline", f"{PIPE}:TOY.generate", "--reference", f"{PIPE}:TOY.plain"],
     "MODULE:FUNCTION", "not with --pipeline"),
    (["--pipeline", f"{PIPE}:TOY.generate", "--reference", f"{PIPE}:TOY.plain", "--algorithm", "block"],
     "--algorithm", "not with --pipeline"),
    (["--pipeline", f"{PIPE}:TOY.generate", "--reference", f"{PIPE}:NOPE"], "MODULE:FUNCTION",
     "specref.proof.pipeline has no NOPE"),
    (["--pipeline", "gen", "--reference", f"{PIPE}:TOY.plain"], "--pipeline", "expected MODULE:FUNCTION"),
    (["--pipeline", f"{PIPE}:TOY.generate", "--reference", f"{PIPE}:TOY.plain", "--samples", "0"], "--samples", ""),
    (["--pipeline", f"{PIPE}:TOY.generate", "--reference", f"{PIPE}:TOY.plain", "--new-tokens", "x"],
     "--new-tokens", ""),
    (["specref.mrs:verify", "--call-limit", "0"], "--call-limit", ""),
    (["specref.mrs:verify", "--time-limit", "-1"], "--time-limit", ""),
])
def test_pipeline_and_limit_usage_errors_are_one_line_and_status_2(capsys, argv, option, message):
    cli = importlib.import_module("specref.__main__")
    with pytest.raises(SystemExit) as exit:
        cli.main(["conform", *argv])
    assert exit.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in assert_one_error_line(err, PROG, option)


def test_pipeline_mode_a_run_that_tests_nothing_or_cannot_range_check_ids_is_status_3(capsys, tmp_path):
    # INCOMPLETE, status 3: no check failed, but one tested nothing (too few sequences for two bins, or ids beyond
    # every id PLAIN returned with no --vocabulary to range-check them); never a plain pass
    (tmp_path / "gen.py").write_text(
        "from specref.proof.pipeline import TOY\n"
        "def generate(n, seed):\n    out = TOY.generate(n, seed)\n    out[7, 2] = 2**62\n    return out\n")
    cli = importlib.import_module("specref.__main__")
    out_json = tmp_path / "report.json"
    assert cli.main(["conform", "--pipeline", f"{PIPE}:TOY.generate", "--reference", f"{PIPE}:TOY.plain",
                     "--samples", "10", "--vocabulary", "6", "--json", str(out_json)]) == 3
    out = capsys.readouterr().out
    print(out)
    assert "INCOMPLETE (1 of 3 checks not tested)" in out
    assert "not tested: sequences of 4 tokens: run with --samples" in out
    assert json.loads(out_json.read_text())["verdict"].startswith("INCOMPLETE")
    assert cli.main(["conform", "--pipeline", f"{tmp_path}/gen.py:generate", "--reference", f"{PIPE}:TOY.plain",
                     "--samples", "300"]) == 3
    out = capsys.readouterr().out
    print(out)
    assert "4611686018427387904 in 1 of 300 sequences" in out and "--vocabulary V" in out and "PASSED" not in out
    assert cli.main(["conform", "--pipeline", f"{tmp_path}/gen.py:generate", "--reference", f"{PIPE}:TOY.plain",
                     "--samples", "300", "--vocabulary", "6"]) == 1
    assert "token id 4611686018427387904, outside [0, 6)" in capsys.readouterr().out


# ---------------------------------------------------------------- tree verifiers: --algorithm tree-topk | tree-mss | tree-rrs

# the hostile tree verifiers of tests/proof/test_conform_tree.py, loaded by the command from their file
HOSTILE_TREE = ROOT / "tests" / "proof" / "test_conform_tree.py"


@pytest.mark.parametrize("name, check, message", [
    ("huge", "contract", "returned [1000000000]: a token id outside the vocabulary [0, 4)"),
    ("nan", "contract", "returned [nan]: not integer token ids"),
    ("too_many", "contract", "returned 4 tokens for a tree of depth 1 (must be 1 to depth + 1 = 2)"),
    ("sleeps", "time limit", "verifier call 1 did not return within its time limit of 0.25 s"),
])
def test_a_hostile_tree_verifier_fails_at_once_through_the_command(capsys, name, check, message):
    cli = importlib.import_module("specref.__main__")
    start = time.monotonic()
    status = cli.main(["conform", f"{HOSTILE_TREE}:{name}", "--algorithm", "tree-mss", "--call-limit", "0.25"])
    seconds = time.monotonic() - start
    out = capsys.readouterr().out
    print(out, f"{seconds:.2f} s")
    assert status == 1 and "as tree-mss verification" in out and f"FAIL  {check}" in out and message in out
    assert f"diagnosis: {check}: " in out and seconds < 5.0


def test_a_tree_algorithm_reaches_the_checker(monkeypatch, capsys):
    seen = {}

    def fake_check(function, adapter, **kwargs):
        seen.update(kwargs, function=function, adapter=adapter)
        return _report(True)

    monkeypatch.setattr(conform, "check", fake_check)
    cli = importlib.import_module("specref.__main__")
    assert cli.main(["conform", "specref.mrs_tree:verify_tree_rrs", "--algorithm", "tree-rrs", "--log-probs", "--batch"]) == 0
    assert seen["function"] is mrs_tree.verify_tree_rrs and seen["algorithm"] == "tree-rrs"
    assert seen["adapter"].log_probs and seen["adapter"].batch
    assert "PASSED" in capsys.readouterr().out


def test_count_and_token_is_refused_for_a_tree_verifier(capsys):
    cli = importlib.import_module("specref.__main__")
    with pytest.raises(SystemExit) as exit:
        cli.main(["conform", "specref.mrs_tree:verify_tree_mss", "--algorithm", "tree-mss", "--returns", "count-and-token"])
    assert exit.value.code == 2
    assert "a count does not say which path was accepted" in assert_one_error_line(capsys.readouterr().err, PROG,
                                                                                    "--returns")


@pytest.mark.slow  # a full run each: about 20 s for the reference, a minute for the control
def test_a_real_process_passes_a_reference_tree_verifier_and_fails_a_control(tmp_path):
    r = python("-m", "specref", "conform", "specref.mrs_tree:verify_tree_rrs", "--algorithm", "tree-rrs")
    print(r.stdout)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stderr
    (tmp_path / "control.py").write_text("from specref.proof import tree\n"
                                         "rrs_without_zeroing_p = tree.ALGORITHMS['tree-rrs'].bug['rrs_without_zeroing_p']\n")
    r = python("-m", "specref", "conform", f"{tmp_path}/control.py:rrs_without_zeroing_p", "--algorithm", "tree-rrs")
    print(r.stdout)
    assert r.returncode == 1 and "diagnosis: rrs_without_zeroing_p: " in r.stdout, r.stderr


def test_a_file_target_imports_its_sibling_files(tmp_path):
    # before: ModuleNotFoundError for the sibling (the file's folder was not on the import path)
    (tmp_path / "helper_for_conform_target.py").write_text("from specref import mrs\nverify = mrs.verify\n")
    (tmp_path / "adapter_for_conform_target.py").write_text(
        "from helper_for_conform_target import verify as _verify\n\ndef verify(x, p, q, rng):\n"
        "    return _verify(x, p, q, rng)\n")
    f = command.load_function(f"{tmp_path}/adapter_for_conform_target.py:verify")
    assert f.__module__ == "adapter_for_conform_target" and callable(f)


def test_a_specref_folder_that_shadows_the_installed_package_is_warned_of(tmp_path, monkeypatch, capsys):
    installed, here = tmp_path / "site" / "specref", tmp_path / "cwd" / "specref"
    assert command.shadow_warning(installed, installed) == "" and command.shadow_warning(here, None) == ""
    assert f"in {here}, not the installed one in {installed}" in command.shadow_warning(here, installed)
    monkeypatch.setattr(command, "installed_package", lambda: installed)  # the run prints it on stderr
    monkeypatch.setattr(conform, "check", lambda *a, **k: _report(True))
    assert command.run(command_args("specref.mrs:verify")) == 0
    assert "not the installed one" in capsys.readouterr().err


def command_args(target):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args([target])


def test_reseed_globals_reaches_the_adapter():
    args = command_args("specref.mrs:verify")
    command.check_args(args)
    assert args.adapter.reseed_globals is False
    args = command_args("specref.mrs:verify")
    args.reseed_globals = True
    command.check_args(args)
    assert args.adapter.reseed_globals is True


def _two_token_plain(n, seed):  # the exact law {(0, 0): 1/2, (0, 1): 1/2}
    return np.stack([np.zeros(n, dtype=np.int64), np.random.default_rng(seed).integers(2, size=n)], axis=1)


def test_the_pipelines_impossible_sequence_check_counts_them():
    # the check's count was never tested: a fault that never counted one survived the suite
    def one_impossible(n, seed):
        out = _two_token_plain(n, seed)
        out[5] = [1, 1]  # probability 0 under the law
        return out
    law = {(0, 0): 0.5, (0, 1): 0.5}
    report = pipeline.check_pipeline(one_impossible, _two_token_plain, samples=300, vocabulary=2, law=law)
    check = {c.name: c for c in report.checks}["no impossible sequence"]
    assert check.passed is False and "1 speculative, 0 plain, e.g. [1, 1]" in check.detail, check.line()
    control = pipeline.check_pipeline(_two_token_plain, _two_token_plain, samples=300, vocabulary=2, law=law)
    assert {c.name: c for c in control.checks}["no impossible sequence"].passed is True
