"""The global generators a verifier may draw from, driven by the checker's uniforms or reseeded from its rng.

Many verifiers draw their coins from Python's `random.random()`, NumPy's legacy global functions
(`np.random.rand`, `np.random.choice`, ...) or torch's global generator (`torch.rand`,
`torch.multinomial`), instead of a generator handed to them.  Two tools reach them:

- `driven(uniforms)`: while inside, those functions draw from `uniforms.random()` (the checker's
  injected uniforms), so the exact tier can hand such a verifier a chosen uniform.  A continuous
  uniform is the uniform itself; a token drawn from weights w is the inverse CDF of one uniform,
  `mrs.sample`'s rule, so a verifier that draws its last token with `np.random.choice(V, p=w)` or
  `torch.multinomial(w, 1)` reproduces the portable vectors.  Torch is driven only when it is
  already imported.  A draw the rule does not cover (several tokens without replacement) raises
  `NotDriven`, and the exact tier is then reported as not run.
- `reseed(rng)`: seed Python's `random`, NumPy's global generator and torch's (when imported) from
  `rng`, so a verifier that draws from them is reproducible from the checker's seed.

What is not reached: a generator the verifier makes for itself (`np.random.default_rng()`,
`torch.Generator()`), a `torch.rand(..., generator=g)`, and a name bound before the run
(`from random import random`): the exact tier's probe sees that none of the injected uniforms were
drawn and says so.
"""

from __future__ import annotations

import random
import sys
from contextlib import contextmanager, nullcontext

import numpy as np

from specref import mrs
from specref.proof.vectors import ListedUniforms

# The largest float32 below 1: a float64 uniform rounded to float32 must stay below 1, as torch.rand's do.
FLOAT32_BELOW_1 = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


class NotDriven(RuntimeError):
    """A draw from a global generator that `driven` cannot express in the checker's uniforms."""


def _one_token(w: np.ndarray, u: float) -> int:  # [V] nonnegative weights, uniform -> token id
    """mrs.sample's inverse CDF of one uniform, on weights that need not sum to 1."""
    w = np.asarray(w, dtype=np.float64)
    total = w.sum()
    if not total > 0.0:
        raise ValueError(f"a token drawn from weights with sum {total}: the weights must have a positive sum")
    return mrs._invert(w, u * total)


def _numpy_functions(uniforms) -> dict:
    """NumPy's legacy global functions, drawing from `uniforms`."""
    def random_sample(size=None):
        return uniforms.random() if size is None else np.asarray(uniforms.random(size))

    def rand(*dims):
        return uniforms.random() if not dims else np.asarray(uniforms.random(dims))

    def uniform(low=0.0, high=1.0, size=None):
        return low + (high - low) * random_sample(size)

    def choice(a, size=None, replace=True, p=None):
        items = np.arange(a) if np.ndim(a) == 0 else np.asarray(a)
        w = np.ones(len(items)) if p is None else np.asarray(p, dtype=np.float64)
        n = 1 if size is None else int(np.prod(size))
        if n > 1 and not replace:
            raise NotDriven("np.random.choice without replacement of several items")
        picks = [items[_one_token(w, uniforms.random())] for _ in range(n)]
        return picks[0] if size is None else np.asarray(picks).reshape(size)

    return {"random": random_sample, "random_sample": random_sample, "rand": rand, "uniform": uniform,
            "choice": choice}


def _torch_functions(torch, uniforms) -> dict:
    """torch's functions that draw from its global generator, drawing from `uniforms` (a generator= argument, which
    names a generator of the verifier's own, is refused: `NotDriven`)."""
    def rand(*size, generator=None, dtype=None, device=None, **_):
        if generator is not None:
            raise NotDriven("torch.rand with a generator of the verifier's own")
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        u = np.asarray(uniforms.random(size) if size else uniforms.random(), dtype=np.float64)
        dtype = dtype or torch.get_default_dtype()
        if dtype != torch.float64:
            u = np.minimum(u, FLOAT32_BELOW_1)  # rounding to float32 must not reach 1
        return torch.as_tensor(u, dtype=dtype, device=device)

    def rand_like(t, dtype=None, device=None, **_):
        return rand(tuple(t.shape), dtype=dtype or t.dtype, device=device or t.device)

    def multinomial(weights, num_samples, replacement=False, generator=None, **_):
        if generator is not None:
            raise NotDriven("torch.multinomial with a generator of the verifier's own")
        if num_samples > 1 and not replacement:
            raise NotDriven("torch.multinomial of several tokens without replacement")
        rows = weights.detach().cpu().double().numpy()
        picked = [[_one_token(row, uniforms.random()) for _ in range(num_samples)] for row in rows.reshape(-1, rows.shape[-1])]
        out = torch.as_tensor(np.asarray(picked, dtype=np.int64), device=weights.device)
        return out.reshape(num_samples) if weights.dim() == 1 else out

    return {"rand": rand, "rand_like": rand_like, "multinomial": multinomial}


def _replacements(uniforms) -> list[tuple[object, str, object]]:
    """(object, attribute, replacement) for every global draw `driven` reaches."""
    def py_random():
        return float(uniforms.random())

    out = [(random, "random", py_random), (random._inst, "random", py_random)]  # random.uniform, choices, ... call it
    out += [(np.random, name, f) for name, f in _numpy_functions(uniforms).items()]
    torch = sys.modules.get("torch")
    if torch is not None:
        out += [(torch, name, f) for name, f in _torch_functions(torch, uniforms).items()]
    return out


_DRIVING: list = []  # the uniforms the global draws are routed to now (`driven`), the innermost last


@contextmanager
def driven(uniforms):
    """While inside, Python's random, NumPy's legacy global functions and (if imported) torch's global draws take their
    uniforms from `uniforms.random()`; everything is restored on leaving, raise or not.

    Entered again with the uniforms already driven, it changes nothing and restores nothing.  The checker enters
    it around a guarded call (`driving`, in the thread that owns the call's time limit) and the adapted verifier
    enters it again inside the call, which may run in a daemon thread that is abandoned at its limit: the
    originals are then restored when the limit is reported, not when (or if) the abandoned call returns."""
    if _DRIVING and _DRIVING[-1] is uniforms:
        yield uniforms
        return
    saved = []  # (object, attribute, original or None when the attribute was not the object's own)
    _DRIVING.append(uniforms)
    try:
        for obj, name, f in _replacements(uniforms):
            saved.append((obj, name, vars(obj).get(name) if hasattr(obj, "__dict__") else getattr(obj, name)))
            setattr(obj, name, f)
        yield uniforms
    finally:
        for obj, name, original in reversed(saved):
            if original is None:
                delattr(obj, name)  # an instance attribute over the class's method
            else:
                setattr(obj, name, original)
        _DRIVING.pop()


def driving(rng):
    """`driven(rng)` when rng is the exact tier's injected uniforms (a `ListedUniforms`), else a context that does
    nothing: what a verifier called with `rng` draws from the global generators."""
    return driven(rng) if isinstance(rng, ListedUniforms) else nullcontext()


def reseed(rng) -> None:
    """Seed Python's random, NumPy's global generator and torch's (if imported) from `rng` (an np.random.Generator):
    a verifier that draws from them is then reproducible from the checker's seed, call by call."""
    seeds = rng.integers(2**32, size=3)
    random.seed(int(seeds[0]))
    np.random.seed(int(seeds[1]))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(int(seeds[2]))
