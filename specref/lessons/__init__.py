"""What only the notebooks (and `python -m specref figures`, which draws the same plots) use.

    plots.py      the notebooks' plots and the small computations behind them; imports no model
    quick.py      the SPECREF_QUICK switch (standard library only)
    widgets.py    the speedup model's sliders and notebook 05's highlighted text (ipywidgets)
    progress.py   a progress line that rewrites itself, for long cells
    exercises/    the exercises' graders: the suite's own proofs, pointed at a learner's function
    execute.py    runs each notebook headless and saves it with its outputs (python -m specref.lessons.execute)

The package root, `specref/`, holds the core: the samplers, mrs.py, warps, drafts, the speedup
model, the NumPy transformer and the proofs.  Nothing in the core imports this package.
"""
