"""Layer 3, the lazy tensor engine: XLA tensors record IR; a sync compiles and runs it.

Modules, bottom-up (each imports only those above it in this list):
  ir            nodes of the graph, hashed structurally as they are created
  tensor        XLATensor, the live/pending registries, errors about misplaced tensors
  layout        the CPU's strides and storage offset of each view's engine tensor
  dtype_policy  the storage dtype of each torch dtype (XLA_USE_BF16 & co, plugin policy)
  transfer      host <-> device copies
  nodes         building values: device data, engine nodes, lifted scalars
  composite     marked patterns (xla::mark_tensor): grouping a graph into composite regions
  functional    the functionalization wrapper users hold
  jax_call      a JAX function called on XLA tensors, recorded as one node (xb.call_jax)
  custom_call   an XLA custom call (a kernel the compiler knows by name) as one node
  sharding      SPMD layouts of tensors: resharded data, sharding constraints, tiles
  manual        manual-sharding regions of SPMD programs (shards in, global tensor out)
  rng           the device RNG state and the key each random op records
  rewrites      in-place and _foreach_ ops rewritten into others
  dump          XLA_SAVE_TENSORS_FILE, XLA_METRICS_FILE, the *_OPBYOP switches
  dynamic_shape_detector  the different graphs a compiled function traced, limited
                (torch_xla.compile's num_different_graphs_allowed)
  analysis      PT_XLA_DEBUG_LEVEL: why each graph compiled and ran, read from the stack
  replicas      compiling and running programs that span every process's device
  compiler      a walked graph as one jitted JAX function; the in-memory program cache
  plans         a graph's walk kept by its roots' hashes, replayed while its structure repeats
  graph         sync, mark_step, materialize: walk, look up or compile, execute
  eager         eager mode: each recorded op compiled (once) and run at once
  fallback      running an op on the CPU
  dispatch      choosing the rule for each ATen op, and recording
  special       the engine's own rules, registered into dispatch's table
  functional_collectives  torch's functional collectives (_c10d_functional) recorded as
                the collectives xm records
  nested        the transformer fast path's nested tensors, held in padded form
  loop          a step recorded once, run as one XLA While loop (gradient accumulation,
                scan, while_loop)
  region        a pure function recorded once per signature as a JAX function (assume_pure)

Importing the package loads `special`, `functional_collectives`, `nested` and `loop` (and
so everything else but `region`): after it, every ATen op on an XLA tensor reaches
`dispatch.run`, and torch's `while_loop` reaches `loop.while_loop`.
"""

from torch_xla.lazy import (  # noqa: F401  (register the engine's rules)
    functional_collectives,
    loop,
    nested,
    special,
)
