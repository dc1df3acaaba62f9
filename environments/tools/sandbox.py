"""Run untrusted Python in a sandboxed subprocess.

Every call gets a fresh temporary working directory (deleted afterwards) and
runs `python -I -B` (isolated mode: no user site, no PYTHON* variables) under:

- a wall-clock timeout (the whole process group is SIGKILLed) and RLIMIT_CPU;
- RLIMIT_AS (address space, so a 10 GiB allocation fails with MemoryError),
  RLIMIT_NPROC (forks), RLIMIT_FSIZE (file size, also bounds captured output),
  RLIMIT_CORE = 0;
- stdout/stderr captured into unlinked temporary files and truncated to a byte
  budget when read back;
- network: when `unshare -n` works (root, or an unprivileged user namespace
  via `unshare -rn`), the child runs in a fresh network namespace with no
  interfaces ("netns"). In every case an audit hook (PEP 578) inside the child
  refuses all `socket.*` events, so creating a socket raises PermissionError;
- an audit hook (PEP 578) in the child, a tripwire that refuses: opening for
  writing, creating, removing, renaming, linking or chmod/chown/utime of any
  path outside the working directory; `subprocess`, `os.system`, `os.exec*`,
  `os.spawn*`, `os.posix_spawn*`, `pty.spawn`, `sqlite3.connect`, all `ctypes`
  events, and `os.fork`/`os.forkpty` when `allow_fork` is False (a forked
  child keeps the hook); importing native modules whose C code acts without
  raising those events (`_posixsubprocess`, `subprocess`, `ctypes`, `sqlite3`,
  `_multiprocessing`, `_posixshmem`, sub-interpreters, `_testcapi`), raised as
  ImportError so libraries with optional imports (numpy's ctypes) still load;
  such modules are also dropped from sys.modules before user code runs.
  `os.mkfifo`/`os.mknod` (no audit event) are replaced by refusing functions.
- user: when the parent runs as root, the child is started through `setpriv`
  as uid/gid 65534 (nobody) with no supplementary groups, keeping only the
  ambient capability CAP_DAC_READ_SEARCH (read any file, e.g. a Python
  installed under a root-only home); the kernel itself then refuses writes to
  root-owned paths (/etc, /usr, ...) and RLIMIT_NPROC counts only sandboxed
  processes. The probe (`isolation()`) falls back to the parent's user when
  this fails.

The boundary is what the OS enforces: rlimits, the network namespace, uid
nobody. The audit hook is a tripwire, not a security boundary: any native
code path that raises no audit event (an extension module not listed above,
a C library doing its own I/O) or that reaches interpreter memory could bypass
or remove it. What is NOT isolated: reading files the (dropped) user may
read, and writing where nobody may write (world-writable dirs such as /tmp)
by such a bypass; without root, only the tripwire stands between the code and
the user's own files. Full filesystem isolation would need mount namespaces /
containers (or seccomp), which this module does not set up.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NOBODY = 65534

_BOOTSTRAP = r'''
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
root = os.path.realpath(cfg["workdir"])
os.chdir(root)
_realpath, _join, _fspath = os.path.realpath, os.path.join, os.fspath
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PATH_EVENTS = {"os.remove": 1, "os.rename": 2, "os.mkdir": 1, "os.rmdir": 1, "os.symlink": 2,
                "os.link": 2, "os.truncate": 1, "os.chmod": 1, "os.chown": 1, "os.utime": 1,
                "shutil.rmtree": 1, "shutil.copyfile": 2, "shutil.move": 2}
_BANNED = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "pty.spawn",
           "sqlite3.connect", "os.fork" if cfg["allow_fork"] is False else "-")
# Native modules whose C code acts without raising the audit events checked here:
# _posixsubprocess.fork_exec runs programs, sqlite opens its own files, ctypes reaches
# raw memory (and could remove this hook), _posixshmem/_multiprocessing create
# /dev/shm objects, sub-interpreters start without this (per-interpreter) hook, and
# _testcapi/_testinternalcapi poke interpreter internals.
_NATIVE = frozenset({"_posixsubprocess", "_ctypes", "ctypes", "_sqlite3", "sqlite3", "_multiprocessing",
                     "_posixshmem", "_testcapi", "_testinternalcapi", "_xxsubinterpreters",
                     "_xxinterpchannels", "_interpreters", "_interpchannels", "_interpqueues"})

def _native(name, filename=None):
    parts = name.split(".") if isinstance(name, str) else []
    if isinstance(filename, str):
        parts.append(os.path.basename(filename).split(".")[0])
    return any(part in _NATIVE for part in parts)

def _inside(path):
    if isinstance(path, int):
        return True
    try:
        p = _realpath(_join(root, _fspath(path)))
    except Exception:
        return False
    if isinstance(p, bytes):
        p = p.decode("utf-8", "replace")
    return p == root or p.startswith(root + os.sep)

def _hook(event, args):
    if event.startswith("socket."):
        raise PermissionError("sandbox: network access is disabled")
    if event.startswith("ctypes."):
        raise PermissionError("sandbox: ctypes is disabled")
    if event == "import":
        if _native(args[0], args[1] if len(args) > 1 else None):
            raise ImportError(f"sandbox: importing {args[0]!r} is refused (native code that bypasses "
                              "the sandbox's checks)", name=args[0] if isinstance(args[0], str) else None)
    if event == "open":
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        if flags & _WRITE and not _inside(args[0]):
            raise PermissionError(f"sandbox: writing outside the working directory is refused: {args[0]!r}")
    elif event in _PATH_EVENTS:
        for p in args[:_PATH_EVENTS[event]]:
            if p is not None and not _inside(p):
                raise PermissionError(f"sandbox: {event} outside the working directory is refused: {p!r}")
    elif event.startswith(_BANNED):
        raise PermissionError(f"sandbox: {event} is disabled")

sys.addaudithook(_hook)
# An already-imported module raises no "import" event: drop the native modules and any
# module holding one, so that user code has to import them again (and is refused).
for _name, _mod in list(sys.modules.items()):
    if _native(_name) or any(isinstance(v, type(sys)) and _native(v.__name__) for v in list(vars(_mod).values())):
        del sys.modules[_name]

def _refuse_node(path, *args, **kwargs):
    raise PermissionError(f"sandbox: creating special files is refused: {path!r}")

import posix  # os.mkfifo/os.mknod raise no audit event: refuse them by name (a tripwire too)
os.mkfifo = os.mknod = posix.mkfifo = posix.mknod = _refuse_node
del posix
del json, resource
import runpy, traceback
main = os.path.join(root, "main.py")
sys.argv = [main]
try:
    runpy.run_path(main, run_name="__main__")
except SystemExit:
    raise
except BaseException as e:
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != main:
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb or e.__traceback__)
    sys.exit(1)
'''


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Attributes:
        timeout_s: wall-clock seconds before the process group is killed.
        memory_bytes: RLIMIT_AS (virtual address space), bytes.
        max_processes: RLIMIT_NPROC (processes of the sandbox user).
        max_file_bytes: RLIMIT_FSIZE, bytes (any file, including captured output).
        max_output_bytes: bytes of stdout and of stderr returned (the rest is cut).
        allow_fork: when False, os.fork is refused by the audit hook as well.
    """

    timeout_s: float = 5.0
    memory_bytes: int = 1 << 30
    max_processes: int = 16
    max_file_bytes: int = 16 << 20
    max_output_bytes: int = 8192
    allow_fork: bool = True

    def __post_init__(self):
        for name in ("timeout_s", "memory_bytes", "max_processes", "max_file_bytes", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: expected a value > 0, got {getattr(self, name)!r}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run produced.

    Attributes:
        stdout, stderr: decoded (utf-8, invalid bytes replaced), truncated output.
        returncode: exit status (negative: killed by that signal).
        timed_out: the wall-clock timeout fired.
        truncated: stdout or stderr was cut to max_output_bytes.
        duration_s: wall-clock seconds.
        stdout_bytes, stderr_bytes: bytes the program wrote to each stream
            (before truncation; at most RLIMIT_FSIZE).
    """

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    truncated: bool
    duration_s: float
    stdout_bytes: int
    stderr_bytes: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=None)
def isolation() -> dict[str, object]:
    """Which isolation this machine allows (probed once per process).

    Returns:
        {"network": "netns" | "audit-hook", "user": "nobody" | "same",
         "prefix": [command prefix], e.g. ["unshare", "-n", "setpriv", ...]}.
    """
    prefix: list[str] = []
    unshare = shutil.which("unshare")
    flags = "-n" if os.geteuid() == 0 else "-rn"
    if unshare and _works([unshare, flags, "true"]):
        prefix = [unshare, flags]
    user = "same"
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        drop = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        if _works(prefix + drop + [sys.executable, "-I", "-B", "-c", "import traceback, runpy"]):
            prefix, user = prefix + drop, "nobody"
    return {"network": "netns" if unshare and prefix[:2] == [unshare, flags] else "audit-hook",
            "user": user, "prefix": prefix}


def _read(f, budget: int) -> tuple[str, int]:
    """The first `budget` bytes of `f`, decoded, and the size of `f` in bytes."""
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    return f.read(budget).decode("utf-8", "replace"), size


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), *, stdin: str = "") -> SandboxResult:
    """Runs `code` as `main.py` in a fresh sandbox (see the module docstring).

    Args:
        code: Python source.
        limits: resource limits.
        stdin: text fed to the program's standard input.

    Returns:
        SandboxResult; never raises for anything the code does.

    Raises:
        TypeError: when `code` is not a string.
    """
    if not isinstance(code, str):
        raise TypeError(f"code: expected str, got {type(code).__name__}")
    iso = isolation()
    drop_to = NOBODY if iso["user"] == "nobody" else None
    workdir = tempfile.mkdtemp(prefix="jaxrl_sandbox_")
    start = time.perf_counter()
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(code)
        if drop_to is not None:
            os.chown(workdir, drop_to, drop_to)
        cpu = int(limits.timeout_s) + 1
        cfg = {
            "workdir": workdir,
            "allow_fork": limits.allow_fork,
            "rlimits": {
                "RLIMIT_CPU": cpu,
                "RLIMIT_AS": int(limits.memory_bytes),
                "RLIMIT_NPROC": int(limits.max_processes),
                "RLIMIT_FSIZE": int(limits.max_file_bytes),
                "RLIMIT_CORE": 0,
            },
        }
        cmd = list(iso["prefix"]) + [sys.executable, "-I", "-B", "-c", _BOOTSTRAP, json.dumps(cfg)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
            inp.write(stdin.encode("utf-8", "replace"))
            inp.seek(0)
            proc = subprocess.Popen(cmd, stdin=inp, stdout=out, stderr=err, cwd=workdir, env=env,
                                    close_fds=True, process_group=0)
            timed_out = False
            try:
                proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(proc.pid)  # also reaps children left behind by a finished program
            proc.wait()
            stdout, out_bytes = _read(out, limits.max_output_bytes)
            stderr, err_bytes = _read(err, limits.max_output_bytes)
        return SandboxResult(stdout=stdout, stderr=stderr, returncode=proc.returncode, timed_out=timed_out,
                             truncated=max(out_bytes, err_bytes) > limits.max_output_bytes,
                             duration_s=time.perf_counter() - start, stdout_bytes=out_bytes,
                             stderr_bytes=err_bytes)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
