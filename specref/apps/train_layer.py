"""`python -m specref.apps.train_layer`: train the draft layer (specref.smollm2.draft_layer) on the data at scale.

Data: the shards of `python -m specref draft-data` (`specref.apps.draft_build`), the training shards
read in build order until --positions are loaded, every held-out shard for the held-out alpha.
Training runs over windows of --window consecutive positions of one sequence (`seq`), each unrolled
--unroll levels as drafting sees them (EAGLE-3's training-time test, Li et al. 2025: level j takes
the draft's own prediction in place of the target's state; `specref.smollm2.draft_layer.forward`),
with the loss of `specref.smollm2.draft.head_loss` (KL + TV through the restricted head) averaged
over levels, and Adam (`specref.apps.train_draft.Adam`, its learning-rate schedule).  A checkpoint
is written atomically every 30 s and at the end; run the same command again after an interrupt and
it resumes.  The progress line gives the held-out alpha 1 and 3 steps ahead (temperature 1, on the
target's own sampled tokens, on every 4th held-out sequence; the last line on all of them) and the
time left.

--draft mlp trains the MLP draft instead (`specref.apps.train_draft.train`, hidden 1024, unroll 2) on
the same positions, the same kept tokens and the same number of examples (steps x windows x window
positions), and measures it the same way: the comparison at equal data.  --costs times one draft
step of each against one decode step of the target, in one process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from specref.apps import draft_build, train_draft as td
from specref.apps.draft_data import load_shards
from specref.smollm2 import draft as nd
from specref.smollm2 import draft_layer as dl
from specref.smollm2.fetch import cache_root
from specref.smollm2.model import KVCache, block, causal_mask, load_smollm2


@dataclass(frozen=True)
class LayerTrainConfig:
    """What a training run does; every field is part of its checkpoint's key."""

    seed: int = 0
    positions: int = 100_000  # training positions loaded (whole shards, in build order)
    n_heads: int = 9  # the draft layer's query heads
    n_kv_heads: int = 3
    head_dim: int = 64
    d_ff: int = 1536  # its SwiGLU width
    kept: int = 4096  # tokens the head covers
    steps: int = 600  # Adam steps
    windows: int = 8  # windows per step
    window: int = 32  # consecutive positions per window
    unroll: int = 3  # levels (drafted steps) per window
    lr: float = 1e-3
    kl_weight: float = 1.0
    tv_weight: float = 1.0
    init: str = "target"  # "target": the layer starts as the target's last one; "fresh": random, output projections 0

    def layer(self, target_config) -> dl.LayerConfig:
        return dl.like_target(target_config, self.n_heads, self.n_kv_heads, self.head_dim, self.d_ff)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


# ---- data ---------------------------------------------------------------------------------------------

def positions_in_sequence(seq):  # [n] -> [n]
    """Each position's place in its sequence (0 at a sequence's first token)."""
    idx = np.arange(len(seq))
    start = np.r_[True, seq[1:] != seq[:-1]]
    return idx - np.maximum.accumulate(np.where(start, idx, 0))


def windows(data: dict, pos, starts, W: int):  # [B] -> idx [B, W], real [B, W], positions [B, W]
    """Windows of W positions from each start, cut at the end of the start's sequence (the cut rows are
    'not real': padding after every real row, which causal attention never lets a real row see)."""
    idx = starts[:, None] + np.arange(W)[None, :]
    inside = idx < len(data["seq"])
    idx = np.where(inside, idx, starts[:, None])
    real = inside & (data["seq"][idx] == data["seq"][starts][:, None])
    idx = np.where(real, idx, starts[:, None])
    return idx, real, pos[starts][:, None] + np.arange(W)[None, :]


def levels_loss(ys, HN, q, valid, kl_weight: float, tv_weight: float):  # J x [B, L, d], [d, N], [B, L, N], J x [B, L]
    """Mean over levels of `head_loss` on each level's valid rows; returns loss, J x dloss/dy, mean alpha per level."""
    loss, dys, alphas = 0.0, [], []
    for y, ok in zip(ys, valid):
        part, dy_rows, alpha = nd.head_loss(y[ok], HN, q[ok], kl_weight, tv_weight)
        dy = np.zeros_like(y)
        dy[ok] = dy_rows / len(ys)
        loss += part / len(ys)
        dys.append(dy)
        alphas.append(alpha)
    return loss, dys, alphas


def held_out_alphas(P: dict, c: dl.LayerConfig, held: dict, E, HN, aheads=(1, 3), every: int = 1) -> dict:
    """Mean alpha at temperature 1 on the target's own sampled tokens, drafting `ahead` steps from a true state,
    on every `every`-th held-out sequence: the rows `specref.apps.train_draft.held_out_alpha` measures."""
    pos = positions_in_sequence(held["seq"])
    first = np.flatnonzero(pos == 0)
    ends = np.r_[first[1:], len(pos)]
    total = {a: 0.0 for a in aheads}
    count = {a: 0 for a in aheads}
    for s, t in list(zip(first, ends))[::every]:
        p = np.arange(s + 1, t)                                  # positions with a state before them
        if len(p) == 0 or not held["kind"][p].any():
            continue
        ys = dl.forward(P, c, held["h"][p - 1].astype(np.float32)[None], E[held["tok"][p]][None], pos[p][None],
                        max(aheads))[0]
        for a in aheads:
            rows = np.flatnonzero((held["kind"][p] == 1) & (np.arange(len(p)) >= a - 1))
            if len(rows):
                prob = nd.softmax(ys[a - 1][0, rows] @ HN)
                total[a] += float(np.minimum(prob, td.target_probs(held, p[rows], HN)).sum())
                count[a] += len(rows)
    return {a: total[a] / max(count[a], 1) for a in aheads}


# ---- initialisation -----------------------------------------------------------------------------------

def residual_scale(model, tokens) -> float:
    """Root-mean-square of the target's residual stream after its last block (before the final norm)."""
    w, c = model.weights, model.config
    n = len(tokens)
    cache = KVCache(c, n)
    x = w.embed(np.asarray(tokens))
    for i, layer in enumerate(w.layers):
        x = block(x, layer, cache, i, model.rot[:n], causal_mask(n), c)
    return float(np.sqrt((x * x).mean()))


def initial_params(config: LayerTrainConfig, model, data: dict, E) -> dict:
    """The feature map from ridge regression onto the target's next state before its gain (so the draft
    starts as the linear draft, normalised), at the scale of the target's residual stream for "target";
    the layer from the target's last decoder layer ("target") or random with zero output projections."""
    c = config.layer(model.config)
    g = model.weights.output_norm
    prefix = {k: v[:30_000] for k, v in data.items()}             # the ridge's normal equations on a prefix
    A, b = td.ridge(prefix, E)
    P = {"out_norm": g.copy()}
    if config.init == "target":
        last = model.weights.layers[-1]
        if (c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff) != (model.config.n_heads, model.config.n_kv_heads,
                                                            model.config.head_dim, model.config.d_ff):
            raise ValueError(f"init 'target' needs the target's widths, got {c}")
        for name in ("attn_norm", "w_qkv", "w_o", "ffn_norm", "w_gate_up", "w_down"):
            P[name] = getattr(last, name).copy()
        scale = residual_scale(model, data["tok"][:128])
    elif config.init == "fresh":
        rng = np.random.default_rng([config.seed, 9])
        d = c.d_model
        P.update(attn_norm=np.ones(d), ffn_norm=np.ones(d), w_o=np.zeros((c.q_dim, d)), w_down=np.zeros((c.d_ff, d)),
                 w_qkv=rng.standard_normal((d, c.q_dim + 2 * c.kv_dim)) / np.sqrt(d),
                 w_gate_up=rng.standard_normal((d, 2 * c.d_ff)) / np.sqrt(d))
        scale = 1.0
    else:
        raise ValueError(f"init must be 'target' or 'fresh', got {config.init!r}")
    P["w_in"], P["b_in"] = A / g * scale, b / g * scale
    return {name: np.asarray(P[name], np.float32) for name in dl.PARAM_NAMES}


# ---- training -------------------------------------------------------------------------------------------

def train(config: LayerTrainConfig, model, data: dict, held: dict, E, HN, checkpoint: pathlib.Path, log,
          seconds_limit: float | None = None) -> tuple[dict, list[dict]]:
    """Train (resuming from `checkpoint` if it exists); returns the parameters and the progress history."""
    c = config.layer(model.config)
    rng = np.random.default_rng([config.seed, 7])
    if checkpoint.is_file():
        P, opt, history = td.load_checkpoint(checkpoint, dl.PARAM_NAMES, rng)
        log(f"resuming from step {opt.t} ({checkpoint})")
    else:
        P = initial_params(config, model, data, E)
        opt = td.Adam(P)
        a = held_out_alphas(P, c, held, E, HN, every=4)
        history = [{"step": 0, "loss": None, "held_out_alpha": a[1], "held_out_alpha_3": a[3]}]
        log(f"step 0 ({config.init} initialisation): held-out alpha {a[1]:.3f}, 3 ahead {a[3]:.3f}")
    pos = positions_in_sequence(data["seq"])
    starts = np.flatnonzero(pos >= 1)                             # a window's first row needs the state before it
    schedule = td.Config(steps=config.steps, lr=config.lr)        # train_draft's warm-up and decay
    eval_every = max(config.steps // 10, 1)
    start, last_save, first_step, losses = time.perf_counter(), time.perf_counter(), opt.t, []
    while opt.t < config.steps:
        idx, real, positions = windows(data, pos, starts[rng.integers(0, len(starts), config.windows)], config.window)
        ys, cache = dl.forward(P, c, data["h"][idx - 1].astype(np.float32), E[data["tok"][idx]], positions,
                               config.unroll)
        q = td.target_probs(data, idx.ravel(), HN).reshape(*idx.shape, -1)     # [B, W, N]
        valid = [real & (np.arange(config.window) >= j)[None, :] for j in range(config.unroll)]
        loss, dys, _ = levels_loss(ys, HN, q, valid, config.kl_weight, config.tv_weight)
        opt.step(P, dl.backward(P, c, cache, dys), td.learning_rate(schedule, opt.t))
        losses.append(loss)
        last = opt.t == config.steps
        if opt.t % eval_every == 0 or last:
            a = held_out_alphas(P, c, held, E, HN, every=1 if last else 4)
            rate = (opt.t - first_step) / (time.perf_counter() - start)
            entry = {"step": opt.t, "loss": float(np.mean(losses[-eval_every:])), "held_out_alpha": a[1],
                     "held_out_alpha_3": a[3], "held_out_all": last}
            history.append(entry)
            log(f"step {opt.t}/{config.steps}  loss {entry['loss']:.3f}  held-out alpha {a[1]:.3f} (3 ahead "
                f"{a[3]:.3f}{', all held-out' if last else ', every 4th held-out sequence'})  {rate:.2f} steps/s  "
                f"about {(config.steps - opt.t) / rate:.0f} s left")
        if time.perf_counter() - last_save > 30 or last:
            td.save_checkpoint(checkpoint, P, opt, rng, history)
            last_save = time.perf_counter()
        if seconds_limit is not None and time.perf_counter() - start > seconds_limit and not last:
            td.save_checkpoint(checkpoint, P, opt, rng, history)
            log(f"stopped after {seconds_limit:.0f} s at step {opt.t}; run again to resume")
            break
    return P, history


def train_mlp(config: LayerTrainConfig, data: dict, held: dict, E, HN, checkpoint: pathlib.Path, log) -> dict:
    """The MLP draft (hidden 1024, unroll 2) on the same data and kept tokens, for as many examples as the layer
    sees (steps x windows x window positions, in batches of 256); its held-out alpha 1 and 3 steps ahead."""
    batch = 256
    steps = -(-config.steps * config.windows * config.window // batch)
    mlp = td.Config(hidden=1024, kept=config.kept, unroll=2, steps=steps, batch=batch, lr=config.lr, seed=config.seed)
    params, history = td.train(mlp, data, held, E, HN, checkpoint, log)
    return {"steps": steps, "batch": batch, "held_out_alpha": td.held_out_alpha(params, held, E, HN, 1),
            "held_out_alpha_3": td.held_out_alpha(params, held, E, HN, 3)}


# ---- the cost of a draft step ---------------------------------------------------------------------------

def step_costs(model, drafts: dict, prompt, reps: int = 20, clock=time.perf_counter) -> dict:
    """Seconds of one decode step of the target and of one drafted step of each draft (median of reps,
    interleaved) by `clock`: the target holds the prompt; a draft step drafts the row one position past it.
    On a loaded machine the wall clock counts the waits too; time.process_time counts this process's CPU only
    (with one BLAS thread, the step's own work)."""
    prompt = np.asarray(prompt)
    times: dict = {"target": [], **{name: [] for name in drafts}}
    for r in range(reps):
        model.final_states(prompt[:-1], 1)
        t = clock()
        model.next_probs(prompt, 1)                              # one new position, the head over V
        times["target"].append(clock() - t)
        model.final_states(prompt[:-1], 1)                       # the target holds all but the newest token
        for name, draft in drafts.items():
            ahead = np.r_[prompt, [int(prompt[r % len(prompt)])]]
            draft.next_probs(prompt, 1)                          # the first step, from the target's state
            t = clock()
            draft.next_probs(ahead, 1)                           # the next one: from its own prediction
            times[name].append(clock() - t)
    return {name: float(np.median(v)) for name, v in times.items()}


# ---- the command ------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specref.apps.train_layer", description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=pathlib.Path, default=None,
                        help="the shards' directory (default: the cache's draft-data/scale-<key>)")
    parser.add_argument("--out-dir", type=pathlib.Path, default=None,
                        help="where checkpoints and the draft go (default: the cache's draft-layer/)")
    parser.add_argument("--draft", choices=("layer", "mlp"), default="layer")
    parser.add_argument("--positions", type=int, default=LayerTrainConfig.positions)
    parser.add_argument("--steps", type=int, default=LayerTrainConfig.steps)
    parser.add_argument("--init", choices=("target", "fresh"), default=LayerTrainConfig.init)
    parser.add_argument("--seconds", type=float, default=None, help="stop (resumably) after this many seconds")
    parser.add_argument("--costs", action="store_true", help="time a draft step against a decode step and stop")
    parser.add_argument("--features", default=None, metavar="L,L,...",
                        help="with --costs: also time the MLP that reads these blocks of the target (EAGLE-3's inputs)")
    args = parser.parse_args(argv)
    log = lambda text: print(text, flush=True)  # noqa: E731
    root = cache_root(None)
    data_dir = args.data or root / "draft-data" / f"scale-{draft_build.BuildSpec().key()}"
    out_dir = args.out_dir or root / "draft-layer"
    config = replace(LayerTrainConfig(), positions=args.positions, steps=args.steps, init=args.init)
    model = load_smollm2(progress=lambda *a: None)
    if args.costs:
        from specref.apps.draft_features import parse_layers
        try:
            features = parse_layers(args.features) if args.features else ()
        except ValueError as e:
            parser.error(f"argument --features: {e}")
        return costs(model, config, out_dir, log, features)
    train_paths, held_paths = draft_build.prefix(data_dir, config.positions)
    data, held = load_shards(train_paths), load_shards(held_paths)
    head = model.weights.head_matrix()
    E = np.ascontiguousarray(head.T)
    kept = td.kept_tokens(data, config.kept, head.shape[1])
    HN = np.ascontiguousarray(head[:, kept])
    log(f"{len(data['tok'])} training positions from {len(train_paths)} shards, {int(held['kind'].sum())} held-out "
        f"sampled positions from {len(held_paths)} shards; config {config.key()}")
    t0 = time.process_time()
    if args.draft == "mlp":
        result = train_mlp(config, data, held, E, HN, out_dir / f"mlp-{config.key()}.npz", log)
        log(f"MLP: {json.dumps(result)}  ({time.process_time() - t0:.0f} CPU s)")
        return 0
    P, history = train(config, model, data, held, E, HN, out_dir / f"layer-{config.key()}.npz", log, args.seconds)
    if history[-1]["step"] == config.steps:
        meta = {"train_config": asdict(config), "history": history, "train_positions": int(len(data["tok"])),
                "command": "python -m specref.apps.train_layer " + " ".join(argv or [])}
        path = out_dir / f"draft-layer-{config.key()}.npz"
        sha = dl.save_layer_draft(path, dl.LayerDraftWeights(P, config.layer(model.config), kept, meta))
        log(f"wrote {path} (SHA-256 {sha}); {time.process_time() - t0:.0f} CPU s")
    return 0


def costs(model, config: LayerTrainConfig, out_dir: pathlib.Path, log, features=()) -> int:
    """c of the trained draft layer (or of random weights of the same widths), of the shipped MLP draft and, if
    `features` are given, of an MLP of the shipped widths that also reads the target's blocks `features`."""
    path = out_dir / f"draft-layer-{config.key()}.npz"
    if path.is_file():
        layer = dl.load_layer_draft(path, model.config.vocab_size)
    else:
        c = config.layer(model.config)
        rng = np.random.default_rng(0)
        P = {n: (rng.standard_normal(s) * 0.02).astype(np.float32) for n, s in c.shapes().items()}
        layer = dl.LayerDraftWeights(P, c, np.arange(0, 2 * config.kept, 2), {})
        log(f"no trained draft at {path}: timing random weights of the same widths")
    prompt = model.tokenizer.encode("def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n\n"
                                    "def mul(a, b):\n    \"\"\"Return the product of a and b.\"\"\"\n    ")
    drafts = {"layer": dl.LayerDraft(model, layer), "mlp": nd.shipped_draft(model)}
    if features:                                   # the MLP reading the target's other layers too (random weights)
        shipped = nd.shipped_draft(model).weights
        d, rng = model.config.d_model, np.random.default_rng(1)
        n_in = (2 + len(features)) * d
        params = dict(shipped.params, A=(rng.standard_normal((n_in, d)) * 0.02).astype(np.float32),
                      W1=(rng.standard_normal((n_in, shipped.hidden)) * 0.02).astype(np.float32))
        meta = {"config": dict(shipped.meta.get("config", {}), features=list(features))}
        drafts["mlp+features"] = nd.NeuralDraft(model, nd.DraftWeights(params, shipped.kept, meta))
    for name, clock in (("wall clock", time.perf_counter), ("CPU time", time.process_time)):
        t = step_costs(model, drafts, prompt, clock=clock)
        steps = ", ".join(f"{n} {1e3 * t[n]:.2f} ms (c = {t[n] / t['target']:.3f})" for n in drafts)
        log(f"{name}: decode step {1e3 * t['target']:.2f} ms; draft step: {steps}; "
            f"prompt {len(prompt)} tokens, plain path, one process")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
