"""check_roll_back: the KV cache after one SpS call, rolled back to the context and the accepted drafts.

The answer is f(cache, drafts, out) -> None.  `cache` (the model's KVCache) holds the context and the K = len(drafts)
drafts that one target call has just scored; `out` is what the verifier returned for them: the n accepted drafts,
then one more token (the correction drawn after a rejection, or the bonus token when all K were accepted).  f
changes the cache in place so that it holds the context and the n accepted drafts, and nothing after them: its
length becomes len(context) + n.  The last token of `out` was never scored; it is the next call's first new
position.

`check_roll_back(f, model)` scores a context of CONTEXT tokens and K drafts with the model it is handed
(`model.next_logits(context + drafts, K + 1)`: the real SmolLM2 in notebook 05, a tiny random one in the tests) for
every K of DRAFTS, and for every n from 0 to K hands f a copy of that cache.  What f leaves is compared with the
model's own rollback (`cache.rollback(K - n)`): the length first, then the keys, values, final states and token
ids of every position below it, bit for bit, and arrays still long enough for the cache's capacity.  A failure
names the known mistake (ROLL_BACK_MISTAKES) whose lengths the answer gives on every case, else says on the first
case it misses what the cache holds and what it should.  The model's cache is emptied afterwards (`model.reset()`).

The model is used through what every SmolLM2 has (`next_logits`, `reset`, `config.vocab_size`, and `cache` with
`length`, `capacity`, `k`, `v`, `h`, `tokens` and `rollback`), so this module imports no model code.
"""

from __future__ import annotations

import copy
import functools
from typing import Callable

import numpy as np

from specref.proof.verdict import Limits

from .grading import SEED, Result, _Fail, _grade, _not_answered


CONTEXT = 8  # tokens of context before the drafts
DRAFTS = (4, 3, 1, 0)  # K, the drafts one call scores; K = 0 is a call that drafted nothing


def _rolled(cache, drafts, out) -> int:  # the length the cache must have: the context and the n accepted drafts
    return cache.length - (len(drafts) - (len(out) - 1))


def _keeps_a_slot_for_the_last_token(cache, drafts, out):
    cache.rollback(len(drafts) - len(out) + 1)
    cache.tokens[cache.length] = out[-1]  # its keys and values are the rejected draft's (or never computed)
    cache.length += 1


def _length_is_the_accepted_count(cache, drafts, out):
    cache.length = len(out) - 1


# The learner-facing diagnosis of each known mistake, and the mistake itself as it is usually written.
ROLL_BACK_MISTAKES = [
    ("rolls back len(drafts) - len(out) positions: out holds the n accepted drafts AND one more token, so this keeps "
     "the first rejected draft, and asks for -1 when every draft was accepted; roll back K - n = len(drafts) - "
     "(len(out) - 1)", lambda cache, drafts, out: cache.rollback(len(drafts) - len(out))),
    ("rolls back one position too many: the last accepted draft is forgotten (with none accepted, the context's last "
     "token)", lambda cache, drafts, out: cache.rollback(len(drafts) - len(out) + 2)),
    ("keeps a position for out's last token: it was never scored (its slot holds a rejected draft's keys and values, "
     "or nothing); the next call computes it, so the cache ends with the accepted drafts",
     _keeps_a_slot_for_the_last_token),
    ("rolls back the n accepted drafts where the K - n rejected ones must go",
     lambda cache, drafts, out: cache.rollback(len(out) - 1)),
    ("does not roll back: the rejected drafts stay in the cache, and the next token would attend to text that was "
     "never generated", lambda cache, drafts, out: None),
    ("rolls back every draft, the accepted ones too: the output is right, but the next call must compute them again",
     lambda cache, drafts, out: cache.rollback(len(drafts))),
    ("sets the length to the number of accepted drafts: the cache holds the context's positions first",
     _length_is_the_accepted_count),
]


def _model_parts(model):
    """The parts of the model the check uses, or TypeError saying what is missing."""
    needed = ("next_logits", "reset", "cache", "config")
    missing = [name for name in needed if not hasattr(model, name)]
    missing += [f"cache.{name}" for name in ("length", "capacity", "k", "v", "h", "tokens", "rollback")
                if hasattr(model, "cache") and not hasattr(model.cache, name)]
    if missing:
        raise TypeError(f"check_roll_back(f, model) needs the model whose cache f rolls back (the notebook's `model`, "
                        f"a SmolLM2); got {type(model).__name__}, without {', '.join(missing)}")


def _cases(model) -> list[tuple[object, list, list, list]]:
    """(the cache after scoring context + drafts, context, drafts, out) for every K of DRAFTS and n of 0..K."""
    V = int(model.config.vocab_size)
    rng = np.random.default_rng(SEED)
    context = [int(t) for t in rng.integers(V, size=CONTEXT)]
    longest = [int(t) for t in rng.integers(V, size=max(DRAFTS))]
    cases = []
    for K in DRAFTS:
        drafts = longest[:K]
        model.reset()
        model.next_logits(context + drafts, K + 1)  # one call: K + 1 rows; the cache holds context + drafts
        scored = copy.deepcopy(model.cache)
        for n in range(K + 1):
            last = (drafts[n] + 1) % V if n < K else int(rng.integers(V))  # a correction differs from the draft
            cases.append((scored, context, drafts, drafts[:n] + [last]))
    model.reset()
    return cases


def _where(context, drafts, out) -> str:
    n = len(out) - 1
    return (f"K = {len(drafts)} drafts {drafts}, n = {n} accepted, out = {out} (the context: {len(context)} "
            "tokens)")


def _outcome(f, scored, drafts, out):
    """What f does to a copy of the scored cache: ('length', L) or ('raised', type name), and the cache."""
    cache = copy.deepcopy(scored)
    try:
        returned = f(cache, list(drafts), list(out))
    except Exception as e:  # noqa: BLE001  (whatever the answer raises is part of what it does)
        return ("raised", type(e).__name__, str(e)), cache
    if cache.length == scored.length and returned is not None and hasattr(returned, "length"):
        return ("returned", "a cache"), cache
    return ("length", int(cache.length)), cache


def _same_rows(a, b, n: int) -> str:  # '' if caches a and b agree below position n, else what differs
    if a.tokens[:n].tolist() != b.tokens[:n].tolist():
        return "the token ids"
    if any(not np.array_equal(x[:, :, :n], y[:, :, :n]) for x, y in zip(a.k, b.k)):
        return "the keys"
    if any(not np.array_equal(x[:, :n], y[:, :n]) for x, y in zip(a.v, b.v)):
        return "the values"
    if not np.array_equal(a.h[:n], b.h[:n]):
        return "the final states"
    return ""


def _holds(L: int, context, drafts, out) -> str:
    """What a cache of length L holds, in words, against the context and the n accepted drafts it should hold."""
    c, n, K = len(context), len(out) - 1, len(drafts)
    want = c + n
    if L > want:
        rejected = drafts[n:min(L - c, K)]
        said = f"{len(rejected)} rejected draft{'s' if len(rejected) != 1 else ''} {rejected}" if rejected else ""
        beyond = L - max(c + K, want)
        if beyond > 0:
            said += (" and " if said else "") + f"{beyond} position{'s' if beyond > 1 else ''} never scored"
        return f"length {L}: the context, the {n} accepted drafts and {said} after them"
    if L < c:
        return f"length {L}: not even the whole context ({c} positions)"
    return f"length {L}: the context and only {L - c} of the {n} accepted drafts"


def check_roll_back(f: Callable, model) -> Result:
    """Grade f(cache, drafts, out) -> None as the rollback after one SpS call, on `model`'s cache (module docstring)."""
    if not callable(f) or hasattr(f, "cache"):  # (a model is callable too)
        raise TypeError(f"check_roll_back takes your function first, check_roll_back(roll_back, model); got "
                        f"{type(f).__name__}")
    _model_parts(model)

    def run(limits: Limits) -> str:
        cases = _cases(model)
        scored, context, drafts, out = cases[0]
        _not_answered(limits, f, copy.deepcopy(scored), list(drafts), list(out))
        timed = functools.partial(limits.call, f)
        outcomes, problem = [], None
        for scored, context, drafts, out in cases:
            want = _rolled(scored, drafts, out)
            check = f"case {_where(context, drafts, out)}"
            outcome, cache = _outcome(timed, scored, drafts, out)
            outcomes.append(outcome)
            if problem is not None:
                continue
            if outcome[0] == "raised":
                problem = check, f"raised {outcome[1]}: {outcome[2]}"
            elif outcome[0] == "returned":
                problem = check, ("returned a cache and left the one it was handed unchanged: change that cache "
                                  "in place (its rollback(m), or its length); the loop goes on with the same cache")
            elif outcome[1] != want:
                problem = check, (f"the cache should hold the context and the {len(out) - 1} accepted drafts, length "
                                  f"{want}; it holds {_holds(outcome[1], context, drafts, out)}")
            else:
                reference = copy.deepcopy(scored)
                reference.rollback(scored.length - want)
                differ = _same_rows(cache, reference, want)
                short = [name for name, a in (("k", cache.k[0].shape[2]), ("v", cache.v[0].shape[1]),
                                              ("h", cache.h.shape[0]), ("tokens", cache.tokens.shape[0]))
                         if a < cache.capacity]
                if differ:
                    problem = check, (f"the length is right ({want}), but {differ} of positions it keeps changed: "
                                      "a rollback only forgets the positions past the new length")
                elif short:
                    problem = check, (f"the length is right ({want}), but the cache's {', '.join(short)} arrays are "
                                      f"now shorter than its capacity {cache.capacity}: the next call would write "
                                      "past their end")
        model.reset()
        if problem is not None:
            check, said = problem
            label = next((label for label, wrong in ROLL_BACK_MISTAKES
                          if all(_outcome(wrong, s, d, o)[0][:2] == got[:2]
                                 for (s, _, d, o), got in zip(cases, outcomes))), "")
            raise _Fail(check, f"{label} ({said})" if label else said)
        return (f"the cache equals the model's own rollback (length, then keys, values, final states and token ids "
                f"bit for bit) on {len(cases)} cases: K = {', '.join(map(str, DRAFTS))} drafts after {CONTEXT} "
                "tokens of context, every n accepted from 0 to K")
    return _grade("roll_back", run)
