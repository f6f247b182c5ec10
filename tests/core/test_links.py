"""The documentation's relative links lead somewhere: README.md and every docs/*.md.

Every markdown link or image `[text](target)` (and reference definition `[name]: target`) whose
target is not a URL (http:, https:, mailto: or any other scheme) must name a file or directory
that exists inside the repository; `path#anchor` into a markdown file (or `#anchor` into the same
page) must name a heading of that file, by GitHub's slug.  Links inside fenced code blocks and
inline code are not links.  The README is the front door: at most MAX_README_LINES lines, and it
links every page in docs/.
"""

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_README_LINES = 200

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), text with at most one level of nested brackets, an optional title
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def pages() -> list[Path]:
    """The pages whose links are checked: README.md and docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(text: str, keep_code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code blanked out unless keep_code."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line if keep_code else _CODE_SPAN.sub("code", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = text.replace("`", "").lower()
    kept = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a markdown text offers: its headings' slugs (repeats numbered -1, -2, ... as GitHub does) and HTML anchors."""
    found, seen = set(), {}
    for _, line in _prose_lines(text, keep_code=True):  # a heading's anchor keeps its code's text
        found.update(_HTML_ANCHOR.findall(line))
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link in the text's prose."""
    out = []
    for number, line in _prose_lines(text):
        targets = [m.group(1) for m in _LINK.finditer(line)]
        ref = _REFERENCE.match(line)
        if ref:
            targets.append(ref.group(1))
        out.extend((number, t[1:-1] if t.startswith("<") else t) for t in targets)
    return out


def broken_links(text: str, page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `text`, read as the page `page` inside `root`, that lead nowhere: one message each."""
    problems = []
    for number, target in links(text):
        if _SCHEME.match(target):
            continue  # http:, https:, mailto: ... are not checked
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part)
        if not path_part:
            file = page
        elif path_part.startswith("/"):
            file = (root / path_part.lstrip("/")).resolve()
        else:
            file = (page.parent / path_part).resolve()
        where = f"{page.relative_to(root) if page.is_relative_to(root) else page}:{number}: {target}"
        if not file.is_relative_to(root.resolve()):
            problems.append(f"{where}: leads outside the repository")
            continue
        if file != page and not file.exists():
            problems.append(f"{where}: no such file or directory")
            continue
        if anchor and file.suffix == ".md":
            offered = anchors(text if file == page else file.read_text(encoding="utf-8"))
            if unquote(anchor) not in offered:
                problems.append(f"{where}: no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page):
    problems = broken_links(page.read_text(encoding="utf-8"), page)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_checker_reports_broken_links():
    # Negative control: the same checker on a page with known good and broken links.
    page = ROOT / "docs" / "example.md"
    text = "\n".join([
        "# Example page",
        "## A section: with punctuation, and `code`",
        "[fine](performance.md) [fine too](../README.md) ![figure](../figures/) [here](#example-page)",
        "[section](#a-section-with-punctuation-and-code) [web](https://example.com/missing.md) [mail](mailto:x@y.z)",
        "[missing file](no_such_page.md) and ![missing image](../figures/no_such.png)",
        "[missing anchor](performance.md#no-such-heading) and [missing here](#nowhere)",
        "[outside](../../elsewhere.md)",
        "```",
        "[in a code block](not_checked.md)",
        "```",
        "`[inline code](not_checked_either.md)`",
        "[reference]: also_missing.md",
    ])
    problems = broken_links(text, page)
    reported = [p.split(": ", 1)[1].split(":")[0] for p in problems]
    assert reported == ["no_such_page.md", "../figures/no_such.png", "performance.md#no-such-heading",
                        "#nowhere", "../../elsewhere.md", "also_missing.md"], problems


def test_slugs_follow_github():
    assert slug("A third day: OpenBLAS's own threads against the plan's") == "a-third-day-openblass-own-threads-against-the-plans"
    assert slug("specref — speculative sampling, proven, in NumPy") == "specref--speculative-sampling-proven-in-numpy"
    assert slug("The `verify_block` rule, step 1") == "the-verify_block-rule-step-1"
    assert anchors("## Whole pipelines: `--pipeline`\n") == {"whole-pipelines---pipeline"}
    assert anchors("# Notes\n## Notes\n```\n# not a heading\n```\n") == {"notes", "notes-1"}


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"


def test_readme_links_every_docs_page():
    linked = {(ROOT / unquote(t.partition("#")[0])).resolve()
              for _, t in links((ROOT / "README.md").read_text(encoding="utf-8")) if not _SCHEME.match(t)}
    unlinked = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
