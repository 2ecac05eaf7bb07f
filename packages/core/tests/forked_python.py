"""`python -c CODE` for the tests, forked from a server that has already imported torch.

Many tests need a process of their own (the PJRT client is one per process, and some
variables are read when a process starts). A fresh interpreter here spends 8-10 s of CPU
before its first op: torch, jax, and `torch._dynamo` and `torch.distributed.tensor`, which
torch itself imports on the first `__torch_dispatch__` op. The core tests start about two
hundred of them. `run` forks them instead from one server per test process that has made
those imports (`PRELOAD`, never `torch_xla` and never a runtime), so each costs the
imports of torch_xla alone.

A forked run behaves as `python -c CODE ARGS...` started with `env` in the caller's working
directory: `sys.argv` is `["-c", *ARGS]`, `sys.path[0]` is `""`, `__main__` is a new module,
the exit status is the interpreter's (an uncaught exception prints its traceback and exits
1, `sys.exit` and signals as usual), and atexit handlers and non-daemon threads run at the
end, because the child leaves through the interpreter's own shutdown. stdout and stderr
are the caller's pipes; stdin is /dev/null.

What a fork cannot give, `run` leaves to a real interpreter (`fresh=True`, or
automatically):
- a variable read while torch, jax or numpy import: the run is forked only when `env`
  differs from the server's environment in variables torch_xla reads at run time
  (`_LATE_VARIABLES`); any other difference (`JAX_*`, `PYTHONPATH`, `XLA_FLAGS`, ...)
  starts a fresh interpreter;
- a test of what an import loads (`"jax" not in sys.modules`): `fresh=True`;
- a platform without `os.fork` or Unix sockets, or a server that failed to start;
- `TORCH_XLA_TEST_FRESH_PYTHON=1`: every run fresh (to compare, or to rule this out).
"""

from __future__ import annotations

import atexit
import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

# Imported by the server before it forks: what every test process imports before its
# first op. Not torch_xla: its variables are read when it imports.
PRELOAD = ("torch", "torch._dynamo", "torch.distributed.tensor", "jax", "numpy")
# Variables that may differ from the server's in a forked run: read by torch_xla, its
# plugins or the test's own code, none by what PRELOAD imports. XLA_FLAGS and
# XLA_PYTHON_CLIENT_* are XLA's own (read by jaxlib), so they are not among them.
_LATE_PREFIXES = ("PJRT_", "XLA_", "TORCH_XLA_", "CPU_", "TPU_", "NEURON_", "PYTEST_",
                  "XMP_", "MASTER_")
_LATE_NAMES = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                         "GROUP_RANK", "SYNC_TENSORS_OPBYOP", "GET_TENSORS_OPBYOP"})
_XLA_OWN = ("XLA_FLAGS", "XLA_PYTHON_CLIENT_")
FRESH_ENV = "TORCH_XLA_TEST_FRESH_PYTHON"
_READY = b"ready\n"
_COUNT = struct.Struct("q")


def run(args: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
        fresh: bool = False) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, *args], env=env, stdin=subprocess.DEVNULL,
    capture_output=True, text=True, timeout=timeout)`, forked from the server when `args`
    is `["-c", CODE, ...]` and nothing above asks for a real interpreter. Either way stdin
    is empty: a test process's own stdin (a pytest-xdist worker's) may hold anything."""
    env = dict(os.environ if env is None else env)
    server = None if fresh or args[:1] != ["-c"] else _server_for(env)
    if server is None:
        return subprocess.run([sys.executable, *args], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    return server.run(args, env, timeout)


def _late(name: str) -> bool:
    if name.startswith(_XLA_OWN):
        return False
    return name in _LATE_NAMES or name.startswith(_LATE_PREFIXES)


def _differs_early(env: dict[str, str], base: dict[str, str]) -> bool:
    """Whether `env` and `base` differ in a variable that may be read at import."""
    return any(not _late(k) for k in env.keys() ^ base.keys()) or any(
        base[k] != v and not _late(k) for k, v in env.items() if k in base)


# --- the caller's side ---------------------------------------------------------------

class _Server:
    """One fork server, started by this process with its environment of the time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.folder = tempfile.mkdtemp(prefix="torch-xla-forks-")
        self.path = os.path.join(self.folder, "socket")
        here = os.path.dirname(os.path.abspath(__file__))
        boot = (f"import sys; sys.path.insert(0, {here!r}); import forked_python; "
                f"del sys.path[0]; forked_python.serve({self.path!r})")
        # stdin stays open while this process lives: the server ends at its EOF.
        self.process = subprocess.Popen(
            [sys.executable, "-c", boot], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self.folder)
        ready = self.process.stdout.readline()
        self.process.stdout.close()
        if ready != _READY:
            self.process.wait()
            raise RuntimeError(f"the fork server ended while importing {PRELOAD} "
                               f"(status {self.process.returncode})")
        atexit.register(self.close)

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        try:
            os.unlink(self.path)
            os.rmdir(self.folder)
        except OSError:
            pass

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, args: list[str], env: dict[str, str], timeout: float | None
            ) -> subprocess.CompletedProcess:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = pickle.dumps((args, env, os.getcwd()))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(self.path)
                socket.send_fds(conn, [_COUNT.pack(len(request))], [out_w, err_w])
                conn.sendall(request)
            finally:
                os.close(out_w)
                os.close(err_w)
            pid = _receive_count(conn)
            outputs = [_Reader(out_r), _Reader(err_r)]
            conn.settimeout(timeout)
            try:
                status = _receive_count(conn)
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                _receive_count(conn)
                out, err = (r.text(5) for r in outputs)
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout,
                                                output=out, stderr=err) from None
        out, err = (r.text(None) for r in outputs)
        return subprocess.CompletedProcess([sys.executable, *args], status, out, err)


class _Reader(threading.Thread):
    """Reads one pipe to its end (the child and whatever it started hold it open)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.chunks = fd, []
        self.start()

    def run(self) -> None:
        with open(self.fd, "rb", closefd=True) as pipe:
            while chunk := pipe.read1(65536):
                self.chunks.append(chunk)

    def text(self, timeout: float | None) -> str:
        """What was read, decoded as `subprocess.run(text=True)` does."""
        self.join(timeout)
        data = b"".join(self.chunks)
        return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _receive_count(conn: socket.socket) -> int:
    data = b""
    while len(data) < _COUNT.size:
        chunk = conn.recv(_COUNT.size - len(data))
        if not chunk:
            raise RuntimeError("the tests' fork server ended during a run")
        data += chunk
    return _COUNT.unpack(data)[0]


_server: _Server | None = None
_lock = threading.Lock()
_failed = False


def _server_for(env: dict[str, str]) -> _Server | None:
    """This process's server when `env` may run in it, started on first use."""
    global _server, _failed
    if _failed or os.environ.get(FRESH_ENV) == "1" or not hasattr(os, "fork") or not hasattr(
            socket, "AF_UNIX"):
        return None
    with _lock:
        if _server is None or not _server.alive():
            base = {k: v for k, v in os.environ.items() if not _late(k)}
            try:
                _server = _Server(base)
            except (OSError, RuntimeError) as error:
                _failed = True
                print(f"forked_python: runs use fresh interpreters ({error})", file=sys.stderr)
                return None
        server = _server
    return None if _differs_early(env, server.env) else server


# --- the server's side ---------------------------------------------------------------

def serve(path: str) -> None:
    """Import PRELOAD, then fork one child per request on the Unix socket `path` until
    stdin ends. A child returns from here into `_become` and leaves through the
    interpreter's normal shutdown."""
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.write(1, _READY)
    os.dup2(devnull, 1)
    selector = selectors.DefaultSelector()
    for fd in (0, wake_r, listener.fileno()):
        selector.register(fd, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.fd == 0:
                if not os.read(0, 4096):
                    os._exit(0)
            elif key.fd == wake_r:
                os.read(wake_r, 4096)
                _reap(children)
            else:
                conn, _ = listener.accept()
                request = _request(conn)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    for other in (listener, *children.values()):
                        other.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    return _become(conn, devnull, *request)
                for fd in request[3:]:
                    os.close(fd)
                conn.sendall(_COUNT.pack(pid))
                children[pid] = conn


def _request(conn: socket.socket) -> tuple:
    """(args, env, cwd, stdout fd, stderr fd) of one run."""
    head, fds, _, _ = socket.recv_fds(conn, _COUNT.size, 2)
    size = _COUNT.unpack(head)[0]
    data = b""
    while len(data) < size:
        data += conn.recv(size - len(data))
    return (*pickle.loads(data), *fds)


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(_COUNT.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass  # the caller is gone
            conn.close()


def _become(conn: socket.socket, devnull: int, args: list[str], env: dict[str, str],
            cwd: str, stdout: int, stderr: int) -> None:
    """Turn this forked child into `python -c CODE ARGS...` and run CODE."""
    import builtins
    import importlib.machinery
    import types
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, target in ((devnull, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if "multiprocessing.process" in sys.modules:  # where a -c interpreter started
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = os.path.abspath(cwd)
    if "numpy.random" in sys.modules:  # a fresh interpreter draws a fresh seed
        sys.modules["numpy.random"].seed()
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    main.__loader__ = importlib.machinery.BuiltinImporter
    main.__annotations__ = {}
    sys.modules["__main__"] = main
    sys.argv = ["-c", *args[2:]]
    sys.path[0] = ""
    code = compile(args[1], "<string>", "exec")
    try:
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as error:  # as the interpreter: the traceback, then status 1
        error.__traceback__ = error.__traceback__.tb_next  # from CODE's frame down
        sys.excepthook(type(error), error, error.__traceback__)
        raise SystemExit(1) from None
    raise SystemExit(0)

