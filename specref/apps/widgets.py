"""The speedup model's interactive panel: plain callbacks plus the ipywidgets wiring.

Letters are Leviathan et al. 2023's (section 3), as in `specref.speedup`:
alpha  acceptance rate (Chen's "accepted fraction"; sum_x min(p, q))
gamma  draft tokens per target call (Chen's K)
c      time of one draft step / time of one target decode step  (Def. 3.7)
c_hat  arithmetic operations per token, draft / target  (Def. 3.10)
score_slope  extra cost of each additional token scored in one target call, in decode
       steps: a call that scores gamma + 1 tokens costs 1 + score_slope * gamma decode
       steps.  Leviathan's model assumes 0 (parallel scoring is free); on a CPU it is not.

`speedup_panel` and `plot_speedup` are what the sliders call; tests call them directly.
`interactive_speedup` builds the sliders for notebook 04.  `highlight_html` and
`side_by_side_html` render generated text for notebook 05 (accepted drafts highlighted).
"""

from __future__ import annotations

import codecs
import html

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np

from specref import speedup

GAMMA_MAX = 16  # the panel's gamma axis runs 1..GAMMA_MAX


def score_cost(gamma, score_slope: float):
    """Cost of one target call scoring gamma + 1 tokens, in decode steps: 1 + score_slope * gamma."""
    if score_slope < 0:
        raise ValueError(f"score_slope must be >= 0 (extra decode steps per extra scored token), got {score_slope}")
    return 1.0 + score_slope * np.asarray(gamma, dtype=np.float64)


def speedup_panel(alpha: float, gamma: int, c: float, c_hat: float, score_slope: float = 0.0,
                  gamma_max: int = GAMMA_MAX) -> dict:
    """Every number the panel shows for one setting of the sliders.

    Keys: expected_tokens (Eq. 1), walltime_improvement (Thm 3.8), operations_factor
    (Thm 3.11), optimal_gamma and its improvement (section 3.5, searched in 1..gamma_max),
    lower_bound (Cor. 3.9, (1 + alpha) / (1 + c); None unless alpha > c), score_cost and
    walltime_improvement_measured (Thm 3.8 with the call's real cost), and the optimal
    gamma under that measured cost.
    """
    if int(gamma) != gamma or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma}")
    gamma = int(gamma)
    s = float(score_cost(gamma, score_slope))
    gammas = np.arange(1, gamma_max + 1)
    measured = speedup.walltime_improvement_measured(alpha, gammas, c, score_cost(gammas, score_slope))
    g_opt = speedup.optimal_gamma(alpha, c, gamma_max)
    return {
        "alpha": float(alpha), "gamma": gamma, "c": float(c), "c_hat": float(c_hat), "score_slope": float(score_slope),
        "expected_tokens": float(speedup.expected_tokens(alpha, gamma)),
        "walltime_improvement": float(speedup.walltime_improvement(alpha, gamma, c)),
        "operations_factor": float(speedup.operations_factor(alpha, gamma, c_hat)),
        "optimal_gamma": g_opt,
        "optimal_improvement": float(speedup.walltime_improvement(alpha, g_opt, c)),
        "lower_bound": float(speedup.improvement_lower_bound(alpha, c)) if alpha > c else None,
        "score_cost": s,
        "walltime_improvement_measured": float(speedup.walltime_improvement_measured(alpha, gamma, c, s)),
        "optimal_gamma_measured": int(gammas[np.argmax(measured)]),
        "optimal_improvement_measured": float(measured.max()),
    }


def format_panel(d: dict) -> str:
    """The panel's numbers as a few lines of text."""
    bound = f"{d['lower_bound']:.3f}x" if d["lower_bound"] is not None else "none (alpha <= c)"
    return "\n".join([
        f"alpha={d['alpha']:.2f}  gamma={d['gamma']}  c={d['c']:.3f}  c_hat={d['c_hat']:.3f}  score_slope={d['score_slope']:.2f}",
        f"expected tokens per target call (Eq. 1):          {d['expected_tokens']:.3f}",
        f"walltime improvement (Thm 3.8):                   {d['walltime_improvement']:.3f}x",
        f"arithmetic operations factor (Thm 3.11):          {d['operations_factor']:.3f}x",
        f"optimal gamma (sec. 3.5):                         {d['optimal_gamma']}  -> {d['optimal_improvement']:.3f}x",
        f"Cor. 3.9 bound at gamma=1, (1+alpha)/(1+c):       {bound}",
        f"scoring gamma+1 tokens costs                      {d['score_cost']:.2f} decode steps",
        f"walltime improvement with that cost:              {d['walltime_improvement_measured']:.3f}x",
        f"optimal gamma with that cost:                     {d['optimal_gamma_measured']}  -> {d['optimal_improvement_measured']:.3f}x",
    ])


def plot_speedup(ax, alpha: float, gamma: int, c: float, score_slope: float = 0.0, gamma_max: int = GAMMA_MAX):
    """Walltime improvement against gamma for one alpha and c: Leviathan's Thm 3.8 and the
    measured-cost version, the chosen gamma and both optima marked, 1x (no gain) dashed."""
    gammas = np.arange(1, gamma_max + 1)
    ideal = speedup.walltime_improvement(alpha, gammas, c)
    real = speedup.walltime_improvement_measured(alpha, gammas, c, score_cost(gammas, score_slope))
    ax.plot(gammas, ideal, "o-", ms=3, label="Thm 3.8 (scoring gamma+1 tokens costs 1 step)")
    if score_slope > 0:
        ax.plot(gammas, real, "s-", ms=3, label=f"scoring costs 1 + {score_slope:.2f} gamma steps")
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    ax.axvline(gamma, color="k", lw=0.8, alpha=0.5)
    d = speedup_panel(alpha, gamma, c, 0.0, score_slope, gamma_max)
    ax.plot([d["optimal_gamma"]], [d["optimal_improvement"]], "*", ms=12, color="C0")
    if score_slope > 0:
        ax.plot([d["optimal_gamma_measured"]], [d["optimal_improvement_measured"]], "*", ms=12, color="C1")
    ax.set_xlabel("gamma (draft tokens per target call; Chen's K)")
    ax.set_ylabel("walltime improvement over ArS (x)")
    ax.set_title(f"Leviathan's letters: alpha={alpha:.2f}, c={c:.3f}")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return ax


def _show(alpha, gamma, c, c_hat, score_slope):
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    plot_speedup(ax, alpha, gamma, c, score_slope)
    plt.show()
    print(format_panel(speedup_panel(alpha, gamma, c, c_hat, score_slope)))


def interactive_speedup(alpha: float = 0.7, gamma: int = 4, c: float = 0.05, c_hat: float = 0.05,
                        score_slope: float = 0.0):
    """Sliders for alpha, gamma, c, c_hat and score_slope driving `plot_speedup` and `speedup_panel`."""
    style = {"description_width": "initial"}
    return ipywidgets.interactive(
        _show,
        alpha=ipywidgets.FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01, description="alpha", style=style),
        gamma=ipywidgets.IntSlider(value=gamma, min=1, max=GAMMA_MAX, description="gamma", style=style),
        c=ipywidgets.FloatSlider(value=c, min=0.0, max=1.0, step=0.005, readout_format=".3f", description="c", style=style),
        c_hat=ipywidgets.FloatSlider(value=c_hat, min=0.0, max=1.0, step=0.005, readout_format=".3f",
                                     description="c_hat", style=style),
        score_slope=ipywidgets.FloatSlider(value=score_slope, min=0.0, max=1.0, step=0.01,
                                           description="score_slope", style=style),
    )


def highlight_html(tokenizer, pieces) -> str:
    """HTML for a generated text: tokens that were drafted and accepted on a green background.

    `pieces` is a list of (token ids appended by one loop, number of them that were accepted
    drafts); the accepted drafts come first in each loop, the target's own token last.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two tokens
    out = []
    for tokens, n_accepted in pieces:
        for i, token in enumerate(tokens):
            text = html.escape(decoder.decode(tokenizer.decode_bytes([int(token)])))
            out.append(f'<span style="background:#b6e3b6">{text}</span>' if i < n_accepted else text)
    return '<pre style="white-space:pre-wrap;font-size:12px">' + "".join(out) + "</pre>"


def side_by_side_html(columns: dict) -> str:
    """An HTML table with one column per (title -> HTML body), e.g. ArS next to SpS."""
    head = "".join(f"<th style='text-align:left'>{html.escape(t)}</th>" for t in columns)
    body = "".join(f"<td style='vertical-align:top;width:{100 // len(columns)}%'>{b}</td>" for b in columns.values())
    return f"<table><tr>{head}</tr><tr>{body}</tr></table>"
