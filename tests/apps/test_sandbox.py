"""The sandbox that runs generated code: every way a program can end maps to one status, and
nothing a program does (hang, crash, fork bomb, writes, memory) reaches the caller."""

import ast
import os
import glob
import tempfile
import time

import pytest

from specref.apps import sandbox
from specref.apps.sandbox import ResourceLimits, run_program

FAST = ResourceLimits(seconds=5.0)
namespaces_only = pytest.mark.skipif(
    sandbox.isolation() != "namespaces",
    reason="needs root and util-linux unshare/setpriv (isolation 'namespaces')",
)


def sandbox_uid_processes() -> list[int]:
    """Pids of processes running under a sandbox uid (the range run_program draws from)."""
    pids = []
    for status_path in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status_path) as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue  # the process ended while we looked
        if sandbox._UID_RANGE[0] <= int(uid_line.split()[1]) < sandbox._UID_RANGE[1]:
            pids.append(int(status_path.split("/")[2]))
    return pids


def test_passing_program():
    result = run_program("def f(x):\n    return x + 1\nassert f(1) == 2\nprint('ok')\n", FAST)
    assert result.status == "passed" and result.passed and result.returncode == 0
    assert result.stdout_tail.strip() == "ok"
    assert result.seconds > 0


def test_failing_assert():
    result = run_program("assert 1 + 1 == 3, 'arithmetic'\n", FAST)
    assert result.status == "failed" and not result.passed
    assert "AssertionError: arithmetic" in result.stderr_tail


def test_syntax_error_fails():
    result = run_program("def f(:\n", FAST)
    assert result.status == "failed" and "SyntaxError" in result.stderr_tail


def test_hang_times_out_and_is_killed():
    start = time.perf_counter()
    result = run_program("import time\nwhile True:\n    time.sleep(0.01)\n", ResourceLimits(seconds=1.0))
    assert result.status == "timeout" and result.returncode is None
    assert time.perf_counter() - start < 5.0, "the kill after the time limit took too long"


def test_hang_that_ignores_sigterm_and_children_is_killed():
    program = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"  # leave the process group
        "while True:\n"
        "    time.sleep(0.01)\n"
    )
    result = run_program(program, ResourceLimits(seconds=1.0))
    assert result.status == "timeout"
    if sandbox.isolation() == "namespaces":
        time.sleep(0.2)
        assert sandbox_uid_processes() == []


def test_abort_is_a_crash():
    result = run_program("import os\nos.abort()\n", FAST)
    assert result.status == "crashed" and result.returncode == -6  # SIGABRT


def test_segfault_is_a_crash():
    result = run_program("import ctypes\nctypes.string_at(0)\n", FAST)
    assert result.status == "crashed" and result.returncode == -11  # SIGSEGV


def test_memory_hog_hits_the_limit():
    result = run_program("x = bytearray(8 * 1024**3)\n", ResourceLimits(seconds=5.0, memory_bytes=512 << 20))
    assert result.status == "memory"
    # the negative control: the same allocation at 1/100 of the size is fine under the same limit
    small = run_program("x = bytearray(8 * 1024**3 // 100)\n", ResourceLimits(seconds=5.0, memory_bytes=512 << 20))
    assert small.status == "passed", small.stderr_tail


def test_big_file_hits_the_file_size_limit():
    result = run_program("open('big', 'wb').write(b'x' * (4 << 20))\n", ResourceLimits(seconds=5.0, file_bytes=1 << 20))
    assert result.status in ("failed", "crashed")  # SIGXFSZ kills the writer
    assert not result.passed


def test_no_environment_leaks(monkeypatch):
    monkeypatch.setenv("SECRET", "hunter2-do-not-leak")
    result = run_program("import os\nprint(dict(os.environ))\n", FAST)
    assert result.passed, result.stderr_tail
    assert "hunter2" not in result.stdout_tail
    environment = ast.literal_eval(result.stdout_tail)  # the dict the program printed
    assert environment["PATH"] == sandbox.SANDBOX_PATH
    # LC_CTYPE is set by the interpreter itself in the C locale (PEP 538), not inherited
    assert set(environment) <= {"PATH", "LC_CTYPE"}, environment


def test_temp_dir_is_removed():
    result = run_program("import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd())\n", FAST)
    assert result.passed, result.stderr_tail
    workdir = result.stdout_tail.strip()
    assert os.path.basename(workdir) == "work"
    assert not os.path.exists(workdir) and not os.path.exists(os.path.dirname(workdir))


def test_temp_dir_is_removed_after_a_timeout_too():
    result = run_program(
        "import os, time\nprint(os.getcwd(), flush=True)\nopen('x', 'w').write('y')\ntime.sleep(60)\n",
        ResourceLimits(seconds=1.0),
    )
    assert result.status == "timeout"
    assert not os.path.exists(os.path.dirname(result.stdout_tail.strip()))


@namespaces_only
def test_writes_outside_the_work_dir_fail():
    target_dir = tempfile.mkdtemp(prefix="specref-target-")  # root-owned, like the repository
    os.chmod(target_dir, 0o777)  # even world-writable: the read-only mount must stop the write
    try:
        candidates = [
            os.path.join(target_dir, "escaped.txt"),
            "/tmp/specref-escaped.txt",
            "/var/tmp/specref-escaped.txt",
            "/dev/shm/specref-escaped.txt",
            os.path.join(os.path.dirname(os.path.dirname(sandbox.__file__)), "escaped.txt"),
        ]
        program = (
            "import errno\n"
            f"for path in {candidates!r}:\n"
            "    try:\n"
            "        open(path, 'w').write('x')\n"
            "        print('WROTE', path)\n"
            "    except OSError as e:\n"
            "        print('refused', path, errno.errorcode[e.errno])\n"
            "open('inside.txt', 'w').write('fine')\n"
            "print('inside ok')\n"
        )
        result = run_program(program, FAST)
        assert result.passed, result.stderr_tail
        assert "WROTE" not in result.stdout_tail
        assert result.stdout_tail.count("refused") == len(candidates)
        assert "inside ok" in result.stdout_tail  # the negative control: its own directory works
        for path in candidates:
            assert not os.path.exists(path)
    finally:
        os.rmdir(target_dir)


@namespaces_only
def test_runs_unprivileged_without_network():
    program = (
        "import os, socket\n"
        "print(os.getuid())\n"
        "print(os.getgid())\n"
        "print(os.getgroups())\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
        "    print('NETWORK')\n"
        "except OSError:\n"
        "    print('no network')\n"
    )
    result = run_program(program, FAST)
    assert result.passed, result.stderr_tail
    uid, gid, groups, network = result.stdout_tail.strip().splitlines()
    assert int(uid) >= sandbox._UID_RANGE[0] and int(gid) == int(uid)
    assert groups == "[]"
    assert network == "no network"


@namespaces_only
def test_fork_bomb_is_contained():
    # Forks forever, swallowing the errors, each child leaving the process group.
    bomb = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        "    except OSError:\n"
        "        time.sleep(0.001)\n"
    )
    limits = ResourceLimits(seconds=2.0, processes=32)
    result = run_program(bomb, limits)
    assert result.status == "timeout"
    time.sleep(0.2)
    assert sandbox_uid_processes() == [], "fork bomb processes survived the sandbox"
    # The process limit really bound: count how many processes a bomb got.
    counter = (
        "import os, time\n"
        "n = 0\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    counted = run_program(counter, limits)
    assert counted.passed, counted.stderr_tail
    assert 0 < int(counted.stdout_tail.strip()) < limits.processes
    time.sleep(0.2)
    assert sandbox_uid_processes() == []
    # and the machine is fine afterwards: this process can still fork and run programs
    assert run_program("print(6 * 7)\n", FAST).stdout_tail.strip() == "42"


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="program text"):
        run_program(b"print(1)")
    with pytest.raises(ValueError, match="seconds"):
        ResourceLimits(seconds=0)


def test_classify():
    assert sandbox.classify(0, False, "") == "passed"
    assert sandbox.classify(None, True, "") == "timeout"
    assert sandbox.classify(1, False, "Traceback...\nMemoryError\n") == "memory"
    assert sandbox.classify(-9, False, "") == "crashed"
    assert sandbox.classify(1, False, "AssertionError") == "failed"
