"""Where a plan is cached, one per machine and weights, and how it is read back; `plan_for` measures one when none is cached.

Holds the plan's path (from the machine key), the reading and checking of a cached plan, and the
rule that a plan measured on a busy machine is used but not cached (BUSY_CORES).  The key itself
is machine.py's, the measuring planner.py's, the JSON form of a plan plan.py's.
"""

import datetime
import hashlib
import json
import pathlib
import time
from typing import Callable

from specref.fast.machine import LoadWatch, machine_key
from specref.fast.plan import ROW_COUNTS, Plan, PlanError
from specref.fast.planner import measure
from specref.files import write_text
from specref.smollm2.fetch import cache_root
from specref.smollm2.weights import Weights


def plan_path(weights: Weights, cache_dir=None) -> pathlib.Path:
    """Where this machine's plan for these weights is cached."""
    digest = hashlib.sha256(json.dumps(machine_key(weights), sort_keys=True).encode()).hexdigest()[:16]
    return cache_root(cache_dir) / "plans" / f"{digest}.json"


BUSY_CORES = 0.25          # other processes using more than this many cores on average while measuring: a busy machine


def plan_for(weights: Weights, cache_dir=None, progress: Callable = print, remeasure: bool = False,
             glu: Callable | None = None) -> Plan:
    """This machine's cached plan, or (none cached, or remeasure) a new one measured now (about half a
    minute on an idle 2-core machine); glu: the model's gated unit (see `measure`).

    A new plan is cached only if the machine was quiet while it was measured (other processes kept
    at most BUSY_CORES busy, `LoadWatch`): a plan measured under load is used for this process
    and measured again next time, rather than kept as if it were the machine's.
    """
    path = plan_path(weights, cache_dir)
    if not remeasure:
        plan, problem = read_plan(path, weights)
        if plan is not None:
            return plan
        if problem:
            progress(f"the plan in {path} {problem}; measuring a new one")
    progress("measuring how to multiply by the weights fastest on this machine "
             "(once per machine, about half a minute on an idle 2-core machine) ...")
    watch, started = LoadWatch(), time.perf_counter()
    plan = measure(weights, progress=progress, glu=glu)
    seconds = time.perf_counter() - started
    plan.why += f", {datetime.date.today().isoformat()}"
    others = watch.others()
    if others is not None and others > BUSY_CORES:
        plan.why += f"; other processes kept {others:.2f} cores busy meanwhile: not cached"
        progress(f"measured in {seconds:.0f} s, but other processes kept {others:.2f} cores busy meanwhile: the plan "
                 f"is used now but not cached, and measured again next time (on a quiet machine)")
        return plan
    write_text(path, json.dumps(plan.to_json(), indent=1))    # never a half-written plan
    progress(f"plan measured in {seconds:.0f} s and cached in {path}")
    return plan


def read_plan(path: pathlib.Path, weights: Weights) -> tuple[Plan | None, str]:
    """(the plan in `path` if it is these weights' plan on this machine, else None; what was wrong
    with it: '' if there is no file, else why it cannot be used)."""
    if not path.exists():
        return None, ""
    try:
        plan = Plan.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, PlanError) as e:
        return None, f"cannot be read ({e})"
    if plan.key != machine_key(weights) or set(plan.choice) != set(ROW_COUNTS):
        return None, "is for another machine or version"
    return plan, ""


def cached_plan(weights: Weights, cache_dir=None) -> Plan | None:
    """This machine's cached plan for these weights, or None (none cached, unreadable, or stale)."""
    return read_plan(plan_path(weights, cache_dir), weights)[0]
