"""`torch_xla.debug.profiler` (imported as `xp`): trace events, step markers and trace capture.

PyTorch/XLA's profiler API over jax's profiler, the TSL profiler inside jaxlib.
`Trace` and `StepTrace` mark regions of the program; a trace records them with
the runtime's own events (`PjRtComputationClient::Compile`, `...::ExecuteComputation`,
`...::TransferToDevice`) and the device's. A trace is taken either in the program
(`start_trace` / `stop_trace`) or from outside it: the program runs `start_server`
and a client (`trace`, or TensorBoard's profile plugin) asks that server for one.
Either way an XSpace protobuf lands in `<log_dir>/plugins/profile/<run>/<host>.xplane.pb`,
the layout TensorBoard's profile plugin (tensorboard-plugin-profile, xprof) reads.

Importing this module imports jax; `import torch_xla` does not import it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import gzip
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

# jaxlib's profiler binding: jax.profiler keeps one server in a global, but PyTorch/XLA's
# `start_server` hands the server to the caller, whose reference decides its lifetime;
# and jax.profiler's session state tells whether a recording session is jax's own.
from jax._src import profiler as jax_profiler
from jax._src.lib import _profiler
from jax.profiler import TraceAnnotation

import torch_xla
from torch_xla import runtime as xr
from torch_xla.core import xla_model as xm
from torch_xla.lazy import ir

__all__ = [
    "ProfilerServer",
    "StepTrace",
    "Trace",
    "get_tracer_marked_step",
    "set_tracer_marked_step",
    "start_server",
    "start_trace",
    "stop_trace",
    "trace",
    "trace_detached",
    "trace_me",
]

_F = TypeVar("_F", bound=Callable[..., Any])

# --- step markers -------------------------------------------------------------------

_TRACER_MARKED_STEP = False


def set_tracer_marked_step(value: bool) -> None:
    """Record whether a `StepTrace` has marked the current step (it syncs on exit)."""
    global _TRACER_MARKED_STEP
    _TRACER_MARKED_STEP = value


def get_tracer_marked_step() -> bool:
    return _TRACER_MARKED_STEP


class Trace(TraceAnnotation):
    """A named region of the program: `with xp.Trace('forward'): ...`.

    The region appears as an event named `name` on the trace timeline of the thread
    that ran it, with the keyword arguments as its arguments. The ops recorded inside it
    carry `name` in their HLO metadata (`name/aten__mm`), so the device's part of a trace
    groups their instructions under it too. Outside a trace it costs about a
    microsecond."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self._outer_scope: str | None = None
        super().__init__(name, **kwargs)

    def __enter__(self) -> Trace:
        self._outer_scope = ir.push_scope(self.name)
        super().__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        ir.pop_scope(self._outer_scope)
        super().__exit__(*exc_info)


class StepTrace(Trace):
    """One training step: `with xp.StepTrace('train_step', step_num=i): ...`.

    A step event, from which the profile plugin computes per-step statistics. Leaving
    it runs the step's pending computation (`torch_xla.sync()`), inside the event."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, _r=1, **kwargs)  # _r=1: TSL's mark of a step event

    def __enter__(self) -> StepTrace:
        set_tracer_marked_step(True)
        return super().__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        # the step is marked inside the event but outside the scope, which must be closed
        # when a step is marked
        ir.pop_scope(self._outer_scope)
        try:
            torch_xla.sync()
        finally:
            TraceAnnotation.__exit__(self, *exc_info)


def trace_me(scope: str) -> Callable[[_F], _F]:
    """Decorator: every call of the function is a `Trace(scope)` region."""

    def decorate(func: _F) -> _F:
        @functools.wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            with Trace(scope):
                return func(*args, **kwargs)

        return traced  # type: ignore[return-value]

    return decorate


# --- traces taken in the program ----------------------------------------------------


class _ProfileState:
    """The trace `start_trace` started, if any."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.session: Any = None
        self.log_dir = ""
        self.create_perfetto_trace = False


_state = _ProfileState()


def start_trace(
    log_dir: str | os.PathLike[str],
    *,
    create_perfetto_trace: bool = False,
    host_tracer_level: int = 2,
    python_tracer_level: int = 0,
) -> None:
    """Start recording a trace of this process; `stop_trace` writes it under `log_dir`.

    Only one trace may run at a time. The tracer levels are TSL's: host 1 records only
    user events (`Trace`), 2 adds the runtime's, 3 is verbose; python 1 records every
    Python call (large traces). The device's tracer is always on. With
    `create_perfetto_trace` the trace is also written as a Chrome trace JSON that
    https://ui.perfetto.dev opens."""
    with _state.lock:
        if _state.session is not None:
            raise RuntimeError(
                f"A profile is already being recorded (into {_state.log_dir!r}). "
                "Only one profile may be run at a time. Call xp.stop_trace() first."
            )
        # The device's tracer registers with its PJRT client: start the client first,
        # or a session started before the first device use records no device events.
        xr.process_index()
        options = _profiler.ProfileOptions()
        options.host_tracer_level = host_tracer_level
        options.python_tracer_level = python_tracer_level
        options.raise_error_on_start_failure = True
        _state.session = _profiler.ProfilerSession(options)
        _state.log_dir = os.fspath(log_dir)
        _state.create_perfetto_trace = create_perfetto_trace


def stop_trace() -> None:
    """Stop the trace `start_trace` started and write it to its `log_dir`.

    The file is `<log_dir>/plugins/profile/<run>/<host>.xplane.pb`, `<run>` the time
    (`2024_01_31_12_00_00`); in a job of several processes `<host>` is
    `<hostname>_process<k>`, so each process writes its own file."""
    with _state.lock:
        session = _state.session
        if session is None:
            raise RuntimeError("No profile started: call xp.start_trace(log_dir) first.")
        log_dir, perfetto = _state.log_dir, _state.create_perfetto_trace
        _state.reset()
        xspace = session.stop()
        run_dir, host = _run_dir(log_dir), _host_name()
        (run_dir / f"{host}.xplane.pb").write_bytes(xspace)
        if perfetto:
            _write_perfetto_trace(session, xspace, run_dir / f"{host}.perfetto_trace.json.gz")


def _run_dir(log_dir: str) -> Path:
    run = Path(log_dir) / "plugins" / "profile" / time.strftime("%Y_%m_%d_%H_%M_%S")
    run.mkdir(parents=True, exist_ok=True)
    return run


def _host_name() -> str:
    host = socket.gethostname() or "localhost"
    if xr.process_count() > 1:
        return f"{host}_process{xr.process_index()}"
    return host


def _write_perfetto_trace(session: Any, xspace: bytes, path: Path) -> None:
    """TSL's Chrome trace JSON of `xspace`, without the `metadata` Perfetto rejects."""
    with tempfile.TemporaryDirectory() as scratch:
        session.export(xspace, scratch)
        (json_file,) = Path(scratch).glob("plugins/profile/*/*.trace.json.gz")
        with gzip.open(json_file, "rt") as f:
            events = json.load(f)
    events.pop("metadata", None)
    with gzip.open(path, "wt") as f:
        json.dump(events, f)


# --- traces taken from outside: the server and its client --------------------------


def start_server(port: int, only_on_master: bool = True) -> ProfilerServer | None:
    """Start a profiler server on `port`, which `trace` and TensorBoard's profile
    plugin ask for traces of this process.

    The server runs as long as the returned object lives: keep a reference. With
    `only_on_master`, only the master ordinal of each host starts one (others get
    None). Raises RuntimeError if the port is invalid or held by another program."""
    if only_on_master and not xm.is_master_ordinal():
        return None
    if not 0 < port < 65536:
        raise RuntimeError(f"Profiler server port {port} is invalid: use one in 1..65535.")
    _check_port_free(port)
    xr.process_index()  # the device tracer registers with the runtime client (see start_trace)
    return ProfilerServer(port)


class ProfilerServer:
    """A running profiler server; dropping the object (or `stop()`) shuts it down, once
    the traces being taken from it are written."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._server: Any = _profiler.start_server(port)

    def stop(self) -> None:
        if self._server is not None:
            _wait_for_captures(self.port)
            self._server = None  # gRPC's shutdown waits for the Profile calls in flight

    def __del__(self) -> None:
        self.stop()


class _Captures:
    """`trace` calls of this process in flight, by server port."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.by_port: collections.Counter[int] = collections.Counter()

    @contextlib.contextmanager
    def running(self, port: int) -> Iterator[None]:
        with self.changed:
            self.by_port[port] += 1
        try:
            yield
        finally:
            with self.changed:
                self.by_port[port] -= 1
                self.changed.notify_all()


_captures = _Captures()


def _wait_for_captures(port: int) -> None:
    """Wait, without the GIL, until no trace is being taken from the server on `port`.

    A trace taken through the server ends with jaxlib's Python tracer, which needs the
    GIL; destroying the server waits for that trace while holding the GIL. So first wait
    for this process's own `trace` calls, then for any other recording session (a
    TensorBoard capture) that is not this module's or jax.profiler's."""
    with _captures.changed:
        _captures.changed.wait_for(lambda: _captures.by_port[port] == 0)
    if _foreign_session_recording():
        while _foreign_session_recording():
            time.sleep(0.05)
        time.sleep(0.5)  # the server writes the trace once recording has stopped


def _foreign_session_recording() -> bool:
    in_program = _state.session is not None or jax_profiler._profile_state.profile_session
    return _profiler.TraceMe.is_enabled() and not in_program


def _check_port_free(port: int) -> None:
    """gRPC shares ports (SO_REUSEPORT) and only logs a failed bind: test it the same way."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind(("::", port))
        except OSError as error:
            raise RuntimeError(
                f"Cannot start the profiler server on port {port}: {error.strerror}. "
                "Another program holds it; choose a free port."
            ) from error


def trace(
    service_addr: str,
    logdir: str,
    duration_ms: int = 1000,
    num_tracing_attempts: int = 3,
    host_tracer_level: int = 2,
    device_tracer_level: int = 1,
    delay_ms: int = 0,
    timeout_s: int = 120,
    interval_s: int = 5,
) -> None:
    """Ask the profiler servers at `service_addr` for a trace of `duration_ms`; blocks.

    `service_addr` is one `host:port` or several, comma-separated (one per host of a
    job). Each server writes its trace itself, to
    `<logdir>/plugins/profile/<run>/<host>_<port>.xplane.pb`, so `logdir` must be a
    path the servers can write. A server not reachable yet is asked again every
    `interval_s` seconds for up to `timeout_s`; a trace with no events is taken again,
    `num_tracing_attempts` times in all. Tracer levels as in `start_trace`, and
    `device_tracer_level` 0 turns the device's tracer off; `delay_ms` delays the start
    of the recording. Needs the grpcio package."""
    addresses = _parse_addresses(service_addr)
    if duration_ms <= 0 or num_tracing_attempts <= 0:
        raise ValueError(
            f"duration_ms={duration_ms} and num_tracing_attempts={num_tracing_attempts} "
            "must be positive."
        )
    capture = _Capture(
        duration_ms, delay_ms, host_tracer_level, device_tracer_level,
        repository=os.path.join(os.path.abspath(logdir), "plugins", "profile"),
        run=time.strftime("%Y_%m_%d_%H_%M_%S"),
        deadline=time.monotonic() + timeout_s, interval_s=interval_s,
    )
    attempts = 0
    while attempts < num_tracing_attempts:
        attempts += 1
        outcomes = _profile_all(capture, addresses)
        if "traced" in outcomes.values():
            return
        if any(outcome != "empty" for outcome in outcomes.values()):
            break  # an error, not an empty trace: trying again would not help
    raise RuntimeError(
        f"No trace was collected from {service_addr} after {attempts} attempt(s): "
        + "; ".join(f"{a}: {o}" for a, o in outcomes.items())
        + ". Check that the program called xp.start_server on that port and runs during "
        "the trace (or raise duration_ms or num_tracing_attempts)."
    )


def trace_detached(*args: Any, **kwargs: Any) -> threading.Thread:
    """`trace` in a background thread (same arguments); returns the started thread."""
    thread = threading.Thread(target=trace, args=args, kwargs=kwargs, name="xp.trace")
    thread.start()
    return thread


def _parse_addresses(service_addr: str) -> list[str]:
    addresses = [a.strip().removeprefix("grpc://") for a in service_addr.split(",")]
    bad = [a for a in addresses if not a.rpartition(":")[2].isdigit()]
    if bad:
        raise ValueError(
            f"service_addr={service_addr!r} is not a comma-separated list of host:port "
            f"addresses ({bad[0]!r} is not); write e.g. 'localhost:9012'."
        )
    return addresses


@dataclasses.dataclass(frozen=True)
class _Capture:
    """One `trace` call: what each server is asked for, and how long to keep asking."""

    duration_ms: int
    delay_ms: int
    host_tracer_level: int
    device_tracer_level: int
    repository: str  # <logdir>/plugins/profile: the server writes <run>/<host>.xplane.pb in it
    run: str
    deadline: float  # time.monotonic() after which an unreachable server is given up
    interval_s: float  # between two tries of an unreachable server

    def request(self, address: str) -> bytes:
        """A ProfileRequest; built at each try, as it holds the start time."""
        return _profile_request(self, address)

    def rpc_timeout_s(self) -> float:
        return (self.delay_ms + self.duration_ms) / 1000 + 60.0  # the server blocks throughout


def _profile_all(capture: _Capture, addresses: list[str]) -> dict[str, str]:
    """One Profile call per server, all at once; each address's outcome."""
    grpc = _import_grpc()
    outcomes: dict[str, str] = {}

    def ask(address: str) -> None:
        outcomes[address] = _profile_one(grpc, capture, address)

    threads = [threading.Thread(target=ask, args=(a,)) for a in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _import_grpc() -> Any:
    try:
        import grpc  # optional: only a trace client needs it
    except ImportError as error:
        raise ImportError(
            "xp.trace talks to the profiler server over gRPC and needs the grpcio package: "
            "pip install grpcio (or trace in the program with xp.start_trace/xp.stop_trace)."
        ) from error
    return grpc


def _profile_one(grpc: Any, capture: _Capture, address: str) -> str:
    """"traced", "empty", or what went wrong; an unreachable server is tried again."""
    port = int(address.rpartition(":")[2])
    with grpc.insecure_channel(address) as channel, _captures.running(port):
        profile = channel.unary_unary("/tensorflow.ProfilerService/Profile")
        while True:
            try:
                response = profile(capture.request(address), timeout=capture.rpc_timeout_s())
            except grpc.RpcError as error:
                unreachable = error.code() == grpc.StatusCode.UNAVAILABLE
                if unreachable and time.monotonic() < capture.deadline:
                    time.sleep(capture.interval_s)
                    continue
                return f"{error.code().name} ({error.details()})"
            return "empty" if _empty_trace(response) else "traced"


# --- the ProfilerService wire format ------------------------------------------------
# TSL's `tensorflow.ProfilerService` (tsl/profiler/protobuf/profiler_service.proto and
# profiler_options.proto). A trace request needs a handful of scalar fields, written
# here by hand so that no protobuf classes are needed.


def _profile_request(capture: _Capture, address: str) -> bytes:
    start_ns = time.time_ns() + capture.delay_ms * 1_000_000 if capture.delay_ms > 0 else 0
    options = b"".join([  # ProfileOptions
        _int_field(5, 1),  # version 1: the levels mean what they say, 0 included
        _int_field(2, capture.host_tracer_level),
        _int_field(3, capture.device_tracer_level),
        _int_field(8, start_ns),  # 0: start now
        _int_field(9, capture.duration_ms),
    ])
    return b"".join([  # ProfileRequest
        _int_field(1, capture.duration_ms),
        _int_field(2, 1_000_000),  # max_events, as TSL's own client asks
        _bytes_field(3, b"xplane.pb"),  # tools
        _bytes_field(4, options),
        _bytes_field(5, capture.repository.encode()),
        _bytes_field(6, capture.run.encode()),
        _bytes_field(7, address.encode()),  # host_name: the server names the file after it
    ])


def _empty_trace(response: bytes) -> bool:
    """ProfileResponse.empty_trace (field 7, a bool)."""
    return any(number == 7 and value for number, value in _fields(response))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | 0x80 if value else low)
        if not value:
            return bytes(out)


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""  # proto3 omits zeros


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _fields(message: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of each varint or length-delimited field of `message`."""
    fields: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(message):
        key, i = _read_varint(message, i)
        if key & 7 == 0:
            value, i = _read_varint(message, i)
            fields.append((key >> 3, value))
        elif key & 7 == 2:
            size, i = _read_varint(message, i)
            fields.append((key >> 3, message[i : i + size]))
            i += size
        else:
            raise ValueError(f"Unexpected protobuf wire type {key & 7} in a profiler response.")
    return fields


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i
