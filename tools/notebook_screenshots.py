"""Screenshots of notebook 04's speedup panel in JupyterLab, before and after a slider move.

    python3 -m tools.notebook_screenshots [--out figures/] [--slider alpha --presses 10]

Starts JupyterLab and headless Chromium as tests/apps/test_browser.py does (quick mode), runs
notebook 04, takes a screenshot of the panel (sliders, plots, printed numbers), presses the right
arrow key on one slider's handle (alpha by default, 10 presses: 0.70 -> 0.80), waits until the
panel has redrawn, and takes a second one.  Writes notebook04_before.png and notebook04_after.png.
Needs Debian's chromium and chromium-driver and selenium, like the browser test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.apps import jupyterlab_browser as lab_browser

FIGURES = Path(__file__).resolve().parents[1] / "figures"
OUTPUTS = ("notebook04_before.png", "notebook04_after.png")  # what this command writes into --out


def panel_screenshot(browser: lab_browser.Browser, path: Path) -> None:
    """The interact widget (sliders and output) as a PNG file."""
    from selenium.webdriver.common.by import By
    panel = browser.driver.find_element(By.CSS_SELECTOR, ".widget-interact")
    browser.js("arguments[0].scrollIntoView({block: 'start'});", panel)
    panel.screenshot(str(path))
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.notebook_screenshots", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=FIGURES, help=f"output directory (default {FIGURES})")
    parser.add_argument("--slider", default="alpha", choices=["alpha", "gamma", "c", "c_hat", "score_slope"])
    parser.add_argument("--presses", type=int, default=10, help="right-arrow presses on the slider (default 10)")
    args = parser.parse_args(argv)
    reason = lab_browser.missing()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    from selenium.webdriver.common.keys import Keys
    args.out.mkdir(parents=True, exist_ok=True)
    lab = lab_browser.Lab(env={"SPECREF_QUICK": "1"}, notebooks=[lab_browser.ROOT / "notebooks" / "04_speedup_model.ipynb"])
    browser = None
    try:
        lab.start()
        browser = lab_browser.Browser(width=1300, height=1500)
        browser.open_notebook(lab, "04_speedup_model.ipynb")
        state = browser.run_all(timeout=120)
        errors = [e for c in state["cells"] for e in c["errors"]]
        if errors:
            print("notebook 04 failed:", *errors, sep="\n", file=sys.stderr)
            return 1
        text = browser.wait("the panel's first drawing", lambda: browser.widget_output()[0], timeout=30)
        before = browser.slider_value(args.slider)
        panel_screenshot(browser, args.out / OUTPUTS[0])
        browser.press_on_slider(args.slider, Keys.ARROW_RIGHT, args.presses)
        browser.wait(f"the panel to redraw after moving {args.slider}",
                     lambda: (lambda t, _: t and t != text and t.splitlines()[0] == _first_line(browser))(
                         *browser.widget_output()), timeout=30)
        time.sleep(0.5)  # let the new image paint
        panel_screenshot(browser, args.out / OUTPUTS[1])
        print(f"{args.slider}: {before} -> {browser.slider_value(args.slider)}")
    finally:
        if browser is not None:
            browser.stop()
        lab.stop()
    return 0


def _first_line(browser: lab_browser.Browser) -> str:
    """The panel's first printed line as the sliders now stand: the output has caught up when they match."""
    v = {name: browser.slider_value(name) for name in ("alpha", "gamma", "c", "c_hat", "score_slope")}
    return f"alpha={v['alpha']}  gamma={v['gamma']}  c={v['c']}  c_hat={v['c_hat']}  score_slope={v['score_slope']}"


if __name__ == "__main__":
    sys.exit(main())
