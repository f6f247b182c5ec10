"""Every notebook is a pair: notebooks/NN_name.py (jupytext percent format; the source that is
edited and reviewed) and notebooks/NN_name.ipynb (what JupyterLab opens; committed with its outputs,
executed top to bottom on a fresh kernel by `python3 -m specref.lessons.execute`).

After editing a .py, regenerate its .ipynb from it (cell ids and metadata kept):

    jupytext --update --to ipynb notebooks/*.py

or  jupytext --sync notebooks/*.py , which takes each pair's inputs from whichever file is newer:
fine right after editing the .py, but if the .ipynb is newer (a checkout or pull wrote it later),
--sync overwrites the .py edit with the .ipynb.  Then re-execute:  python3 -m specref.lessons.execute
Pairing is set in notebooks/jupytext.toml, so Jupyter (with jupytext installed) saves both files.
"""

import difflib
import re
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.config import load_jupytext_config
from jupytext.paired_paths import paired_paths

from specref.lessons import execute

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
EXPECTED = ["00_why_fast", "01_theorem1", "02_toy_mrs", "03_chi_square", "04_speedup_model", "05_real_model",
            "06_making_a_draft", "07_block_verification", "08_trees"]
PAIRS = [(NOTEBOOKS_DIR / f"{name}.py", NOTEBOOKS_DIR / f"{name}.ipynb") for name in EXPECTED]
PAIR_IDS = EXPECTED

# What JupyterLab 4 sets when it connects the python3 kernel (ipykernel): NotebookPanel._updateSpec
# and _updateLanguage write these two keys, and the notebook is marked modified only if they change.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {  # ipykernel's kernel_info reply, without "version" (the kernel's Python version)
    "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py", "mimetype": "text/x-python",
    "name": "python", "nbconvert_exporter": "python", "pygments_lexer": "ipython3",
}


def _cells(path: Path) -> list[tuple[str, str]]:
    """(cell type, source) of every cell, read with jupytext's reader (.py or .ipynb)."""
    return [(cell.cell_type, cell.source) for cell in jupytext.read(path).cells]


def _first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for k, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {k + 1}: {x!r} vs {y!r}"
    k = min(len(la), len(lb))
    return f"line {k + 1}: {(la[k] if k < len(la) else '<end>')!r} vs {(lb[k] if k < len(lb) else '<end>')!r}"


def pair_differences(py_path: Path, ipynb_path: Path) -> list[str]:
    """Where the .py and the .ipynb of one notebook disagree, one message per cell; [] when in sync.

    Cells are numbered from 0 in the order of the .py (as in the notebook's cell ids, NN-KK)."""
    name = py_path.stem
    text, nb = _cells(py_path), _cells(ipynb_path)
    problems = []
    matcher = difflib.SequenceMatcher(a=text, b=nb, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        n = min(i2 - i1, j2 - j1) if op == "replace" else 0
        for k in range(n):  # cells at the same place that differ
            (ta, sa), (tb, sb) = text[i1 + k], nb[j1 + k]
            if ta != tb:
                problems.append(f"{name}: cell {i1 + k} is {ta} in {py_path.name} but {tb} in {ipynb_path.name} "
                                f"(cell {j1 + k})")
            else:
                problems.append(f"{name}: cell {i1 + k} ({ta}) differs between {py_path.name} and "
                                f"{ipynb_path.name} (cell {j1 + k}), {_first_difference(sa, sb)}")
        for i in range(i1 + n, i2):
            problems.append(f"{name}: cell {i} ({text[i][0]}) of {py_path.name} is missing from {ipynb_path.name}: "
                            f"{text[i][1].splitlines()[:1]}")
        for j in range(j1 + n, j2):
            problems.append(f"{name}: cell {j} ({nb[j][0]}) of {ipynb_path.name} is missing from {py_path.name}: "
                            f"{nb[j][1].splitlines()[:1]}")
    return problems


def output_problems(ipynb_path: Path) -> list[str]:
    """How a committed .ipynb fails to be a top-to-bottom run on a fresh kernel, saved as
    specref.lessons.execute saves it; [] when it is one.

    Every code cell ran, in order (execution counts 1, 2, 3, ...), none left an error, no widget
    view or widget state is saved (GitHub could not draw it), and the first code cell says
    whether the notebook ran in quick mode or at full sizes."""
    nb = nbformat.read(ipynb_path, as_version=4)
    nbformat.validate(nb)
    problems = []
    if "widgets" in nb.metadata:
        problems.append(f"{ipynb_path.name}: widget state saved in the notebook's metadata")
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for n, (i, cell) in enumerate(code, start=1):
        if cell.execution_count != n:
            problems.append(f"{ipynb_path.name}: cell {i} has execution count {cell.execution_count}, not {n}")
        for out in cell.outputs:
            if out.output_type == "error":
                problems.append(f"{ipynb_path.name}: cell {i} saved an error: {out.get('ename')}")
            if execute.WIDGET_VIEW in out.get("data", {}):
                problems.append(f"{ipynb_path.name}: cell {i} saved a widget view")
    first = "".join(o.get("text", "") for o in code[0][1].outputs) if code else ""
    if not re.search(r"quick mode|full sizes", first):
        problems.append(f"{ipynb_path.name}: the first code cell does not print whether it ran in quick mode or at "
                        f"full sizes (it printed {first[:80]!r})")
    return problems


def unpaired(directory: Path) -> list[str]:
    """Notebooks in `directory` that lack their pair (an .ipynb without its .py or the reverse)."""
    ipynbs = {p.stem for p in directory.glob("*.ipynb")}
    scripts = {p.stem for p in directory.glob("*.py")}
    return ([f"{directory.name}/{s}.ipynb has no {s}.py" for s in sorted(ipynbs - scripts)]
            + [f"{directory.name}/{s}.py has no {s}.ipynb" for s in sorted(scripts - ipynbs)])


# ---------------------------------------------------------------- the committed notebooks

def test_every_notebook_has_its_pair():
    assert sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb")) == EXPECTED
    assert unpaired(NOTEBOOKS_DIR) == [], "pair a new notebook: jupytext --sync notebooks/NN_name.ipynb (or .py)"


@pytest.mark.parametrize("name", EXPECTED)
def test_jupytext_config_pairs_ipynb_with_percent_py(name):
    ipynb = NOTEBOOKS_DIR / f"{name}.ipynb"
    config = load_jupytext_config(str(ipynb))
    assert config is not None and config.formats == ["ipynb,py:percent"], "notebooks/jupytext.toml"
    paths = paired_paths(str(ipynb), "ipynb", config.formats[0])
    assert [(Path(p), fmt.get("format_name")) for p, fmt in paths] == [(ipynb, None), (ipynb.with_suffix(".py"), "percent")]


@pytest.mark.parametrize("py_path, ipynb_path", PAIRS, ids=PAIR_IDS)
def test_pair_in_sync(py_path, ipynb_path):
    problems = pair_differences(py_path, ipynb_path)
    assert not problems, "\n".join(problems + ["the .py is the source: jupytext --update --to ipynb notebooks/*.py"])


@pytest.mark.parametrize("py_path, ipynb_path", PAIRS, ids=PAIR_IDS)
def test_committed_executed_top_to_bottom(py_path, ipynb_path):
    problems = output_problems(ipynb_path)
    assert not problems, "\n".join(problems + [f"run it: python3 -m specref.lessons.execute {py_path.stem}"])


@pytest.mark.parametrize("py_path, ipynb_path", PAIRS, ids=PAIR_IDS)
def test_metadata_as_jupyterlab_writes_it(py_path, ipynb_path):
    """Opening the notebook in JupyterLab with the python3 kernel must not mark it modified."""
    nb = nbformat.read(ipynb_path, as_version=4)
    assert nb.metadata.kernelspec == KERNELSPEC
    assert {k: v for k, v in nb.metadata.language_info.items() if k != "version"} == LANGUAGE_INFO
    assert "version" in nb.metadata.language_info
    assert jupytext.read(py_path).metadata.kernelspec == KERNELSPEC  # the .py header carries the kernelspec
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5) and all("id" in c for c in nb.cells)


def test_opening_and_saving_in_jupyter_rewrites_nothing(tmp_path):
    """What a Jupyter server with jupytext does on open and save (no browser): both files come back byte for byte."""
    contents = pytest.importorskip("jupytext.sync_contentsmanager")
    copy = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS_DIR, copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    def files():  # the .py header records the jupytext version that wrote it: another version rewrites that line
        return {p.name: re.sub(rb"(?m)^#\s+jupytext_version: .*$", b"", p.read_bytes())
                for p in copy.iterdir() if p.is_file()}

    before = files()
    manager = contents.TextFileContentsManager(root_dir=str(copy))
    for name in EXPECTED:
        model = manager.get(f"{name}.ipynb")
        assert model["content"]["metadata"]["kernelspec"] == KERNELSPEC
        manager.save(model, f"{name}.ipynb")
    after = files()
    assert [n for n in before if after.get(n) != before[n]] == []


# ---------------------------------------------------------------- negative controls: the checks do catch problems

@pytest.fixture
def pair_copy(tmp_path):
    """A copy of notebook 02's pair in a temporary directory."""
    py, ipynb = PAIRS[EXPECTED.index("02_toy_mrs")]
    shutil.copy(py, tmp_path / py.name)
    shutil.copy(ipynb, tmp_path / ipynb.name)
    shutil.copy(NOTEBOOKS_DIR / "jupytext.toml", tmp_path / "jupytext.toml")
    return tmp_path / py.name, tmp_path / ipynb.name


def _cell_index(path: Path, needle: str) -> int:
    return next(i for i, (_, source) in enumerate(_cells(path)) if needle in source)


def test_negative_control_changed_cell_in_py(pair_copy):
    py, ipynb = pair_copy
    assert pair_differences(py, ipynb) == []  # the copy starts in sync
    i = _cell_index(py, "QUICK = quick_mode()")
    py.write_text(py.read_text().replace("QUICK = quick_mode()", "QUICK = True"))
    problems = pair_differences(py, ipynb)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"02_toy_mrs: cell {i} (code) differs") and "QUICK = True" in problems[0]


def test_negative_control_changed_cell_in_ipynb(pair_copy):
    py, ipynb = pair_copy
    nb = nbformat.read(ipynb, as_version=4)
    i = next(k for k, c in enumerate(nb.cells) if c.cell_type == "markdown" and k > 0)
    nb.cells[i].source = nb.cells[i].source.replace("the", "THE", 1)
    nbformat.write(nb, ipynb)
    problems = pair_differences(py, ipynb)
    assert len(problems) == 1 and problems[0].startswith(f"02_toy_mrs: cell {i} (markdown) differs"), problems


def test_negative_control_cell_type_and_inserted_cell(pair_copy):
    py, ipynb = pair_copy
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[0].cell_type = "raw"
    nbformat.write(nb, ipynb)
    text = py.read_text().replace("# %% [markdown]\n# ## Figure 10", "# %%\nprint('added')\n\n# %% [markdown]\n# ## Figure 10")
    py.write_text(text)
    problems = pair_differences(py, ipynb)
    assert len(problems) == 2, problems
    assert problems[0].startswith("02_toy_mrs: cell 0 is markdown in 02_toy_mrs.py but raw in 02_toy_mrs.ipynb")
    assert "of 02_toy_mrs.py is missing from 02_toy_mrs.ipynb: [\"print('added')\"]" in problems[1]


def test_negative_control_outputs_and_execution_counts(pair_copy):
    _, ipynb = pair_copy
    assert output_problems(ipynb) == []
    nb = nbformat.read(ipynb, as_version=4)
    code = [k for k, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells[code[2]].execution_count = None  # a cell that did not run
    nb.cells[code[3]].outputs.append(nbformat.v4.new_output("error", ename="ValueError", evalue="x", traceback=[]))
    nb.cells[code[0]].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    nb.metadata["widgets"] = {}
    nbformat.write(nb, ipynb)
    assert output_problems(ipynb) == [
        "02_toy_mrs.ipynb: widget state saved in the notebook's metadata",
        f"02_toy_mrs.ipynb: cell {code[2]} has execution count None, not 3",
        f"02_toy_mrs.ipynb: cell {code[3]} saved an error: ValueError",
        "02_toy_mrs.ipynb: the first code cell does not print whether it ran in quick mode or at full sizes "
        "(it printed 'hello\\n')"]


def test_negative_control_missing_pair(pair_copy):
    py, ipynb = pair_copy
    assert unpaired(py.parent) == []
    py.unlink()
    assert unpaired(ipynb.parent) == [f"{ipynb.parent.name}/02_toy_mrs.ipynb has no 02_toy_mrs.py"]
    other = PAIRS[EXPECTED.index("01_theorem1")][0]
    shutil.copy(other, py.parent / other.name)
    assert unpaired(py.parent) == [f"{ipynb.parent.name}/02_toy_mrs.ipynb has no 02_toy_mrs.py",
                                   f"{ipynb.parent.name}/01_theorem1.py has no 01_theorem1.ipynb"]
