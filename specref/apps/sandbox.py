"""Run an untrusted Python program (a generated HumanEval completion) and report how it ended.

Every program runs in a fresh `python3 -I` interpreter (isolated mode: no PYTHON* variables, no
user site-packages, script directory not on sys.path) in a child process, with:

- a wall-clock limit: on timeout the whole process group is killed with SIGKILL;
- rlimits on every process of the sandbox: address space (RLIMIT_AS, so a memory hog gets a
  MemoryError), file size (RLIMIT_FSIZE, which also caps what stdout/stderr can write),
  CPU seconds (RLIMIT_CPU, a second guard behind the wall clock), open files and no core dumps;
- an empty environment: only PATH is set, nothing of the parent's environment (tokens,
  passwords, SECRET=...) is inherited;
- a temporary working directory, removed afterwards whatever happened.

When we are root and util-linux's `unshare`, `mount` and `setpriv` exist (isolation
"namespaces", the usual case on this project's machines), the program additionally runs:

- in new PID, mount, network and IPC namespaces. The PID namespace is what really contains a
  fork bomb: when its first process dies the kernel kills every process in it, even ones that
  left the process group with setsid(); `unshare --kill-child` ties that first process to the
  one we kill on timeout. Without a network namespace the code could reach the network; with it,
  it has only a loopback device that is down.
- as a fresh unprivileged uid/gid (a random number no account uses, chosen per run) with no
  supplementary groups and no_new_privs set, so RLIMIT_NPROC applies (root ignores it) and
  counts only this run's processes: a fork bomb stops at `ResourceLimits.processes`;
- with every mount of the machine remounted read-only inside its mount namespace, except the
  working directory (bound onto itself first). World-writable places such as /tmp, /var/tmp,
  /run/lock and /dev/shm become read-only for it, and files owned by root are not writable by
  its uid anyway; so it cannot write outside its directory. Device nodes such as /dev/null stay
  usable (read-only mounts do not apply to them).

What is NOT prevented: reading files that are world-readable (the code can read the repository
and the system); using CPU and memory up to the limits for up to the time limit (two cores are
shared with the rest of the run); kernel exploits. This is a guard against buggy or careless
generated code, not a security boundary against a determined attacker; a container or VM is.

Without root or those tools (isolation "plain"), only the interpreter, limits, environment,
working directory and process-group kill apply: a fork bomb can then escape the process group
with setsid() and writes to world-writable directories are possible. `isolation()` says which.
"""

import dataclasses
import functools
import os
import resource
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STATUSES = ("passed", "failed", "timeout", "crashed", "memory")

# The only environment variable a sandboxed program sees.
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

# Filesystem types that are left as they are inside the mount namespace: the fresh /proc that
# `unshare --mount-proc` mounts for the PID namespace must stay usable by the interpreter.
_KEEP_WRITABLE_TYPES = ("proc",)

# Sandbox uids are drawn from this range: far above any account on a normal system.
_UID_RANGE = (1 << 20, 1 << 30)


@dataclasses.dataclass(frozen=True)
class ResourceLimits:
    seconds: float = 10.0  # wall-clock limit for the whole program, start to exit
    memory_bytes: int = 1 << 30  # RLIMIT_AS per process (virtual address space)
    processes: int = 32  # RLIMIT_NPROC for the sandbox uid (namespaces isolation only)
    file_bytes: int = 8 << 20  # RLIMIT_FSIZE: largest file any sandboxed process may write
    open_files: int = 64  # RLIMIT_NOFILE

    def __post_init__(self):
        if not self.seconds > 0:
            raise ValueError(f"ResourceLimits.seconds must be > 0, got {self.seconds}")
        for name in ("memory_bytes", "processes", "file_bytes", "open_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"ResourceLimits.{name} must be a positive integer, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    status: str  # one of STATUSES
    seconds: float  # wall-clock time from start to exit (or to the kill on timeout)
    returncode: int | None  # exit code; negative = killed by that signal; None on timeout
    stderr_tail: str  # the last `tail_chars` characters the program wrote to stderr
    stdout_tail: str  # same for stdout

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "passed": self.passed}


@functools.lru_cache(maxsize=None)
def isolation() -> str:
    """Say which isolation run_program gives here: "namespaces" or "plain" (see the module doc)."""
    if os.geteuid() != 0:
        return "plain"
    if not all(shutil.which(tool) for tool in ("unshare", "mount", "setpriv", "sh")):
        return "plain"
    probe = subprocess.run(
        ["unshare", "--pid", "--mount", "--net", "--ipc", "--fork", "--kill-child", "true"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"PATH": SANDBOX_PATH},
    )
    return "namespaces" if probe.returncode == 0 else "plain"


def others_can_execute(path: str) -> bool:
    """True if a user with no relation to the file's owner or group can run `path`."""
    path = os.path.realpath(path)
    parts = [path] + [os.path.dirname(path)]
    while parts[-1] != "/":
        parts.append(os.path.dirname(parts[-1]))
    return all(os.stat(part).st_mode & 0o001 for part in parts)


@functools.lru_cache(maxsize=None)
def interpreter() -> str:
    """The python3 the sandbox runs: this one if the sandbox uid may execute it, else the system's."""
    if isolation() == "plain":
        return sys.executable
    for candidate in (sys.executable, shutil.which("python3", path=SANDBOX_PATH)):
        if candidate and others_can_execute(candidate):
            return candidate
    raise RuntimeError(
        f"no python3 that an unprivileged user may execute: {sys.executable} sits in a directory "
        f"closed to others and there is no python3 on {SANDBOX_PATH}"
    )


def writable_mounts() -> list[str]:
    """Mount points of this machine that are mounted read-write (and are not /proc)."""
    points = []
    with open("/proc/self/mounts") as f:
        for line in f:
            _, point, fs_type, options = line.split()[:4]
            point = point.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            if fs_type in _KEEP_WRITABLE_TYPES or point == "/proc" or point.startswith("/proc/"):
                continue
            if options.split(",")[0] == "rw" and point not in points:
                points.append(point)
    return points


def confine_script(workdir: str, uid: int, command: list[str]) -> str:
    """The shell script that runs as pid 1 of the new namespaces: lock the filesystem, drop root, run."""
    lines = ["set -e", f"mount --bind {shlex.quote(workdir)} {shlex.quote(workdir)}"]
    lines += [f"mount -o remount,bind,ro {shlex.quote(point)}" for point in writable_mounts()]
    lines.append(f"cd {shlex.quote(workdir)}")
    # No `exec`: the shell stays pid 1 of the namespace (pid 1 ignores signals it has no handler
    # for, which would hide an os.abort()), waits for the program and exits with its status,
    # 128 + n if signal n killed it.
    lines.append(
        f"setpriv --reuid={uid} --regid={uid} --clear-groups --no-new-privs -- "
        + f"env -i PATH={shlex.quote(SANDBOX_PATH)} "  # the shell's PWD, OLDPWD, ... stay behind
        + " ".join(shlex.quote(c) for c in command)
    )
    return "\n".join(lines)


def _set_limits(limits: ResourceLimits, count_processes: bool) -> None:
    """Run in the child between fork and exec: apply the rlimits (inherited by every descendant)."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    cpu = int(limits.seconds) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if count_processes:  # only for a sandbox uid of its own: RLIMIT_NPROC counts all of a uid's processes
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


def _tail(path: str, chars: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 4 * chars))
        return f.read().decode("utf-8", errors="replace")[-chars:]


def classify(returncode: int | None, timed_out: bool, stderr_tail: str) -> str:
    """Turn how the program ended into one of STATUSES."""
    if timed_out:
        return "timeout"
    if returncode == 0:
        return "passed"
    if "MemoryError" in stderr_tail:
        return "memory"
    if returncode < 0:
        return "crashed"
    return "failed"


def run_program(source: str, limits: ResourceLimits = ResourceLimits(), tail_chars: int = 2000) -> SandboxResult:
    """Write `source` to prog.py in a fresh temporary directory and run it there under `limits`."""
    if not isinstance(source, str):
        raise ValueError(f"run_program expects the program text as str, got {type(source).__name__}")
    mode = isolation()
    outer = tempfile.mkdtemp(prefix="specref-sandbox-")  # root-owned: holds the logs
    try:
        workdir = os.path.join(outer, "work")
        os.mkdir(workdir, 0o700)
        with open(os.path.join(workdir, "prog.py"), "w", encoding="utf-8") as f:
            f.write(source)
        command = [interpreter(), "-I", "prog.py"]
        if mode == "namespaces":
            uid = _UID_RANGE[0] + secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0])
            os.chmod(outer, 0o711)  # the sandbox uid may pass through, not list or write
            os.chown(workdir, uid, uid)
            command = [
                "unshare", "--pid", "--mount", "--net", "--ipc", "--fork", "--kill-child",
                "--mount-proc", "--propagation", "private",
                "sh", "-c", confine_script(workdir, uid, command),
            ]
        stdout_path, stderr_path = os.path.join(outer, "stdout"), os.path.join(outer, "stderr")
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(
                command, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env={"PATH": SANDBOX_PATH}, start_new_session=True, close_fds=True,
                preexec_fn=functools.partial(_set_limits, limits, mode == "namespaces"),
            )
            timed_out = False
            try:
                proc.wait(timeout=limits.seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            seconds = time.perf_counter() - start
            _kill_group(proc.pid)  # stragglers too (plain isolation); no-op if all are gone
            proc.wait()
        returncode = None if timed_out else proc.returncode
        if mode == "namespaces" and returncode is not None and returncode > 128:
            returncode = -(returncode - 128)  # the shell's 128 + n means "killed by signal n"
        stderr_tail = _tail(stderr_path, tail_chars)
        status = classify(returncode, timed_out, stderr_tail)
        return SandboxResult(status, seconds, returncode, stderr_tail, _tail(stdout_path, tail_chars))
    finally:
        shutil.rmtree(outer, ignore_errors=True)
        if os.path.exists(outer):
            raise RuntimeError(f"could not remove the sandbox directory {outer}")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
