"""Adapting a user's verifier to the contract the checker calls, chains and trees alike.

`Adapter` says how the function differs from `mrs.verify` (or `mrs_tree.verify_tree_*`): a batch dimension,
log-probabilities, a seed or a torch generator instead of a NumPy one, a count and a token instead of
the tokens.  `adapt` turns the function into a verifier with the contract's signature, routing the
checker's rng to it as the adapter says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specref.proof import vectors
from specref.proof.conform import globalrng
from specref.proof.conform.algorithms import is_tree


@dataclass(frozen=True)
class Adapter:
    """How to call a verifier whose signature differs from `mrs.verify`'s; the defaults are verify's own."""

    batch: bool = False  # takes x_draft [1, K], p [1, K, V], q [1, K+1, V] and returns [1, n] (or (counts [1], tokens [1]))
    log_probs: bool = False  # takes log p and log q (log 0 = -inf) instead of probabilities
    rng: str | Callable = "generator"  # "generator": an object with .random(); "seed": an int; "none": no rng
    # argument (the function draws its own); or a callable seed -> the function's generator (a torch.Generator)
    returns: str = "tokens"  # "tokens": [n] accepted drafts + one; "count_and_token": (number accepted, extra token)
    array: Callable = np.asarray  # applied to each array argument (for example torch.from_numpy)
    reseed_globals: bool = False  # before each call, seed Python's random, NumPy's global generator and torch's
    # (when imported) from the checker's rng (`globalrng.reseed`), for a function that draws from them

    def __post_init__(self):
        if not (callable(self.rng) or self.rng in ("generator", "seed", "none")):
            raise ValueError(f"Adapter.rng must be 'generator', 'seed', 'none' or a callable seed -> generator, got {self.rng!r}")
        if self.returns not in ("tokens", "count_and_token"):
            raise ValueError(f"Adapter.returns must be 'tokens' or 'count_and_token', got {self.returns!r}")

    @property
    def injectable(self) -> bool:
        """Whether the checker's own uniforms can reach the function: it is handed the rng object itself, or it draws
        its own from the global generators, which the exact tier drives from the same uniforms (`globalrng.driven`)."""
        return self.rng in ("generator", "none")


def _flat(value) -> np.ndarray:  # a NumPy array, a torch tensor, a list, a scalar -> 1-D array
    if hasattr(value, "detach"):  # a torch tensor: np.asarray needs it on the CPU, without grad
        value = value.detach().cpu()
    return np.asarray(value).reshape(-1)


def _rng_argument(adapter: Adapter, rng) -> list:
    """What the function takes last, as `adapter.rng` says: [rng], [a seed drawn from it], [its generator], or []."""
    if callable(adapter.rng):
        return [adapter.rng(int(rng.integers(2**63)))]
    if adapter.rng == "seed":
        return [int(rng.integers(2**63))]
    return [rng] if adapter.rng == "generator" else []


def adapt(function: Callable, adapter: Adapter = Adapter(), algorithm: str = "token") -> Callable:
    """`function` as a verifier with the contract's signature for `algorithm`:

    - a chain ("token", "block"): `mrs.verify`'s, (x_draft [K], p [K, V], q [K+1, V], rng) -> tokens [n];
    - a tree ("tree-*"): `mrs_tree.verify_tree_mss`'s, (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> tokens [n].

    The integer arrays (x_draft; or tokens and parents) go as int64, p and q as log p and log q with
    `adapter.log_probs`, every array with a leading dimension of 1 with `adapter.batch`.  A tree verifier
    returns its tokens: returns="count_and_token" names no path and is refused (ValueError).  Handed the exact
    tier's injected uniforms (a `vectors.ListedUniforms`), the function runs with Python's random, NumPy's global
    functions and torch's global generator drawing from them (`globalrng.driven`); otherwise, with
    `adapter.reseed_globals`, those generators are reseeded from the handed rng before each call.
    """
    tree = is_tree(algorithm)
    if tree and adapter.returns != "tokens":
        raise ValueError("a tree verifier returns the path's tokens and one more: Adapter.returns must be 'tokens' "
                         f"(a count does not say which path), got {adapter.returns!r}")

    def verify(*args):  # (x_draft, p, q, rng) or (tokens, parents, p, q, rng) -> [n]
        *ids, p, q, rng = args
        arrays = [np.asarray(a, dtype=np.int64) for a in ids] + [p, q]
        if adapter.log_probs:
            with np.errstate(divide="ignore"):
                arrays[-2:] = np.log(p), np.log(q)  # log 0 = -inf
        if adapter.batch:
            arrays = [a[None] for a in arrays]  # [1, K] or [1, N] each, [1, K(+1), V] or [1, N+1, V]
        if isinstance(rng, vectors.ListedUniforms):  # the exact tier: the global generators draw its uniforms too
            with globalrng.driven(rng):
                out = function(*[adapter.array(a) for a in arrays], *_rng_argument(adapter, rng))
        else:
            if adapter.reseed_globals:
                globalrng.reseed(rng)
            out = function(*[adapter.array(a) for a in arrays], *_rng_argument(adapter, rng))
        if adapter.returns == "count_and_token":  # (a chain's only)
            n, extra = out
            n = int(_flat(n)[0])
            return np.append(np.asarray(arrays[0]).reshape(-1)[:n], _flat(extra)[:1])
        return _flat(out[0] if adapter.batch and not np.isscalar(out) and len(out) == 1 else out)

    verify.__name__ = getattr(function, "__name__", "verify_tree" if tree else "verify")
    return verify
