"""Small helpers PyTorch/XLA programs import from `torch_xla.utils.utils`."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any

import torch

# --- lifetime helpers ---------------------------------------------------------


class Cleaner:
    """Calls `func` when the object is garbage collected."""

    def __init__(self, func: Callable[[], Any]) -> None:
        self.func = func

    def __del__(self) -> None:
        self.func()


class TmpFolder:
    """A fresh temporary folder (`.name`), removed with its content when the object goes."""

    def __init__(self) -> None:
        self.name = tempfile.mkdtemp()
        name = self.name
        self.cleaner = Cleaner(lambda: shutil.rmtree(name, ignore_errors=True))


class LazyProperty:
    """A value computed by `gen_fn` on the first read of `.value`, then kept."""

    def __init__(self, gen_fn: Callable[[], Any]) -> None:
        self._gen_fn: Callable[[], Any] | None = gen_fn
        self._value: Any = None

    @property
    def value(self) -> Any:
        if self._gen_fn is not None:
            self._value = self._gen_fn()
            self._gen_fn = None
        return self._value


# --- fake data -----------------------------------------------------------------


class SampleGenerator:
    """Yields the same `data` `sample_count` times: fake data for `--fake_data` runs.

    Each `iter()` starts a new pass, so it can stand in for a DataLoader over
    several epochs.
    """

    def __init__(self, data: Any, sample_count: int) -> None:
        if sample_count < 0:
            raise ValueError(f"sample_count must be >= 0, got {sample_count}")
        self._data = data
        self._sample_count = sample_count
        self._count = 0

    def __iter__(self) -> SampleGenerator:
        return SampleGenerator(self._data, self._sample_count)

    def __len__(self) -> int:
        return self._sample_count

    def __next__(self) -> Any:
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data

    next = __next__


class FnDataGenerator:
    """`count` batches `(data, func(data))`, `data = gen_tensor(batch_size, *dims)`."""

    def __init__(
        self,
        func: Callable[[Any], Any],
        batch_size: int,
        gen_tensor: Callable[..., Any],
        dims: Iterable[int] | None = None,
        count: int = 1,
    ) -> None:
        self._func = func
        self._batch_size = batch_size
        self._gen_tensor = gen_tensor
        self._dims = list(dims) if dims else [1]
        self._count = count
        self._emitted = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> FnDataGenerator:
        return FnDataGenerator(
            self._func, self._batch_size, self._gen_tensor, dims=self._dims, count=self._count
        )

    def __next__(self) -> tuple[Any, Any]:
        if self._emitted >= self._count:
            raise StopIteration
        data = self._gen_tensor(self._batch_size, *self._dims)
        self._emitted += 1
        return data, self._func(data)

    next = __next__


class DataWrapper:
    """Base of objects whose tensors `for_each_instance*` should reach.

    A subclass lists its tensors in `get_tensors()` and rebuilds itself from
    replacements (same order) in `from_tensors()`.
    """

    def get_tensors(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} must implement get_tensors()")

    def from_tensors(self, tensors: list) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement from_tensors()")


# --- nested structures -----------------------------------------------------------


def as_list(t: Any) -> list | tuple:
    """`t` itself when it is a list or tuple, else `[t]`."""
    return t if isinstance(t, (tuple, list)) else [t]


def _selector(select_fn: Callable[[Any], bool] | type) -> Callable[[Any], bool]:
    # Older PyTorch/XLA took the class whose exact instances to select.
    if isinstance(select_fn, type):
        cls = select_fn
        return lambda value: type(value) is cls
    return select_fn


def _children(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        return (item for pair in value.items() for item in pair)
    if isinstance(value, (list, tuple, set, frozenset)):
        return value
    if isinstance(value, DataWrapper):
        return value.get_tensors()
    if hasattr(value, "__dict__") and not isinstance(value, torch.Tensor):
        return list(vars(value).values())
    return ()


def for_each_instance(value: Any, select_fn: Callable[[Any], bool] | type, fn: Callable) -> None:
    """Call `fn` on every object inside `value` that `select_fn` picks.

    Walks dicts (keys and values), lists, tuples, sets, `DataWrapper`s and
    object attributes (a tensor's excepted), each object once.
    """
    select, seen, stack = _selector(select_fn), set(), [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if select(item):
            fn(item)
        else:
            stack.extend(reversed(list(_children(item))))


def for_each_instance_rewrite(
    value: Any, select_fn: Callable[[Any], bool] | type, fn: Callable
) -> Any:
    """A copy of `value` in which every object `select_fn` picks is replaced by `fn(obj)`.

    Containers and objects are copied (an object shallowly, then its attributes
    rewritten), tensors `select_fn` leaves are kept as they are; an object met twice is
    rewritten once, and cycles are kept. Objects are met in `for_each_instance`'s order.
    """
    return _rewrite(value, _selector(select_fn), fn, {})


def _rewrite(value: Any, select: Callable, fn: Callable, done: dict[int, Any]) -> Any:
    if id(value) in done:
        return done[id(value)]
    if select(value):
        result = done[id(value)] = fn(value)
    elif isinstance(value, dict):
        result = done[id(value)] = {}
        for k, v in value.items():
            key = _rewrite(k, select, fn, done)  # before its value, as `for_each_instance` goes
            result[key] = _rewrite(v, select, fn, done)
    elif isinstance(value, (list, set)):
        result = done[id(value)] = type(value)()
        add = result.append if isinstance(result, list) else result.add
        for x in value:
            add(_rewrite(x, select, fn, done))
    elif isinstance(value, tuple):
        items = [_rewrite(x, select, fn, done) for x in value]
        result = type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        done[id(value)] = result
    elif isinstance(value, DataWrapper):
        tensors = [_rewrite(x, select, fn, done) for x in value.get_tensors()]
        result = done[id(value)] = value.from_tensors(tensors)
    elif hasattr(value, "__dict__") and not isinstance(value, torch.Tensor):
        result = done[id(value)] = copy.copy(value)
        for k, v in vars(result).items():
            setattr(result, k, _rewrite(v, select, fn, done))
    else:
        result = done[id(value)] = value
    return result


def shape(inputs: Any) -> list[int]:
    """The shape of nested lists or tuples: `[[1, 2], [3, 4], [5, 6]]` -> `[3, 2]`."""
    if not isinstance(inputs, (list, tuple)):
        return []
    shapes = [shape(item) for item in inputs]
    if any(s != shapes[0] for s in shapes):
        raise ValueError(f"Ragged nesting: items have shapes {shapes}")
    return [len(inputs)] + (shapes[0] if shapes else [])


def flatten_nested_tuple(inputs: Any) -> tuple:
    """The leaves of nested lists and tuples, in order."""
    if not isinstance(inputs, (list, tuple)):
        return (inputs,)
    return tuple(leaf for item in inputs for leaf in flatten_nested_tuple(item))


def list_copy_append(ilist: Iterable, item: Any) -> list:
    return [*ilist, item]


# --- environment and devices ---------------------------------------------------


def getenv_as(name: str, type: Callable[[str], Any], defval: Any = None) -> Any:
    """The variable `name` converted by `type`, or `defval` when unset.

    A `bool` is written as an integer (`0`/`1`), as PyTorch/XLA reads it.
    """
    env = os.environ.get(name)
    if env is None:
        return defval
    return bool(int(env)) if type is bool else type(env)


def check_env_flag(name: str, default: str = "") -> bool:
    """Whether environment variable `name` is set to a true word (1, on, yes, true, y)."""
    return os.getenv(name, default).upper() in ("ON", "1", "YES", "TRUE", "Y")


def parse_xla_device(device: str) -> tuple[str, int] | None:
    """`'TPU:3'` -> `('TPU', 3)`; None for anything else."""
    m = re.match(r"([A-Z]+):(\d+)$", device)
    return (m.group(1), int(m.group(2))) if m else None


def get_free_tcp_ports(n: int = 1) -> list[int]:
    """`n` TCP ports the system reports free right now."""
    ports = []
    for _ in range(n):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind(("", 0))
            ports.append(s.getsockname()[1])
    return ports


def parallel_work(num_workers: int, fn: Callable, *args: Iterable) -> list:
    """`list(map(fn, *args))` over `num_workers` threads; a worker's error is raised."""
    with futures.ThreadPoolExecutor(max_workers=num_workers) as executor:
        return list(executor.map(fn, *args))


# --- printing and timing ---------------------------------------------------------


def null_print(*args: Any, **kwargs: Any) -> None:
    return None


def eprint(*args: Any, **kwargs: Any) -> None:
    print(*args, file=sys.stderr, **kwargs)


def get_print_fn(debug: Any = None) -> Callable[..., None]:
    """`eprint` when `debug` (default: the DEBUG variable, an integer) is set, else `null_print`."""
    if debug is None:
        debug = int(os.environ.get("DEBUG", "0"))
    return eprint if debug else null_print


def _elapsed_ms(start: float) -> str:
    return f"{1000.0 * (time.time() - start):.3f}ms"


def timed(fn: Callable[[], Any], msg: str = "", printfn: Callable | None = eprint) -> Any:
    """`fn()`, printing `msg` and the time it took in milliseconds."""
    printfn = printfn or get_print_fn()
    start = time.time()
    result = fn()
    printfn(f"{msg}{_elapsed_ms(start)}")
    return result


class TimedScope:
    """Prints `msg` and the time the `with` block took, unless `set_error()` was called."""

    def __init__(self, msg: str = "", printfn: Callable | None = eprint) -> None:
        self._msg = msg
        self._printfn = printfn or get_print_fn()
        self._error: Any = None

    def __enter__(self) -> TimedScope:
        self._start = time.time()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._error is None:
            self._printfn(f"{self._msg}{_elapsed_ms(self._start)}")

    def set_error(self, error: Any) -> None:
        self._error = error
