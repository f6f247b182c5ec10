"""The algorithms a function can be checked as, and where the checker finds what it knows about each.

Chains ("token", "block": `mrs.verify`'s contract) and trees ("tree-topk", "tree-mss", "tree-rrs":
`mrs_tree.verify_tree_*`'s).  What the report calls each is the verifier registry's label (CHECKED_AS).
Everything particular to one shape of call lives in its part, `chain` or `tree` (`part(algorithm)`), under
the same names in both: the known bugs its checks are measured on (`known_bugs`) and its diagnosis names
(`diagnosed`), the bug a failing edge check is the signature of (`edge_bug`), the exact laws of a run's checks
(`check_laws`), which known bugs a run of given sizes catches (`caught`), and the checks themselves.  Here also:
at which sampling parameters the known bugs were sized (`sized_at`).
"""

from __future__ import annotations

from specref import verifiers
from specref.proof.bugs import shipped
from specref.proof.conform import chain, tree

# A function is checked as one of the verifiers of specref.verifiers: a chain verifier ("token", "block") or a tree
# verifier ("tree-topk", "tree-mss", "tree-rrs"), each checked on trees drawn its way.  The report's first line
# names it by the registry's label.
CHECKED_AS = {name: v.label for name, v in verifiers.REGISTRY.items()}

# ---------------------------------------------------------------- what the known bugs were sized at

# A known bug whose effect depends on the request's sampling parameters is sized (its law, its power) at the values
# its model assumes; at other values it moves the law less, and at none (T = 1, no filter) not at all, so a run
# whose adapter applies none cannot catch it.  Bug name -> (the parameter it was sized at, the value that hides it).
SIZED_AT = {
    "bonus_unwarped": (f"temperature {shipped.REQUEST_TEMPERATURE:g}", "T = 1"),
    "target_not_warped": (f"temperature {shipped.REQUEST_TEMPERATURE:g}", "T = 1"),
    "draft_filter_not_passed": (f"draft top-p {shipped.DRAFT_TOP_P:g}", "no top-p filter"),
}


def sized_at(names: list[str]) -> str:
    """The sentence saying at which sampling parameters the named bugs (entries like "bonus_unwarped (99%)") were
    sized, and what a user must do for a pass to cover them; '' when none depends on them."""
    which = [(name, *SIZED_AT[name]) for name in (entry.split(" ")[0] for entry in names) if name in SIZED_AT]
    if not which:
        return ""
    each = ", ".join(f"{name} at {value}" for name, value, _ in which)
    hides = "; ".join(f"at {hidden} {name} changes nothing" for name, _, hidden in which)
    return (f"sized at the request's sampling parameters the checker's rows model: {each} ({hides}, so this covers "
            "them only if the code under test applies such parameters: check at a temperature other than 1, set in "
            "your adapter)")


def is_tree(algorithm: str) -> bool:
    """Whether `algorithm` checks a tree verifier (else a chain verifier, or nothing known)."""
    return algorithm in verifiers.TREES


def part(algorithm: str):
    """The module of what is particular to `algorithm`'s shape of call: `tree` for a tree algorithm, else `chain`."""
    return tree if is_tree(algorithm) else chain
