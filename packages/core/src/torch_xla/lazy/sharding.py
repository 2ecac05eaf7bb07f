"""Sharding annotations on engine tensors (SPMD mode; `xs.mark_sharding` is built on these).

A tensor holding device data is laid out anew at once (`jax.device_put` to the
sharding: every device keeps only its tiles). A tensor whose value is still IR gets a
sharding-constraint node (`jax.lax.with_sharding_constraint` in the compiled graph),
which XLA's partitioner honours and propagates from. Either way the annotation is
part of the graph, so a program is compiled once per layout and reused.

`spec(t)` is PyTorch/XLA's sharding text of a tensor: its annotation, the layout the
partitioner gave a program's output, or `''` for data nobody laid out.

Uneven tiles: a jax array holds only tiles that divide its shape. Data annotated with a
sharding whose tiles do not divide it stays replicated on every device and carries the
annotation beside it (`ir.Data.annotated` is then that sharding, not `True`): `spec`
reports it, it survives a step, and `local_shards` cuts the zero-padded tiles
PyTorch/XLA's devices would hold from each device's copy.

A sharding belongs to the tensor the user marked (`mark`), not to its current value, as
in PyTorch/XLA: after `t.add_(1)` (or an optimizer's update of a parameter) the new value
is laid out as before. Functionalization swaps the value inside the user's tensor in C++
with no hook for us, so marked tensors are remembered (weakly) and their annotation is put
on a new value at the next sync or sharding query (`keep_annotations`).
"""

from __future__ import annotations

import functools
import importlib
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import torch
from torch._subclasses.functional_tensor import FunctionalTensor

from torch_xla.lazy import ir, nodes, transfer
from torch_xla.lazy.tensor import XLATensor
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client

CONSTRAINT_OP = "xla::sharding_constraint"
# The manual-sharding nodes (`lazy/manual.py`); each carries its value's Layout as its
# first static argument, as a constraint does.
FULL_TO_SHARD_OP = "xla::spmd_full_to_shard_shape"
MANUAL_OP = "xla::manual_sharding"
SHARD_TO_FULL_OP = "xla::spmd_shard_to_full_shape"
SPMD_ALL_REDUCE_OP = "xla::spmd_all_reduce"  # collectives inside a manual region
SPMD_REDUCE_SCATTER_OP = "xla::spmd_reduce_scatter"
MANUAL_OPS = frozenset({FULL_TO_SHARD_OP, MANUAL_OP, SHARD_TO_FULL_OP, SPMD_ALL_REDUCE_OP,
                        SPMD_REDUCE_SCATTER_OP})
SHARD_ALIKE_OP = "xla::shard_alike"


def _jax_shard_alike() -> Callable | None:
    """jax's `shard_alike`: `jax.experimental.shard_alike` up to jax 0.10; jax 0.11 has no
    such module, so its other homes are tried before giving up (None)."""
    for module in ("jax.experimental.shard_alike", "jax.sharding", "jax._src.shard_alike"):
        try:
            return importlib.import_module(module).shard_alike
        except (ImportError, AttributeError):
            continue
    return None


_shard_alike = _jax_shard_alike()


class NotSpmdError(RuntimeError):
    """A sharding was asked for outside SPMD mode."""


class Layout:
    """A jax sharding as a node's static argument: equal, hashed and written (in the
    persistent-cache key) by the devices it names, which jax's own repr leaves out."""

    __slots__ = ("sharding", "text")

    def __init__(self, sharding: Any, ndim: int) -> None:
        self.sharding = sharding
        self.text = text(sharding, ndim)

    def __eq__(self, other: object) -> bool:
        return type(other) is Layout and other.sharding == self.sharding

    def __hash__(self) -> int:
        return hash(self.sharding)

    def __repr__(self) -> str:
        return f"Layout({self.text})"


@functools.lru_cache(maxsize=1024)
def text(sharding: Any, ndim: int) -> str:
    """PyTorch/XLA's sharding text of the jax `sharding` over `ndim` dims (kept: building
    it converts the sharding to XLA's, which takes a fraction of a millisecond)."""
    return spmd.sharding_text(sharding, ndim, client().global_devices)


def _constrain(x: Any, layout: Layout) -> Any:
    return jax.lax.with_sharding_constraint(x, spmd.constraint(layout.sharding, x.ndim))


def check_spmd(what: str) -> None:
    if not spmd.enabled():
        raise NotSpmdError(
            f"{what} needs SPMD mode: call torch_xla.runtime.use_spmd() at the start of the "
            "program (before creating XLA tensors), or set XLA_USE_SPMD=1."
        )


def annotate(t: XLATensor, sharding: Any, refuse_other: bool = False) -> None:
    """Lay `t` out as the jax `sharding` (device data now; a pending value in its graph).
    `refuse_other` (a user's mark): device data already sharded another way is refused,
    as PyTorch/XLA refuses it, and the same sharding again changes nothing."""
    check_spmd("Sharding a tensor")
    node, index = t._node, t._index
    aval = node.avals[index]
    if isinstance(node, nodes.Placeholder):  # no data to lay out: the parameter's layout
        t._set(nodes.Placeholder(aval, node.device, sharding))
        return
    if isinstance(node, ir.NoBuffer):  # an input of a recorded function or loop body
        _constrain_value(t, node, index, sharding)
        return
    if node.rule is None:
        if refuse_other and _refused(node, sharding):
            return
        if _divides(sharding, aval[0]):
            array = node.upload(sharding) if type(node) is nodes.HostData else None
            if array is None:
                array = spmd.put(node.array, sharding)
            t._set(ir.Data(array, aval, node.device, annotated=True))
        else:  # uneven tiles: kept whole on every device, the annotation beside it
            array = spmd.put(node.array, client().replicated())
            t._set(ir.Data(array, aval, node.device, annotated=sharding))
        return
    # A pending value: a constraint in the graph (XLA pads uneven tiles inside a program).
    if node.op == CONSTRAINT_OP:  # a new annotation replaces the one before
        node, index = node.inputs[0]
    _constrain_value(t, node, index, sharding)


def _constrain_value(t: XLATensor, node: ir.Node, index: int, sharding: Any) -> None:
    """`t` becomes output `index` of `node` under a sharding constraint of `sharding`."""
    aval = node.avals[index]
    layout = Layout(sharding, len(aval[0]))
    t._set(nodes.engine_node(CONSTRAINT_OP, _constrain, (layout,), [(node, index)], aval,
                             node.device))


def _refused(node: ir.Data, sharding: Any) -> bool:
    """For a user's new mark on device data: True when the data already has this layout
    (nothing to do); raises when it is sharded another way."""
    current = data_layout(node)
    if current is None:
        return False
    ndim = len(node.avals[0][0])
    if _same_layout(current, sharding, ndim):
        return True
    if sharding_is_replicated(current, ndim):
        return False
    raise RuntimeError(
        f"Existing annotation must be cleared first: the tensor is sharded as "
        f"{text(current, ndim)}, so it cannot be marked {text(sharding, ndim)}. Call "
        "xs.clear_sharding(t) before marking it again, or "
        "use xs.annotate_custom_sharding(t, mesh, spec) to lay out what is computed from it "
        "another way without moving its data.")


def annotate_custom(t: XLATensor, sharding: Any) -> None:
    """A sharding constraint over `t`'s current value, device data included, whose layout
    stays as it is (PyTorch/XLA's `annotate_custom_sharding`): the partitioner lays out
    the value as `sharding` inside the next program, and its result keeps it."""
    check_spmd("Annotating a tensor with a custom sharding")
    _constrain_value(t, t._node, t._index, sharding)


def shard_like(a: XLATensor, b: XLATensor) -> list[XLATensor]:
    """`a` and `b` as two new tensors that the partitioner lays out alike, whichever
    layout it chooses for them (jax's `shard_alike`; PyTorch/XLA's `xs.shard_as`)."""
    check_spmd("xs.shard_as")
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"xs.shard_as: tensors of shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)} cannot be laid out alike; give tensors of one shape.")
    if _shard_alike is None:
        raise NotImplementedError(
            f"xs.shard_as needs jax's shard_alike, which jax {jax.__version__} does not "
            "provide; install the jax release torch-xla-core is tested on (0.10.2).")
    return nodes.custom(_shard_alike, SHARD_ALIKE_OP, [a, b], {},
                        [a._node.avals[a._index], b._node.avals[b._index]])


def relayout(t: torch.Tensor, how: Callable[[XLATensor], None]) -> None:
    """Apply `how` (`annotate`, `clear`) to the user tensor `t` so that functionalization
    sees the new value: views of `t` read it (a parameter's `.t()` inside `nn.Linear`
    too). No autograd version bump: the value is the same, only its layout."""
    if type(t) is XLATensor:
        how(t)
        return
    if type(t) is FunctionalTensor:  # traced by AOTAutograd (aot_function): its wrapper
        t = t.elem
    if not torch._is_functional_tensor(t):
        raise TypeError(f"expected an XLA tensor, got a {t.type()} on {t.device}")
    torch._sync(t)
    inner = torch._from_functional_tensor(t)
    if t._is_view():
        # A view's own value: functionalization would turn a write through it into a
        # scatter into its base (no longer this layout); it regenerates the view only
        # when the base changes.
        how(inner)
        return
    fresh = XLATensor(*inner.value)
    how(fresh)
    torch._functionalize_replace(t, fresh)
    torch._functionalize_commit_update(t)
    torch._sync(t)


# --- annotations a marked tensor keeps across in-place updates -----------------------------


class _Kept:
    """A tensor the user marked, the sharding it keeps, and the value last seen in it."""

    __slots__ = ("tensor", "sharding", "value")

    def __init__(self, tensor: Any, sharding: Any, value: XLATensor) -> None:
        self.tensor, self.sharding, self.value = tensor, sharding, weakref.ref(value)


_kept: dict[int, _Kept] = {}  # by id() of the user's functional tensor


def _base(t: torch.Tensor) -> torch.Tensor | None:
    """The functional tensor whose value `t`'s annotation lives on (None for an engine
    tensor or a view, whose value functionalization regenerates from its base)."""
    if type(t) is FunctionalTensor:
        t = t.elem
    if type(t) is XLATensor or not torch._is_functional_tensor(t) or t._is_view():
        return None
    return t


def mark(t: torch.Tensor, sharding: Any) -> None:
    """A user's `xs.mark_sharding`: lay `t` out as `sharding` (`annotate`, refusing data
    sharded another way) and keep the annotation on `t` across in-place updates."""
    relayout(t, lambda inner: annotate(inner, sharding, refuse_other=True))
    _remember(t, sharding)


def mark_custom(t: torch.Tensor, sharding: Any) -> None:
    """A user's `xs.annotate_custom_sharding`: a constraint over `t`'s value
    (`annotate_custom`); `t` keeps the new sharding from now on."""
    relayout(t, lambda inner: annotate_custom(inner, sharding))
    _remember(t, sharding)


def _remember(t: torch.Tensor, sharding: Any) -> None:
    base = _base(t)
    if base is not None:
        key = id(base)
        ref = weakref.ref(base, lambda _, key=key: _kept.pop(key, None))
        _kept[key] = _Kept(ref, sharding, torch._from_functional_tensor(base))


def forget(t: torch.Tensor) -> None:
    """`t` keeps no annotation any more (`xs.clear_sharding`)."""
    base = _base(t)
    if base is not None:
        _kept.pop(id(base), None)


def keep_annotations(t: torch.Tensor | None = None) -> None:
    """Put the annotation of `t` (every marked tensor alive if None) back on the value an
    in-place op gave it; a value already laid out that way is left alone."""
    if not _kept:
        return
    if t is None:
        found = list(_kept.values())
    else:
        base = _base(t)
        one = None if base is None else _kept.get(id(base))
        if one is None:
            return
        found = [one]
    for kept in found:
        base = kept.tensor()
        if base is None:
            continue
        torch._sync(base)
        value = torch._from_functional_tensor(base)
        if kept.value() is value:
            continue
        if not _laid_out_as(value, kept.sharding):
            relayout(base, lambda inner, kept=kept: annotate(inner, kept.sharding))
            value = torch._from_functional_tensor(base)
        kept.value = weakref.ref(value)


def _laid_out_as(t: XLATensor, sharding: Any) -> bool:
    node = t._node
    if node.op in MANUAL_OPS:
        return True  # a manual region decides its own layout
    if node.rule is None:
        found = data_layout(node)
    elif node.op == CONSTRAINT_OP:
        found = node.template[0][1].sharding
    else:
        return False
    if found is None:
        return False
    return _same_layout(found, sharding, len(node.avals[t._index][0]))


def _same_layout(a: Any, b: Any, ndim: int) -> bool:
    """Whether two shardings lay out an `ndim`-dimensional array the same way."""
    return text(a, ndim) == text(b, ndim)


def from_host(t: torch.Tensor, sharding: Any, device: int, local: bool = False) -> XLATensor:
    """The CPU tensor `t` on the virtual device laid out as `sharding` (each device receives
    only its tiles); `local`: `t` is this process's part of the global batch. Dims the mesh
    does not divide evenly are copied whole, the annotation kept beside (`annotate`)."""
    check_spmd("Loading a tensor sharded")
    if local and client().process_count() == 1:
        local = False  # this process's part is the whole batch
    if not local and not _divides(sharding, tuple(t.shape)):
        moved = XLATensor(nodes.host_data(t, device))
        annotate(moved, sharding)
        return moved
    array = transfer.to_device(t, device, sharding, local)
    return XLATensor(ir.Data(array, (tuple(array.shape), t.dtype), device, annotated=True))


def _divides(sharding: Any, shape: tuple) -> bool:
    try:
        sharding.shard_shape(shape)
    except ValueError:  # jax's IndivisibleError
        return False
    return True


def clear(t: XLATensor) -> None:
    """Drop `t`'s annotation: device data goes back to the virtual device's replicated
    layout, a pending value loses its constraint."""
    node = t._node
    if node.rule is None:
        if getattr(node, "annotated", False):
            array = spmd.put(node.array, client().replicated())
            t._set(ir.Data(array, node.avals[0], node.device))
    elif node.op == CONSTRAINT_OP:
        t._set(*node.inputs[0])


def data_layout(node: ir.Data) -> Any | None:
    """The sharding device data is annotated with: its array's own layout, the uneven
    sharding kept beside a replicated array, or None when nobody laid it out."""
    mark = getattr(node, "annotated", False)
    if mark is True:
        return node.array.sharding
    return mark or None


def layout(t: XLATensor) -> Any | None:
    """The jax sharding `t` is (or will be) laid out as, if anyone chose one: for data,
    its array's own layout (replicated where an uneven annotation is kept beside it)."""
    node = t._node
    if node.rule is None:
        return node.array.sharding if getattr(node, "annotated", False) else None
    if node.op == CONSTRAINT_OP:
        return node.template[0][1].sharding
    return None


def spec(t: XLATensor) -> str:
    """PyTorch/XLA's sharding text of `t` (`''` when nothing laid it out)."""
    node = t._node
    if node.rule is None:
        found = data_layout(node)
        if found is None:
            return ""
        return text(found, len(node.avals[0][0]))
    if node.op == CONSTRAINT_OP or node.op in MANUAL_OPS:
        return node.template[0][1].text
    return ""


def output_mark(node: ir.Node, array: jax.Array) -> Any:
    """`ir.Data.annotated` for a program's output computed as `node`: a constraint whose
    tiles do not divide the shape stays beside the (replicated) result, since jax hands
    such a result back replicated; anything else is the array's own layout (True)."""
    if node.op == CONSTRAINT_OP:
        wanted = node.template[0][1].sharding
        if not _divides(wanted, tuple(array.shape)):
            return wanted
    return True


def output_layouts(values: list[tuple[ir.Node, int]], nullary: bool) -> tuple | None:
    """The layouts to compile a graph's outputs with in SPMD mode (None: the partitioner
    chooses them all). A constrained value keeps its constraint when its tiles divide the
    shape: a tensor marked while pending comes out as marked, as in PyTorch/XLA (XLA's
    GSPMD would otherwise be free to give it its input's layout). In a graph without
    inputs (`nullary`, which jax would run on one device) the rest are replicated."""
    if not spmd.enabled():
        return None
    default = client().replicated() if nullary else None
    layouts = tuple([_output_layout(node, index, default) for node, index in values])
    return None if all(layout is None for layout in layouts) else layouts


def _output_layout(node: ir.Node, index: int, default: Any) -> Any:
    if node.op == CONSTRAINT_OP:
        wanted = node.template[0][1].sharding
        if _divides(wanted, node.avals[index][0]):
            return wanted
    if node.op == SHARD_ALIKE_OP:  # both laid out as whichever of the two has a layout
        for found in (_output_layout(*value, None) for value in node.inputs):
            if found is not None:
                return found
    return default


# --- tiles on the host -------------------------------------------------------------------


def _device_name(device: Any) -> str:
    runtime = client()
    return f"{runtime.name}:{runtime.global_devices.index(device)}"


def local_shards(t: XLATensor) -> list[tuple[np.ndarray, Any, str, int]]:
    """(host copy, indices, runtime device, replica id) of each tile of `t`'s device data
    on this process's devices, by device ordinal; indices are `...` when every device
    holds the whole tensor. Uneven tiles come zero-padded to the size of the first."""
    node = t._node
    if _uneven(node):
        return _padded_shards(node.array, node.annotated)
    array = node.array
    shape = tuple(array.shape)
    runtime = client()
    out = []
    for shard in sorted(array.addressable_shards,
                        key=lambda s: runtime.global_devices.index(s.device)):
        whole = tuple(shard.data.shape) == shape
        indices = Ellipsis if whole else [
            slice(*s.indices(n)) for s, n in zip(shard.index, shape, strict=True)]
        out.append((runtime.to_host(shard.data), indices, _device_name(shard.device),
                    shard.replica_id))
    return out


def _uneven(node: ir.Node) -> bool:
    """Whether `node` is data kept whole beside an uneven annotation."""
    return node.rule is None and not isinstance(getattr(node, "annotated", False), bool)


def _padded_shards(array: jax.Array, sharding: Any) -> list[tuple[np.ndarray, Any, str, int]]:
    """`local_shards` of a replicated `array` annotated with the uneven `sharding`: each
    device's tile cut from that device's own copy, zero-padded as PyTorch/XLA pads it."""
    runtime = client()
    shape = tuple(array.shape)
    copies = {shard.device: shard.data for shard in array.addressable_shards}
    size = tile_shape(sharding, shape)
    out = []
    for device, index, replica in padded_tiles(sharding, shape):
        block = runtime.to_host(copies[device])[tuple(index)]
        tile = np.zeros(size, dtype=block.dtype)
        tile[tuple(slice(0, n) for n in block.shape)] = block
        out.append((tile, index, _device_name(device), replica))
    return out


def tile_shape(sharding: Any, shape: tuple) -> tuple:
    """The shape of each device's tile of a `shape` tensor laid out as `sharding`, as
    PyTorch/XLA tiles it: `ceil(dim / tiles)` per dim, the last tiles zero-padded."""
    hlo = sharding._to_xla_hlo_sharding(len(shape))
    if hlo.is_replicated():
        return tuple(shape)
    dims = hlo.tile_assignment_dimensions()
    return tuple(-(-n // k) for n, k in zip(shape, dims, strict=False))


def padded_tiles(sharding: Any, shape: tuple) -> list[tuple[Any, list[slice], int]]:
    """(device, index, replica id) of each tile of a `shape` tensor tiled as `sharding`
    (`tile_shape` per tile) on this process's devices, by ordinal. The index covers the
    tile's part of the tensor: shorter than the tile, or empty, past the end."""
    ndim = len(shape)
    hlo = sharding._to_xla_hlo_sharding(ndim)
    dims = list(hlo.tile_assignment_dimensions())
    ids = np.asarray(hlo.tile_assignment_devices()).reshape(dims)
    assignment = list(sharding._device_assignment)
    size = tile_shape(sharding, shape)
    local = set(sharding.addressable_devices)
    found = []
    for coord in np.ndindex(*dims):
        device = assignment[ids[coord]]
        if device in local:
            index = [slice(min(c * k, n), min((c + 1) * k, n), 1)
                     for c, k, n in zip(coord[:ndim], size, shape, strict=True)]
            replica = int(np.ravel_multi_index(coord[ndim:], dims[ndim:])) if coord[ndim:] else 0
            found.append((device, index, replica))
    ordinal = client().global_devices.index
    return sorted(found, key=lambda item: ordinal(item[0]))


def _check_tiles(tiles: list[np.ndarray], sharding: Any, shape: tuple, what: str) -> None:
    """Every tile has the shape a `shape` tensor's tiles have under `sharding`."""
    wanted = tile_shape(sharding, shape)
    written = text(sharding, len(shape))
    for k, tile in enumerate(tiles):
        if tuple(tile.shape) != wanted:
            raise RuntimeError(
                f"{what}: shard {k} has shape {tuple(tile.shape)}, but each tile of a {shape} "
                f"tensor sharded as {written} is {wanted} (the last ones zero-padded): pass "
                "shards of that shape, or the global shape they tile.")


def _whole_from_padded(tiles: list[np.ndarray], sharding: Any, shape: tuple,
                       what: str) -> jax.Array:
    """A replicated global array of `shape` put together from this process's padded
    `tiles` of the uneven `sharding` (by device ordinal); needs every tile, so one process."""
    if client().process_count() > 1:
        raise RuntimeError(
            f"{what}: a {shape} tensor sharded as {text(sharding, len(shape))} has uneven "
            "tiles, which are kept whole on every device, so every tile is needed, but this "
            "process holds only its own. Use a global shape the mesh divides.")
    host = np.zeros(shape, dtype=tiles[0].dtype)
    for (_, index, _), tile in zip(padded_tiles(sharding, shape), tiles, strict=True):
        host[tuple(index)] = tile[tuple(slice(0, s.stop - s.start) for s in index)]
    return spmd.place(host, client().replicated())


def _addressable(sharding: Any, shape: tuple) -> list[tuple[Any, tuple]]:
    """(device, index) of each tile of `shape` laid out as `sharding` on this process's
    devices, by device ordinal."""
    runtime = client()
    found = sharding.addressable_devices_indices_map(shape)
    return sorted(found.items(), key=lambda item: runtime.global_devices.index(item[0]))


def _from_tiles(tiles: list[np.ndarray], devices: list[str], sharding: Any, shape: tuple,
                what: str) -> jax.Array:
    """A global array of `shape` laid out as `sharding`, from one host tile per device of
    this process (`devices` names them; they must be the devices the layout uses here)."""
    expected = _addressable(sharding, shape)
    names = [_device_name(d) for d, _ in expected]
    if sorted(devices) != sorted(names):
        raise RuntimeError(
            f"{what}: got shards for devices {devices}, but the sharding places tiles on "
            f"{names}: pass exactly one shard per device of this process.")
    by_name = dict(zip(devices, tiles, strict=True))
    arrays = []
    for (device, index), name in zip(expected, names, strict=True):
        tile = by_name[name]
        wanted = tuple(len(range(*s.indices(n))) for s, n in zip(index, shape, strict=True))
        if tuple(tile.shape) != wanted:
            raise RuntimeError(f"{what}: the shard for {name} has shape {tuple(tile.shape)}, "
                               f"but that device's tile of a {shape} tensor is {wanted}.")
        arrays.append(jax.device_put(tile, device))
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def load_local_shards(t: XLATensor, tiles: list[np.ndarray], devices: list[str]) -> None:
    """Replace the tiles of `t`'s (sharded) device data with `tiles`, one per device."""
    node = t._node
    if _uneven(node):
        _load_padded(t, tiles, devices)
        return
    if not getattr(node, "annotated", False) or sharding_is_replicated(node.array.sharding,
                                                                        node.array.ndim):
        raise RuntimeError("load_local_shards_: the tensor is not sharded (its data is "
                           "replicated); mark_sharding it first, or copy the whole value.")
    shape = tuple(node.array.shape)
    if len(tiles) != len(_addressable(node.array.sharding, shape)):
        raise RuntimeError(f"load_local_shards_: expected one shard per device of this process "
                           f"({len(_addressable(node.array.sharding, shape))}), got "
                           f"{len(tiles)}.")
    tiles = [np.asarray(x, dtype=node.array.dtype) for x in tiles]
    array = _from_tiles(tiles, devices, node.array.sharding, shape, "load_local_shards_")
    t._set(ir.Data(array, node.avals[0], node.device, annotated=True))


def _load_padded(t: XLATensor, tiles: list[np.ndarray], devices: list[str]) -> None:
    node = t._node
    sharding, shape = node.annotated, tuple(node.array.shape)
    names = [_device_name(d) for d, _, _ in padded_tiles(sharding, shape)]
    if sorted(devices) != sorted(names):
        raise RuntimeError(
            f"load_local_shards_: got shards for devices {devices}, but the sharding places "
            f"tiles on {names}: pass exactly one shard per device of this process.")
    by_name = dict(zip(devices, tiles, strict=True))
    ordered = [np.asarray(by_name[name], dtype=node.array.dtype) for name in names]
    _check_tiles(ordered, sharding, shape, "load_local_shards_")
    array = _whole_from_padded(ordered, sharding, shape, "load_local_shards_")
    t._set(ir.Data(array, node.avals[0], node.device, annotated=sharding))


def sharding_is_replicated(sharding: Any, ndim: int) -> bool:
    return sharding._to_xla_hlo_sharding(ndim).is_replicated()


def from_shards(tiles: list[np.ndarray], dtype: Any, sharding: Any, shape: tuple,
                device: int) -> ir.Data:
    """Device data of global `shape` laid out as `sharding` from one host tile per device
    of this process, in device-ordinal order (`_global_tensor_from_cpu_shards`). Tiles are
    `tile_shape` (zero-padded past the end of `shape`, as `local_shards` gives them)."""
    check_spmd("Building a tensor from shards")
    what = "_global_tensor_from_cpu_shards"
    if tiles and len(tiles[0].shape) != len(shape):
        raise RuntimeError(f"{what}: the shards have {len(tiles[0].shape)} dims, but the global "
                           f"shape {shape} has {len(shape)}: give a shape of the shards' rank.")
    even = _divides(sharding, shape)
    expected = _addressable(sharding, shape) if even else padded_tiles(sharding, shape)
    if len(tiles) != len(expected):
        raise RuntimeError(f"Expected {len(expected)} shards, one per device of this process "
                           f"for a {shape} tensor, got {len(tiles)}.")
    _check_tiles(tiles, sharding, shape, what)
    if not even:
        array = _whole_from_padded(tiles, sharding, shape, what)
        return ir.Data(array, (shape, dtype), device, annotated=sharding)
    names = [_device_name(item[0]) for item in expected]
    array = _from_tiles(tiles, names, sharding, shape, what)
    return ir.Data(array, (shape, dtype), device, annotated=True)
