"""The verifiers specref knows, one row each: the registry every list of verifiers reads.

A row gives a verifier's name (the one name the commands, the reports and the docs use), its function,
the drafts it is exact for, the label a report gives it, and the law it must follow.  The drafts are
"chain" (K drafts, each drawn from its own row, as in Chen's Algorithm 2) or, for a tree verifier, how
each node's children are drawn (`specref.trees.draw_children`'s mode): each tree verifier is exact only
for its own way.

The law is the name of the row whose exact law of one call this verifier has: its own name for a
reference (the rows below), another row's for a new implementation of a known rule (a faster
`mrs.verify`, say), which the proofs then check as that rule, with no other file to change.  The proofs
hold each law under its reference's name, because the core does not import them: the exact law of one
call (`specref.proof.cases.CORRECT`, `specref.proof.tree.ALGORITHMS`) and the known bugs
(`specref.proof.bugs`).  A test checks that every law here has both.  docs/package.md ("Where to add")
lists the files a new verifier touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specref import mrs, mrs_tree


@dataclass(frozen=True)
class Verifier:
    """One verifier: what it is called, what it runs, which drafts it is exact for."""

    name: str  # "token", "block", "tree-topk", ...: the --verify / --algorithm value and the reports' name
    function: Callable  # mrs.verify's contract for a chain, mrs_tree.verify_tree_*'s for a tree
    drafts: str  # "chain", or the drawing its trees' children are drawn with ("topk", "iid", "without_replacement")
    label: str  # what a report calls it
    law: str = ""  # the row whose exact law of one call it has: "" for its own (a reference)

    def __post_init__(self):
        if not self.law:
            object.__setattr__(self, "law", self.name)

    @property
    def is_tree(self) -> bool:
        return self.drafts != "chain"


REGISTRY = {v.name: v for v in (
    Verifier("token", mrs.verify, "chain", "token-level verification"),
    Verifier("block", mrs.verify_block, "chain", "block verification"),
    Verifier("tree-topk", mrs_tree.verify_tree_topk, "topk", "tree verification, deterministic top-k children (tree-topk)"),
    Verifier("tree-mss", mrs_tree.verify_tree_mss, "iid", "tree verification, i.i.d. children (tree-mss, SpecInfer)"),
    Verifier("tree-rrs", mrs_tree.verify_tree_rrs, "without_replacement",
             "tree verification, children without replacement (tree-rrs)"),
)}
CHAINS = tuple(name for name, v in REGISTRY.items() if not v.is_tree)  # ("token", "block")
TREES = tuple(name for name, v in REGISTRY.items() if v.is_tree)  # ("tree-topk", "tree-mss", "tree-rrs")


def references(names: tuple[str, ...]) -> tuple[str, ...]:
    """The distinct laws of the verifiers `names` (CHAINS or TREES), in the registry's order: the references."""
    return tuple(dict.fromkeys(REGISTRY[name].law for name in names))


def law_of(name: str) -> str:
    """The name of the reference whose exact law the verifier `name` has; ValueError for a name not in the registry."""
    if name not in REGISTRY:
        raise ValueError(f"verifier must be one of {', '.join(REGISTRY)}, got {name!r}")
    law = REGISTRY[name].law
    if law not in REGISTRY or REGISTRY[law].law != law or REGISTRY[law].drafts != REGISTRY[name].drafts:
        raise ValueError(f"verifier {name!r} names the law {law!r}, which must be a reference of the registry (a row "
                         f"that is its own law) with the same drafts ({REGISTRY[name].drafts!r})")
    return law


def reference(name: str) -> Verifier:
    """The reference row whose exact law the verifier `name` has (itself for a reference): its function is the one
    whose portable vectors `name` must reproduce.  ValueError as `law_of`."""
    return REGISTRY[law_of(name)]


def for_drawing(drawing: str) -> Verifier:
    """The tree verifier that is exact for children drawn the way `drawing` says; ValueError if none is."""
    for v in REGISTRY.values():
        if v.is_tree and v.drafts == drawing and v.law == v.name:
            return v
    modes = ", ".join(REGISTRY[name].drafts for name in references(TREES))
    raise ValueError(f"drawing must be one of {modes}, got {drawing!r}")
