"""The draft's inverse temperature beta, chosen on held-out code (`python -m specref.apps.draft_calibrate FILE`).

Training fits the draft at temperature 1 (KL + TV, `specref.apps.train_draft`) and it comes out
flatter than the target: the KL term charges it for every token the target might pick.  Modified
rejection sampling is exact for any draft distribution, so the draft's logits z may be multiplied by
a constant before the run's warp, p = softmax(beta z) (`specref.smollm2.draft`), and beta can be
chosen for what the run rewards:

    alpha(beta) = mean over k in AHEADS of  E sum_x min(warp(softmax(beta z_k))(x), warp(q)(x))

(Leviathan et al. 2023, Definition 3.1), z_k the draft's logits k steps ahead of the target's true
state, under the commands' warp (T 0.8, top-p 0.95, `specref.apps.draft_data.WARP`), over at most
MAX_POSITIONS of the target's own sampled tokens in the data's held-out shards: code that is never
HumanEval and never trained on.  beta is the best of GRID; it is written to the file's meta as
"logit_scale", with the table it was read from ("calibration").  The parameters are unchanged; a
file that records its alpha on the HumanEval yardstick ("humaneval_alpha", `specref.apps.draft_eval`)
has it measured again at the new beta.

Greedy decoding is unchanged by beta (the argmax stays), and so are trees whose children are the
draft's top k.  train-draft calibrates every draft it writes; this command calibrates a file that
exists ('shipped': the one in the repository, whose new SHA-256 it prints to record).
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

from specref.apps.draft_data import WARP
from specref.apps.draft_eval import _warp_rows, mlp_chain, starts
from specref.smollm2 import draft as nd

GRID = tuple(round(0.8 + 0.1 * j, 1) for j in range(13))  # beta in 0.8, 0.9, ..., 2.0
AHEADS = (1, 2, 3)
MAX_POSITIONS = 2000
SEED = 0


def held_rows(params: dict, held: dict, E: np.ndarray, head: np.ndarray, kept: np.ndarray,
              aheads=AHEADS, max_positions: int = MAX_POSITIONS) -> tuple[dict, np.ndarray]:
    """({k: z_k [m, N]}, q [m, N]): at m positions p of the target's sampled tokens in `held` (at most max_positions,
    drawn with SEED), the draft's logits at beta 1 drafting k steps from the target's state s_{p-k} over the true
    tokens, and the target's warped distribution at p, both on the kept tokens."""
    top = max(aheads)
    p = starts(held, top) + top                                    # p - top .. p in one sequence, p sampled
    if not len(p):
        raise ValueError(f"the held-out data has no sampled token with {top} positions of its sequence before it")
    if len(p) > max_positions:
        p = np.sort(np.random.default_rng(SEED).choice(p, max_positions, replace=False))
    from specref.apps.train_draft import target_probs
    HN, chain = np.ascontiguousarray(head[:, kept]), mlp_chain(params, E)
    z = {}
    for k in aheads:
        *_, state = chain(held, p - k, k)                          # the k-th prediction from s_{p-k}
        z[k] = state @ HN
    q = np.concatenate([WARP(target_probs(held, p[a:a + 256], head).astype(np.float64))[:, kept]
                        for a in range(0, len(p), 256)])
    return z, q


def alpha_at(z: np.ndarray, q: np.ndarray, beta: float) -> float:  # [m, N], [m, N] -> mean alpha
    """Mean sum_x min(warp(softmax(beta z)), q) over the rows (q already warped)."""
    return float(np.minimum(_warp_rows(beta * z), q).sum(1).mean())


def choose(z: dict, q: np.ndarray, grid=GRID) -> tuple[float, list[float]]:
    """(beta, alpha(beta) for each beta of grid): the first beta of the grid with the largest alpha."""
    table = [float(np.mean([alpha_at(zk, q, beta) for zk in z.values()])) for beta in grid]
    return float(grid[int(np.argmax(table))]), table


def calibrate(weights: nd.DraftWeights, held: dict, head: np.ndarray, log=print) -> nd.DraftWeights:
    """The same draft with beta chosen on `held` (module docstring) and recorded in its meta."""
    E = np.ascontiguousarray(head.T)
    z, q = held_rows(weights.params, held, E, head, weights.kept)
    beta, table = choose(z, q)
    log(f"calibration on {len(q)} held-out positions, alpha (mean of {len(z)} steps ahead, T 0.8, top-p 0.95): "
        f"beta 1 {table[GRID.index(1.0)]:.4f}, beta {beta:g} {max(table):.4f}")
    meta = dict(weights.meta, logit_scale=beta,
                calibration={"grid": list(GRID), "alpha": [round(a, 5) for a in table], "positions": int(len(q)),
                             "aheads": list(AHEADS), "warp": "T 0.8, top-p 0.95",
                             "data": "the target's sampled tokens in the data's held-out shards (no HumanEval)"})
    return nd.DraftWeights(weights.params, weights.kept, meta)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specref.apps.draft_calibrate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("draft", help="the draft file to calibrate in place, or 'shipped'")
    parser.add_argument("--cache-dir", default=None, help="cache directory (default $SPECREF_CACHE or ~/.cache/specref)")
    args = parser.parse_args(argv)
    from specref.smollm2.fetch import cache_root
    from specref.smollm2.model import load_smollm2
    shipped = args.draft == "shipped"
    path = nd.SHIPPED_PATH if shipped else pathlib.Path(args.draft).expanduser()
    try:
        weights = nd.load_draft(None if shipped else path)
    except nd.DraftError as e:
        parser.error(f"argument draft: {e}")
    data_positions = weights.meta.get("config", {}).get("data_positions")
    if not data_positions:
        parser.error(f"argument draft: {path} was trained on the small standard-library data, whose held-out part "
                     "train-draft reads when it writes a draft; calibrate a draft trained with --data-positions")
    from specref.apps.train_draft import scale_data
    root = cache_root(args.cache_dir)
    try:
        held = scale_data(root, 1, nd.feature_layers(weights.meta))["held"]
    except (ValueError, FileNotFoundError) as e:
        parser.error(f"no held-out code for the calibration ({e}); build the data with `python -m specref draft-data`")
    model = load_smollm2(args.cache_dir, progress=lambda *a: None)
    calibrated = calibrate(weights, held, model.weights.head_matrix())
    before = weights.meta.get("humaneval_alpha")
    if before:                                   # measured at beta 1 by train-draft: measure it again at beta
        from specref.apps.train_draft import evaluate
        calibrated.meta["humaneval_alpha"] = evaluate(model, calibrated, root, before["prompts"], print)
        calibrated.meta["calibration"]["humaneval_alpha_at_beta_1"] = before
    sha = nd.save_draft(path, calibrated)
    print(f"wrote {path} (SHA-256 {sha})")
    if shipped:
        print(f"record it: SHIPPED_SHA256 = \"{sha}\" in specref/smollm2/draft.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
