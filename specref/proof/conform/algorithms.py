"""The algorithms a function can be checked as, and what the checker knows about each: one registry.

Chains ("token", "block": `mrs.verify`'s contract) and trees ("tree-topk", "tree-mss", "tree-rrs":
`mrs_tree.verify_tree_*`'s).  For each: what the report calls it, its correct law (CORRECT), the known bugs
its checks are measured on (`signatures`) and its diagnosis names (`diagnosed`), the bug a failing edge
check is the signature of (`edge_bug`), its reference function's name in the portable vectors
(`vectors_function`), and which known bugs a run of given sizes catches (`caught`).  Every other module
of the checker asks here, so that these lists can later come from one project-wide registry.
"""

from __future__ import annotations

from specref import verifiers
from specref.proof import power, tree
from specref.proof.bugs import broken, lossy, shipped
from specref.proof.cases import CORRECT  # noqa: F401  (the exact law of one call of a correct chain verifier)

# A function is checked as one of the verifiers of specref.verifiers: a chain verifier ("token", "block") or a tree
# verifier ("tree-topk", "tree-mss", "tree-rrs"), each checked on trees drawn its way.  The report's first line
# names it by the registry's label.
CHECKED_AS = {name: v.label for name, v in verifiers.REGISTRY.items()}

# ---------------------------------------------------------------- the known bugs of chain verifiers

# Each is a `broken.Bug`: its sampler (for the vectors' comparison and the power tests) and its exact
# law for fixed drafts, law(x_draft, p, q) -> {output: probability}, summed over the drafts by
# laws.rows_call_law.  Besides the bugs and the lossy rules, each exact verifier is a known way to be
# wrong about the other.
# (Defined in specref.proof.bugs.shipped, whose gallery uses TOKEN_LEVEL for vllm-ascend #7807.)
TOKEN_LEVEL, BLOCK = shipped.TOKEN_LEVEL, shipped.BLOCK
# The laws a verifier checked as token-level, or as block verification, is compared with when it fails.
SIGNATURES = {"token": [*broken.BROKEN.values(), *lossy.LOSSY, BLOCK],
              "block": [*broken.BROKEN_BLOCK.values(), TOKEN_LEVEL, *lossy.LOSSY]}
# The checker's power is measured on every law it can name, through that law's own sampler checked
# as each algorithm whose diagnosis knows it ("name/algorithm" -> (bug, algorithm)):
# tests/proof/test_conform.py and `python3 -m tools.conform_false_alarm`.
KNOWN_BUGS = {f"{bug.name}/{algorithm}": (bug, algorithm) for algorithm in verifiers.CHAINS for bug in SIGNATURES[algorithm]}
# The one-call diagnosis also knows the single-call forms of the bugs that shipped (specref.proof.bugs.shipped,
# docs/shipped_bugs.md; those already among SIGNATURES once); the exact-tier edge checks name the shipped
# edge-case bugs (shipped.edge_signature) in the run's diagnosis.
DIAGNOSED = {a: SIGNATURES[a] + [b for b in shipped.signatures(a) if b not in SIGNATURES[a]] for a in verifiers.CHAINS}

# ---------------------------------------------------------------- the known bugs of tree verifiers

# A failing exact-tier edge check of a tree run names this known bug of its algorithm (tree.ALGORITHMS[...].bug).
TREE_EDGE_BUGS = {"edge q(x) = 0, u = 0": "inclusive_zero_coin"}


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


def tree_algorithm(algorithm: str) -> tree.Algorithm:
    """A tree algorithm's way of drawing children (.drawing), reference verifier and known bugs (.bugs, .bug)."""
    return tree.ALGORITHMS[algorithm]


def signatures(algorithm: str) -> tuple:
    """The known bugs the checks of `algorithm` are there for (what `power` measures them on)."""
    return tuple(tree.ALGORITHMS[algorithm].bugs if is_tree(algorithm) else SIGNATURES[algorithm])


def diagnosed(algorithm: str) -> list:
    """The known bugs a failing check of `algorithm` is compared with (the one-call laws, the vectors' tokens)."""
    return list(tree.ALGORITHMS[algorithm].bugs) if is_tree(algorithm) else DIAGNOSED[algorithm]


def edge_bug(algorithm: str, check: str):
    """The algorithm's own known bug that the failing edge check named `check` is the signature of, or None."""
    if is_tree(algorithm) and check in TREE_EDGE_BUGS:
        return tree.ALGORITHMS[algorithm].bug[TREE_EDGE_BUGS[check]]
    return None


def vectors_function(algorithm: str) -> str:
    """The reference function whose portable vectors a verifier of `algorithm` must reproduce."""
    if is_tree(algorithm):
        return "verify_" + algorithm.replace("-", "_")  # "tree-mss" -> "verify_tree_mss"
    return "verify" if algorithm == "token" else "verify_block"


def caught(algorithm: str, counted: dict, level: float, exact_ran: set[str]) -> tuple[str, list[str], list[str]]:
    """(what the known bugs are, those a run with these per-check samples catches with >= 95% power, the others):
    the known tree bugs of specref/proof/tree.py, or the bugs that shipped (specref.proof.bugs.shipped)."""
    if is_tree(algorithm):  # every check counted; an edge check that ran catches its bug for certain
        edges = {bug for check, bug in TREE_EDGE_BUGS.items() if check in exact_ran}
        yes, no = power.tree_caught(algorithm, counted, level, edges)
        return "known tree bugs (specref/proof/tree.py)", yes, no
    yes, no = power.caught(algorithm, counted, level, exact_ran)
    return "bugs that shipped (docs/shipped_bugs.md)", yes, no
