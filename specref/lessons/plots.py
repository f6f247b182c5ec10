"""The notebooks' plots and the small computations behind them, with no model in sight.

Everything here imports only NumPy, SciPy (through `specref.proof.stats`) and specref's core
(`specref.mrs`, `specref.sampling`, `specref.speedup`, `specref.proof`): never `specref.smollm2`,
gguf or `specref.apps`, so notebooks 01-04, which need no model, do not load the model's code
(tests/apps/test_notebooks.py checks it in a fresh interpreter).  matplotlib is imported only by
the functions that need it, when they run; the others draw on the axes or figure they are given.

`specref.apps.figures` (`python -m specref figures`) writes the README's figures with these
same functions, and keeps what needs the model (Chen et al.'s Figure 1, measured on SmolLM2).

Letters: distributions follow Chen et al. 2023 (p = draft, q = target, K = lookahead);
the speedup plots follow Leviathan et al. 2023 section 3 (alpha, gamma = K, c, c_hat),
as `specref.speedup` does.  Each plot says which.
"""

from __future__ import annotations

import os
import platform

import numpy as np

from specref import mrs, sampling, speedup
from specref.proof import laws, stats
from specref.proof.bugs import broken


def machine_label() -> str:
    """CPU model, core count and NumPy version, for the titles of measured plots."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, NumPy {np.__version__}"


# ---------------------------------------------------------------- Theorem 1 (Chen et al.)

def plot_overlap(ax, p: np.ndarray, q: np.ndarray, names=None):  # [V], [V]
    """Theorem 1 as a picture: q(x) split into min(p, q) (draft accepted, hatched over p)
    and (1 - beta) * residual(x) (resampled after a rejection), with p as an outline; beta = sum min(p, q)
    is the acceptance probability for this pair of rows (Leviathan's beta; his alpha averages it over prefixes)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    V = len(p)
    x = np.arange(V)
    names = names if names is not None else [str(i) for i in range(V)]
    accepted = np.minimum(p, q)  # [V] P(draft x and accept it)
    beta = accepted.sum()
    resampled = (1.0 - beta) * mrs.residual(p, q)  # [V] P(reject, then draw x)
    ax.bar(x, accepted, width=0.6, color="C2", label=f"min(p, q): drafted and accepted (sum beta = {beta:.3f})")
    ax.bar(x, resampled, width=0.6, bottom=accepted, color="C1",
           label=f"(1 - beta) residual: resampled after a rejection (sum {1 - beta:.3f})")
    ax.bar(x, p, width=0.8, fill=False, edgecolor="C0", lw=1.5, ls="--", label="p (draft)")
    ax.hlines(q, x - 0.4, x + 0.4, colors="k", lw=2, label="q (target) = the sum of the two")  # a line, also in the legend
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.6 * max(p.max(), q.max()))  # headroom for the legend
    ax.set_xlabel("token x")
    ax.set_ylabel("probability")
    ax.set_title("Chen et al. Theorem 1: P(X = x) = min(p, q) + (1 - beta) (q - p)+ = q(x)")
    ax.legend(fontsize=7, loc="upper right")
    return ax


# ---------------------------------------------------------------- speedup model (Leviathan et al.)

SURFACE_GAMMA_MAX = 16  # the surface's gamma axis runs 1..16, as the sliders of notebook 04 do


def plot_speedup_surface(ax, c: float, gamma_max: int = SURFACE_GAMMA_MAX, vmax: float = 6.0):
    """Theorem 3.8's walltime improvement over alpha x gamma for one c, its 1x, 2x, 3x and 4x
    contours labelled on the lines, and the optimal gamma per alpha where it lies inside the grid
    (Leviathan's letters)."""
    alphas = np.linspace(0.0, 0.99, 100)
    gammas = np.arange(1, gamma_max + 1)
    A, G = np.meshgrid(alphas, gammas)  # [gamma_max, 100] each
    W = speedup.walltime_improvement(A, G, c)  # [gamma_max, 100]
    im = ax.pcolormesh(alphas, gammas, W, shading="nearest", cmap="viridis", vmin=0.0, vmax=vmax)
    for levels, style, width in (([1.0], "-", 1.5), ([2.0, 3.0, 4.0], ":", 0.8)):
        if W.min() < levels[-1] < W.max() or W.min() < levels[0] < W.max():
            lines = ax.contour(alphas, gammas, W, levels=levels, colors="w", linewidths=width, linestyles=style)
            ax.clabel(lines, fmt=lambda v: f"{v:g}x", fontsize=7, colors="w")
    if c > 0:
        best = np.array([speedup.optimal_gamma(a, c, gamma_max) for a in alphas], dtype=float)
        # where gamma_max + 1 would do better, the search stopped at the grid's edge: not an optimum
        beyond = speedup.walltime_improvement(alphas, gamma_max + 1, c) > speedup.walltime_improvement(alphas, gamma_max, c)
        best[beyond] = np.nan
        ax.plot(alphas, best, "r-", lw=1.2, label="optimal gamma (sec. 3.5)")
        ax.legend(fontsize=7, loc="upper left")
        ax.set_title(f"c = {c:g}")
    else:
        ax.set_title("c = 0: never below 1x; more gamma always gains", fontsize=9)
    ax.set_xlabel("alpha (acceptance rate)")
    ax.set_ylabel("gamma (draft tokens per call)")
    ax.set_yticks([1, 4, 8, 12, 16] if gamma_max == 16 else gammas[:: max(1, gamma_max // 4)])
    return im


def _log_ticks(ax, axis: str, ticks) -> None:
    """Plain-number labels at `ticks` on a log axis (matplotlib labels only the powers of the base)."""
    from matplotlib.ticker import FixedLocator, NullLocator
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_minor_locator(NullLocator())
    (ax.set_yticks if axis == "y" else ax.set_xticks)(ticks, [f"{t:g}" for t in ticks])


def plot_optimal_gamma(ax, cs=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5), gamma_max: int = 64):
    """Leviathan Figure 3 style: the optimal gamma against alpha, one curve per c."""
    alphas = np.linspace(0.01, 0.99, 197)
    for c in cs:
        g = np.array([speedup.optimal_gamma(a, c, gamma_max) for a in alphas], dtype=float)
        g[speedup.walltime_improvement(alphas, g, c) <= 1.0] = np.nan  # no gain: no gamma helps
        ax.step(alphas, g, where="mid", label=f"c = {c:g}")
    ax.set_yscale("log", base=2)
    _log_ticks(ax, "y", [1, 2, 4, 8, 16, 32, 64])
    ax.set_xlabel("alpha (acceptance rate)")
    ax.set_ylabel("optimal gamma")
    ax.set_title("Optimal gamma (Leviathan sec. 3.5, Fig. 3)")
    ax.legend(fontsize=7)
    return ax


def plot_optimal_improvement(ax, cs=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5), gamma_max: int = 64):
    """Walltime improvement at the optimal gamma against alpha, one curve per c, and the
    c = 0 ceiling 1 / (1 - alpha)."""
    alphas = np.linspace(0.01, 0.99, 197)
    for c in cs:
        w = [speedup.walltime_improvement(a, speedup.optimal_gamma(a, c, gamma_max), c) for a in alphas]
        ax.plot(alphas, w, label=f"c = {c:g}")
    ax.plot(alphas, 1.0 / (1.0 - alphas), "k:", label="c = 0, gamma -> inf: 1 / (1 - alpha)")
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_ylim(0.8, 20)
    _log_ticks(ax, "y", [1, 1.5, 2, 3, 5, 10, 20])
    ax.set_xlabel("alpha (acceptance rate)")
    ax.set_ylabel("walltime improvement at optimal gamma (x)")
    ax.set_title("Thm 3.8 at the optimal gamma")
    ax.legend(fontsize=7)
    return ax


def constant_pair(alpha: float, V: int = 3):
    """A draft and a target whose next-token rows never change and overlap by exactly alpha:
    p = [alpha, 0, 1 - alpha], q = [alpha, 1 - alpha, 0].  Every draft token is accepted
    independently with probability alpha: Leviathan's iid assumption holds exactly."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    p = np.zeros(V)
    q = np.zeros(V)
    p[0] = q[0] = alpha
    q[1] = 1.0 - alpha
    p[2] = 1.0 - alpha
    return laws.MarkovChain(np.tile(p, (V, 1))), laws.MarkovChain(np.tile(q, (V, 1)))


def simulate_tokens_per_call(alpha: float, gamma: int, loops: int, rng: np.random.Generator) -> np.ndarray:  # -> [loops]
    """Tokens produced by each of `loops` SpS iterations (specref.sampling) on `constant_pair(alpha)`:
    its accepted drafts plus the target's own token, read from the loop's steps (`sampling.Step`)."""
    draft, target = constant_pair(alpha)
    accepted = []

    def on_step(step: sampling.Step) -> bool:
        accepted.append(step.n_accepted)
        return len(accepted) == loops  # True ends the run

    sampling.speculative_sampling(np.array([0]), draft, target, loops * (gamma + 1), gamma, rng, on_step=on_step)
    return np.array(accepted) + 1


def plot_expected_tokens(ax, gammas=(1, 2, 3, 5, 7, 10), simulated: dict | None = None):
    """Leviathan Figure 2 style: Eq. 1 against alpha per gamma; `simulated` maps
    (alpha, gamma) -> (mean, standard error) of measured tokens per call, drawn as points."""
    alphas = np.linspace(0.0, 0.99, 100)
    for i, g in enumerate(gammas):
        ax.plot(alphas, speedup.expected_tokens(alphas, g), color=f"C{i}", label=f"gamma = {g}")
        if simulated:
            pts = [(a, m, se) for (a, gg), (m, se) in simulated.items() if gg == g]
            if pts:
                a, m, se = map(np.array, zip(*pts))
                ax.errorbar(a, m, yerr=3 * se, fmt="o", ms=3, color=f"C{i}", capsize=2)
    ax.set_xlabel("alpha (acceptance rate)")
    ax.set_ylabel("tokens per target call")
    ax.set_title("Eq. 1 (lines) vs SpS with iid acceptance (points, +-3 s.e.)" if simulated else "Eq. 1")
    ax.legend(fontsize=7)
    return ax


def simulate_expected_tokens(alphas, gammas, loops: int, seed: int = 0) -> dict:
    """(alpha, gamma) -> (mean, standard error) of tokens per call over `loops` SpS iterations."""
    rng = np.random.default_rng(seed)
    out = {}
    for g in gammas:
        for a in alphas:
            t = simulate_tokens_per_call(a, g, loops, rng)
            out[(float(a), int(g))] = (float(t.mean()), float(t.std(ddof=1) / np.sqrt(len(t))))
    return out


# ---------------------------------------------------------------- chi-square tests

def power_case() -> tuple[np.ndarray, np.ndarray]:  # -> p [2, 3], q [3, 3]
    """The verify case of the power study: K = 2 drafts over V = 3 tokens, chosen so that
    every bug of specref.proof.bugs.broken changes the law: alpha = 0.9 at both positions (the bonus
    token is common), and the bonus row q[2] differs from q[1]."""
    p = np.array([[0.5, 0.3, 0.2],
                  [0.2, 0.5, 0.3]])
    q = np.array([[0.4, 0.4, 0.2],
                  [0.3, 0.5, 0.2],
                  [0.1, 0.2, 0.7]])
    return p, q


def verify_samplers() -> dict:
    """The correct verify and every broken variant of specref.proof.bugs.broken, by name."""
    return {"verify (correct)": mrs.verify, **broken.BROKEN}


def verify_pvalues(verify, p: np.ndarray, q: np.ndarray, n: int, reps: int, seed: int,
                   on_test=None) -> np.ndarray:  # -> [reps]
    """Chi-square p-values of `reps` independent samples of n verify outputs against the exact law;
    `on_test()`, if given, is called after each test (progress)."""
    law = laws.verify_law(p, q)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(reps):
        out.append(stats.chi_square_gof(stats.sample_verify(verify, p, q, n, rng), law)[2])
        if on_test is not None:
            on_test()
    return np.array(out)


def plot_pvalue_histogram(ax, pv: np.ndarray, name: str, color: str = "C0"):
    """One sampler's p-values in 20 bins: flat for a correct sampler, piled at 0 for a broken one."""
    ax.hist(pv, bins=np.linspace(0, 1, 21), color=color)
    ax.axhline(len(pv) / 20, color="k", ls=":", lw=1)
    ax.set_title(name, fontsize=8)
    ax.set_xlim(0, 1)
    ax.tick_params(labelsize=7)
    return ax


def power_curves(p, q, ns, reps: int, seed: int = 1, on_test=None) -> dict:
    """name -> rejection rate at stats.LEVEL for each n in ns (the false-alarm rate for the correct one)."""
    return {name: np.array([np.mean(verify_pvalues(f, p, q, n, reps, seed + n, on_test) < stats.LEVEL) for n in ns])
            for name, f in verify_samplers().items()}


MARKERS = "sovD^<>pPX*h"


def plot_power(ax, ns, power: dict, reps: int):
    """Rejection rate at the suite's level against the number of samples, per sampler.  Curves that
    coincide (several broken samplers reach 1 at the same n) are shifted sideways a little, each
    with its own marker, so that none hides another; the ticks are the sample sizes used."""
    k = len(power)
    for i, (name, r) in enumerate(power.items()):
        shift = 1.0 + 0.035 * (i - (k - 1) / 2)  # multiplicative: the x axis is logarithmic
        ax.plot(np.asarray(ns) * shift, r, marker=MARKERS[i % len(MARKERS)], ls="--" if i == 0 else "-",
                ms=6, lw=1.2, mfc="none" if i % 2 else None, color=f"C{i % 10}", label=name)
    ax.axhline(stats.LEVEL, color="k", ls=":", lw=1, label=f"level {stats.LEVEL:g} (false-alarm rate)")
    ax.set_xscale("log")
    _log_ticks(ax, "x", list(ns))
    ax.set_xlabel("n, verify outputs per test (points of one n are spread sideways to stay visible)")
    ax.set_ylabel(f"fraction of {reps} tests\nrejecting at p < {stats.LEVEL:g}")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Power of the chi-square test")
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


# ---------------------------------------------------------------- chi-square tests: the power study's figure

def chi_square_power_sizes(quick: bool) -> dict:
    """Sample sizes of the p-value and power study (quick: CI; otherwise the README's figure)."""
    if quick:
        return {"n_hist": 800, "reps_hist": 20, "ns": (50, 200, 800), "reps_power": 10}
    return {"n_hist": 800, "reps_hist": 200, "ns": (25, 50, 100, 200, 400, 800, 1600), "reps_power": 60}


def chi_square_power_tests(n_hist: int, reps_hist: int, ns, reps_power: int) -> int:
    """How many chi-square tests `plot_chi_square_power` runs with these sizes (for a progress line)."""
    return len(verify_samplers()) * (reps_hist + len(ns) * reps_power)


def plot_chi_square_power(fig, n_hist: int, reps_hist: int, ns, reps_power: int, on_test=None):
    """Into `fig`: one p-value histogram per sampler (correct verify, then specref.proof.bugs.broken) on
    `power_case()`, and below them the power curves.  Returns (p-values by name, power by name).
    `on_test()`, if given, is called after each chi-square test (progress)."""
    p, q = power_case()
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.1, 1])
    samplers = verify_samplers()
    columns = -(-len(samplers) // 2)  # two rows, one panel per sampler
    axes = top.subplots(2, columns, sharex=True).ravel()
    pvalues = {}
    for i, (ax, (name, f)) in enumerate(zip(axes, samplers.items())):
        pvalues[name] = verify_pvalues(f, p, q, n_hist, reps_hist, seed=7, on_test=on_test)
        plot_pvalue_histogram(ax, pvalues[name], name, f"C{i}")
    for ax in axes[len(samplers):]:
        ax.set_visible(False)
    for ax in axes[columns:]:
        ax.set_xlabel("chi-square p-value", fontsize=8)
    for ax in axes[::columns]:
        ax.set_ylabel(f"count of {reps_hist} tests", fontsize=8)
    top.suptitle(f"p-values of {reps_hist} tests of n = {n_hist} verify outputs each against the exact law "
                 f"(dotted: uniform); Chen's letters, K = 2 drafts, V = 3 tokens", fontsize=9)
    power = power_curves(p, q, ns, reps_power, on_test=on_test)
    plot_power(bottom.subplots(), ns, power, reps_power)
    return pvalues, power


# ---------------------------------------------------------------- Chen et al. Figure 1: plots of the measured records

def predicted_vs_measured(records: list[dict], costs: dict) -> list[dict]:
    """Leviathan Table 4 style, per K of `specref.apps.figures.measure_chen_figure1` records: the mean
    alpha, c (draft step / decode step), the measured cost of scoring K + 1 tokens
    (`specref.apps.costs.measure_costs`), Thm 3.8 with that cost, and the measured speedup (ArS
    seconds per token / SpS seconds per token, same prompts and runs).

    Scoring K + 1 tokens cannot cost less than one decode step, so a measured ratio below 1 is
    timing noise: the row says so (`score_noise`) and its prediction uses 1 (`score_cost`), so that
    noise never predicts more speedup than free scoring; `score_measured` keeps what was measured."""
    def mean(key, K):
        return float(np.mean([key(r) for r in records if r["K"] == K]))

    ars = mean(lambda r: r["seconds"] / r["tokens"], 0)
    rows = []
    for K in sorted({r["K"] for r in records if r["K"] > 0}):
        alpha = mean(lambda r: r["alpha"], K)
        c = mean(lambda r: r["draft_ms"], K) / costs["decode_ms_per_token"]
        measured_score = costs["score_ratio"].get(K, float("nan"))
        score, noise = (speedup.plausible_score_cost(measured_score) if np.isfinite(measured_score)
                        else (measured_score, False))
        rows.append({"K": K, "alpha": alpha, "c": c, "score_measured": measured_score, "score_noise": noise,
                     "score_cost": score,
                     "predicted_ideal": float(speedup.walltime_improvement(min(alpha, 1.0), K, c)),
                     "predicted": float(speedup.walltime_improvement_measured(min(alpha, 1.0), K, c, score)),
                     "measured": ars / mean(lambda r: r["seconds"] / r["tokens"], K)})
    return rows


def loop_split(records: list[dict]) -> list[dict]:
    """Per K of `specref.apps.figures.measure_chen_figure1` records (K = 0 is ArS): the mean time of
    one loop and the draft's share of it (K draft calls per loop), in milliseconds."""
    out = []
    for K in sorted({r["K"] for r in records}):
        rs = [r for r in records if r["K"] == K]
        out.append({"K": K, "loop_ms": float(np.mean([1000 * r["seconds"] / r["loops"] for r in rs])),
                    "draft_ms": float(np.mean([K * r["draft_ms"] for r in rs]))})
    return out


def plot_chen_figure1(axes, records: list[dict], N: int):
    """Chen et al. Figure 1's three panels from `specref.apps.figures.measure_chen_figure1` records: time per N tokens,
    tokens per loop / (K + 1), time per loop, each against K (mean +- standard deviation)."""
    Ks = sorted({r["K"] for r in records if r["K"] > 0})

    def stat(key, K):
        v = np.array([key(r) for r in records if r["K"] == K])
        return v.mean(), (v.std(ddof=1) if len(v) > 1 else 0.0)

    per_N = [stat(lambda r: r["seconds"] / r["tokens"] * N, K) for K in Ks]
    ars, ars_sd = stat(lambda r: r["seconds"] / r["tokens"] * N, 0)
    a, b, c = axes
    a.errorbar(Ks, [m for m, _ in per_N], yerr=[s for _, s in per_N], fmt="o-", capsize=3, label="SpS, prompt lookup")
    a.axhline(ars, color="k", ls="--", label=f"ArS ({ars:.2f} s)")
    a.axhspan(ars - ars_sd, ars + ars_sd, color="k", alpha=0.1)
    a.set_ylabel(f"seconds per {N} tokens")
    a.set_title(f"time to generate {N} tokens")
    a.legend(fontsize=8)
    eff = [stat(lambda r: r["tokens"] / r["loops"] / (r["K"] + 1), K) for K in Ks]
    b.errorbar(Ks, [m for m, _ in eff], yerr=[s for _, s in eff], fmt="o-", capsize=3)
    b.set_ylabel("tokens per loop / (K + 1)")
    b.set_title("accepted drafts + 1, over K + 1")
    b.set_ylim(0, 1.05)
    loop = [stat(lambda r: r["seconds"] / r["loops"] * 1000, K) for K in Ks]
    ars_loop = stat(lambda r: r["seconds"] / r["loops"] * 1000, 0)[0]
    c.errorbar(Ks, [m for m, _ in loop], yerr=[s for _, s in loop], fmt="o-", capsize=3, label="SpS loop")
    c.axhline(ars_loop, color="k", ls="--", label=f"ArS step ({ars_loop:.0f} ms)")
    c.set_ylabel("milliseconds per loop")
    c.set_title("time per draft-and-verify loop")
    c.legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("K (draft tokens per loop)")
        ax.set_xticks(Ks)
    return axes
