"""The code the notebooks write out in their cells is the library's code: same tokens, same numbers.

Notebook 00 writes Chen's Algorithm 2 in NumPy (`sample`, `verify`, `speculative_sampling`).  Its
`verify` must return the same tokens as `specref.mrs.verify` on the portable vectors
(specref/proof/mrs_vectors.json, the uniforms listed in each) and on random inputs fed the same
generator; a copy of the cell with the residual replaced by q is the negative control.  The cells
are read from the notebook's .py (the reviewed source), not from the .ipynb.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import jupytext
import numpy as np
import pytest

from specref import mrs
from specref.proof import stats, vectors

ROOT = Path(__file__).resolve().parents[2]
DOC = json.loads(vectors.PATH.read_text())


def notebook_cell(name: str, needle: str) -> str:
    """The source of the one code cell of notebooks/`name`.py that contains `needle`."""
    cells = [c.source for c in jupytext.read(ROOT / "notebooks" / f"{name}.py").cells
             if c.cell_type == "code" and needle in c.source]
    assert len(cells) == 1, f"{len(cells)} code cells of {name}.py contain {needle!r}"
    return cells[0]


def run_cell(source: str) -> SimpleNamespace:
    namespace = {"np": np}
    exec(compile(source, "<notebook cell>", "exec"), namespace)
    return SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


ALGORITHM_2 = notebook_cell("00_why_fast", "def verify(x_draft, p, q, rng)")


def test_algorithm_2_fits_in_40_lines():
    lines = [line for line in ALGORITHM_2.splitlines() if line.strip()]
    assert len(lines) <= 40, f"the inline Algorithm 2 has {len(lines)} lines"


def test_inline_verify_matches_the_portable_vectors():
    cell = run_cell(ALGORITHM_2)
    assert vectors.mismatches(DOC, cell, only="verify") == []
    assert sum(c["function"] == "verify" for c in DOC["cases"]) >= 10


def test_inline_verify_matches_mrs_verify_with_the_same_uniforms():
    cell = run_cell(ALGORITHM_2)
    rng = np.random.default_rng(0)
    for case in range(300):
        V, K = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        p = rng.dirichlet(np.full(V, 0.5), size=K)
        q = rng.dirichlet(np.full(V, 0.5), size=K + 1)
        if case % 3 == 0:
            q[0] = p[0]  # p == q at the first position: never rejected there
        x_draft = np.array([mrs.sample(p[t], rng) for t in range(K)])
        seed = int(rng.integers(1 << 30))
        ours = cell.verify(x_draft, p, q, np.random.default_rng(seed))
        library = mrs.verify(x_draft, p, q, np.random.default_rng(seed))
        assert ours.tolist() == library.tolist(), (case, x_draft, p, q)


def test_negative_control_resampling_from_q_is_caught():
    broken = ALGORITHM_2.replace("sample(np.maximum(q[t] - p[t], 0), rng)", "sample(q[t], rng)")
    assert broken != ALGORITHM_2
    found = vectors.mismatches(DOC, run_cell(broken), only="verify")
    assert found, "resampling from q instead of the residual went unnoticed by the vectors"


def test_inline_speculative_sampling_has_the_target_law():
    """The whole inline loop on the Markov pair, against the exact law (chi-square at level 1e-3, seed 7);
    the draft's law, the negative control, is rejected by the same test."""
    cell = run_cell(ALGORITHM_2)
    target, draft = stats.markov_pair()
    prompt, N, K = np.array([0]), 3, 2
    counts = stats.sample_sequences(lambda r: cell.speculative_sampling(prompt, draft, target, N, K, r), 3000,
                                    len(prompt), np.random.default_rng(7))
    assert stats.chi_square_gof(counts, stats.sequence_law(target, prompt, N))[2] > 1e-3
    assert stats.chi_square_gof(counts, stats.sequence_law(draft, prompt, N))[2] < 1e-3
