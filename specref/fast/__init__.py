"""The fast path: SmolLM2's products multiplied the way that was measured fastest on this machine.

The model (`specref.smollm2.model`) multiplies x @ W and runs `swiglu` as written.  On NumPy's
OpenBLAS, scoring a few rows that way costs far more than one row on some CPUs (BLAS packs the
weights for every small product), which hides speculative sampling's gain.  The fast path keeps
the same numbers (to float32 rounding) but may keep the weights as narrow panels, pad row counts
to cheaper ones and split products over the cores (`specref.fast.plan`), as a measured plan says.

    model = load_fast(measure=True)     # the commands do this; a library user asks for it
    SmolLM2(weights, tokenizer, fast=plan) is the one switch in the model.

A library call never measures unless asked (`measure=True`); a plan is measured once per machine
and cached (`cache.plan_for`), unless the machine was busy while it was measured.
"""

from typing import Callable

from specref.fast.blas import threads_note
from specref.fast.cache import cached_plan, plan_for
from specref.fast.plan import Plan, in_layout
from specref.smollm2.model import SmolLM2, load_smollm2

__all__ = ["Plan", "fast_model", "load_fast", "plan_for", "cached_plan"]


def fast_model(model: SmolLM2, plan: Plan) -> SmolLM2:
    """The same weights and tokenizer on `plan`'s fast path (the weights in the plan's layout: a copy if it differs)."""
    return SmolLM2(in_layout(model.weights, plan.layout), model.tokenizer, fast=plan)


def load_fast(cache_dir=None, progress: Callable = print, measure: bool = False, remeasure: bool = False) -> SmolLM2:
    """SmolLM2-135M-Instruct on this machine's fast path.

    The plan is read from the cache.  With none cached: measure=True measures one now (saying so,
    about half a minute on an idle 2-core machine); measure=False returns the plain model and says
    how to get a plan.  remeasure=True measures again even if one is cached.  If OpenBLAS runs more than
    one thread (a script that did not set OPENBLAS_NUM_THREADS=1 before NumPy loaded), it says what that
    costs (`blas.threads_note`).
    """
    note = threads_note()
    if note:
        progress(note)
    model = load_smollm2(cache_dir, progress)
    if measure or remeasure:
        plan = plan_for(model.weights, cache_dir, progress, remeasure=remeasure)
    else:
        plan = cached_plan(model.weights, cache_dir)
        if plan is None:
            progress("no fast-path plan is cached for this machine: using the plain path "
                     "(load_fast(measure=True) or any `python -m specref` command measures one, about half a minute)")
            return model
    return fast_model(model, plan)
