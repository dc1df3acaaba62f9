"""Sandbox containment: timeout, memory, forks, filesystem, network; the next call still works.

What is enforced (see environments/tools/sandbox.py): wall-clock timeout and
RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, a fresh deleted working
directory, an audit hook refusing sockets / writes outside the working
directory / subprocesses / ctypes / imports of native modules that bypass it
(_posixsubprocess, sqlite3, ...), and (where the machine allows) a network
namespace and uid nobody. Full filesystem isolation (mount namespaces) is not
set up; reading files is allowed.
"""

import os
import uuid

from jaxrl_agent.environments.tools import PythonExecutor, SandboxLimits, isolation, run_python


def _next_call_works():
    assert run_python("print(6 * 7)").stdout.strip() == "42"


def test_infinite_loop_times_out():
    result = run_python("while True:\n    pass\n", SandboxLimits(timeout_s=1.0))
    assert result.timed_out and not result.ok and result.duration_s < 5
    tool = PythonExecutor(SandboxLimits(timeout_s=1.0))({"code": "while True: pass"})
    assert not tool.ok and "timed out" in tool.text
    _next_call_works()


def test_ten_gib_allocation_hits_the_memory_limit():
    result = run_python("b = bytearray(10 * 2**30)\nprint('allocated')", SandboxLimits(memory_bytes=512 << 20))
    assert not result.ok and "MemoryError" in result.stderr and "allocated" not in result.stdout
    _next_call_works()


def test_forks_are_limited():
    code = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(64):\n"  # bounded loop: never a fork bomb
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        print('refused', n, type(e).__name__)\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "else:\n"
        "    print('not refused', n)\n"
    )
    result = run_python(code, SandboxLimits(max_processes=8, timeout_s=5))
    words = result.stdout.split()
    assert words[0] == "refused" and int(words[1]) < 8 and words[2] == "BlockingIOError", result
    _next_call_works()


def test_writes_outside_the_working_directory_are_refused():
    name = f"jaxrl_escape_{uuid.uuid4().hex}"
    for path in (f"/tmp/{name}", f"/tmp/../etc/{name}", f"../{name}"):
        result = run_python(f"open({path!r}, 'w').write('x')")
        assert not result.ok and "PermissionError" in result.stderr, result
        assert not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/etc/{name}")
    result = run_python(f"import os\nos.open('/tmp/{name}', os.O_WRONLY | os.O_CREAT)")
    assert not result.ok and not os.path.exists(f"/tmp/{name}")
    for code in ("import os; os.system('true')", "import os; os.remove('/etc/hostname')"):
        assert "PermissionError" in run_python(code).stderr, code
    # Modules whose native code bypasses the audit hook cannot be imported at all.
    for code in ("import subprocess; subprocess.run(['touch', '/tmp/x'])", "import ctypes; ctypes.CDLL(None)"):
        result = run_python(code)
        assert not result.ok and "ImportError: sandbox: importing" in result.stderr, code
    _next_call_works()


def _shared_dir(tmp_path):
    """A directory outside the sandbox's working dir that the sandbox user (maybe nobody) could write."""
    if isolation()["user"] != "nobody":
        return tmp_path
    os.chmod(tmp_path, 0o777)
    for parent in tmp_path.parents:  # pytest's tmp dirs are 0700: let the dropped user traverse them
        if parent == parent.parent or str(parent) in ("/tmp", "/"):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o111)
    return tmp_path


def test_posixsubprocess_fork_exec_is_refused(tmp_path):
    target = _shared_dir(tmp_path) / "fork_exec_pwned"
    code = (  # what the reviewer ran: subprocess's native helper raises no audit event
        "import _posixsubprocess, os\n"
        f"cmd = [b'/bin/sh', b'-c', b'id > {target}']\n"
        "r, w = os.pipe()\n"
        "pid = _posixsubprocess.fork_exec(cmd, [b'/bin/sh'], True, (w,), None, None, -1, -1, -1, -1, -1, -1,\n"
        "                                 r, w, True, False, -1, None, None, None, -1, None, False)\n"
        "os.waitpid(pid, 0)\n"
        "print('ran')\n"
    )
    for prelude in ("", "import importlib\nimportlib.import_module('_posixsubprocess')\n"):
        result = run_python(prelude + code)
        assert not result.ok and "ran" not in result.stdout, result
        assert "ImportError: sandbox: importing '_posixsubprocess' is refused" in result.stderr, result
        assert not target.exists()
    _next_call_works()


def test_sqlite_cannot_create_files_outside(tmp_path):
    target = _shared_dir(tmp_path) / "pwned.db"
    for code in (f"import sqlite3\nsqlite3.connect({str(target)!r}).execute('create table t (x)')",
                 f"import _sqlite3\n_sqlite3.connect({str(target)!r})"):
        result = run_python(code)
        assert not result.ok and "ImportError: sandbox: importing" in result.stderr, result
        assert not target.exists()
    _next_call_works()


def test_other_hook_bypasses_are_refused(tmp_path):
    target = _shared_dir(tmp_path) / "fifo"
    result = run_python(f"import os\nos.mkfifo({str(target)!r})")
    assert not result.ok and "PermissionError" in result.stderr and not target.exists(), result
    for module in ("_posixshmem", "_multiprocessing", "_xxsubinterpreters", "_ctypes"):
        result = run_python(f"import {module}")
        assert not result.ok and f"importing {module!r} is refused" in result.stderr, result
    result = run_python("import numpy, json, math\nprint(int(numpy.arange(4).sum()))")
    assert result.ok and result.stdout.strip() == "6", result  # numpy copes without ctypes


def test_inside_the_working_directory_files_work_and_are_deleted():
    result = run_python("import os\nopen('a.txt', 'w').write('hi')\nprint(open('a.txt').read(), os.getcwd())")
    text, cwd = result.stdout.split()
    assert text == "hi" and not os.path.exists(cwd)


def test_file_size_limit():
    result = run_python("open('big', 'wb').write(b'x' * (4 << 20))", SandboxLimits(max_file_bytes=1 << 20))
    assert not result.ok and "File too large" in result.stderr


def test_network_socket_is_refused():
    result = run_python("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))\nprint('connected')")
    assert not result.ok and "connected" not in result.stdout and "PermissionError" in result.stderr
    assert isolation()["network"] in ("netns", "audit-hook")
    _next_call_works()


def test_output_is_truncated_to_the_budget():
    result = run_python("print('x' * 100000)", SandboxLimits(max_output_bytes=1000))
    assert result.ok and result.truncated and len(result.stdout) == 1000 and result.stdout_bytes == 100001
