"""What one decode step, one scoring call and one verify cost on this machine, measured now.

Medians over repeats, on the real model:
- `decode_ms_per_token`: one incremental step (one new token after a cached prefix), including
  the float64 softmax, i.e. what an autoregressive loop pays per token;
- `weights_stream_ms`: the floor of a decode step, the fastest pass that reads every weight once:
  a matrix-vector product per matrix on one thread (panel or plain layout) or shared by every
  core, or a plain read of the weights by every core (`stream_passes` below), timed in the same
  rounds as the decode step and the scoring calls (`scoring_and_stream_ms`);
- `score_ratio`: K -> (time to score K + 1 new tokens in one call) / (one decode step), K = 1..8;
  this is the `score_cost` of `specref.speedup.walltime_improvement_measured`;
- `decode_over_stream_rounds`, `score_ratio_rounds` (K -> ...): the 25th and 75th percentiles of
  the same ratios taken within each round (that round's decode step, its fastest floor pass): how
  far the machine's noise moved them during the run;
- `mrs_ms`: one `specref.mrs.verify` call at K = 4, V = 49152;
- `block_ms`: one `specref.mrs.verify_block` call on the same inputs;
- `tree_score_ratio`: N -> (time to score a tree of N nodes in one call, `SmolLM2.score_tree`, with
  the root's token not cached yet, as in speculative sampling, then keep a path of it in the cache,
  `SmolLM2.keep_path`, as the loop does after verifying) / (one decode step), N in `tree_sizes`
  (TREE_SIZES by default), timed in the same rounds; `tree_score_ratio_rounds` their spread, as above;
- `verify_tree_ms`: drawing -> one call of that tree verifier (`specref.verifiers.for_drawing`)
  on a tree of VERIFY_TREE nodes over V = 49152, its children drawn that verifier's way.
Only ratios measured in the same run mean much: the machine may be shared.

`warp_ratio` is measured apart, per warp: what warping one of the target's rows (temperature, top-p) adds to
what the costs above include (its float64 softmax) / one decode step, on the model's rows over a prompt of the run.
A sampled run warps every row it scores, so a call scoring K + 1 rows pays K + 1 warps and a decode step one
(`specref.speedup.warped_costs`).
"""

import os
import time

import numpy as np

from specref import verifiers
from specref.mrs import verify, verify_block
from specref.trees import DRAWINGS, Tree, draw_children
from specref.smollm2.model import SmolLM2, softmax
from specref.fast.kernels import PANEL, from_panels, to_panels
from specref.fast.machine import cores
from specref.fast.team import Team

K_MAX = 8              # score_ratio is measured for K = 1..K_MAX
PREFIX = 64            # tokens cached before every timed call
# Performance targets: decode <= 1.25x the all-cores stream floor, scoring 5 tokens <= 1.2x and
# 9 tokens <= 1.5x a decode step, verify < 2% of a decode step, the demo's default workload
# >= 1.5x over ArS with the model check (Theorem 3.8 from the run's own alpha and costs, `demo.model_check`)
# within 15%, peak memory under 2 GiB; block verification
# under 3% of a decode step.
TARGETS = {"decode_over_stream": 1.25, "score_ratio_4": 1.2, "score_ratio_8": 1.5, "mrs_fraction": 0.02,
           "speedup": 1.5, "prediction_error": 0.15, "peak_rss_mib": 2048, "block_fraction": 0.03,
           "verify_tree_fraction": 0.02}
TREE_SIZES = (4, 8, 16)  # trees whose scoring cost is measured (N nodes; a chain of N + 1 tokens is its peer)
VERIFY_TREE = "4x3"      # the tree the tree verifiers are timed on: 4 children of the root, 3 under each (16 nodes)


def stream_passes(model: SmolLM2, threads: int | None = None) -> dict:
    """name -> a function that reads every weight matrix once: the candidates for the floor of a decode step.

    - `gemv panels`, `gemv plain`: one matrix-vector product per matrix on one thread, in the
      panel layout and in the plain [in, out] layout;
    - `gemv, T threads`: the same products, the matrices shared by T threads (groups of matrices
      taken in turn, so only a few hand-overs per pass);
    - `read, T threads`: T threads summing the weights, a pure memory-bandwidth pass.
    The floor is the fastest of them: what streaming the weights costs on this machine with every
    core it has.  The functions hold a copy of the weights in the layout the model does not use.
    """
    threads = threads or cores()
    panels = [to_panels(m, PANEL) if m.ndim == 2 else m for m in model.weights.matrices()]
    plain = [from_panels(m) for m in panels]                   # one of the two lists is a copy
    x = {d: np.ones(d, np.float32) for d in {p.shape[1] for p in panels}}
    team = Team(threads - 1) if threads > 1 else None
    groups = np.array_split(np.arange(len(plain)), 4 * threads)   # contiguous groups of matrices

    def panel_pass():
        for w in panels:
            np.matmul(x[w.shape[1]], w)                        # [d_in] @ [P, d_in, c] -> [P, c]

    def plain_pass():
        for w in plain:
            x[w.shape[0]] @ w                                  # [d_in] @ [d_in, d_out]

    def gemv_group(k):
        for i in groups[k]:
            x[plain[i].shape[0]] @ plain[i]

    def read_group(k):
        for i in groups[k]:
            np.add.reduce(plain[i].reshape(-1))

    passes = {"gemv panels, 1 thread": panel_pass, "gemv plain, 1 thread": plain_pass}
    if team is not None:
        passes[f"gemv plain, {threads} threads"] = lambda: team.run(len(groups), gemv_group)
    passes[f"read, {threads} thread{'s' if threads > 1 else ''}"] = (
        (lambda: team.run(len(groups), read_group)) if team is not None
        else (lambda: [read_group(k) for k in range(len(groups))]))
    return passes


def scoring_and_stream_ms(model: SmolLM2, repeats: int, k_max: int = K_MAX, passes: dict | None = None) -> tuple:
    """({n: median ms of next_probs on n new tokens after a cached prefix, n = 1..k_max+1},
    {name: median ms of each of `passes`}), all timed in every one of `repeats` rounds, in a
    shuffled order, so that load coming and going hits the decode step, the scoring calls and the
    floor alike and their ratios compare like with like."""
    score, stream = timed_rounds(model, repeats, k_max, passes)
    return median_ms(score), median_ms(stream)


def timed_rounds(model: SmolLM2, repeats: int, k_max: int = K_MAX, passes: dict | None = None) -> tuple:
    """`scoring_and_stream_ms`'s timings, round by round: ({n: [seconds in round r]}, {name: [seconds in round r]})."""
    V = model.config.vocab_size
    prefix = list(range(1000, 1000 + PREFIX))
    model.reset()
    model.next_probs(np.array(prefix), 1)                      # cache the prefix once
    passes = passes or {}
    jobs = [("score", n) for n in range(1, k_max + 2)] + [("pass", name) for name in passes]
    times = {job: [] for job in jobs}
    fresh = 5000
    order = np.random.default_rng(0)
    for _ in range(repeats):
        for i in order.permutation(len(jobs)).tolist():
            kind, what = jobs[i]
            if kind == "score":
                fresh = (fresh + 1) % V                        # a first new token unlike the cached one
                tokens = np.array(prefix + [fresh] + list(range(2000, 2000 + what - 1)))
                t = time.perf_counter()
                model.next_probs(tokens, what)
            else:
                t = time.perf_counter()
                passes[what]()
            times[jobs[i]].append(time.perf_counter() - t)
    model.reset()
    return ({n: times[("score", n)] for n in range(1, k_max + 2)}, {name: times[("pass", name)] for name in passes})


def median_ms(times: dict) -> dict:
    """key -> median of its times (seconds), in ms."""
    return {key: 1e3 * float(np.median(v)) for key, v in times.items()}


def quartiles(values) -> list:
    """[25th, 75th percentile] of values: the middle half of what the rounds measured."""
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), [25, 75])]


def _softmax_rows(rng: np.random.Generator, n: int, V: int) -> np.ndarray:  # -> [n, V] float64
    z = rng.normal(0.0, 3.0, (n, V))  # logits with a spread like the model's
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def verify_ms(V: int, K: int = 4, repeats: int = 51, verifier=verify) -> float:
    """Median ms of one call of `verifier` (specref.mrs.verify by default) on softmax distributions of size V (drafts drawn from p)."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        p, q = _softmax_rows(rng, K, V), _softmax_rows(rng, K + 1, V)  # [K, V], [K+1, V]
        x_draft = np.array([rng.choice(V, p=p[t]) for t in range(K)])
        t = time.perf_counter()
        verifier(x_draft, p, q, rng)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def tree_parents(N: int) -> list[int]:
    """The tree whose scoring is timed: N nodes, two children per node, level by level (the shape barely
    matters: a tree of N nodes is N rows in every product, and its mask only changes which keys count)."""
    return [i // 2 - 1 for i in range(N)]


def tree_scoring_passes(model: SmolLM2, sizes=TREE_SIZES) -> dict:
    """"tree N" -> a function scoring a tree of N nodes after the cached PREFIX and one new token (the
    root, not cached: in speculative sampling it is the last call's final token), then keeping the path
    to its first node (as the loop keeps the accepted path), for `timed_rounds`' passes; none for a
    model without score_tree."""
    if getattr(model, "score_tree", None) is None:
        return {}
    V, prefix, fresh = model.config.vocab_size, list(range(1000, 1000 + PREFIX)), [7000]

    def score(N):
        fresh[0] = (fresh[0] + 1) % V                              # a root unlike the cached token
        model.score_tree(np.array(prefix + [fresh[0]]), np.arange(3000, 3000 + N) % V, tree_parents(N))
        model.keep_path([0])

    return {f"tree {N}": (lambda N=N: score(N)) for N in sizes}


def verify_tree_ms(V: int, drawing: str, tree: str = VERIFY_TREE, repeats: int = 51) -> float:
    """Median ms of one call of the tree verifier for `drawing` (`specref.verifiers.for_drawing`) on softmax
    rows of size V, on the tree `tree` with its children drawn from those rows that verifier's way."""
    rng = np.random.default_rng(0)
    shape, verify = Tree.parse(tree, drawing), verifiers.for_drawing(drawing).function
    times = []
    for _ in range(repeats):
        p, q = _softmax_rows(rng, shape.size + 1, V), _softmax_rows(rng, shape.size + 1, V)  # [N+1, V] each
        tokens = np.zeros(shape.size, np.int64)
        for row in range(shape.size + 1):                          # the root (row 0), then node row - 1
            kids = [i for i, j in enumerate(shape.parents) if j == row - 1]
            if kids:
                tokens[kids] = draw_children(p[row], len(kids), drawing, rng)
        parents = np.array(shape.parents)
        t = time.perf_counter()
        verify(tokens, parents, p, q, rng)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def warp_ratio(model: SmolLM2, warp, tokens, repeats: int = 21) -> float:
    """What warping one of the model's rows with `warp` (a `specref.warps.Warp`) adds to a call / one decode step,
    measured now.  The loop warps a target's rows from its logits (`specref.warps.Warped`, `Warp.from_logits`), and
    the decode step and scoring costs measured here already include the float64 softmax of every row, so a row's
    warp costs the loop time(warp.from_logits(row)) - time(softmax(row)): the medians of `repeats` of each, and as
    many decode steps, in turn.  Greedy's is near 0 (an argmax instead of the softmax; 0.0017 on a Zen 4).  The rows
    are the model's own over `tokens`, a real text (a prompt of the run): top-p's work depends on how peaked a row
    is, and rows over arbitrary token ids, nearly flat, cost more than twice as much to warp as rows over code."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) < 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"warp_ratio needs a real text of at least 2 token ids (a prompt) whose rows it warps, "
                         f"got {tokens.shape} of {tokens.dtype}")
    model.reset()
    rows = model.next_logits(tokens, min(len(tokens) - 1, 32))    # [k, V] the model's logits over the text
    warps, softmaxes, steps, extra = [], [], [], []
    for r in range(repeats):
        row = rows[r % len(rows)][None]
        t = time.perf_counter()
        warp.from_logits(row)
        warps.append(time.perf_counter() - t)
        t = time.perf_counter()
        softmax(row, np.float64)
        softmaxes.append(time.perf_counter() - t)
        extra.append(1000 + r)
        t = time.perf_counter()
        model.next_probs(np.concatenate([tokens, extra]), 1)       # one new token after the cached ones
        steps.append(time.perf_counter() - t)
    model.reset()
    return float((np.median(warps) - np.median(softmaxes)) / np.median(steps))


def measure_costs(model: SmolLM2, repeats: int = 7, tree_sizes=TREE_SIZES, warps: dict | None = None,
                  warp_text=None) -> dict:
    """Decode step, weights-stream floor, scoring cost per K and per tree (of each size in `tree_sizes`), and verify
    costs, measured now on this machine; with `warps` (name -> `specref.warps.Warp`) also `warp_ratio`: name -> what
    warping one of the model's rows over `warp_text` (a prompt of the run) costs / one decode step (`warp_ratio`)."""
    if warps and warp_text is None:
        raise ValueError("measuring the warps' cost needs warp_text, a real text whose rows are warped (a prompt)")
    trees = tree_scoring_passes(model, tree_sizes)
    rounds, pass_rounds = timed_rounds(model, repeats, passes={**stream_passes(model), **trees})
    tree_rounds = {int(name.split()[1]): pass_rounds.pop(name) for name in trees}   # N -> seconds per round
    stream_rounds = pass_rounds
    score, stream = median_ms(rounds), median_ms(stream_rounds)
    decode = score[1]
    per_round_decode = np.array(rounds[1])
    per_round_floor = np.min(list(stream_rounds.values()), axis=0)    # each round's fastest pass
    mrs_ms = verify_ms(model.config.vocab_size)
    block_ms = verify_ms(model.config.vocab_size, verifier=verify_block)
    floor = min(stream.values())
    return {
        "decode_ms_per_token": decode,
        "weights_stream_ms": floor,
        "weights_stream_ms_by_pass": stream,
        "decode_over_stream": decode / floor,
        "score_ms": {n - 1: ms for n, ms in score.items() if n > 1},      # K -> ms for K + 1 tokens
        "score_ratio": {n - 1: ms / decode for n, ms in score.items() if n > 1},
        # the same ratios within each round (each round's own decode step and fastest pass): their
        # middle half says how far the run's noise reaches, beside the ratios of medians above
        "decode_over_stream_rounds": quartiles(per_round_decode / per_round_floor),
        "score_ratio_rounds": {n - 1: quartiles(np.array(v) / per_round_decode) for n, v in rounds.items() if n > 1},
        "mrs_ms": mrs_ms,
        "mrs_fraction": mrs_ms / decode,
        "block_ms": block_ms,
        "block_fraction": block_ms / decode,
        "tree_score_ms": median_ms(tree_rounds),
        "tree_score_ratio": {N: ms / decode for N, ms in median_ms(tree_rounds).items()},
        "tree_score_ratio_rounds": {N: quartiles(np.array(v) / per_round_decode) for N, v in tree_rounds.items()},
        "verify_tree_ms": (tree_ms := {drawing: verify_tree_ms(model.config.vocab_size, drawing)
                                       for drawing in DRAWINGS}),
        "verify_tree_fraction": {drawing: ms / decode for drawing, ms in tree_ms.items()},
        "warp_ratio": {name: warp_ratio(model, w, warp_text) for name, w in (warps or {}).items()},
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "cores": cores(),
        "plan": model.fast.to_json() if model.fast is not None else "plain",
        "repeats": repeats,
    }
