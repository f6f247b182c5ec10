"""The text the neural draft learns from: Python functions with a docstring, from code no benchmark holds.

Sources: Python's own standard library on this machine (`sysconfig.get_paths()["stdlib"]`) and the
Python sources of the packages installed beside it (site-packages: numpy, scipy, matplotlib,
IPython, pytest, ...).  Never HumanEval, MBPP or anything derived from them: a file is skipped if
any part of its path names one of them (BENCHMARK_NAMES), or lies in a test-suite directory, or
in specref itself (SKIP_DIRS).  `leaks` then checks the text itself: no long run of tokens of a
HumanEval prompt or canonical solution may appear in it (tests/smollm2/test_draft_data.py runs it
on the whole corpus, and on a corpus with one solution planted, which it must reject).

Each function is kept as (source, prompt): the prompt is the source up to the end of the
docstring, then a newline and the body's indentation, as a HumanEval prompt ends.  Identical
sources (vendored copies of one file) are kept once, so the held-out split below is disjoint by
text as well as by function.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import site
import sysconfig
import textwrap

import numpy as np

HELD_OUT_EVERY = 20  # every 20th function (after the seeded shuffle) is held out
SKIP_DIRS = {"test", "tests", "testing", "idlelib", "site-packages", "dist-packages", "lib2to3", "__pycache__",
             "turtledemo", "ensurepip", "tkinter", "specref"}
BENCHMARK_NAMES = ("humaneval", "human_eval", "human-eval", "mbpp")  # never read a path that mentions one
MIN_CHARS, MAX_CHARS = 200, 2500  # functions of this many characters (dedented) are kept
LEAK_NGRAM = 20  # tokens in a row shared with a HumanEval problem that count as a leak


def excluded(path: str) -> bool:
    """True for a path the corpus never reads: a benchmark's (any part names HumanEval or MBPP)."""
    low = path.lower()
    return any(name in low for name in BENCHMARK_NAMES)


def source_roots() -> list[pathlib.Path]:
    """The directories read: the standard library, then each site-packages directory."""
    roots = [pathlib.Path(sysconfig.get_paths()["stdlib"])]
    for path in site.getsitepackages():
        p = pathlib.Path(path)
        if p.is_dir() and p not in roots:
            roots.append(p)
    return roots


def python_files(root: pathlib.Path) -> list[pathlib.Path]:
    """Every .py file under root, in sorted order, outside SKIP_DIRS and benchmark paths (below root).

    At root itself only the names in SKIP_DIRS are skipped, so a site-packages root is read even
    though the standard library's walk skips the site-packages directory inside it.
    """
    found = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not excluded(d))
        found += [pathlib.Path(dirpath) / name for name in sorted(files)
                  if name.endswith(".py") and not excluded(os.path.relpath(os.path.join(dirpath, name), root))]
    return found


def functions_in(source: str) -> list[tuple[str, str]]:
    """(source, prompt) of every function in `source` with a docstring and a body after it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(node.body) < 2 \
                or ast.get_docstring(node) is None:
            continue
        start = node.lineno - 1 - len(node.decorator_list)
        full = textwrap.dedent("\n".join(lines[start:node.end_lineno]))
        head = textwrap.dedent("\n".join(lines[start:node.body[0].end_lineno]))
        body_indent = node.body[1].col_offset - node.col_offset
        if MIN_CHARS <= len(full) <= MAX_CHARS and body_indent > 0:
            found.append((full, head + "\n" + " " * body_indent))
    return found


def collect(roots: list[pathlib.Path], seed: int) -> list[tuple[str, str]]:
    """(source, prompt) of the functions under `roots`, each distinct source once, in a seeded order."""
    found, seen = [], set()
    for root in roots:
        for path in python_files(root):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for source, prompt in functions_in(text):
                if source not in seen:
                    seen.add(source)
                    found.append((source, prompt))
    if not found:
        raise RuntimeError(f"no Python functions with docstrings found under {[str(r) for r in roots]}")
    order = np.random.default_rng(seed).permutation(len(found))
    return [found[i] for i in order]


def stdlib_functions(seed: int) -> list[tuple[str, str]]:
    """(source, prompt) of standard-library functions with a docstring, in a seeded order."""
    return collect(source_roots()[:1], seed)


def split(functions: list) -> tuple[list, list]:
    """(training, held-out) functions: every HELD_OUT_EVERY-th is held out."""
    return ([f for i, f in enumerate(functions) if i % HELD_OUT_EVERY],
            [f for i, f in enumerate(functions) if i % HELD_OUT_EVERY == 0])


# ---- the leak check -----------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]")


def code_tokens(text: str) -> list[str]:
    """Words and punctuation marks, whitespace dropped: reformatting a copy does not hide it."""
    return _TOKEN.findall(text)


def ngrams(tokens: list[str], n: int) -> set[int]:
    """Hashes of every run of n tokens of which at least half are names (a letter or _ first).

    Runs of numbers and punctuation are left out: a docstring's example `[1.0, 2.0, 3.0, 4.0, 5.0]`
    is 21 such tokens and turns up in unrelated code (measured on this corpus: two false leaks)."""
    named = [t[0].isalpha() or t[0] == "_" for t in tokens]
    return {hash(tuple(tokens[i:i + n])) for i in range(len(tokens) - n + 1) if 2 * sum(named[i:i + n]) >= n}


def leaks(texts, problems, n: int = LEAK_NGRAM) -> list[str]:
    """Task ids of the HumanEval problems (`specref.apps.humaneval.problems.Problem`) sharing a run of n
    tokens with any of `texts`.  Each problem contributes its canonical solution and the last lines of
    its prompt joined to it (signature, docstring, body): a solution shorter than n tokens is seen
    through its docstring and signature."""
    owner: dict[int, str] = {}
    for p in problems:
        for h in ngrams(code_tokens(p.canonical_solution), n) | ngrams(code_tokens(p.prompt + p.canonical_solution)[-4 * n:], n):
            owner[h] = p.task_id
    found = set()
    for text in texts:
        tokens = code_tokens(text)
        for i in range(len(tokens) - n + 1):     # the problem's runs are the filtered ones: no filter needed here
            task = owner.get(hash(tuple(tokens[i:i + n])))
            if task is not None:
                found.add(task)
    return sorted(found)
