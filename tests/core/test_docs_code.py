"""Every code block in README.md and docs/*.md runs in the suite, or says why it cannot.

A fenced block (``` or ~~~) is checked by its language:

- python: run as a script in a fresh interpreter, in an empty temporary directory, within
  PYTHON_LIMIT seconds; specref is importable, and a block that does `import mrs` finds
  specref/mrs.py copied into that directory, as the README asks the reader to copy it;
- bash (sh, shell, console): every command in it (split at newlines, `&&`, `||`, `;` and `|`,
  comments dropped) must be `python3 -m specref COMMAND ...`, and each is parsed by that command's
  own argument parser, built as `python -m specref` builds it: the option names, their values'
  types and choices are checked, nothing is run (the commands load the 93 MB model, a data set or
  the reader's own module, and take minutes);
- a block that cannot run (a listing, a directory tree, a usage synopsis, a command that installs,
  downloads or takes minutes, code that stands for the reader's own) carries, on the line just
  before its fence, `<!-- fragment: REASON -->`.  A marked python block must still compile.

The test fails for an unmarked block that is not run, a marker without a reason or without a
block after it, a python block that fails or runs past its limit, and a command its parser
rejects.  `test_the_collector_reports_what_it_must` is the negative control.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_LIMIT = 300.0  # a hang guard for one python block: the README's loop takes about 5 s alone, and over 60 s on a 2-core machine at load 8
PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*fragment\s*:(?P<reason>.*?)-->\s*$")
MARKER_START = re.compile(r"^\s*<!--\s*fragment\b")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")

@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str  # the info string's first word, lower case ('' if none)
    text: str
    fragment: str | None  # the marker's reason ('' if the marker has none); None if unmarked

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")


def collect(text: str, page: str) -> tuple[list[Block], list[str]]:
    """(the fenced blocks of a markdown text, problems with its fragment markers)."""
    lines = text.splitlines()
    blocks, problems, i = [], [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if MARKER_START.match(lines[i]):
            nxt = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if nxt is None:
                problems.append(f"{page}:{i + 1}: a fragment marker not on the line just before a code block")
            if not MARKER.match(lines[i]):
                problems.append(f"{page}:{i + 1}: a fragment marker must read <!-- fragment: REASON -->")
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        body, j = [], i + 1
        while j < len(lines):
            close = FENCE.match(lines[j])
            if (close and close["fence"][0] == fence[0] and len(close["fence"]) >= len(fence)
                    and not close["info"].strip()):
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        reason = None
        if i > 0:
            marker = MARKER.match(lines[i - 1])
            if marker:
                reason = marker["reason"].strip()
        info = m["info"].strip().split()
        blocks.append(Block(page, i + 1, info[0].lower() if info else "", "\n".join(body) + "\n", reason))
        i = j + 1
    return blocks, problems


# ---------------------------------------------------------------- running and parsing

def run_python(code: str, workdir: pathlib.Path, limit: float = PYTHON_LIMIT) -> str:
    """Run code as a script in workdir; '' if it exits 0 in time, else what went wrong."""
    workdir.mkdir(parents=True, exist_ok=True)
    if re.search(r"^\s*(import mrs\b|from mrs import)", code, re.MULTILINE):
        shutil.copy(ROOT / "specref" / "mrs.py", workdir / "mrs.py")
    script = workdir / "block.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg")
    try:
        done = subprocess.run([sys.executable, script.name], cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=limit)
    except subprocess.TimeoutExpired:
        return f"did not finish in {limit:g} s"
    if done.returncode != 0:
        return f"exited with status {done.returncode}:\n{done.stderr[-3000:]}"
    return ""


def commands(text: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, split at && || ; | and newlines."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        current = []
        for token in lex:
            if token in ("&&", "||", ";", "|"):
                out.append(current)
                current = []
            else:
                current.append(token)
        out.append(current)
    return [c for c in out if c]


def specref_problem(command: list[str]) -> str:
    """'' if the command is `python3 -m specref COMMAND ...` and its command's parser accepts it, else why not."""
    while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):  # VAR=value before the command
        command = command[1:]
    if len(command) < 3 or command[0] not in ("python3", "python") or command[1:3] != ["-m", "specref"]:
        return f"not a `python3 -m specref` command: {shlex.join(command)}"
    from specref import __main__ as cli
    argv = command[3:]
    if not argv or argv[0] not in cli.COMMANDS:
        return f"no such command: {shlex.join(command)}"
    module = importlib.import_module(cli.COMMANDS[argv[0]][0])
    parser = argparse.ArgumentParser(prog=f"{cli.PROG} {argv[0]}", allow_abbrev=False)
    module.add_arguments(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv[1:])
    except SystemExit as e:
        if e.code not in (0, None):  # 0: --help
            return f"{shlex.join(command)}: {err.getvalue().strip().splitlines()[-1]}"
    return ""


def check(block: Block, workdir: pathlib.Path) -> str:
    """'' if the block runs (or is a marked fragment, compiling if python), else what is wrong."""
    if block.fragment is not None:
        if not block.fragment:
            return f"{block.name}: a fragment marker without a reason"
        if block.lang in PYTHON:
            try:
                compile(block.text, block.name, "exec")
            except SyntaxError as e:
                return f"{block.name}: a python fragment that does not compile: {e}"
        return ""
    if block.lang in PYTHON:
        problem = run_python(block.text, workdir)
        return f"{block.name}: the python block {problem}" if problem else ""
    if block.lang in SHELL:
        cmds = commands(block.text)
        if not cmds:
            return f"{block.name}: a shell block with no command"
        problems = [p for p in (specref_problem(c) for c in cmds) if p]
        return f"{block.name}: " + "; ".join(problems) if problems else ""
    return (f"{block.name}: a {block.lang or 'plain'} block that is not run: mark it "
            "<!-- fragment: REASON --> on the line before its fence")


# ---------------------------------------------------------------- the pages

def _collect_pages() -> tuple[list[Block], list[str]]:
    blocks, problems = [], []
    for page in PAGES:
        b, p = collect(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
        blocks += b
        problems += p
    return blocks, problems


BLOCKS, MARKER_PROBLEMS = _collect_pages()


def test_the_pages_have_blocks_and_well_formed_markers():
    assert len(BLOCKS) >= 10 and {b.page for b in BLOCKS} >= {"README.md", "docs/package.md"}
    assert not MARKER_PROBLEMS, "\n".join(MARKER_PROBLEMS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_every_block_runs_or_is_marked(block, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # commands name paths relative to the repository, as the pages say to run them
    problem = check(block, tmp_path)
    assert not problem, problem


# ---------------------------------------------------------------- negative control

NEGATIVE = """# A page

<!-- fragment: a directory listing -->
```
a/  b/
```

```python
print("fine")
```

```python
import numpy as np
x = np.ones(3) @ np.ones(4)   # broken: shapes (3,) and (4,)
```

```
an unmarked listing
```

<!-- fragment: -->
```bash
python3 -m specref demo
```

<!-- fragment: stands for the reader's code -->
```python
report = conform.check(my_verify)
```

<!-- fragment: not valid python -->
```python
def f(:
```

```bash
python3 -m specref figures --quick   # a comment
python3 -m specref demo --K 0
python3 -m specref no-such-command && pip install x
```

<!-- fragment: a dangling marker -->

Text.
"""


def test_the_collector_reports_what_it_must(tmp_path):
    blocks, problems = collect(NEGATIVE, "page.md")
    assert [b.line for b in blocks] == [4, 8, 12, 17, 22, 27, 32, 36]
    assert problems == ["page.md:42: a fragment marker not on the line just before a code block"]
    found = {b.line: check(b, tmp_path / str(b.line)) for b in blocks}
    assert found[4] == "" and found[8] == "" and found[27] == ""  # marked listing, good python, marked fragment
    assert "ZeroDivisionError" in found[12] or "ValueError" in found[12], found[12]  # the broken python block
    assert "plain block that is not run" in found[17]  # the unmarked listing
    assert "without a reason" in found[22]
    assert "does not compile" in found[32]
    bash = found[36]
    assert "figures" not in bash.replace("no-such-command", ""), bash  # the good command passes
    assert "argument --K" in bash and "no such command" in bash and "not a `python3 -m specref` command: pip" in bash


def test_a_python_block_past_its_limit_fails(tmp_path):
    assert "did not finish" in run_python("import time\ntime.sleep(5)\n", tmp_path, limit=0.5)


# ---------------------------------------------------------------- numbers the pages cite

def test_the_detectable_deviation_table_in_tests_md_is_the_tools_output():
    """docs/tests.md cites `python3 -m tools.detectable_tv`; its table must be what the tool prints now."""
    from tools import detectable_tv
    page = (ROOT / "docs" / "tests.md").read_text(encoding="utf-8")
    for line in detectable_tv.table().splitlines():
        assert line in page, f"docs/tests.md lacks, or has another version of, this line of the tool's table:\n{line}"
