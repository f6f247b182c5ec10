"""The speedup panel's callbacks, called directly (the sliders in notebook 04 call the same functions)."""

import base64

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from specref.lessons import widgets  # noqa: E402


def test_panel_matches_leviathan_table1():
    # Leviathan Table 1 (c = c_hat = 0): alpha 0.8, gamma 5 -> speed 3.69x, operations 1.63x
    d = widgets.speedup_panel(0.8, 5, 0.0, 0.0)
    assert d["walltime_improvement"] == pytest.approx(3.69, abs=0.005)
    assert d["operations_factor"] == pytest.approx(1.63, abs=0.005)
    assert d["expected_tokens"] == pytest.approx((1 - 0.8 ** 6) / 0.2)


def test_panel_by_hand():
    # alpha 0.5, gamma 2, c 0.1: Eq. 1 = 1 + 0.5 + 0.25 = 1.75; Thm 3.8 = 1.75 / 1.2
    d = widgets.speedup_panel(0.5, 2, 0.1, 0.2, score_slope=0.5)
    assert d["expected_tokens"] == pytest.approx(1.75)
    assert d["walltime_improvement"] == pytest.approx(1.75 / 1.2)
    assert d["operations_factor"] == pytest.approx((2 * 0.2 + 2 + 1) / 1.75)
    assert d["lower_bound"] == pytest.approx(1.5 / 1.1)
    assert d["score_cost"] == pytest.approx(2.0)  # 1 + 0.5 * gamma
    assert d["walltime_improvement_measured"] == pytest.approx(1.75 / (0.2 + 2.0))


def test_free_scoring_is_leviathans_model():
    for alpha in (0.1, 0.6, 0.95):
        d = widgets.speedup_panel(alpha, 3, 0.05, 0.05, score_slope=0.0)
        assert d["walltime_improvement_measured"] == pytest.approx(d["walltime_improvement"])
        assert d["optimal_gamma_measured"] == d["optimal_gamma"]


def test_costly_scoring_shrinks_gamma_and_gain():
    free = widgets.speedup_panel(0.8, 4, 0.02, 0.02, 0.0)
    cpu = widgets.speedup_panel(0.8, 4, 0.02, 0.02, 0.3)
    assert cpu["optimal_gamma_measured"] < free["optimal_gamma_measured"]
    assert cpu["optimal_improvement_measured"] < free["optimal_improvement_measured"]


def test_no_bound_when_alpha_below_c():
    assert widgets.speedup_panel(0.1, 1, 0.2, 0.0)["lower_bound"] is None
    assert widgets.speedup_panel(0.1, 1, 0.2, 0.0)["walltime_improvement"] < 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="gamma"):
        widgets.speedup_panel(0.5, 0, 0.1, 0.1)
    with pytest.raises(ValueError, match="score_slope"):
        widgets.speedup_panel(0.5, 2, 0.1, 0.1, score_slope=-1.0)
    with pytest.raises(ValueError, match="alpha"):
        widgets.speedup_panel(1.5, 2, 0.1, 0.1)


def test_format_panel_mentions_every_number():
    text = widgets.format_panel(widgets.speedup_panel(0.7, 3, 0.05, 0.05, 0.2))
    for word in ("Eq. 1", "Thm 3.8", "Thm 3.11", "Cor. 3.9", "optimal gamma"):
        assert word in text


def test_plot_speedup_draws_both_curves():
    fig, ax = plt.subplots()
    widgets.plot_speedup(ax, 0.7, 3, 0.05, score_slope=0.25)
    ys = [line.get_ydata() for line in ax.get_lines() if len(line.get_xdata()) == widgets.GAMMA_MAX]
    assert len(ys) == 2
    ideal, real = ys
    assert np.all(np.asarray(real) < np.asarray(ideal))
    plt.close(fig)


def test_interactive_has_the_sliders():
    w = widgets.interactive_speedup()
    names = {c.description for c in w.children if hasattr(c, "min")}
    assert names == {"alpha", "gamma", "c", "c_hat", "score_slope"}


class ByteTokenizer:
    """Token i is the byte i: enough to check the rendering, including a character split over two tokens."""

    def decode_bytes(self, ids):
        return bytes(ids)


def test_highlight_html_marks_accepted_drafts_and_escapes():
    pieces = [([ord("a"), ord("<")], 1), (list("é".encode()), 2), ([ord("z")], 0)]
    out = widgets.highlight_html(ByteTokenizer(), pieces)
    assert '<span style="background:#b6e3b6">a</span>&lt;' in out  # 'a' accepted, '<' from the target, escaped
    assert "é" in out and "\ufffd" not in out  # the two bytes of é decode as one character
    assert out.count("<span") == 3 and out.endswith("z</pre>")


def test_side_by_side_html_has_one_column_per_title():
    out = widgets.side_by_side_html({"ArS": "<pre>x</pre>", "SpS": "<pre>y</pre>"})
    assert out.count("<th") == 2 and out.count("<td") == 2


def test_side_by_side_html_left_aligns_every_cell():
    # JupyterLab right-aligns table cells; generated code must read as code
    out = widgets.side_by_side_html({"ArS": widgets.highlight_html(ByteTokenizer(), [([ord(" "), ord("x")], 0)])})
    assert "<td style='text-align:left;" in out and "text-align:left;font-size" in out


def test_search_limit_is_named_only_when_a_larger_gamma_would_gain():
    assert widgets.at_search_limit(0.7, 0.0)          # c = 0: every larger gamma gains
    assert not widgets.at_search_limit(0.7, 0.05)     # the optimum is 6 < 16
    text = widgets.format_panel(widgets.speedup_panel(0.7, 4, 0.0, 0.0))
    assert "slider's limit" in text
    assert "slider's limit" not in widgets.format_panel(widgets.speedup_panel(0.7, 4, 0.05, 0.0))


def test_panel_axes_stay_fixed_while_the_curves_fit():
    fig, (a, b) = plt.subplots(1, 2)
    tops = []
    for alpha in (0.5, 0.6, 0.7, 0.8):
        a.clear()
        b.clear()
        widgets.plot_speedup(a, alpha, 4, 0.05, 0.25)
        widgets.plot_operations(b, alpha, 4, 0.05)
        tops.append((a.get_ylim()[1], b.get_ylim()[1]))
    assert set(tops) == {(widgets.Y_FIXED, widgets.Y_FIXED_OPERATIONS)}
    a.clear()
    widgets.plot_speedup(a, 0.95, 4, 0.0)  # reaches 11.7x: the axis goes to gamma_max + 1 at once
    assert a.get_ylim()[1] == widgets.GAMMA_MAX + 1
    assert "gamma=4" in a.get_title() and "costs 1.00 steps" in a.get_title()
    plt.close(fig)


def test_c_hat_moves_only_the_operations_plot():
    fig, (a, b) = plt.subplots(1, 2)
    widgets.plot_operations(b, 0.7, 4, 0.05)
    low = b.get_lines()[0].get_ydata()
    b.clear()
    widgets.plot_operations(b, 0.7, 4, 0.5)
    assert np.all(b.get_lines()[0].get_ydata() > low)
    plt.close(fig)


def test_surface_matches_the_sliders_and_draws_only_real_optima():
    from specref.apps import figures
    assert figures.SURFACE_GAMMA_MAX == widgets.GAMMA_MAX
    fig, (free, costly) = plt.subplots(1, 2)
    figures.plot_speedup_surface(free, 0.0)
    figures.plot_speedup_surface(costly, 0.05)
    assert not free.get_lines()  # c = 0: more gamma always gains, there is no optimum to draw
    (best,) = costly.get_lines()
    assert np.nanmax(best.get_ydata()) <= widgets.GAMMA_MAX
    plt.close(fig)


# ---------------------------------------------------------------- notebook 01's overlap sliders

def test_overlap_rows_normalise_and_give_alpha_by_hand():
    # the Qualcomm rows: min(p, q) = [0.3, 0.3, 0.1, 0.1], alpha 0.8; weights are normalised first
    p, q, alpha = widgets.overlap_rows([4, 3, 2, 1], [0.3, 0.45, 0.1, 0.15])
    assert p.tolist() == pytest.approx([0.4, 0.3, 0.2, 0.1]) and alpha == pytest.approx(0.8)
    assert widgets.overlap_rows([1, 0], [0, 1])[2] == 0.0            # disjoint rows: nothing is accepted
    assert widgets.overlap_rows([1, 2], [2, 4])[2] == pytest.approx(1.0)  # the same row: everything is


@pytest.mark.parametrize("p, q, words", [([0, 0], [1, 1], "weights of p"), ([1, 1], [1, -1], "weights of q"),
                                         ([1, 1], [1, 1, 1], "one weight per token"), ([1], [1], "two tokens"),
                                         ([1, np.nan], [1, 1], "finite")])
def test_overlap_rows_bad_input(p, q, words):
    with pytest.raises(ValueError, match=words):
        widgets.overlap_rows(p, q)


def test_overlap_outputs_draw_the_picture_and_print_alpha():
    names = ["a", "b", "c"]
    out = widgets.overlap_outputs(names, p_a=0.5, p_b=0.5, p_c=0.0, q_a=0.25, q_b=0.25, q_c=0.5)
    assert [o["output_type"] for o in out] == ["display_data", "stream"]
    assert base64.b64decode(out[0]["data"]["image/png"])[:4] == b"\x89PNG"
    assert "beta = sum min(p, q) = 0.500" in out[1]["text"]
    zero = widgets.overlap_outputs(names, p_a=0, p_b=0, p_c=0, q_a=1, q_b=0, q_c=0)
    assert len(zero) == 1 and "move a slider of that row above 0" in zero[0]["text"]


def test_overlap_sliders_redraw_when_moved():
    panel = widgets.interactive_overlap([0.4, 0.3, 0.2, 0.1], [0.3, 0.45, 0.1, 0.15], "abcd")
    sliders = {w.description: w for w in panel.kwargs_widgets}
    assert sorted(sliders) == ["p(a)", "p(b)", "p(c)", "p(d)", "q(a)", "q(b)", "q(c)", "q(d)"]
    assert "= 0.800" in panel.out.outputs[-1]["text"]
    sliders["q(a)"].value = 0.0  # q = [0, 0.45, 0.1, 0.15] / 0.7: min(p, q) sums to 0.3 + 1/7 + 0.1 = 0.543
    assert "= 0.543" in panel.out.outputs[-1]["text"]
