"""Run one notebook headless N times in quick mode and count the runs that hang or fail.

    python3 tools/notebook_hang.py notebooks/04_speedup_model.ipynb --runs 20 [--timeout 120] [--load 1]
    python3 tools/notebook_hang.py --mechanism 200

Each run is `jupyter nbconvert --to notebook --execute NOTEBOOK --output <tmp>` with SPECREF_QUICK=1,
killed after `--timeout` seconds; a run killed so counts as a hang, one that exits non-zero as a failure.
`--load K` keeps K CPU-bound processes busy during the runs (a shared machine); `--root DIR` runs the
specref of another checkout (e.g. an older commit unpacked with `git archive`).  Prints each run's time
and outcome, then the failure rate.  `--py-spy` and `--debug` show where a hung run waits.

`--mechanism N` shows the cause without a kernel: a client DEALER socket, polled with asyncio for a
reply, as jupyter_client polls the shell channel, while the same socket sends other messages, once
raw (as jupyter_client's Session.send does on the shell socket for nbclient's Output widget
stand-in) and once through the asyncio socket; it counts the replies the poll did not wake for.
docs/notebooks.md has the numbers measured with this tool.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]

BUSY = "while True: pass"


def descendants(pid: int) -> list[int]:
    """pid and every process below it (the kernel runs in a session of its own, so not in nbconvert's group)."""
    out = [pid]
    for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
        out += descendants(int(child))
    return out


def spy(root: int) -> str:
    """py-spy dumps of nbconvert and every process it started (the kernel)."""
    out = []
    for pid in map(str, descendants(root)):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        dump = subprocess.run(["py-spy", "dump", "--pid", pid], capture_output=True, text=True)
        out.append(f"--- pid {pid}: {cmdline}\n{dump.stdout}{dump.stderr}")
    return "\n".join(out)


def tail(text: str, lines: int = 60, width: int = 300) -> str:
    """The last lines of nbconvert's output, each cut to `width` characters (--debug prints whole images)."""
    return "\n".join(line[:width] + (" ..." if len(line) > width else "") for line in text.splitlines()[-lines:])


def run_once(notebook: Path, timeout: float, out: Path, dump: bool = False, debug: bool = False,
             root: Path = ROOT) -> tuple[str, float, str]:
    env = {**os.environ, "SPECREF_QUICK": "1", "PYTHONPATH": str(root)}
    cmd = ["jupyter", "nbconvert", "--to", "notebook", "--execute", str(notebook), "--output", str(out)]
    cmd += ["--debug"] if debug else []
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = spy(proc.pid) if dump else ""
        for pid in descendants(proc.pid):
            os.kill(pid, signal.SIGKILL)
        text, _ = proc.communicate()
        return "hang", time.perf_counter() - start, tail(text) + "\n" + stacks
    seconds = time.perf_counter() - start
    return ("ok" if proc.returncode == 0 else f"fail (exit {proc.returncode})"), seconds, tail(text)


# ---------------------------------------------------------------- the mechanism, without a kernel

def _replier(address: str, stop: threading.Event) -> None:
    """A stand-in kernel: answers b"request" with b"reply" a few ms later; b"state" gets no answer."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(address)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while not stop.is_set():
        if poller.poll(100):
            ident, body = sock.recv_multipart()
            if body == b"request":
                time.sleep(random.uniform(0, 0.01))  # the cell finishes a little later
                sock.send_multipart([ident, b"reply"])
    sock.close(linger=0)


async def _missed_wakeups(address: str, n: int, raw: bool) -> int:
    import zmq.asyncio
    sock = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    sock.connect(address)
    plain = zmq.Socket.shadow(sock.underlying)  # what jupyter_client's Session.send sends on
    sender = plain if raw else sock
    missed = 0

    async def iopub_task():  # each output handled (a few ms: a PNG decoded), then the widget's state sent
        for _ in range(8):
            until = time.perf_counter() + 0.002
            while time.perf_counter() < until:
                pass
            sender.send(b"state")
            await asyncio.sleep(0)

    for _ in range(n):
        await sock.send(b"request")
        other = asyncio.ensure_future(iopub_task())
        start = time.perf_counter()
        ready = await sock.poll(1000)  # jupyter_client: ready = await socket.poll(timeout); nbclient's is None
        missed += bool(ready) and time.perf_counter() - start > 0.9  # the reply was there; only the timeout woke it
        await other
        await sock.recv()
    sock.close(linger=0)
    return missed


def mechanism(n: int) -> int:
    stop = threading.Event()
    address = "tcp://127.0.0.1:%d" % random.randint(20000, 60000)
    server = threading.Thread(target=_replier, args=(address, stop))
    server.start()
    try:
        for raw in (True, False):
            missed = asyncio.run(_missed_wakeups(address, n, raw))
            how = "raw, on a plain shadow socket" if raw else "through the asyncio socket"
            print(f"other messages sent {how}: the poll missed {missed} of {n} replies (there, but found only when its 1 s timeout fired)")
    finally:
        stop.set()
        server.join()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebook", type=Path, nargs="?")
    parser.add_argument("--mechanism", type=int, metavar="N", help="the socket-level experiment, N requests each way")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose specref the kernel imports")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as a hang")
    parser.add_argument("--load", type=int, default=0, help="CPU-bound processes kept running meanwhile")
    parser.add_argument("--verbose", action="store_true", help="print the output of runs that hang or fail")
    parser.add_argument("--debug", action="store_true",
                        help="run nbconvert with --debug (every kernel message; the tail is printed on a hang)")
    parser.add_argument("--py-spy", action="store_true",
                        help="on a hang, print py-spy dumps of nbconvert and the kernel (pip install py-spy)")
    args = parser.parse_args(argv)
    if args.mechanism:
        return mechanism(args.mechanism)
    if args.notebook is None:
        parser.error("a notebook, or --mechanism N")
    notebook = args.notebook.resolve()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    bad, times = 0, []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                outcome, seconds, text = run_once(notebook, args.timeout, Path(tmp) / f"run{i}.ipynb", args.py_spy,
                                                 args.debug, args.root.resolve())
                times.append(seconds)
                bad += outcome != "ok"
                print(f"run {i + 1:3d}: {outcome:<16} {seconds:6.1f} s", flush=True)
                if outcome != "ok" and (args.verbose or args.py_spy or args.debug):
                    print("    " + text.strip().replace("\n", "\n    "), flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    ok = [t for t in times if t < args.timeout]
    print(f"{notebook.name}: {bad} of {args.runs} runs hung or failed ({100 * bad / args.runs:.0f}%), "
          f"load {args.load}, timeout {args.timeout:g} s; times {min(times):.1f}-{max(times):.1f} s"
          + (f", median of runs under the timeout {sorted(ok)[len(ok) // 2]:.1f} s" if ok else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
