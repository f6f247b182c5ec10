"""The speedup model's interactive panel: plain callbacks plus the ipywidgets wiring.

Letters are Leviathan et al. 2023's (section 3), as in `specref.speedup`:
alpha  acceptance rate (Chen's "accepted fraction"; sum_x min(p, q))
gamma  draft tokens per target call (Chen's K)
c      time of one draft step / time of one target decode step  (Def. 3.7)
c_hat  arithmetic operations per token, draft / target  (Def. 3.10)
score_slope  extra cost of each additional token scored in one target call, in decode
       steps: a call that scores gamma + 1 tokens costs 1 + score_slope * gamma decode
       steps.  Leviathan's model assumes 0 (parallel scoring is free); on a CPU it is not.

`speedup_panel`, `plot_speedup` and `plot_operations` are what the sliders call; tests call
them directly.
`interactive_speedup` builds the sliders for notebook 04; `panel_outputs` is what they show (a
`SpeedupPanel` hands it to its Output widget as state rather than capturing printed output, which
could hang a headless run: see `SpeedupPanel`).  `interactive_overlap` is notebook 01's sliders for
the rows p and q (`overlap_rows` normalises them and gives alpha = sum min(p, q); `overlap_outputs`
draws Theorem 1's picture), wired the same way.  `highlight_html` and
`side_by_side_html` render generated text for notebook 05 (accepted drafts highlighted).
"""

from __future__ import annotations

import base64
import codecs
import html
import io
import traceback

import ipywidgets
import numpy as np

from specref import speedup
from specref.lessons import plots

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


def at_search_limit(alpha: float, c: float, gamma_max: int = GAMMA_MAX, score_slope: float = 0.0) -> bool:
    """True when gamma_max + 1 would beat gamma_max: the searched optimum is then the search's limit, not an optimum."""
    g = np.array([gamma_max, gamma_max + 1])
    w = speedup.walltime_improvement_measured(alpha, g, c, score_cost(g, score_slope))
    return bool(w[1] > w[0])


def format_panel(d: dict) -> str:
    """The panel's numbers as a few lines of text."""
    bound = f"{d['lower_bound']:.3f}x" if d["lower_bound"] is not None else "none (alpha <= c)"
    limit = f"  (gamma = {GAMMA_MAX} is the slider's limit; a larger gamma would gain more)"
    ideal_limit = limit if d["optimal_gamma"] == GAMMA_MAX and at_search_limit(d["alpha"], d["c"]) else ""
    measured_limit = limit if d["optimal_gamma_measured"] == GAMMA_MAX and at_search_limit(
        d["alpha"], d["c"], score_slope=d["score_slope"]) else ""
    return "\n".join([
        f"alpha={d['alpha']:.2f}  gamma={d['gamma']}  c={d['c']:.3f}  c_hat={d['c_hat']:.3f}  score_slope={d['score_slope']:.2f}",
        f"expected tokens per target call (Eq. 1):          {d['expected_tokens']:.3f}",
        f"walltime improvement (Thm 3.8):                   {d['walltime_improvement']:.3f}x",
        f"arithmetic operations factor (Thm 3.11):          {d['operations_factor']:.3f}x",
        f"optimal gamma (sec. 3.5):                         {d['optimal_gamma']}  -> {d['optimal_improvement']:.3f}x{ideal_limit}",
        f"Cor. 3.9 bound at gamma=1, (1+alpha)/(1+c):       {bound}",
        f"scoring gamma+1 tokens costs                      {d['score_cost']:.2f} decode steps",
        f"walltime improvement with that cost:              {d['walltime_improvement_measured']:.3f}x",
        f"optimal gamma with that cost:                     {d['optimal_gamma_measured']}  -> "
        f"{d['optimal_improvement_measured']:.3f}x{measured_limit}",
    ])


# The panel's y axes stay fixed ([0, 6] for the walltime, [0, 12] for the operations) while the curves
# fit, so a slider move shows as the curve moving against fixed gridlines; a curve that leaves that
# range switches the axis to the largest value any setting can reach (gamma_max + 1 for the walltime,
# 2 gamma_max + 1 for the operations), so an axis changes at most once over a slider's whole range.
Y_FIXED = 6.0
Y_FIXED_OPERATIONS = 12.0


def _fixed_top(peak: float, fixed: float, ceiling: float) -> float:
    return fixed if peak <= fixed else ceiling


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
    ax.set_title(f"alpha={alpha:.2f}, gamma={gamma}, c={c:.3f}; scoring gamma+1 tokens costs "
                 f"{d['score_cost']:.2f} steps", fontsize=9)
    ax.set_xticks(gammas[::1 if gamma_max <= 16 else 2])
    ax.set_xlim(0.5, gamma_max + 0.5)
    ax.set_ylim(0, _fixed_top(max(ideal.max(), real.max()), Y_FIXED, gamma_max + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    return ax


def plot_operations(ax, alpha: float, gamma: int, c_hat: float, gamma_max: int = GAMMA_MAX):
    """Thm 3.11's arithmetic operations factor against gamma for one alpha and c_hat, the chosen gamma marked."""
    gammas = np.arange(1, gamma_max + 1)
    ops = speedup.operations_factor(alpha, gammas, c_hat)
    ax.plot(gammas, ops, "o-", ms=3, color="C2", label="Thm 3.11")
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    ax.axvline(gamma, color="k", lw=0.8, alpha=0.5)
    ax.plot([gamma], [speedup.operations_factor(alpha, gamma, c_hat)], "o", ms=7, color="C2")
    ax.set_xlabel("gamma")
    ax.set_ylabel("arithmetic operations over ArS (x)")
    ax.set_title(f"operations (c_hat={c_hat:.3f}): time is not affected", fontsize=9)
    ax.set_xticks(gammas[::2])
    ax.set_xlim(0.5, gamma_max + 0.5)
    ax.set_ylim(0, _fixed_top(float(ops.max()), Y_FIXED_OPERATIONS, 2 * gamma_max + 1))
    ax.grid(alpha=0.3)
    return ax


def panel_outputs(alpha: float, gamma: int, c: float, c_hat: float, score_slope: float) -> tuple[dict, ...]:
    """What the panel shows for one setting of the sliders, as two notebook outputs: the plots of
    `plot_speedup` and `plot_operations` as one PNG, then the text of `format_panel`.

    The figure is a bare matplotlib Figure, not pyplot's, so no backend displays it on its own."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.8), layout="constrained")
    a, b = fig.subplots(1, 2, width_ratios=[1.6, 1])
    plot_speedup(a, alpha, gamma, c, score_slope)
    plot_operations(b, alpha, gamma, c_hat)
    png = io.BytesIO()
    fig.savefig(png, format="png", bbox_inches="tight")
    return (
        {"output_type": "display_data", "metadata": {},
         "data": {"image/png": base64.b64encode(png.getvalue()).decode("ascii"), "text/plain": repr(fig)}},
        {"output_type": "stream", "name": "stdout",
         "text": format_panel(speedup_panel(alpha, gamma, c, c_hat, score_slope)) + "\n"},
    )


class SpeedupPanel(ipywidgets.interactive):
    """`ipywidgets.interactive` whose drawing is handed to its Output widget as that widget's state
    (`out.outputs = ...`, one comm message on IOPub), instead of being printed and displayed inside
    `with out:` and captured.

    Why: a captured output makes a headless run hang now and then.  nbclient (nbconvert --execute,
    the test suite) stands in for the frontend's Output widget, and for every output it captures it
    sends the widget's state back to the kernel on the shell channel, from the task that reads IOPub,
    through a plain (not asyncio) socket (jupyter_client's Session.send).  When the cell's
    execute_reply reaches that same shell socket during such a send, the send consumes the socket's
    edge-triggered wake-up and the asyncio poll waiting for the reply never wakes: the run waits
    forever with the reply unread (see docs/notebooks.md).  Without capture nbclient sends nothing.
    In JupyterLab the panel looks and updates the same way: the Output widget renders its outputs."""

    def update(self, *args):
        self.kwargs = {w._kwarg: w.get_interact_value() for w in self.kwargs_widgets}
        try:
            self.result = self.out.outputs = tuple(self.f(**self.kwargs))
        except Exception:
            # shown in the panel, and raised: in the cell that builds the panel, the cell fails
            self.out.outputs = ({"output_type": "stream", "name": "stderr", "text": traceback.format_exc()},)
            raise


# Every slider has the same width and label width, so the tracks are equally long and aligned;
# 640 px leaves a track of about 450 px, at least 2 px per step of the finest slider (c, 200 steps).
SLIDER_LAYOUT = {"width": "640px"}
SLIDER_STYLE = {"description_width": "100px"}


def interactive_speedup(alpha: float = 0.7, gamma: int = 4, c: float = 0.05, c_hat: float = 0.05,
                        score_slope: float = 0.0):
    """Sliders for alpha, gamma, c, c_hat and score_slope driving `plot_speedup`, `plot_operations`
    and `speedup_panel` (through `panel_outputs`)."""
    def slider(kind, **kw):
        return kind(layout=ipywidgets.Layout(**SLIDER_LAYOUT), style=SLIDER_STYLE, **kw)

    return SpeedupPanel(
        panel_outputs,
        alpha=slider(ipywidgets.FloatSlider, value=alpha, min=0.0, max=0.99, step=0.01, description="alpha"),
        gamma=slider(ipywidgets.IntSlider, value=gamma, min=1, max=GAMMA_MAX, description="gamma"),
        c=slider(ipywidgets.FloatSlider, value=c, min=0.0, max=1.0, step=0.005, readout_format=".3f", description="c"),
        c_hat=slider(ipywidgets.FloatSlider, value=c_hat, min=0.0, max=1.0, step=0.005, readout_format=".3f",
                     description="c_hat"),
        score_slope=slider(ipywidgets.FloatSlider, value=score_slope, min=0.0, max=1.0, step=0.01,
                           description="score_slope"),
    )


# ---------------------------------------------------------------- Theorem 1's overlap, with sliders for p and q

def overlap_rows(p_weights, q_weights) -> tuple[np.ndarray, np.ndarray, float]:  # [V], [V] -> p [V], q [V], alpha
    """The sliders' weights normalised into a draft row p and a target row q, and alpha = sum_x min(p(x), q(x)),
    the chance a draft from p is accepted against q (Theorem 1)."""
    p, q = np.asarray(p_weights, dtype=np.float64), np.asarray(q_weights, dtype=np.float64)
    if p.ndim != 1 or p.shape != q.shape or p.size < 2:
        raise ValueError(f"p and q need one weight per token, two tokens or more, got shapes {p.shape} and {q.shape}")
    for name, w in (("p", p), ("q", q)):
        if not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
            raise ValueError(f"the weights of {name} must be finite, >= 0 and not all 0, got {w.tolist()}")
    p, q = p / p.sum(), q / q.sum()
    return p, q, float(np.minimum(p, q).sum())


def overlap_outputs(names, **weights) -> tuple[dict, ...]:
    """What the overlap panel shows for one setting of its sliders (p_<token>, q_<token>: weights): the picture of
    `plots.plot_overlap` as a PNG, then the rows and alpha as text; weights all 0 give a line saying so."""
    from matplotlib.figure import Figure

    try:
        p, q, alpha = overlap_rows([weights[f"p_{n}"] for n in names], [weights[f"q_{n}"] for n in names])
    except ValueError as e:
        return ({"output_type": "stream", "name": "stdout", "text": f"{e}: move a slider of that row above 0\n"},)
    fig = Figure(figsize=(7, 4), layout="constrained")
    plots.plot_overlap(fig.subplots(), p, q, names)
    png = io.BytesIO()
    fig.savefig(png, format="png", bbox_inches="tight")
    text = (f"p = {np.round(p, 3).tolist()}\nq = {np.round(q, 3).tolist()}\n"
            f"beta = sum min(p, q) = {alpha:.3f} (alpha, were these the rows at every position): a draft from p "
            f"is accepted with probability {alpha:.3f}\n")
    return ({"output_type": "display_data", "metadata": {},
             "data": {"image/png": base64.b64encode(png.getvalue()).decode("ascii"), "text/plain": repr(fig)}},
            {"output_type": "stream", "name": "stdout", "text": text})


def interactive_overlap(p, q, names):
    """Sliders for the weights of p and q (one per token each, normalised to rows), redrawing Theorem 1's overlap
    and printing alpha (through `overlap_outputs`); drawn as the speedup panel is, without captured output."""
    names = [str(n) for n in names]
    p, q, _ = overlap_rows(p, q)

    def slider(row, n, value):
        return ipywidgets.FloatSlider(value=round(float(value), 2), min=0.0, max=1.0, step=0.01,
                                      description=f"{row}({n})", layout=ipywidgets.Layout(width="420px"),
                                      style={"description_width": "60px"})

    sliders = {f"p_{n}": slider("p", n, v) for n, v in zip(names, p)}
    sliders.update({f"q_{n}": slider("q", n, v) for n, v in zip(names, q)})
    def show(**weights):
        return overlap_outputs(names, **weights)
    return SpeedupPanel(show, **sliders)


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
    return '<pre style="white-space:pre-wrap;text-align:left;font-size:12px">' + "".join(out) + "</pre>"


def side_by_side_html(columns: dict) -> str:
    """An HTML table with one column per (title -> HTML body), e.g. ArS next to SpS.

    Every cell is left-aligned: JupyterLab's stylesheet right-aligns table cells, which would
    push generated code to the right and hide its indentation."""
    head = "".join(f"<th style='text-align:left'>{html.escape(t)}</th>" for t in columns)
    body = "".join(f"<td style='text-align:left;vertical-align:top;width:{100 // len(columns)}%'>{b}</td>"
                   for b in columns.values())
    return f"<table><tr>{head}</tr><tr>{body}</tr></table>"
