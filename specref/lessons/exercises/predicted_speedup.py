"""check_predicted_speedup: Leviathan's Theorem 3.8 with a measured scoring cost, and its known mistakes.

The answer is f(alpha, gamma, c, score_cost) -> float: the expected speedup over autoregressive sampling when each
of gamma drafts is accepted with probability alpha (Eq. 1's tokens per call), a draft step costs c decode steps
and one target call that scores gamma + 1 tokens costs score_cost decode steps, so that a call costs
gamma c + score_cost decode steps (`specref.speedup.walltime_improvement_measured`).

`check_predicted_speedup` compares the answer with `specref.speedup` (to TOL, relative) on a grid of telling
settings (SPEEDUP_GRID), then on N_RANDOM settings drawn with seed SEED (alpha uniform on [0, 1), gamma an integer
from 0 to MAX_GAMMA, c uniform on [0, 0.5), score_cost uniform on [1, 4)), then on every edge value at once
(alpha = 0, alpha near 1, gamma = 0, c = 0, score_cost = 1, gamma = MAX_GAMMA), then at alpha = 1, where Eq. 1 is
0 / 0 and its limit gamma + 1 is asked for.  A failure names the known mistake whose values the answer gives on
every setting, or else says which setting it missed and by how much.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable

import numpy as np

from specref import speedup
from specref.proof.verdict import Limits

from .grading import SEED, TOL, Result, _Fail, _fmt, _grade, _not_answered, _number, _pair


MAX_GAMMA = 64
N_RANDOM = 400
# (alpha, gamma, c, score_cost), the telling ones first: a failure shows the first it meets.
SPEEDUP_GRID = ((0.8, 4, 0.05, 1.3), (0.6, 2, 0.1, 1.5), (0.9, 8, 0.0, 2.0), (0.5, 1, 0.2, 1.1), (0.3, 3, 0.0, 1.0))
EDGE = {"alpha": (0.0, 1e-9, 0.5, 1 - 2.0 ** -20), "gamma": (0, 1, MAX_GAMMA), "c": (0.0, 0.3),
        "score_cost": (1.0, 3.0)}


def _eq1(a, g):  # Eq. 1 for alpha < 1
    return (1 - a ** (g + 1)) / (1 - a)


# The learner-facing diagnosis of each known mistake, and the mistake itself (for alpha < 1).
SPEEDUP_MISTAKES = [
    ("divides by gamma c + 1, Leviathan's cost of a call on an accelerator: the target call here costs score_cost "
     "decode steps, so a call costs gamma c + score_cost", lambda a, g, c, s: _eq1(a, g) / (g * c + 1)),
    ("alpha**gamma where Eq. 1 has alpha**(gamma + 1): the token every call adds (the residual or bonus token) is "
     "left out of the tokens per call", lambda a, g, c, s: (1 - a ** g) / (1 - a) / (g * c + s)),
    ("prices gamma + 1 draft steps: the draft runs once per draft token, gamma times; the extra token comes from "
     "the target call", lambda a, g, c, s: _eq1(a, g) / ((g + 1) * c + s)),
    ("counts the scoring cost once per draft (gamma score_cost): one target call scores all gamma + 1 tokens at "
     "once, for score_cost decode steps in all", lambda a, g, c, s: _eq1(a, g) / (g * c + g * s)),
    ("multiplies the costs: the draft's gamma steps and the target call run one after the other, so their costs "
     "add, gamma c + score_cost", lambda a, g, c, s: _eq1(a, g) / ((g * c + 1) * s)),
    ("returns the tokens per call: the speedup divides them by what the call costs in decode steps, "
     "gamma c + score_cost", lambda a, g, c, s: _eq1(a, g)),
    ("leaves the draft's cost out (gamma c): the draft steps take time too",
     lambda a, g, c, s: _eq1(a, g) / s),
    ("1 / (1 - alpha) is Eq. 1's limit for endlessly many drafts: a call scores only gamma of them",
     lambda a, g, c, s: 1 / (1 - a) / (g * c + s)),
]


@functools.cache
def _random_settings() -> tuple[tuple, ...]:
    rng = np.random.default_rng(SEED)
    return tuple((float(rng.random()), int(rng.integers(0, MAX_GAMMA + 1)), float(0.5 * rng.random()),
                  float(1 + 3 * rng.random())) for _ in range(N_RANDOM))


@functools.cache
def _edge_settings() -> tuple[tuple, ...]:
    return tuple(itertools.product(EDGE["alpha"], EDGE["gamma"], EDGE["c"], EDGE["score_cost"]))


def _all_settings() -> tuple[tuple, ...]:  # every setting with alpha < 1
    return SPEEDUP_GRID + _random_settings() + _edge_settings()


def _want(a, g, c, s) -> float:
    return float(speedup.walltime_improvement_measured(a, g, c, s))


def _where(a, g, c, s) -> str:
    return f"alpha = {a:.6g}, gamma = {g}, c = {c:.6g}, score_cost = {s:.6g}"


def _setting_number(f, limits: Limits, check: str, setting) -> float:  # f(*setting) as a float, or _Fail
    return _number(limits, check, f, *setting, where=_where(*setting))


def _safe(f, setting) -> float:  # f(*setting) as a float, NaN if it raises or returns no number
    try:
        return float(np.asarray(f(*setting), dtype=np.float64).item())
    except Exception:  # noqa: BLE001
        return math.nan


def _close(a: float, b: float) -> bool:  # NaN is close to NaN only: a known mistake can give it where f does
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=TOL, abs_tol=1e-12)


def _gap(f, setting, got, want) -> str:  # what is wrong, with the known mistake it matches
    where = "{}: got {}, Theorem 3.8 gives {}".format(_where(*setting), *_pair(got, want, _fmt))
    settings = _all_settings()
    answers = [_safe(f, s) for s in settings]
    for label, wrong in SPEEDUP_MISTAKES:
        if all(_close(x, _safe(wrong, s)) for x, s in zip(answers, settings)):
            return f"{label} ({where})"
    here = [label.split(":")[0] for label, wrong in SPEEDUP_MISTAKES if _close(got, _safe(wrong, setting))]
    return f"{where} (here it gives a known mistake's value, not everywhere: {here[0]})" if here else where


def check_predicted_speedup(f: Callable) -> Result:
    """Grade f(alpha, gamma, c, score_cost) -> float as Theorem 3.8 with a measured scoring cost (module docstring)."""
    def run(limits: Limits) -> str:
        _not_answered(limits, f, *SPEEDUP_GRID[0])
        for check, settings in (("Theorem 3.8", SPEEDUP_GRID), ("random settings", _random_settings()),
                                ("edge values", _edge_settings())):
            for setting in settings:
                got, want = _setting_number(f, limits, check, setting), _want(*setting)
                if not _close(got, want):
                    raise _Fail(check, _gap(functools.partial(limits.call, f), setting, got, want))
        check = "alpha = 1"
        for g, c, s in itertools.product(EDGE["gamma"] + (2, 5), EDGE["c"], EDGE["score_cost"]):
            setting = (1.0, g, c, s)
            try:
                got = _setting_number(f, limits, check, setting)
            except _Fail as e:
                raise _Fail(check, f"{e.diagnosis}; at alpha = 1 Eq. 1 is 0 / 0: give it its limit gamma + 1 in a "
                                   "branch of its own") from None
            if not _close(got, _want(*setting)):
                raise _Fail(check, f"{_where(*setting)}: got {_fmt(got)}, Theorem 3.8 gives {_fmt(_want(*setting))} "
                                   f"(every draft is accepted: gamma + 1 = {g + 1} tokens a call)")
        n = len(_all_settings()) + len(EDGE["gamma"] + (2, 5)) * len(EDGE["c"]) * len(EDGE["score_cost"])
        return (f"Theorem 3.8 with the scoring cost equal to specref.speedup on {n} settings: {len(SPEEDUP_GRID)} "
                f"chosen, {N_RANDOM} random (seed {SEED}, gamma 0 to {MAX_GAMMA}), every combination of the edge "
                "values, and alpha = 1")
    return _grade("predicted_speedup", run)
