"""JupyterLab in headless Chromium, driven as a learner drives it: open a notebook, Run All, move
sliders with the keyboard.  Used by tests/apps/test_browser.py and tools/notebook_screenshots.py.

Needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver) and the
selenium package (the dev extra).  Every process started here runs in its own process group and
is killed with it by `Lab.stop` and `Browser.stop`.

The notebooks are copied to a temporary directory first, so neither JupyterLab's autosave nor
jupytext's pairing can write into the repository.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_HINT = ("the browser test needs Debian's chromium and chromium-driver (apt-get install -y chromium "
                "chromium-driver), and selenium and JupyterLab (python3 -m pip install -e '.[browser]'); .ci/run installs them")
REQUIRE = "SPECREF_REQUIRE_BROWSER"   # =1: a missing browser fails the test instead of skipping it (CI)

# JupyterLab settings for the session: no news or update checks (no network here, and their toast
# would cover the page); the rest are JupyterLab's defaults.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
}


def missing() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} not found; {INSTALL_HINT}"
    for module in ("selenium", "jupyterlab"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed; {INSTALL_HINT}"
    return None


def required(environ=None) -> bool:
    """True when the environment demands the browser test (SPECREF_REQUIRE_BROWSER=1, as CI sets it)."""
    value = (os.environ if environ is None else environ).get(REQUIRE, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{REQUIRE}={value!r} is not recognised; use 1 (the browser test must run) or 0 / unset")
    return value == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat(pid) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, from /proc/PID/stat; None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live process below `pid`: children, grandchildren, ..."""
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _stat(d.name)) is not None:
            children.setdefault(st[0], []).append((int(d.name), st[1]))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def _kill_survivors(procs) -> None:
    """SIGKILL each (pid, start time) that is still the same process (same start time)."""
    for pid, start in procs:
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop `proc` (started with start_new_session), its process group and every process below it
    (Jupyter kernels and Chromium's helpers start sessions of their own): SIGTERM, SIGKILL after `grace` s."""
    below = descendants(proc.pid)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    _kill_survivors(below)


class Lab:
    """A JupyterLab server on 127.0.0.1, a random free port and a random token, serving a temporary
    copy of notebooks/*.ipynb and of notebooks/solutions/ (the exercises import the solutions from there);
    `env` is added to the server's environment (its kernels inherit it)."""

    def __init__(self, env: dict | None = None, notebooks=None):
        self.env = env or {}
        self.notebooks = notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        self.proc = None
        self.tmp = None

    def start(self, timeout: float = 60.0) -> "Lab":
        self.tmp = Path(tempfile.mkdtemp(prefix="specref-lab-"))
        served = self.tmp / "notebooks"
        served.mkdir()
        for nb in self.notebooks:
            shutil.copy(nb, served / nb.name)
        shutil.copytree(ROOT / "notebooks" / "solutions", served / "solutions",
                        ignore=shutil.ignore_patterns("__pycache__"))
        settings = self.tmp / "settings"
        for name, value in SETTINGS.items():
            path = settings / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        # the kernels import specref from this repository, as notebooks/ next to it would
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": pythonpath, **self.env, "JUPYTERLAB_SETTINGS_DIR": str(settings),
               "JUPYTERLAB_WORKSPACES_DIR": str(self.tmp / "workspaces"), "JUPYTER_RUNTIME_DIR": str(self.tmp / "runtime")}
        self.log = open(self.tmp / "jupyterlab.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={served}",
             "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=served, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with status {self.proc.returncode}:\n{self.log_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"JupyterLab did not answer within {timeout:.0f} s:\n{self.log_text()}")

    def log_text(self) -> str:
        self.log.flush()
        return (self.tmp / "jupyterlab.log").read_text()[-4000:]

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"

    def api(self, method: str, path: str):
        """One call of the server's REST API; the decoded JSON answer, or None for an empty one."""
        req = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every session and its kernel (a notebook's kernel keeps its memory until then)."""
        for session in self.api("GET", "sessions"):
            self.api("DELETE", f"sessions/{session['id']}")

    def stop(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            self.log.close()
            self.proc = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# The notebook panel's state, read in the page from JupyterLab's own objects (exposed with
# --LabApp.expose_app_in_browser): kernel status, cells run, error outputs, the dirty flag.
_STATE_JS = """
const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
if (!w || !w.content || !w.context || !w.sessionContext) return null;
const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
const cells = [];
const model = w.content.model;
if (model) {
  for (let i = 0; i < model.cells.length; i++) {
    const c = model.cells.get(i);
    if (c.type !== 'code') continue;
    const errors = [];
    for (let j = 0; j < c.outputs.length; j++) {
      const o = c.outputs.get(j);
      if (o.type === 'error') { const j = o.toJSON(); errors.push(j.ename + ': ' + j.evalue); }
    }
    cells.push({index: i, count: c.executionCount, errors: errors});
  }
}
return {path: w.context.path, ready: w.context.isReady && w.sessionContext.isReady,
        kernel: kernel ? kernel.status : null, dirty: model ? model.dirty : null, cells: cells};
"""


# The open notebook's model as nbformat 4 JSON, outputs included.
_NOTEBOOK_JS = """
const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
return w && w.content && w.content.model ? w.content.model.toJSON() : null;
"""


class Browser:
    """Headless Chromium under chromedriver (Debian's), with selenium."""

    def __init__(self, width: int = 1400, height: int = 1000):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={width},{height}", "--force-device-scale-factor=1"):
            options.add_argument(arg)
        self.user_data = tempfile.mkdtemp(prefix="specref-chromium-")
        options.add_argument(f"--user-data-dir={self.user_data}")
        self.service = Service(CHROMEDRIVER, popen_kw={"start_new_session": True})
        self.driver = None
        try:
            self.driver = webdriver.Chrome(service=self.service, options=options)
            # A headless page never has the window's focus, and JupyterLab (4.6 seen) tracks its current
            # widget by focus: without this, shell.currentWidget stays null and no notebook is seen to open
            self.driver.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        try:
            if self.driver is not None:
                self.driver.quit()
        except Exception:
            pass
        proc = getattr(self.service, "process", None)
        if proc is not None:
            _kill_group(proc, grace=5.0)  # chromedriver and the chromium it started
        shutil.rmtree(self.user_data, ignore_errors=True)

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def state(self) -> dict | None:
        return self.js(_STATE_JS)

    def notebook(self):
        """The open notebook as JupyterLab holds it (its model, outputs included), as an nbformat notebook."""
        import nbformat
        nb = nbformat.from_dict(self.js(_NOTEBOOK_JS))
        for cell in nb.cells:  # JupyterLab may keep a stream's text as a list of chunks
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and isinstance(out.get("text"), list):
                    out["text"] = "".join(out["text"])
        return nb

    def wait(self, what: str, condition, timeout: float, interval: float = 0.2):
        """Poll `condition()` until it returns something truthy; TimeoutError naming `what` otherwise."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = condition()
            if last:
                return last
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    def open_notebook(self, lab: Lab, name: str, timeout: float = 60.0) -> dict:
        """Open notebooks/`name` and wait until its kernel is idle; returns the panel's state."""
        self.driver.get(lab.notebook_url(name))

        def ready():
            s = self.state()
            return s if s and s["path"].endswith(name) and s["ready"] and s["kernel"] == "idle" else None

        return self.wait(f"{name} to open with an idle kernel", ready, timeout)

    def menu(self, menu: str, command: str) -> None:
        """Click a main-menu entry, e.g. menu("Run", "runmenu:run-all")."""
        from selenium.webdriver.common.by import By
        bar = self.driver.find_element(By.ID, "jp-MainMenu")
        for item in bar.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item"):
            if item.text.strip() == menu:
                item.click()
                break
        else:
            raise LookupError(f"no menu {menu!r}")
        entry = self.wait(f"menu entry {command}", lambda: self.driver.find_elements(
            By.CSS_SELECTOR, f".lm-Menu-item[data-command='{command}']"), 10)
        entry[0].click()

    def run_all(self, timeout: float) -> dict:
        """Run > Run All Cells; wait until every code cell has run or one failed. Returns the state."""
        self.menu("Run", "runmenu:run-all")
        time.sleep(0.5)  # let the first execute request go out before polling for idle

        def finished():
            s = self.state()
            if not s or s["kernel"] != "idle":
                return None
            done = all(c["count"] is not None for c in s["cells"])
            failed = any(c["errors"] for c in s["cells"])
            return s if done or failed else None

        return self.wait("Run All to finish", finished, timeout, interval=0.5)

    # ---------------------------------------------------------------- ipywidgets sliders

    def slider(self, description: str):
        """The ipywidgets slider whose label is `description`."""
        from selenium.webdriver.common.by import By
        for w in self.driver.find_elements(By.CSS_SELECTOR, ".widget-slider"):
            labels = w.find_elements(By.CSS_SELECTOR, ".widget-label")
            if labels and labels[0].text.strip() == description:
                return w
        raise LookupError(f"no slider labelled {description!r}")

    def slider_value(self, description: str) -> str:
        return self.js("return arguments[0].querySelector('.widget-readout').textContent;", self.slider(description)).strip()

    def press_on_slider(self, description: str, key: str, times: int = 1) -> None:
        """Focus the slider's handle and press `key` (a selenium Keys value) `times` times."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
        handle = self.slider(description).find_element(By.CSS_SELECTOR, ".noUi-handle")
        self.js("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", handle)
        assert self.js("return document.activeElement === arguments[0];", handle), f"{description}: handle not focused"
        actions = ActionChains(self.driver)
        for _ in range(times):
            actions.send_keys(key)
        actions.perform()

    def widget_output(self):
        """(text, PNG bytes) of the first ipywidgets interact output on the page: the printed lines and
        the plot, read in one script so that a redraw cannot come between the two."""
        import base64
        text, src = self.js("""
            const out = document.querySelector('.widget-interact .widget-output');
            if (!out) return ['', ''];
            const text = Array.from(out.querySelectorAll('pre')).map(e => e.textContent).join('\\n');
            const img = out.querySelector('img');
            return [text, img ? img.getAttribute('src') : ''];""")
        png = base64.b64decode(src.split(",", 1)[1]) if src.startswith("data:image/png;base64,") else b""
        return text.strip("\n"), png
