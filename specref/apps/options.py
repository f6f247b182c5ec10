"""The commands' option types: each turns one option's text into its value or rejects it.

argparse calls an option's `type=` function on its text, default strings included; when one
raises argparse.ArgumentTypeError, argparse prints the usage and one line naming the option,
`python -m specref demo: error: argument --K: expected an integer from 1 to 64, got '0'`, and
exits with status 2, before a model or a data set is loaded.  Nothing here imports NumPy, a model
or matplotlib.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib

# SmolLM2-135M's context (llama.context_length in its GGUF): prompt and new tokens must fit in it.
# Checked again, with the real prompt, on the loaded model.
CONTEXT_LENGTH = 8192
# Drafts per target call.  Each one costs a draft step and a row of the target's scoring call,
# and the expected tokens per call (1 - alpha^(K+1)) / (1 - alpha) stop growing long before 64.
MAX_K = 64


def _fail(expected: str, text: str):
    raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range(kind: str, low, high, low_open: bool = False) -> str:
    if high is None:
        return f"{kind} {'>' if low_open else '>='} {_num(low)}"
    if low_open:
        return f"{kind} > {_num(low)} and <= {_num(high)}"
    return f"{kind} from {_num(low)} to {_num(high)}"


def integer(low: int | None = None, high: int | None = None):
    """An integer in [low, high] (either end may be None: unbounded)."""
    if low is None:
        expected = "an integer" if high is None else f"an integer <= {high}"
    else:
        expected = _range("an integer", low, high)

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            _fail(expected, text)
        if (low is not None and value < low) or (high is not None and value > high):
            _fail(expected, text)
        return value

    return parse


def real(low: float, high: float | None = None, low_open: bool = False):
    """A finite number >= low (> low if low_open), and <= high unless high is None."""
    expected = _range("a finite number", low, high, low_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            _fail(expected, text)
        if not math.isfinite(value) or value < low or (low_open and value == low) or \
                (high is not None and value > high):
            _fail(expected, text)
        return value

    return parse


K = integer(1, MAX_K)  # drafts per target call
MAX_NEW_TOKENS = integer(1, CONTEXT_LENGTH - 1)  # the prompt takes at least one position
SEED = integer(0)  # numpy.random.default_rng takes non-negative integers
TEMPERATURE = real(0.0)  # 0 = greedy
TOP_P = real(0.0, 1.0, low_open=True)  # nucleus mass; 1 keeps every token


def tree(value: str) -> str:
    """A tree of drafts' shape (`specref.trees.Tree.parse`): children per depth like 2x1 (2 children of
    the root, 1 under each), or a spine like 3+1 (3 children of the root, 1 under the first); each
    number from 1 to MAX_K, at most MAX_K nodes.  Returned without spaces."""
    expected = f"a tree like 2x1 (children per depth) or 3+1 (a spine), numbers >= 1, at most {MAX_K} nodes"
    t = "".join(value.split()).lower()
    sep = "+" if "+" in t else "x"
    parts = t.split(sep)
    if not t or not all(p.isdigit() and 1 <= int(p) <= MAX_K for p in parts):
        _fail(expected, value)
    widths = [int(p) for p in parts]
    if sep == "+":
        nodes = sum(widths)
    else:
        nodes, level = 0, 1
        for w in widths:
            level *= w
            nodes += level
            if nodes > MAX_K:
                break
    if nodes > MAX_K:
        _fail(expected, value)
    return t


def text(value: str) -> str:
    """Any text with something besides white space in it."""
    if not value.strip():
        _fail("non-empty text", value)
    return value


# The commands' draft names, the one list of them (`specref.apps.named_drafts.by_name` makes each draft)
DRAFTS = ("prompt-lookup", "prompt-lookup-adaptive", "ngram", "uniform", "neural", "neural+lookup")
LOOKUP_DRAFTS = ("prompt-lookup", "prompt-lookup-adaptive", "neural+lookup")  # the drafts that take lookup_n
NEURAL_DRAFTS = ("neural", "neural+lookup")  # the drafts that run the trained draft (the shipped one, or --draft-file)


def known_drafts() -> tuple[str, ...]:
    """The draft names SpS accepts: `DRAFTS`."""
    return DRAFTS


def draft_list(value: str) -> list[str]:
    """Comma-separated draft names, each known and named once, at least one."""
    names = [n.strip() for n in value.split(",")]
    known = known_drafts()
    expected = f"a comma-separated subset of {','.join(known)}"
    if not value.strip() or "" in names:
        _fail(expected, value)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown draft {unknown[0]!r}; expected {expected}, got {value!r}")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"a draft is named twice; expected {expected}, each once, got {value!r}")
    return names


def K_list(value: str) -> list[int]:
    """Comma-separated K values, each from 1 to MAX_K and given once, at least one."""
    expected = f"comma-separated integers from 1 to {MAX_K} like 1,2,4, each once"
    try:
        values = [int(v) for v in value.split(",")]
    except ValueError:
        _fail(expected, value)
    if not values or min(values) < 1 or max(values) > MAX_K or len(set(values)) < len(values):
        _fail(expected, value)
    return values


def _writable_ancestor(path: pathlib.Path, what: str, text: str) -> None:
    """The nearest existing ancestor of `path` must be a writable directory (`path` gets created in it)."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                _fail(f"{what} under a directory ({parent} is a file)", text)
            if not os.access(parent, os.W_OK | os.X_OK):
                _fail(f"{what} under a writable directory ({parent} is not writable)", text)
            return


def directory(value: str) -> pathlib.Path:
    """A directory: an existing writable one, or a path where one can be created."""
    if not value:
        _fail("a directory", value)
    path = pathlib.Path(value).expanduser()
    if path.exists():
        if not path.is_dir():
            _fail("a directory (this is a file)", value)
        if not os.access(path, os.W_OK | os.X_OK):
            _fail("a writable directory", value)
    else:
        _writable_ancestor(path, "a directory", value)
    return path


def draft_file(value: str) -> str:
    """A draft file that exists (one `train-draft --out` wrote); whether it is one is checked when it is read."""
    path = pathlib.Path(value).expanduser()
    if not value or not path.is_file():
        _fail("a draft file that exists (written by `python -m specref train-draft --out FILE`)", value)
    return str(path)


def output_file(parents: bool = False, suffix_not: str | None = None):
    """A file to write: not a directory; its directory must exist, or with parents=True may be
    created; a name ending in `suffix_not` is refused (the command writes a file of that name beside it)."""
    def parse(value: str) -> str:
        if not value:
            _fail("a file name", value)
        path = pathlib.Path(value).expanduser()
        if value.endswith(("/", os.sep)) or path.is_dir():
            _fail("a file name (this is a directory)", value)
        if suffix_not and path.suffix == suffix_not:
            _fail(f"a name not ending in {suffix_not} (the same name ending in {suffix_not} is written beside it)",
                  value)
        parent = path.absolute().parent
        if parent.is_dir():
            if not os.access(parent, os.W_OK | os.X_OK):
                _fail(f"a file in a writable directory ({parent} is not writable)", value)
        elif parents:
            _writable_ancestor(path, "a file", value)
        else:
            _fail(f"a file in an existing directory ({parent} is not one)", value)
        return str(path)

    return parse


def checked(add_arguments, args: argparse.Namespace) -> argparse.Namespace:
    """`args` with every option passed again through the type and choices that `add_arguments`
    declares for it; ValueError naming the option if one is bad.  For options set by code rather
    than read from a command line (a parsed command line has been checked already)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = argparse.Namespace(**vars(args))
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if value is None or not action.option_strings:
            continue
        try:
            if action.type is not None:
                text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
                value = action.type(text)
            if action.choices is not None and value not in action.choices:
                raise argparse.ArgumentTypeError(f"expected one of {', '.join(map(str, action.choices))}, "
                                                 f"got {value!r}")
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"argument {action.option_strings[0]}: {e}") from None
        setattr(out, action.dest, value)
    return out
