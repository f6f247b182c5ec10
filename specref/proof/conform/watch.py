"""What every output of a verifier must be, and the two wrappers that hold every call to it.

A call has one of two shapes (a `Form`): a chain's, (x_draft [K], p [K, V], q [K+1, V], rng), or a
tree's, (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng).  `Guarded` puts a verifier under the
run's time limits and stops the run (ContractViolation) at an output outside the contract
(`contract_problem`: 1-D, integer ids in [0, V), 1 to K + 1 of them, or 1 to depth + 1 for a tree);
`Watched` records what is wrong with any output the checks see (for a chain the drafts as prefix,
for a tree the path along the tree's edges (`path_problem`), and no kept token with q(x) = 0), and
`form_check` turns its record into the check "every output seen".
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np

from specref import trees
from specref.proof.conform import globalrng
from specref.proof.verdict import Check, ContractViolation, Limits


def token_ids_problem(out, V: int, longest: int, length_error) -> str:
    """'' if `out` is 1-D with 1..longest integer token ids in [0, V), else what is wrong; `length_error(n)`
    words a length outside 1..longest (the one wording that depends on what was called)."""
    try:
        out = np.asarray(out)
    except Exception as e:  # noqa: BLE001  (whatever it returned)
        return f"returned something that is not an array of token ids ({type(e).__name__}: {e})"
    if out.ndim != 1:
        return f"returned an array of shape {out.shape}, not a 1-D array of token ids"
    if not 1 <= len(out) <= longest:
        return length_error(len(out))
    if out.dtype.kind == "f":
        if not (np.all(np.isfinite(out)) and np.all(out == np.round(out))):
            return f"returned {out.tolist()}: not integer token ids"
    elif out.dtype.kind not in "iub":
        return f"returned {out.tolist()!r} of dtype {out.dtype}: not integer token ids"
    if np.any((out < 0) | (out >= V)):
        return f"returned {out.tolist()}: a token id outside the vocabulary [0, {V})"
    return ""


def contract_problem(out, K, V: int) -> str:
    """'' if `out` is a possible output of a verifier call, else what is wrong: 1-D integer ids in [0, V), 1 to K + 1
    of them for a chain of K drafts; K may instead be a tree's parents [N]: then 1 to depth + 1 of them.  (Whether
    a tree's path follows its edges is `path_problem`'s to see.)"""
    if np.ndim(K) == 0:  # a chain: K drafts
        return token_ids_problem(out, V, K + 1, lambda n: f"returned {n} tokens for K = {K} "
                                                         f"(must be 1 to K + 1 = {K + 1})")
    depth = trees.depth(np.asarray(K).tolist())
    return token_ids_problem(out, V, depth + 1, lambda n: f"returned {n} tokens for a tree of depth {depth} "
                                                         f"(must be 1 to depth + 1 = {depth + 1})")


def path_problem(out, tokens, parents, q) -> str:  # [n], [N], [N], [N+1, V]
    """'' if out[:-1] walks down the tree's edges from the root (each token a child of the node before), keeps no
    child the target gives q(x) = 0 in its parent's row, and ends with a token of positive q in the row of the
    node it follows, else which of the three it does not."""
    children = trees.children_of(parents)
    rows = [0]  # the rows of the nodes the path so far may be at (siblings may repeat a token under tree-mss)
    for y in out[:-1]:
        kept = [(row, i) for row in rows for i in children[row] if tokens[i] == y]  # (parent's row, child)
        if not kept:
            return "the path does not follow the tree's edges"
        if any(q[row, y] == 0.0 for row, _ in kept):
            return "kept a child with q(x) = 0"
        rows = [i + 1 for _, i in kept]
    if out and all(q[row, out[-1]] == 0.0 for row in rows):
        return "the last token has q(x) = 0 at the node it follows"
    return ""


# ---------------------------------------------------------------- the two shapes of a call

class Form:
    """The shape of a verifier's call: what its output must be (`contract_problem`, which stops a run, and `watch`,
    which is recorded), and how a call is shown (`called` in a contract violation, `seen` in the watcher's examples)."""

    name: str  # a verifier's name when it has none
    KEEPS: str  # what every output must, as the check "every output seen" says it

    def contract_problem(self, out, args) -> str:
        raise NotImplementedError

    def called(self, args) -> str:
        raise NotImplementedError

    def seen(self, args, out) -> str:
        raise NotImplementedError

    def watch(self, out, args, guarded: bool) -> tuple[str, np.ndarray]:
        """(what is wrong with `out`, or '', and the output as the checks count it); guarded: whether the contract
        was checked already (by `Guarded`)."""
        raise NotImplementedError


class ChainCall(Form):
    """A chain verifier's call, (x_draft [K], p [K, V], q [K+1, V], rng)."""

    name = "verify"
    KEEPS = "length in 1..K+1, drafts as prefix, ids in [0, V), no draft with q(x) = 0 kept, a last token with q > 0"

    def contract_problem(self, out, args) -> str:
        K, V = np.shape(args[1])
        return contract_problem(out, K, V)

    def called(self, args) -> str:
        return f"x_draft={np.asarray(args[0]).tolist()}"

    def seen(self, args, out) -> str:
        return f"x_draft={list(map(int, args[0]))} -> {np.asarray(out).tolist()}"

    def watch(self, out, args, guarded: bool) -> tuple[str, np.ndarray]:  # (the contract checked again, guarded or not)
        x_draft, p, q, _ = args
        K, V = p.shape
        out = np.asarray(out)
        if out.ndim != 1 or not 1 <= len(out) <= K + 1:
            return "length not in 1..K+1", out
        if out.dtype.kind not in "iu" and not (out.dtype.kind == "f" and np.all(np.isfinite(out))
                                               and np.all(out == np.round(out))):
            return "not integer token ids", out
        out = out.astype(np.int64)
        if np.any((out < 0) | (out >= V)):
            return f"token id outside [0, {V})", out
        n = len(out) - 1
        if np.any(out[:n] != np.asarray(x_draft)[:n]):
            return "the output's prefix is not the drafts", out
        if n and np.any(q[np.arange(n), out[:n]] == 0.0):
            return "kept a draft with q(x) = 0", out
        if q[n, out[n]] == 0.0:
            return "the last token has q(x) = 0 in its row", out
        return "", out


class TreeCall(Form):
    """A tree verifier's call, (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng)."""

    name = "verify_tree"
    KEEPS = ("length 1 to depth + 1, ids in [0, V), the path along the tree's edges, no child with q(x) = 0 kept, "
             "a last token with q > 0")

    def contract_problem(self, out, args) -> str:
        return contract_problem(out, args[1], np.shape(args[3])[1])

    def called(self, args) -> str:
        return f"tokens={np.asarray(args[0]).tolist()}, parents={np.asarray(args[1]).tolist()}"

    def seen(self, args, out) -> str:
        return f"tokens={list(map(int, args[0]))} parents={list(map(int, args[1]))} -> {np.asarray(out).tolist()}"

    def watch(self, out, args, guarded: bool) -> tuple[str, np.ndarray]:
        tokens, parents, p, q, _ = args
        problem = "" if guarded else contract_problem(out, parents, q.shape[1])
        if problem:  # (Guarded stops the run on these before they get here)
            return problem.split(":")[0].split(" (")[0], np.asarray(out)
        out = np.asarray(out).astype(np.int64)
        return path_problem(out.tolist(), np.asarray(tokens).tolist(), np.asarray(parents).tolist(), q), out


CHAIN_CALL, TREE_CALL = ChainCall(), TreeCall()


# ---------------------------------------------------------------- the wrappers

class Guarded:
    """A verifier under `limits`, whose every output must keep the contract of its form of call (else
    ContractViolation, which ends the run).  A call handed the exact tier's uniforms drives the global generators
    from them here, in the thread that owns the limit (`globalrng.driving`): a call abandoned at its limit in a
    daemon thread then leaves them restored."""

    def __init__(self, verifier: Callable, limits: Limits, form: Form = CHAIN_CALL):
        self.verifier, self.limits, self.form = verifier, limits, form
        self.__name__ = getattr(verifier, "__name__", form.name)

    def __call__(self, *args):
        with globalrng.driving(args[-1]):  # driven here, so a call abandoned at its limit leaves nothing driven
            out = self.limits.call(self.verifier, *args)
        problem = self.form.contract_problem(out, args)
        if problem:
            raise ContractViolation(f"{problem}; call {self.limits.calls}, {self.form.called(args)}")
        return np.asarray(out)


class Watched:
    """A verifier that records what is wrong with any of its outputs (`form.watch`: length, ids, the drafts as prefix
    or the path along the tree's edges, a kept token with q(x) = 0)."""

    def __init__(self, verifier: Callable, form: Form = CHAIN_CALL):
        self.verifier, self.form, self.calls, self.problems = verifier, form, 0, Counter()
        self.example = {}
        self.KEEPS = form.KEEPS  # what every output must

    def _problem(self, kind: str, example: str) -> None:
        self.problems[kind] += 1
        self.example.setdefault(kind, example)

    def __call__(self, *args):
        out = self.verifier(*args)
        self.calls += 1
        where = self.form.seen(args, out)
        problem, out = self.form.watch(out, args, isinstance(self.verifier, Guarded))
        if problem:
            self._problem(problem, where)
        return out


def form_check(watched: Watched, name: str) -> Check:
    """The check `name` ("every output seen"): whether any output `watched` saw was wrong, with an example of each."""
    if watched.calls == 0:
        return Check(name, "edge", None, "no output to look at: every call raised")
    if not watched.problems:
        return Check(name, "edge", True, f"{watched.calls} outputs: {watched.KEEPS}")
    detail = "; ".join(f"{kind}: {count} of {watched.calls} outputs, e.g. {watched.example[kind]}"
                       for kind, count in watched.problems.items())
    return Check(name, "edge", False, detail)
