"""`python -m specref`: every bad option value ends the command with one error line and status 2
before anything is loaded; `--help` of every command needs only the core dependencies; one
mechanism sets the BLAS thread count: OPENBLAS_NUM_THREADS, 1 unless the environment says otherwise,
set before NumPy is imported by specref.__main__, and the same way by notebook 05, which runs the
model as `demo` and `bench` do."""

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("demo", "bench", "humaneval", "figures", "conform")

# Per command and option: command lines with a bad value for that option.  {file} is an existing
# file, {dir} an existing directory, {missing} a directory that does not exist.
BAD = {
    "demo": {
        "--prompt": [["--prompt", ""], ["--prompt", "  \n"]],
        "--K": [["--K", "0"], ["--K", "65"], ["--K", "two"], ["--K"]],
        "--temperature": [["--temperature", "-1"], ["--temperature", "nan"], ["--temperature", "inf"],
                          ["--temperature", "hot"]],
        "--top-p": [["--top-p", "0"], ["--top-p", "1.5"], ["--top-p", "-0.1"]],
        "--draft": [["--draft", "medusa"]],
        "--max-new-tokens": [["--max-new-tokens", "0"], ["--max-new-tokens", "8192"]],
        "--seed": [["--seed", "-1"], ["--seed", "1.5"]],
        "--cache-dir": [["--cache-dir", "{file}"], ["--cache-dir", "{file}/sub"]],
        "--color": [["--color", "purple"]],
        "--verify": [["--verify", "typical"], ["--verify", "Block"], ["--verify"]],
        "--tree": [["--tree", "2x0"], ["--tree", "4x4x4"], ["--tree", "3+-1"], ["--tree", "two"], ["--tree"]],
        "--draft-file": [["--draft-file", "{missing}/d.npz"], ["--draft-file", "{dir}"], ["--draft-file", "{file}"],
                         ["--draft-file", "{file}", "--draft", "ngram"]],
    },
    "bench": {
        "--json": [["--json", "{dir}"], ["--json", "{missing}/costs.json"], ["--json", "{file}/costs.json"]],
        "--repeats": [["--repeats", "0"], ["--repeats", "many"]],
        "--cache-dir": [["--cache-dir", "{file}"]],
        "--K": [["--K", "0"]],
        "--max-new-tokens": [["--max-new-tokens", "0"]],
        "--blas-threads": [["--blas-threads", "-1"], ["--blas-threads", "x"], ["--blas-threads=2.5"]],
        "--verify": [["--verify", "lossy"]],
        "--replan": [["--replan=yes"]],
        "--one-thread": [["--one-thread=yes"]],
        "--costs-only": [["--costs-only=yes"]],
    },
    "humaneval": {
        "--limit": [["--limit", "0"], ["--limit", "165"]],
        "--K": [["--K", "0"], ["--K", "65"]],
        "--drafts": [["--drafts", "prompt-lookup,medusa"], ["--drafts", ""], ["--drafts", "ngram,,uniform"],
                     ["--drafts", "ngram,ngram"]],
        "--max-new-tokens": [["--max-new-tokens", "0"]],
        "--seed": [["--seed", "-1"]],
        "--lookup-n": [["--lookup-n", "0"], ["--lookup-n", "65"], ["--lookup-n", "3.5"]],
        "--verify": [["--verify", "tokens"], ["--verify", ""]],
        "--tree": [["--tree", "0"], ["--tree", "2x"], ["--tree", "65"]],
        "--json": [["--json", "{dir}"], ["--json", "{dir}/out.jsonl"], ["--json", "{file}/out.json"]],
        "--k-sweep": [["--k-sweep", "a,b"], ["--k-sweep", "0,2"], ["--k-sweep", ""], ["--k-sweep", "2,2"],
                      ["--k-sweep", "1,65"]],
        "--timeout": [["--timeout", "0"], ["--timeout", "-1"], ["--timeout", "inf"]],
        "--no-bench-costs": [["--no-bench-costs=yes"]],
        "--cache-dir": [["--cache-dir", "{file}"]],
        "--draft-file": [["--draft-file", "{missing}/d.npz"], ["--draft-file", "{file}"],
                         ["--draft-file", "{file}", "--drafts", "prompt-lookup,ngram"]],
    },
    "figures": {
        "--quick": [["--quick=1"]],
        "--out": [["--out", "{file}"], ["--out", "{file}/sub"]],
        "--skip-model": [["--skip-model=no"]],
    },
    "train-draft": {
        "--quick": [["--quick=1"]],
        "--seed": [["--seed", "-1"], ["--seed", "x"]],
        "--steps": [["--steps", "0"], ["--steps", "1e3"]],
        "--out": [["--out", "{dir}"], ["--out", "{missing}/d.npz"], ["--out", "{dir}/d.npz", "--install"]],
        "--install": [["--install=yes"]],
        "--workers": [["--workers", "0"], ["--workers", "many"]],
        "--cache-dir": [["--cache-dir", "{file}"]],
        "--blas-threads": [["--blas-threads", "-2"]],
        "--data-positions": [["--data-positions", "0"], ["--data-positions", "1e5"],
                             ["--data-positions", "1000", "--quick"]],
        "--hidden": [["--hidden", "0"], ["--hidden", "wide"]],
        "--unroll": [["--unroll", "0"], ["--unroll", "17"], ["--unroll", "two"]],
        "--batch": [["--batch", "0"], ["--batch", "-4"]],
        "--eval-prompts": [["--eval-prompts", "165"], ["--eval-prompts", "-1"]],
        "--report": [["--report", "{dir}"], ["--report", "{missing}/r.json"]],
        "--evaluate": [["--evaluate", "{missing}/d.npz"], ["--evaluate", "{dir}"],
                       ["--evaluate", "shipped", "--eval-prompts", "0"]],
    },
    "draft-data": {
        "--positions": [["--positions", "0"], ["--positions", "2e6"], ["--positions", "2,000,000"]],
        "--seed": [["--seed", "-1"], ["--seed", "x"]],
        "--batch": [["--batch", "0"], ["--batch", "257"]],
        "--threads": [["--threads", "0"], ["--threads", "two"]],
        "--cache-dir": [["--cache-dir", "{file}"]],
    },
    "conform": {
        "--algorithm": [["--algorithm", "greedy"], ["--algorithm", "Token"], ["--algorithm"]],
        "--batch": [["--batch=1"]],
        "--log-probs": [["--log-probs=yes"]],
        "--rng": [["--rng", "jax"], ["--rng", ""]],
        "--returns": [["--returns", "count"], ["--returns", "count_and_token"]],
        "--arrays": [["--arrays", "jax"]],
        "--seed": [["--seed", "-1"], ["--seed", "1.5"], ["--seed", "x"]],
        "--no-vectors": [["--no-vectors=0"]],
        "--reseed-globals": [["--reseed-globals=yes"]],
        "--json": [["--json", "{dir}"], ["--json", "{missing}/report.json"], ["--json", "{file}/report.json"]],
        "--pipeline": [["--pipeline", "specref.proof.pipeline"], ["--pipeline", ":TOY.generate"]],
        "--reference": [["--reference", "plain"], ["--pipeline", "specref.proof.pipeline:TOY.generate"]],
        "--new-tokens": [["--new-tokens", "0"], ["--new-tokens", "two"]],
        "--samples": [["--samples", "0"], ["--samples", "1e4"]],
        "--vocabulary": [["--vocabulary", "0"], ["--vocabulary", "-3"]],
        "--call-limit": [["--call-limit", "0"], ["--call-limit", "nan"], ["--call-limit", "-1"]],
        "--time-limit": [["--time-limit", "0"], ["--time-limit", "inf"]],
    },
}
CASES = [(cmd, option, argv) for cmd, table in BAD.items() for option, cases in table.items() for argv in cases]

# Packages that are not core dependencies (numpy, scipy, gguf): --help must work without them.
NON_CORE = ("matplotlib", "ipywidgets", "jupyter", "nbclient", "nbformat", "hypothesis", "pytest", "jupytext",
            "IPython", "regex", "jinja2", "ipykernel")

# Run `python -m specref ARGS` with the named top-level packages unimportable, as if not installed.
BLOCKED_RUN = """
import runpy, sys
blocked = set(sys.argv[1].split(","))
for name in list(sys.modules):
    if name.split(".")[0] in blocked:
        del sys.modules[name]
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
sys.meta_path.insert(0, NotInstalled())
sys.argv = ["specref", *sys.argv[2:]]
runpy.run_module("specref", run_name="__main__", alter_sys=True)
"""

# Run `python -m specref ARGS` and say, once, what OPENBLAS_NUM_THREADS was when NumPy got imported.
THREADS_RUN = """
import os, runpy, sys
class Watch:
    seen = False
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not self.seen:
            self.seen = True
            print("numpy imported with OPENBLAS_NUM_THREADS=" + os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
                  file=sys.stderr)
sys.meta_path.insert(0, Watch())
sys.argv = ["specref", *sys.argv[1:]]
runpy.run_module("specref", run_name="__main__", alter_sys=True)
"""


def python(*args, env_extra=None, unset=("OPENBLAS_NUM_THREADS",)):
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def assert_one_error_line(stderr: str, prog: str, option: str | None = None) -> str:
    """argparse's usage lines, then exactly one line: `prog: error: argument OPTION: ...`."""
    lines = stderr.rstrip("\n").split("\n")
    assert lines[0].startswith("usage: "), stderr
    assert all(line.startswith(" ") for line in lines[1:-1]), stderr
    assert lines[-1].startswith(f"{prog}: error: " + (f"argument {option}" if option else "")), stderr
    return lines[-1]


def fill(argv, tmp_path):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_dir").mkdir(exist_ok=True)
    paths = {"file": tmp_path / "a_file", "dir": tmp_path / "a_dir", "missing": tmp_path / "no" / "such"}
    return [a.format(**paths) for a in argv]


@pytest.fixture
def cli(monkeypatch):
    """specref.__main__ with every command's run and every loader replaced by one that fails the test."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    cli = importlib.import_module("specref.__main__")
    for module_name, _ in cli.COMMANDS.values():
        importlib.import_module(module_name)

    def refuse(*args, **kwargs):
        raise AssertionError("a command ran or loaded something despite a bad option")

    for name, module in list(sys.modules.items()):
        if name.startswith("specref"):
            for attr in ("run", "load_smollm2", "load_fast", "load_problems", "fetch_pypi_member", "gguf_path", "measure_costs"):
                if callable(getattr(module, attr, None)):
                    monkeypatch.setattr(module, attr, refuse)
    return cli


def parser_of(command: str) -> argparse.ArgumentParser:
    cli = importlib.import_module("specref.__main__")
    parser = argparse.ArgumentParser()
    importlib.import_module(cli.COMMANDS[command][0]).add_arguments(parser)
    return parser


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_bad_values_in_this_test(command):
    """A new option needs its bad values in BAD (and an argparse type that rejects them)."""
    options = {s for a in parser_of(command)._actions for s in a.option_strings if s not in ("-h", "--help")}
    assert options == set(BAD[command])


@pytest.mark.parametrize("command,option,argv", CASES, ids=[f"{c} {' '.join(a)}" for c, _, a in CASES])
def test_a_bad_value_is_one_line_and_status_2_before_anything_runs(cli, capsys, tmp_path, command, option, argv):
    with pytest.raises(SystemExit) as exit:
        cli.main([command, *fill(argv, tmp_path)])
    assert exit.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_error_line(err, f"python -m specref {command}", option)


def test_good_values_reach_run_converted(monkeypatch, tmp_path):
    from specref.apps import options as drafts
    cli = importlib.import_module("specref.__main__")
    seen = {}
    for command in COMMANDS:
        module = importlib.import_module(cli.COMMANDS[command][0])
        monkeypatch.setattr(module, "run", lambda args, command=command: seen.__setitem__(command, args) or 0)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert cli.main(["demo", "--K", "2", "--temperature", "0", "--top-p", "1", "--draft", "all", "--seed", "3",
                     "--max-new-tokens", "5", "--cache-dir", str(tmp_path / "new" / "cache"), "--color", "never"]) == 0
    d = seen["demo"]
    assert (d.K, d.temperature, d.top_p, d.draft, d.seed, d.max_new_tokens) == (2, 0.0, 1.0, "all", 3, 5)
    assert d.cache_dir == tmp_path / "new" / "cache" and d.command == "demo"
    assert cli.main(["humaneval", "--drafts", "ngram, prompt-lookup", "--k-sweep", "1,3", "--limit", "164",
                     "--json", str(tmp_path / "deep" / "r.json"), "--timeout", "0.5"]) == 0
    h = seen["humaneval"]
    assert (h.drafts, h.k_sweep, h.limit, h.timeout) == (["ngram", "prompt-lookup"], [1, 3], 164, 0.5)
    assert cli.main(["humaneval", "--tree", "3 + 1", "--K", "2"]) == 0
    assert (seen["humaneval"].tree, seen["humaneval"].K) == ("3+1", 2)
    assert cli.main(["demo", "--tree", "2X1"]) == 0 and seen["demo"].tree == "2x1"
    assert cli.main(["humaneval"]) == 0  # the defaults pass their own checks
    assert seen["humaneval"].drafts == list(drafts.DRAFTS) and seen["humaneval"].k_sweep is None
    assert cli.main(["bench", "--json", str(tmp_path / "c.json"), "--blas-threads", "1"]) == 0
    assert seen["bench"].blas_threads == 1 and not seen["bench"].one_thread
    assert cli.main(["bench", "--one-thread"]) == 0 and seen["bench"].one_thread
    assert cli.main(["figures", "--quick", "--out", str(tmp_path / "figs")]) == 0


def test_humaneval_check_args_checks_options_set_by_code():
    from specref.apps import humaneval
    args = parser_of("humaneval").parse_args([])
    assert humaneval.check_args(args)[1] is None
    for name, value, option in [("K", 0, "--K"), ("drafts", "ngram,medusa", "--drafts"), ("k_sweep", "a", "--k-sweep"),
                                ("timeout", 0.0, "--timeout"), ("limit", 0, "--limit")]:
        bad = argparse.Namespace(**{**vars(args), name: value})
        with pytest.raises(ValueError, match=f"argument {option}:"):
            humaneval.check_args(bad)


def test_blas_threads_cannot_be_set_once_numpy_is_imported(cli, capsys, monkeypatch):
    import numpy  # noqa: F401  (this process has it; setting the variable now would change nothing)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    with pytest.raises(SystemExit) as exit:
        cli.main(["bench", "--blas-threads", "3"])
    assert exit.value.code == 2
    line = assert_one_error_line(capsys.readouterr().err, "python -m specref bench", "--blas-threads")
    assert "OPENBLAS_NUM_THREADS=3" in line


# ---- real processes ------------------------------------------------------------------------------

@pytest.mark.default_cases("argv0---temperature")
@pytest.mark.parametrize("argv,option", [
    (["demo", "--temperature", "-1"], "--temperature"),
    (["bench", "--repeats", "0"], "--repeats"),
    (["humaneval", "--limit", "0"], "--limit"),
    (["figures", "--out", "README.md"], "--out"),
])
def test_a_bad_value_in_a_real_process_loads_nothing(argv, option):
    r = python("-m", "specref", *argv)
    assert r.returncode == 2 and r.stdout == ""
    line = assert_one_error_line(r.stderr, f"python -m specref {argv[0]}", option)
    assert "expected" in line
    assert not any(word in r.stderr.lower() for word in ("loading", "fetching", "download", "traceback"))


@pytest.mark.default_cases("--help", "demo --help")
@pytest.mark.parametrize("argv", [["--help"], *[[c, "--help"] for c in COMMANDS]], ids=lambda a: " ".join(a))
def test_help_needs_only_the_core_dependencies(argv):
    blocked = NON_CORE + (("numpy", "scipy", "gguf") if argv == ["--help"] else ())  # the list imports nothing
    r = python("-c", BLOCKED_RUN, ",".join(blocked), *argv)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m specref") and r.stderr == ""
    if argv == ["--help"]:
        for command in COMMANDS:
            assert command in r.stdout
    else:
        assert all(option in r.stdout for option in BAD[argv[0]])


def test_figures_without_matplotlib_says_so_in_one_line(tmp_path):
    r = python("-c", BLOCKED_RUN, "matplotlib", "figures", "--out", str(tmp_path / "figs"))
    assert r.returncode == 2 and not (tmp_path / "figs").exists()
    assert "specref[plots]" in assert_one_error_line(r.stderr, "python -m specref figures")


def test_no_command_or_an_unknown_one():
    for argv, message in [([], "required"), (["nope"], "invalid choice")]:
        r = python("-m", "specref", *argv)
        assert r.returncode == 2 and message in assert_one_error_line(r.stderr, "python -m specref")


@pytest.mark.default_cases("argv0-env0-3", "argv6-env6-1")
@pytest.mark.parametrize("argv,env,threads", [
    (["bench", "--blas-threads", "3"], {}, "3"),
    (["bench", "--blas-threads=4"], {}, "4"),
    (["bench", "--blas-threads", "0"], {"OPENBLAS_NUM_THREADS": "2"}, "2"),
    (["bench"], {}, "1"),
    (["bench"], {"OPENBLAS_NUM_THREADS": "2"}, "2"),
    (["bench", "--blas-threads", "3"], {"OPENBLAS_NUM_THREADS": "2"}, "3"),
    (["demo"], {}, "1"),
])
def test_openblas_threads_are_set_before_numpy_is_imported(argv, env, threads):
    """The one mechanism: the environment variable, set by specref.__main__ before NumPy's import
    (the bad --repeats / --K stops each command right after parsing)."""
    bad = ["--repeats", "0"] if argv[0] == "bench" else ["--K", "0"]
    r = python("-c", THREADS_RUN, *argv, *bad, env_extra=env)
    assert r.returncode == 2, r.stderr
    assert f"numpy imported with OPENBLAS_NUM_THREADS={threads}\n" in r.stderr


def _code_lines(notebook: Path) -> list[str]:
    import jupytext
    cells = jupytext.read(notebook).cells
    return [line.strip() for c in cells if c.cell_type == "code" for line in c.source.splitlines()]


MODEL_NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")
                         if any("load_smollm2(" in line or "load_fast(" in line for line in _code_lines(p)))
TRAINING_NOTEBOOKS = ["06_making_a_draft"]     # trains a draft, which `train-draft` does on every core
PLAIN_NOTEBOOKS = ["00_why_fast"]  # times the plain model (not the fast path), on one BLAS thread as the commands
ONE_BLAS_THREAD = 'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")'


def test_the_model_notebooks_are_found():
    assert MODEL_NOTEBOOKS == ["00_why_fast", "05_real_model", "06_making_a_draft"]
    assert set(TRAINING_NOTEBOOKS) < set(MODEL_NOTEBOOKS) and set(PLAIN_NOTEBOOKS) < set(MODEL_NOTEBOOKS)


@pytest.mark.parametrize("name", MODEL_NOTEBOOKS)
def test_notebooks_that_load_the_model_set_the_blas_threads_as_their_command(name):
    """A notebook that loads the model to generate sets OPENBLAS_NUM_THREADS as `demo` and `bench` do,
    before its first import of NumPy or of a package that imports it, and so does one that times the plain
    model against the memory floor (00: the floor and the decode step measured on the same thread count);
    one that also trains leaves OpenBLAS its every-core default, as `train-draft` does."""
    lines = _code_lines(ROOT / "notebooks" / f"{name}.py")
    setting = [i for i, line in enumerate(lines) if line == ONE_BLAS_THREAD]
    if name in TRAINING_NOTEBOOKS:
        assert not setting and "td.run_training(" in " ".join(lines)
        return
    if name in PLAIN_NOTEBOOKS:
        assert "load_smollm2(" in " ".join(lines) and "load_fast(" not in " ".join(lines)
    imports = [i for i, line in enumerate(lines) if line.split(" ")[0] in ("import", "from")
               and line.split(" ")[1].split(".")[0] in ("numpy", "specref", "matplotlib", "scipy")]
    assert setting and imports and setting[0] < imports[0], f"{name} loads the model without setting the BLAS threads first"
