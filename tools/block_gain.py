"""Exact expected tokens per target call of token-level and block verification, side by side.

    python3 -m tools.block_gain
    python3 -m tools.block_gain --paired figures/block_verification/he_K*_*.json

Everything here (but --paired) is computed by enumeration (`specref.proof.stats`), no sampling:
- the block-verification paper's toy example (binary vocabulary, draft (2/3, 1/3), target
  (1/3, 2/3), context-independent) for K = 1..8, in exact fractions;
- context-dependent models over V = 3 tokens (every prefix has its own Dirichlet(0.5) row),
  with drafts of three qualities: draft = lam * target + (1 - lam) * another such model, for
  K = 2, 4, 8, averaged over 5 random pairs; and the same with a one-hot draft (the target's
  most likely token, as prompt lookup or a greedy draft gives), where block verification
  provably gains nothing.
--paired reads `humaneval --json` reports instead and prints, for each SpS row, the paired gain of block
verification on that run's own drafts: E block / E token - 1, both expected tokens per call computed exactly
for each call's drafts (`laws.ExpectedTokens`), as docs/block_verification.md's table gives it.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from specref.proof import laws


def expected_both(draft_row, target_row, K: int, V: int) -> tuple[float, float]:
    """(token-level, block) expected tokens per call, summed over every draft block."""
    token = block = 0.0
    for xs in itertools.product(range(V), repeat=K):
        p = np.array([draft_row(xs[:t]) for t in range(K)])
        chance = float(np.prod(p[np.arange(K), xs]))
        if chance == 0.0:
            continue
        q = np.array([target_row(xs[:t]) for t in range(K + 1)])
        t, b = laws.expected_tokens_given_drafts(np.array(xs), p, q)
        token, block = token + chance * t, block + chance * b
    return token, block


def toy() -> None:
    print("toy example (draft (2/3, 1/3), target (1/3, 2/3)): accepted drafts per call")
    print("| K | token-level | block | gain |")
    print("|---|---|---|---|")
    for K in range(1, 9):
        p = laws.fixed_rows([[Fraction(2, 3), Fraction(1, 3)]] * K)
        q = laws.fixed_rows([[Fraction(1, 3), Fraction(2, 3)]] * (K + 1))
        token = laws.mean_output_length(laws.chain_call_law(laws.token_call_law, p, q, K, 2)) - 1
        block = laws.mean_output_length(laws.chain_call_law(laws.block_call_law, p, q, K, 2)) - 1
        print(f"| {K} | {token} = {float(token):.3f} | {block} = {float(block):.3f} | {float(block / token - 1):+.1%} |")


def mixture(a, b, lam):
    return lambda prefix: lam * a(prefix) + (1 - lam) * b(prefix)


def one_hot_of(model, V):
    return lambda prefix: np.eye(V)[int(np.argmax(model(prefix)))]


def context_dependent(V: int = 3, pairs: int = 5) -> None:
    print(f"\ncontext-dependent models, V = {V}, mean over {pairs} random pairs: tokens per call")
    print("| draft | alpha (first position) | K | token-level | block | gain |")
    print("|---|---|---|---|---|---|")
    for label, make in [("lam = 0.5", lambda t, o: mixture(t, o, 0.5)), ("lam = 0.8", lambda t, o: mixture(t, o, 0.8)),
                        ("lam = 0.95", lambda t, o: mixture(t, o, 0.95)), ("one-hot", lambda t, o: one_hot_of(t, V))]:
        for K in (2, 4, 8):
            token = block = alpha = 0.0
            for seed in range(pairs):
                rng = np.random.default_rng(seed)
                target = laws.random_conditionals(V, rng, 0.5)
                other = laws.random_conditionals(V, rng, 0.5)
                draft = make(target, other)
                t, b = expected_both(draft, target, K, V)
                token, block = token + t / pairs, block + b / pairs
                alpha += float(np.minimum(draft(()), target(())).sum()) / pairs
            print(f"| {label} | {alpha:.2f} | {K} | {token:.3f} | {block:.3f} | {block / token - 1:+.1%} |", flush=True)


def paired(paths: list[str]) -> None:
    import json
    import pathlib
    print("| report | K | draft | decoding | E token | E block | paired gain |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        if not pathlib.Path(path).is_file():
            raise SystemExit(f"{path} is not a file (expected a `python3 -m specref humaneval --json` report)")
        rows = [r for r in json.loads(pathlib.Path(path).read_text()).get("rows", []) if r.get("method") == "SpS"]
        if not rows:
            raise SystemExit(f"{path} has no SpS rows (expected a `python3 -m specref humaneval --json` report)")
        for r in rows:
            token, block = r.get("expected_tokens_per_call_token"), r.get("expected_tokens_per_call_block")
            if not token or block is None:
                raise SystemExit(f"{path}: the {r['draft']} row has no expected tokens per call of both verifiers")
            decoding = "greedy" if r["temperature"] == 0 else f"T {r['temperature']:g}, top-p {r['top_p']:g}"
            print(f"| {path} | {r['K']} | {r['draft']} | {decoding} | {token:.4f} | {block:.4f} | {block / token - 1:+.1%} |")


if __name__ == "__main__":
    import sys
    if sys.argv[1:2] == ["--paired"]:
        if not sys.argv[2:]:
            raise SystemExit("--paired needs one or more humaneval --json reports")
        paired(sys.argv[2:])
    elif sys.argv[1:]:
        raise SystemExit(f"usage: python3 -m tools.block_gain [--paired REPORT.json ...]; got {' '.join(sys.argv[1:])}")
    else:
        toy()
        context_dependent()
