"""`python -m specref train-draft`: train the neural draft (specref.smollm2.draft) from the target, here.

Data (`specref.apps.draft_data`, never HumanEval): functions with a docstring from Python's own
standard library on this machine, shuffled with the seed, every 20th held out; the rest seen by
the target teacher-forced (packed into sequences of up to 384 tokens) and as the prompts of its own
completions (temperature 0.8, top-p 0.95, at most 64 tokens).  Per position the target's final
state (float16), log-sum-exp and argmax are kept, in shards under cache/draft-data/<key>/, made by
worker processes (one model each); an interrupted run resumes at the first missing shard.  The
data at scale (standard library and installed packages, millions of positions) is built by
`python -m specref draft-data` (`specref.apps.draft_build`).

Training: A and b start from ridge regression (s_{i-1}, e(x_i)) -> s_i, W2 from 0; then Adam on
KL + TV through the restricted head, each example unrolled two steps (the second from the draft's
own prediction, as drafting ahead sees it).  A checkpoint is written every 30 s (atomically); an
interrupted run resumes from it.  The progress line shows the step, the loss, the held-out alpha
(one step and two steps ahead, at temperature 1) and the time left.  Then the draft's inverse
temperature beta is chosen on the held-out data (`specref.apps.draft_calibrate`).

Output: --out PATH (default: the cache's draft.npz); --install writes the draft that ships with
the repository (specref/smollm2/draft.npz) and prints the SHA-256 to record in
specref.smollm2.draft.SHIPPED_SHA256.  --quick: a small configuration (about a minute), measured after training
on the completions of the first 16 HumanEval prompts (--eval-prompts gives another number).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from specref.apps import options
from specref.apps.draft_eval import with_features
from specref.apps.draft_data import load_shards, make_data, write_npz
from specref.files import replacing
from specref.smollm2 import draft as nd
from specref.smollm2.fetch import cache_root
from specref.fast import load_fast
from specref.smollm2.model import SmolLM2

@dataclass(frozen=True)
class Config:
    """What a training run does; every field is part of the cache key of its data and checkpoint."""

    seed: int = 0
    tf_sequences: int = 160  # teacher-forced sequences of training text (up to 384 tokens each)
    gen_sequences: int = 256  # on-policy completions of training prompts (the text drafting will see)
    held_out_sequences: int = 48  # on-policy completions of held-out prompts (for the held-out alpha)
    max_new: int = 64  # tokens per on-policy completion
    seq_len: int = 384  # tokens per teacher-forced sequence
    shard_sequences: int = 16  # sequences per data shard
    hidden: int = 1024  # units in the draft's SiLU layer
    kept: int = 4096  # tokens the draft's head covers
    steps: int = 3000  # Adam steps
    batch: int = 256
    lr: float = 1e-3
    unroll: int = 2  # steps each example is unrolled (the later ones from the draft's own prediction)
    kl_weight: float = 1.0
    tv_weight: float = 1.0
    ridge_init: bool = True  # start A, b from ridge regression (False: from zero, to see training work)
    data_positions: int = 0  # 0: the standard-library data above; N: the first N training positions at scale
    features: tuple = ()  # target blocks whose residual the draft also reads (EAGLE-3; needs data_positions)

    def data_key(self) -> str:
        """The data directory's key: the counts are not in it, since a shard's content does not depend
        on them (the plan for fewer sequences is a prefix of the plan for more; see shard_plan)."""
        fields = ("seed", "max_new", "seq_len", "shard_sequences")
        # "rng": each completion draws from a generator of its own (specref.apps.draft_data.make_shard)
        return _digest({"rng": "per completion", **{f: getattr(self, f) for f in fields}})

    def run_key(self) -> str:
        d = asdict(self)
        if not d["features"]:
            del d["features"]                     # the key of a plain draft's run, as before features existed
        return _digest(d)


# --quick measures alpha on the completions of the first 16 HumanEval prompts, not all 164: the held-out set is
# made once per machine, and all 164 completions take about two minutes on an idle 2-core Zen 4, more than --quick's
# whole minute.
QUICK_EVAL_PROMPTS = 16
QUICK = Config(tf_sequences=6, gen_sequences=6, held_out_sequences=4, max_new=24, seq_len=128,
               shard_sequences=4, hidden=64, kept=2048, steps=150, batch=64, lr=3e-3)


# The options that set a Config field (the rest are fixed by --quick or not).
OPTIONS = {"seed": "--seed", "steps": "--steps", "data_positions": "--data-positions", "hidden": "--hidden",
           "batch": "--batch", "lr": "--lr", "unroll": "--unroll", "features": "--features"}


def command_of(config: Config) -> str:
    """The train-draft command line that makes `config`: --quick or not, the seed, then each option whose field
    differs from that base (the command a run's report and its draft file record)."""
    quick = all(getattr(config, f) == getattr(QUICK, f) for f in asdict(config) if f not in OPTIONS)
    base = QUICK if quick else Config()
    words = ["python -m specref train-draft"] + (["--quick"] if quick else []) + [f"--seed {config.seed}"]
    for field, option in OPTIONS.items():
        value = getattr(config, field)
        if field != "seed" and value != getattr(base, field):
            words.append(f"{option} {','.join(map(str, value)) if field == 'features' else value}")
    return " ".join(words)


def _digest(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# ---- training ---------------------------------------------------------------------------------------

def kept_tokens(data: dict, n: int, V: int) -> np.ndarray:
    """The n tokens most frequent in the training text or as the target's argmax (ties: lower id), sorted."""
    counts = np.bincount(data["tok"], minlength=V) + np.bincount(data["amax"], minlength=V)
    order = np.lexsort((np.arange(V), -counts))                    # by count, then by id
    return np.sort(order[:n]).astype(np.int64)


def chains(data: dict, steps: int) -> np.ndarray:
    """Indices i such that positions i .. i + steps are in one sequence."""
    s = data["seq"]
    ok = np.ones(len(s) - steps, bool)
    for j in range(1, steps + 1):
        ok &= s[j:len(s) - steps + j] == s[:len(s) - steps]
    return np.flatnonzero(ok)


RIDGE_CHUNK = 200_000  # rows of the ridge initialisation's design matrix held at once


def ridge(data: dict, E: np.ndarray, lam: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Least squares with a ridge penalty lam * n: [s_{i-1}, (features_{i-1},) e(x_i), 1] -> s_i.

    X'X and X'Y are summed over chunks of RIDGE_CHUNK rows, so memory stays bounded at any data size (all of X
    in float64 is 18 GB at 2 000 000 positions)."""
    i = chains(data, 1)
    d = data["h"].shape[1]
    n_in = d + with_features(data, i[:1], data["h"][i[:1]].astype(np.float32)).shape[1]
    G, XY = np.zeros((n_in + 1, n_in + 1)), np.zeros((n_in + 1, d))
    for a in range(0, len(i), RIDGE_CHUNK):
        k = i[a:a + RIDGE_CHUNK]
        X = np.concatenate([with_features(data, k, data["h"][k].astype(np.float32)), E[data["tok"][k + 1]],
                            np.ones((len(k), 1), np.float32)], 1).astype(np.float64)   # [chunk, n_in + 1]
        G += X.T @ X
        XY += X.T @ data["h"][k + 1].astype(np.float64)                                 # [2d + 1, d]
    G[np.diag_indices_from(G)] += lam * len(i)
    W = np.linalg.solve(G, XY)
    return W[:-1].astype(np.float32), W[-1].astype(np.float32)


def target_probs(data: dict, i: np.ndarray, HN: np.ndarray) -> np.ndarray:  # -> [len(i), N]
    """The target's probabilities of the kept tokens at positions i (not renormalised)."""
    return np.exp(data["h"][i].astype(np.float32) @ HN - data["lse"][i][:, None])


class Adam:
    """Adam (Kingma and Ba) with bias correction; its state is plain arrays so it can be checkpointed."""

    def __init__(self, params: dict, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.b1, self.b2, self.eps, self.t = b1, b2, eps, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: dict, grads: dict, lr: float) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for k in params:
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * grads[k]
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * grads[k] * grads[k]
            params[k] -= (lr / c1) * self.m[k] / (np.sqrt(self.v[k] / c2) + self.eps)


def learning_rate(config: Config, step: int) -> float:
    """Linear warm-up over 100 steps, then linear decay to a tenth."""
    return config.lr * min(1.0, (step + 1) / 100) * (1 - 0.9 * step / config.steps)


def held_out_alpha(params: dict, held: dict, E: np.ndarray, HN: np.ndarray, ahead: int = 1) -> float:
    """Mean alpha at temperature 1 on the target's own held-out tokens, drafting `ahead` steps from a true state.

    The target's distribution is over the whole vocabulary; the draft's is 0 outside the kept tokens,
    so alpha = sum over kept tokens of min(p, q) (q restricted, not renormalised).
    """
    i = chains(held, ahead)
    i = i[held["kind"][i + ahead] == 1]                             # positions of sampled tokens
    state = held["h"][i].astype(np.float32)
    for j in range(1, ahead + 1):
        state = nd.net_forward(params, with_features(held, i, state), E[held["tok"][i + j]])[0]
    total = 0.0
    for a in range(0, len(i), 512):
        p = nd.softmax(state[a:a + 512] @ HN)
        total += float(np.minimum(p, target_probs(held, i[a:a + 512] + ahead, HN)).sum())
    return total / max(len(i), 1)


def train(config: Config, data: dict, held: dict, E: np.ndarray, HN: np.ndarray, checkpoint: pathlib.Path,
          log, seconds_limit: float | None = None) -> tuple[dict, list[dict]]:
    """Train (resuming from `checkpoint` if it exists); returns the parameters and the progress history."""
    rng = np.random.default_rng([config.seed, 7])
    d = E.shape[1]
    if checkpoint.is_file():
        params, opt, history = load_checkpoint(checkpoint, nd.PARAM_NAMES, rng)
        log(f"resuming from step {opt.t} ({checkpoint})")
    else:
        n_in = (2 + len(config.features)) * d                  # [s, features, e]
        A, b = ridge(data, E) if config.ridge_init else (np.zeros((n_in, d), np.float32), np.zeros(d, np.float32))
        init = np.random.default_rng([config.seed, 8])
        params = {"A": A, "b": b,
                  "W1": (init.standard_normal((n_in, config.hidden)) / np.sqrt(n_in)).astype(np.float32),
                  "b1": np.zeros(config.hidden, np.float32), "W2": np.zeros((config.hidden, d), np.float32)}
        opt = Adam(params)
        history = [{"step": 0, "held_out_alpha": held_out_alpha(params, held, E, HN),
                    "held_out_alpha_2": held_out_alpha(params, held, E, HN, 2), "loss": None}]
        log(f"step 0 (ridge initialisation): held-out alpha {history[0]['held_out_alpha']:.3f}, "
            f"2 ahead {history[0]['held_out_alpha_2']:.3f}")
    starts = chains(data, config.unroll)
    start, last_save, losses = time.perf_counter(), time.perf_counter(), []
    first_step = opt.t
    eval_every = max(config.steps // 12, 1)
    while opt.t < config.steps:
        sel = starts[rng.integers(0, len(starts), config.batch)]
        state = data["h"][sel].astype(np.float32)
        grads, loss = None, 0.0
        for j in range(1, config.unroll + 1):      # step j starts from step j-1's prediction (not differentiated)
            y, cache = nd.net_forward(params, with_features(data, sel, state), E[data["tok"][sel + j]])
            step_loss, dy, _ = nd.head_loss(y, HN, target_probs(data, sel + j, HN), config.kl_weight,
                                            config.tv_weight)
            g = nd.net_backward(params, cache, dy / config.unroll)
            grads = g if grads is None else {k: grads[k] + g[k] for k in g}
            loss += step_loss / config.unroll
            state = y
        opt.step(params, grads, learning_rate(config, opt.t))
        losses.append(loss)
        if opt.t % eval_every == 0 or opt.t == config.steps:
            rate = (opt.t - first_step) / (time.perf_counter() - start)
            entry = {"step": opt.t, "loss": float(np.mean(losses[-eval_every:])),
                     "held_out_alpha": held_out_alpha(params, held, E, HN),
                     "held_out_alpha_2": held_out_alpha(params, held, E, HN, 2)}
            history.append(entry)
            log(f"step {opt.t}/{config.steps}  loss {entry['loss']:.3f}  held-out alpha {entry['held_out_alpha']:.3f} "
                f"(2 ahead {entry['held_out_alpha_2']:.3f})  {rate:.1f} steps/s  "
                f"about {(config.steps - opt.t) / rate:.0f} s left")
        if time.perf_counter() - last_save > 30 or opt.t == config.steps:
            save_checkpoint(checkpoint, params, opt, rng, history)
            last_save = time.perf_counter()
        if seconds_limit is not None and time.perf_counter() - start > seconds_limit:
            save_checkpoint(checkpoint, params, opt, rng, history)
            log(f"stopped after {seconds_limit:.0f} s at step {opt.t}; run again to resume")
            break
    return params, history


def save_checkpoint(path: pathlib.Path, params: dict, opt: Adam, rng: np.random.Generator, history: list) -> None:
    """Everything a run needs to resume exactly: the parameters, Adam's moments and step, the batch generator's
    state and the progress history (written atomically; `load_checkpoint` reads it).  Any draft's parameters."""
    arrays = {"t": np.array(opt.t), "rng": np.array(json.dumps(rng.bit_generator.state)),
              "history": np.array(json.dumps(history))}
    for n in params:
        arrays["p_" + n], arrays["m_" + n], arrays["v_" + n] = params[n], opt.m[n], opt.v[n]
    write_npz(path, arrays)


def load_checkpoint(path: pathlib.Path, names, rng: np.random.Generator) -> tuple[dict, Adam, list]:
    """The parameters `names`, the optimiser and the history `save_checkpoint` wrote to `path`; sets `rng` to the
    state it had then."""
    with np.load(path) as z:
        state = {k: z[k] for k in z.files}
    params = {n: state["p_" + n] for n in names}
    opt = Adam(params)
    opt.m = {n: state["m_" + n] for n in names}
    opt.v = {n: state["v_" + n] for n in names}
    opt.t = int(state["t"])
    rng.bit_generator.state = json.loads(str(state["rng"]))
    return params, opt, json.loads(str(state["history"]))


def scale_data(root: pathlib.Path, positions: int, features=()) -> dict[str, dict]:
    """{"train", "held"}: the first training positions of the data at scale (`python -m specref draft-data`),
    `positions` of them rounded up to the end of a sequence, and its held-out shards; with the target's other
    layers' `features` ("feat", `specref.apps.draft_features`) if given."""
    from specref.apps.draft_build import BuildSpec, prefix
    train_paths, held_paths = prefix(root / "draft-data" / f"scale-{BuildSpec().key()}", positions)
    train, held = load_shards(train_paths, in_order=True), load_shards(held_paths)
    if features:
        from specref.apps.draft_features import load_features
        train["feat"], held["feat"] = load_features(train_paths, features), load_features(held_paths, features)
    cut = positions
    while cut < len(train["seq"]) and train["seq"][cut] == train["seq"][cut - 1]:
        cut += 1                                  # end at a sequence boundary
    return {"train": {k: v[:cut] for k, v in train.items()}, "held": held}


def run_training(model: SmolLM2, config: Config, cache_root: pathlib.Path, workers: int, log,
                 seconds_limit: float | None = None) -> nd.DraftWeights | None:
    """Data, then training; returns the draft (None if stopped early by seconds_limit)."""
    t0 = time.perf_counter()
    if config.data_positions:
        data = scale_data(cache_root, config.data_positions, config.features)
    else:
        data = make_data(model, config, cache_root / "draft-data" / config.data_key(), workers, log)
    train_data, held = data["train"], data["held"]
    log(f"data ready: {len(train_data['tok'])} training positions, {int(held['kind'].sum())} held-out sampled "
        f"positions ({time.perf_counter() - t0:.0f} s)")
    head = model.weights.head_matrix()                            # [d, V]
    E = np.ascontiguousarray(head.T)                              # [V, d]: the tied embeddings
    kept = kept_tokens(train_data, config.kept, head.shape[1])
    HN = np.ascontiguousarray(head[:, kept])
    checkpoint = cache_root / "draft-train" / f"{config.run_key()}.npz"
    params, history = train(config, train_data, held, E, HN, checkpoint, log, seconds_limit)
    if history[-1]["step"] < config.steps:
        return None
    meta = {"config": asdict(config), "history": history, "train_positions": int(len(train_data["tok"])),
            "held_out_sampled_positions": int(held["kind"].sum()),
            "command": command_of(config),
            "data": ("Python standard library functions" if not config.data_positions else
                     "the data at scale (python -m specref draft-data): functions of the standard library and "
                     "the installed packages") + " (teacher-forced and the target's own completions); no HumanEval"}
    from specref.apps.draft_calibrate import calibrate
    weights = calibrate(nd.DraftWeights(params, kept, meta), held, head, log)
    log(f"trained in {time.perf_counter() - t0:.1f} s")  # the time goes to the log, not the file: the same run, the same bytes
    return weights


def evaluate(model: SmolLM2, weights: nd.DraftWeights, root: pathlib.Path, n_prompts: int, log) -> dict:
    """alpha 1, 2 and 3 steps ahead on the target's own completions of HumanEval prompts (`draft_eval`), printed."""
    from specref.apps.draft_eval import alphas, load_eval_data, mlp_chain
    from specref.apps.humaneval.problems import load_problems
    data = load_eval_data(model, root, load_problems(progress=log), log, n_prompts, nd.feature_layers(weights.meta))
    head = model.weights.head_matrix()
    result = alphas(mlp_chain(weights.params, np.ascontiguousarray(head.T)), data,
                    np.ascontiguousarray(head[:, weights.kept]), weights.kept, scale=weights.scale)
    for setting in ("t1", "nucleus", "greedy"):
        log(f"alpha on the target's completions of {n_prompts} HumanEval prompts, {setting}: "
            + ", ".join(f"{k} ahead {v:.3f}" for k, v in result[setting].items()))
    return {"prompts": n_prompts, **{s: {str(k): v for k, v in result[s].items()} for s in result}}


# ---- the command ----------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a small configuration (about a minute)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--steps", type=options.integer(1, 10**7), default=None,
                        help=f"Adam steps (default {Config.steps}, quick {QUICK.steps})")
    parser.add_argument("--data-positions", metavar="N", type=options.integer(1, 10**9), default=None,
                        help="train on the first N training positions of the data at scale (made by "
                             "`python -m specref draft-data`) instead of the small standard-library data")
    parser.add_argument("--hidden", type=options.integer(1, 65536), default=None,
                        help=f"units in the draft's SiLU layer (default {Config.hidden})")
    parser.add_argument("--features", metavar="L,L,...", default=None,
                        help="also feed the draft the target's residual after these blocks (EAGLE-3's inputs; "
                             "needs --data-positions and `python -m specref.apps.draft_features` over that data)")
    parser.add_argument("--lr", type=options.real(0.0, 1.0, low_open=True),
                        default=None, help=f"Adam's peak learning rate (default {Config.lr})")
    parser.add_argument("--unroll", type=options.integer(1, 16), default=None,
                        help=f"steps each example is unrolled, the later ones from the draft's own predicted "
                             f"state (default {Config.unroll})")
    parser.add_argument("--batch", type=options.integer(1, 65536), default=None,
                        help=f"examples per Adam step (default {Config.batch})")
    parser.add_argument("--eval-prompts", metavar="N", type=options.integer(0, 164), default=None,
                        help="after training, measure alpha on the target's own completions of the first N "
                             f"HumanEval prompts (specref.apps.draft_eval; default all 164, with --quick "
                             f"{QUICK_EVAL_PROMPTS}; 0: skip)")
    parser.add_argument("--evaluate", metavar="DRAFT", type=existing_file, default=None,
                        help="train nothing: measure the draft file DRAFT on the held-out set (--eval-prompts) "
                             "and stop ('shipped' for the draft that ships with the repository)")
    parser.add_argument("--report", type=options.output_file(), default=None,
                        help="also write the run's measurements (configuration, history, alpha) as JSON here")
    parser.add_argument("--out", type=options.output_file(), default=None,
                        help="where to write the draft (default: draft.npz in the cache directory)")
    parser.add_argument("--install", action="store_true",
                        help="write the draft that ships with the repository (specref/smollm2/draft.npz)")
    parser.add_argument("--workers", type=options.integer(1, 64), default=max(os.cpu_count() or 1, 1),
                        help="processes that make the data, one model each (default: the number of cores)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="cache directory (default $SPECREF_CACHE or ~/.cache/specref)")
    # read by specref.__main__ before NumPy is imported (the training's large products use every core)
    parser.add_argument("--blas-threads", metavar="N", type=options.integer(0), default=0,
                        help="OpenBLAS threads for training (default 0: every core)")


def existing_file(value: str) -> str:
    """A draft file that exists, or 'shipped'."""
    if value != "shipped" and not pathlib.Path(value).expanduser().is_file():
        raise argparse.ArgumentTypeError(f"expected a draft file that exists, or 'shipped'; got {value!r}")
    return value


def eval_prompts(args) -> int:
    """How many HumanEval prompts' completions alpha is measured on: --eval-prompts, else 164, or with --quick
    QUICK_EVAL_PROMPTS."""
    if args.eval_prompts is not None:
        return args.eval_prompts
    return QUICK_EVAL_PROMPTS if args.quick else 164


def check_args(args) -> None:
    if args.evaluate is not None and args.eval_prompts == 0:
        raise ValueError("argument --evaluate: not allowed with --eval-prompts 0 (it would measure nothing)")
    if args.quick and args.data_positions:
        raise ValueError("argument --data-positions: not allowed with --quick (the quick configuration makes its "
                         "own small data)")
    if args.features is not None and not args.data_positions:
        raise ValueError("argument --features: needs --data-positions (the features are kept for the data at scale)")
    if args.features is not None:
        from specref.apps.draft_features import parse_layers
        args.features = parse_layers(args.features)       # the form here; the count once the model is loaded
    if args.out is not None and args.install:
        raise ValueError("argument --out: not allowed with --install (both name the output file; give one)")


def config_of(args) -> Config:
    """The Config a checked command line asks for (`command_of` gives the command line of a Config)."""
    config = QUICK if args.quick else Config()
    chosen = {"steps": args.steps, "data_positions": args.data_positions, "hidden": args.hidden, "batch": args.batch,
              "lr": args.lr, "unroll": args.unroll}
    config = replace(config, seed=args.seed, **{k: v for k, v in chosen.items() if v})
    return config if args.features is None else replace(config, features=tuple(args.features))


def run(args) -> int:
    config = config_of(args)
    root = cache_root(args.cache_dir)
    out = nd.SHIPPED_PATH if args.install else pathlib.Path(args.out) if args.out else root / "draft.npz"
    model = load_fast(cache_dir=args.cache_dir, measure=True)
    log = lambda text: print(text, flush=True)  # noqa: E731
    if config.features and max(config.features) > model.config.n_layers:
        print(f"error: argument --features: the target has {model.config.n_layers} blocks; got {list(config.features)}")
        return 2
    n_eval = eval_prompts(args)
    if args.evaluate is not None:
        weights = nd.load_draft(None if args.evaluate == "shipped" else args.evaluate, model.config.vocab_size)
        result = evaluate(model, weights, root, n_eval, log)
        if args.report:
            with replacing(args.report, "w") as f:
                json.dump({"draft": args.evaluate, "meta": weights.meta, "humaneval_alpha": result}, f, indent=1)
            print(f"wrote {args.report}")
        return 0
    start = time.perf_counter()
    weights = run_training(model, config, root, args.workers, log)
    if n_eval:
        weights.meta["humaneval_alpha"] = evaluate(model, weights, root, n_eval, log)
    sha = nd.save_draft(out, weights)
    last = weights.meta["history"][-1]
    print(f"wrote {out} (SHA-256 {sha}); held-out alpha {last['held_out_alpha']:.3f}, "
          f"2 ahead {last['held_out_alpha_2']:.3f}")
    if args.report:
        with replacing(args.report, "w") as f:
            json.dump(dict(weights.meta, draft_file=str(out), draft_sha256=sha,
                           seconds=round(time.perf_counter() - start, 1)), f, indent=1)
        print(f"wrote {args.report}")
    if args.install:
        print(f"record it: SHIPPED_SHA256 = \"{sha}\" in specref/smollm2/draft.py")
    return 0

