"""The package's shape, kept: mrs.py is a small chain reference, its tree companion stands beside it, and no
module grows into a drawer.

These are the limits docs/package.md states; each test names the file that breaks its limit.
"""

import ast
from pathlib import Path

from specref import mrs, mrs_tree
from tools import reading_paths

PACKAGE = Path(mrs.__file__).parent
MRS_LINES, MRS_DOC_LINES, MODULE_LINES = 450, 100, 600


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_mrs_py_is_a_short_chain_reference():
    assert _lines(Path(mrs.__file__)) <= MRS_LINES, f"specref/mrs.py has {_lines(Path(mrs.__file__))} lines"
    assert len(mrs.__doc__.splitlines()) <= MRS_DOC_LINES, f"mrs.py's docstring has {len(mrs.__doc__.splitlines())}"
    assert not any(name.startswith("verify_tree") for name in vars(mrs)), "tree verifiers belong in mrs_tree.py"


def test_the_tree_companion_needs_only_numpy_and_mrs():
    tree = ast.parse(Path(mrs_tree.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {"." * n.level + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "numpy", "mrs", "."}, imported


def oversized(root: Path, limit: int) -> list[str]:
    """The .py files under root with more than `limit` lines, as 'path: lines'."""
    return [f"{p.relative_to(root.parent)}: {_lines(p)}" for p in sorted(root.rglob("*.py")) if _lines(p) > limit]


def test_no_module_is_a_drawer():
    assert oversized(PACKAGE, MODULE_LINES) == []


def test_the_size_check_sees_an_oversized_file(tmp_path):  # its negative control
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "big.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    (pkg / "small.py").write_text("x = 1\n" * MODULE_LINES)
    assert oversized(pkg, MODULE_LINES) == [f"pkg/sub/big.py: {MODULE_LINES + 1}"]


def test_the_reading_paths_docs_package_md_quotes_are_the_code_s():
    """docs/package.md quotes the first line of each reading path; tools.reading_paths measures it on the code."""

    docs = (PACKAGE.parent / "docs" / "package.md").read_text(encoding="utf-8")
    for name, (entries, skip) in reading_paths.PATHS.items():
        first = reading_paths.report(name, entries, skip).splitlines()[0]
        assert first in docs, f"docs/package.md does not say what the code measures: {first}"
