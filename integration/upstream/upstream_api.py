"""Upstream PyTorch/XLA's public API, module by module: DATA only (names, no code).

Source: the `torch_xla` 2.9.0 wheel from PyPI (PyTorch/XLA's current release), read as
text (its Python files parsed with `ast`, never imported). For each module `path` is the
file that was read, inside the wheel and identically inside the pytorch/xla repository.

What counts as a public name, the same rule for every module:
- where the module defines `__all__`: the entries of `__all__` that the module binds
  (upstream's `torch_xla/distributed/spmd/__init__.py` fuses two entries with a missing
  comma, "MarkShardingFunction" "mark_sharding"; both halves were tried, the bound one kept);
- otherwise: the names without a leading underscore that the module itself binds at top
  level (functions, classes, constants; also under `if`/`try`) and, for a package
  `__init__`, the non-module names it re-exports from torch_xla modules. A star import
  counts in a package `__init__` and in an alias module that defines nothing itself
  (`torch_xla.core.dynamo_bridge`); elsewhere (`spmd.debugging`) it is an implementation
  detail. Modules, names imported from outside torch_xla,
  `TypeVar`/`ParamSpec` helpers and loggers are not API and are left out, and so is one
  variable that leaks from an import-time probe (`torch_xla.dist`, a tensorflow
  distribution looked up in `torch_xla/__init__.py`).

`torch_xla._XLAC` (its path reads `test/**/*.py`) is upstream's C++ extension, with hundreds
of entry points; listed are the ones upstream's Python tests call directly, found by
searching its test/ folder for `_XLAC._`: the copies in shared/upstream (commit 41398bf),
test/test_operations.py, test/test_input_output_aliases.py, test/test_buffer_donation.py,
test/dynamo/test_dynamo.py, test/dynamo/test_dynamo_integrations_util.py and
test/spmd/test_xla_virtual_device.py (the stored copies the search tools reach). Kept are
those the 2.9.0 wheel's `_XLAC` library still registers: two that tests of older releases
call, `_xla_set_use_full_mat_mul_precision` and `_set_torch_xla_graph_execution_check_level`,
are gone from it. `_is_placecholder` is upstream's own spelling.

`integration/upstream/api_report.py` checks our modules against this list.
"""

from __future__ import annotations

from typing import NamedTuple

RELEASE = "2.9.0"


class Module(NamedTuple):
    path: str  # the upstream file read
    names: tuple[str, ...]  # its public names, sorted


MODULES: dict[str, Module] = {
    "torch_xla": Module(
        "torch_xla/__init__.py",
        (
            "compile", "device", "device_count", "devices", "eager_mode", "launch", "manual_seed",
            "real_devices", "save_as_stablehlo", "save_torch_model_as_stablehlo", "step", "sync",
        ),
    ),
    "torch_xla._XLAC": Module(
        "test/**/*.py",
        (
            "OpSharding", "_check_tensor_need_materialization", "_clear_pending_irs",
            "_get_base_seed_as_tensor", "_get_buffer_donation", "_get_executed_fallback_ops",
            "_get_git_revs", "_get_graph_hash", "_get_ir_debug", "_get_seed_info_id",
            "_get_tensors_handle", "_get_tensors_xla_device_data_node", "_get_xla_sharding_spec",
            "_get_xla_sharding_type", "_get_xla_tensor_debug_info",
            "_get_xla_tensor_dimension_size", "_get_xla_tensors_hlo", "_get_xla_tensors_text",
            "_global_tensor_from_cpu_shards", "_init_computation_client", "_init_xla_lazy_backend",
            "_is_placecholder", "_replace_xla_tensor", "_run_cached_graph", "_set_buffer_donation",
            "_set_ir_debug", "_set_xla_custom_op_name_prefix", "_spmd_full_to_shard_shape",
            "_spmd_shard_to_full_shape", "_xla_get_all_devices", "_xla_get_auto_sharding",
            "_xla_get_devices", "_xla_get_enable_alias_with_buffer_donor_config",
            "_xla_get_runtime_devices", "_xla_get_tensor_id", "_xla_increment_counter",
            "_xla_metrics_report", "_xla_real_devices", "_xla_runtime_is_initialized",
            "_xla_set_enable_alias_with_buffer_donor_config", "_xla_set_mat_mul_precision",
            "_xla_spmd_all_reduce", "_xla_spmd_reduce_scatter", "_xla_sync_multi",
            "_xla_tensors_from_aten", "_xla_warm_up_cache",
        ),
    ),
    "torch_xla._dynamo.config": Module(
        "torch_xla/_dynamo/config.py",
        (
            "skip_input_data_check",
        ),
    ),
    "torch_xla._dynamo.dynamo_bridge": Module(
        "torch_xla/_dynamo/dynamo_bridge.py",
        (
            "Deduper", "GraphInputMatcher", "InputCollector", "NoneRemover",
            "SpecialReturnHandler", "UnsupportedNodesCollector", "XLAConstructorMoverPass",
            "dynamo_debug", "extract_compiled_graph", "extract_compiled_graph_helper",
            "extract_graph_helper", "extract_internal", "get_fallback_ops", "is_xla_tensor",
            "partition_fx_graph_for_cpu_fallback", "ptxla_debug",
        ),
    ),
    "torch_xla._internal.pjrt": Module(
        "torch_xla/_internal/pjrt.py",
        (
            "initialize_multiprocess", "initialize_singleprocess", "run_multiprocess", "spawn",
            "spawn_threads",
        ),
    ),
    "torch_xla.amp": Module(
        "torch_xla/amp/__init__.py",
        (
            "autocast",
        ),
    ),
    "torch_xla.amp.syncfree": Module(
        "torch_xla/amp/syncfree/__init__.py",
        (
            "Adam", "AdamW", "SGD",
        ),
    ),
    "torch_xla.backends": Module(
        "torch_xla/backends/__init__.py",
        (
            "get_mat_mul_precision", "set_mat_mul_precision",
        ),
    ),
    "torch_xla.core.dynamo_bridge": Module(
        "torch_xla/core/dynamo_bridge.py",
        (
            "Deduper", "GraphInputMatcher", "InputCollector", "NoneRemover",
            "SpecialReturnHandler", "UnsupportedNodesCollector", "XLAConstructorMoverPass",
            "dynamo_debug", "extract_compiled_graph", "extract_compiled_graph_helper",
            "extract_graph_helper", "extract_internal", "get_fallback_ops", "is_xla_tensor",
            "partition_fx_graph_for_cpu_fallback", "ptxla_debug",
        ),
    ),
    "torch_xla.core.functions": Module(
        "torch_xla/core/functions.py",
        (
            "AllGather", "AllReduce", "AllReduceSumLayer", "SyncBatchNorm", "all_gather",
            "all_reduce", "distributed_mm",
        ),
    ),
    "torch_xla.core.xla_builder": Module(
        "torch_xla/core/xla_builder.py",
        (
            "CompiledCallableWithCache", "FlattenedInputFunc", "JaxCallable",
            "JaxFlattenedInputFunc", "Op", "Shape", "Type", "XlaCallable", "call_jax",
            "computation_from_module_proto", "create_builder", "create_computation",
            "create_placeholder_tensor", "get_computation_hlo", "mkleaf", "mkop", "mkparam",
            "mkshape", "tensor_shape", "xla_computation_as_func",
        ),
    ),
    "torch_xla.core.xla_env_vars": Module(
        "torch_xla/core/xla_env_vars.py",
        (
            "ACCELERATOR_TYPE", "CLOUD_TPU_TASK_ID", "CPU_NUM_DEVICES", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "PJRT_CPU_ASYNC_CLIENT", "PJRT_DEVICE", "PJRT_DIST_SERVICE_ADDR",
            "PJRT_DYNAMIC_PLUGINS", "PJRT_LOCAL_PROCESS_COUNT", "PJRT_LOCAL_PROCESS_RANK",
            "PJRT_SELECT_DEFAULT_DEVICE", "RANK", "TPUVM_MODE", "TPU_ACCELERATOR_TYPE",
            "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_HOST_BOUNDS",
            "TPU_MESH_CTLER_ADDR", "TPU_MESH_CTLER_PORT", "TPU_NUM_DEVICES",
            "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_BOUNDS", "TPU_PROCESS_PORT",
            "TPU_SKIP_MDS_QUERY", "TPU_VISIBLE_CHIPS", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID",
            "WORKER_ID", "WORLD_SIZE",
        ),
    ),
    "torch_xla.core.xla_model": Module(
        "torch_xla/core/xla_model.py",
        (
            "CoalescingBuckets", "DeviceContext", "MemoryInfo", "REDUCE_AND", "REDUCE_MAX",
            "REDUCE_MIN", "REDUCE_MUL", "REDUCE_OR", "REDUCE_SUM", "RateTracker",
            "ToXlaTensorArena", "XLA_LIB", "add_step_closure", "all_gather",
            "all_gather_bucketized", "all_reduce", "all_reduce_bucketized_gradients", "all_to_all",
            "broadcast_master_param", "check_view_sharing", "collective_broadcast",
            "collective_permute", "do_on_ordinals", "fork_rng", "get_local_ordinal",
            "get_memory_info", "get_rng_state", "get_stablehlo", "get_stablehlo_bytecode",
            "get_xla_supported_devices", "is_master_ordinal", "is_xla_tensor", "mark_step",
            "master_print", "mesh_reduce", "optimization_barrier_", "optimizer_step", "recv",
            "reduce_gradients", "reduce_scatter", "reduce_scatter_bucketized", "rendezvous",
            "save", "send", "send_cpu_data_to_device", "set_replication", "set_rng_state",
            "unlazy", "wait_device_ops", "xla_device", "xla_device_hw", "xla_device_kind",
            "xla_real_devices", "xla_rendezvous", "xla_replication_devices",
        ),
    ),
    "torch_xla.debug.metrics": Module(
        "torch_xla/debug/metrics.py",
        (
            "clear_all", "clear_counters", "clear_metrics", "counter_names", "counter_value",
            "executed_fallback_ops", "metric_data", "metric_names", "metrics_report",
            "short_metrics_report",
        ),
    ),
    "torch_xla.debug.metrics_compare_utils": Module(
        "torch_xla/debug/metrics_compare_utils.py",
        (
            "compare_metrics", "get_data_points_from_metrics_reports", "parse_metrics_report",
        ),
    ),
    "torch_xla.debug.profiler": Module(
        "torch_xla/debug/profiler.py",
        (
            "StepTrace", "Trace", "get_tracer_marked_step", "set_tracer_marked_step",
            "start_server", "start_trace", "stop_trace", "trace", "trace_detached", "trace_me",
        ),
    ),
    "torch_xla.distributed.data_parallel": Module(
        "torch_xla/distributed/data_parallel.py",
        (
            "Context", "DataParallel", "ThreadResult",
        ),
    ),
    "torch_xla.distributed.fsdp": Module(
        "torch_xla/distributed/fsdp/__init__.py",
        (
            "XlaFullyShardedDataParallel", "checkpoint_module",
            "consolidate_sharded_model_checkpoints", "consolidate_sharded_state_dicts",
        ),
    ),
    "torch_xla.distributed.fsdp.wrap": Module(
        "torch_xla/distributed/fsdp/wrap.py",
        (
            "always_wrap_policy", "lambda_auto_wrap_policy", "recursive_wrap",
            "size_based_auto_wrap_policy", "transformer_auto_wrap_policy",
        ),
    ),
    "torch_xla.distributed.parallel_loader": Module(
        "torch_xla/distributed/parallel_loader.py",
        (
            "MpDeviceLoader", "ParallelLoader", "PerDeviceLoader", "PerDeviceQueue",
        ),
    ),
    "torch_xla.distributed.spmd": Module(
        "torch_xla/distributed/spmd/__init__.py",
        (
            "HybridMesh", "Mesh", "ShardingSpec", "ShardingType", "XLAPatchedLinear", "XLAShard",
            "XLAShardedTensor", "_mark_manual_sharding", "annotate_custom_sharding",
            "apply_backward_optimization_barrier", "auto_policy", "clear_sharding",
            "disable_manual_sharding", "enable_manual_sharding", "get_1d_mesh", "get_global_mesh",
            "mark_sharding", "mark_sharding_with_gradients", "set_global_mesh", "shard_as",
            "wrap_if_sharded", "xla_distribute_module", "xla_distribute_tensor",
            "xla_patched_nn_linear_forward",
        ),
    ),
    "torch_xla.distributed.spmd.debugging": Module(
        "torch_xla/distributed/spmd/debugging.py",
        (
            "RICH_ENABLED", "visualize_sharding", "visualize_tensor_sharding",
        ),
    ),
    "torch_xla.distributed.spmd.xla_sharded_tensor": Module(
        "torch_xla/distributed/spmd/xla_sharded_tensor.py",
        (
            "XLAShard", "XLAShardedTensor", "no_dispatch",
        ),
    ),
    "torch_xla.distributed.spmd.xla_sharding": Module(
        "torch_xla/distributed/spmd/xla_sharding.py",
        (
            "EinsumLinear", "HybridMesh", "MarkShardingFunction", "Mesh", "PartitionSpec",
            "ShardingSpec", "ShardingType", "XLAPatchedLinear", "annotate_custom_sharding",
            "aot_mark_sharding_fake", "apply_backward_optimization_barrier",
            "apply_xla_patch_to_nn_linear", "clear_sharding", "disable_manual_sharding",
            "enable_manual_sharding", "get_1d_mesh", "get_global_mesh", "mark_sharding",
            "mark_sharding_with_gradients", "set_global_mesh", "shard_as", "unwrap_sharded_tensor",
            "wrap_as_sharded_tensor", "wrap_if_sharded", "xla_patched_nn_linear_forward",
        ),
    ),
    "torch_xla.distributed.xla_backend": Module(
        "torch_xla/distributed/xla_backend.py",
        (
            "ProcessGroupXla", "new_xla_process_group",
        ),
    ),
    "torch_xla.distributed.xla_multiprocessing": Module(
        "torch_xla/distributed/xla_multiprocessing.py",
        (
            "MpModelWrapper", "MpSerialExecutor", "create_optimized_replica_groups",
            "device_kind_handler_dict", "spawn",
        ),
    ),
    "torch_xla.distributed.zero_redundancy_optimizer": Module(
        "torch_xla/distributed/zero_redundancy_optimizer.py",
        (
            "ZeroRedundancyOptimizer",
        ),
    ),
    "torch_xla.experimental": Module(
        "torch_xla/experimental/__init__.py",
        (
            "eager_mode", "eager_mode_context", "is_eager_mode",
        ),
    ),
    "torch_xla.experimental.assume_pure": Module(
        "torch_xla/experimental/assume_pure.py",
        (
            "PureModule", "assume_pure", "assume_pure_torch", "j2t_autograd", "make_fake_inputs",
            "prepare_computation_inputs",
        ),
    ),
    "torch_xla.experimental.callback": Module(
        "torch_xla/experimental/callback.py",
        (
            "on_ready_callback", "on_ready_event",
        ),
    ),
    "torch_xla.experimental.custom_kernel": Module(
        "torch_xla/experimental/custom_kernel.py",
        (
            "DEFAULT_MASK_VALUE", "FlashAttention", "GMM", "convert_torch_dtype_to_jax",
            "fa_custom_backward", "fa_custom_backward_fake", "fa_custom_forward",
            "fa_custom_forward_fake", "flash_attention", "flash_attention_non_xla",
            "flash_attention_xla", "generate_ctx_need_grad", "gmm", "gmm_backward", "gmm_non_xla",
            "gmm_xla", "make_kernel_from_pallas", "multi_queries_paged_attention",
            "multi_queries_paged_attention_non_xla", "multi_queries_paged_attention_xla",
            "non_xla_attetion", "non_xla_ragged_paged_attention", "paged_attention",
            "paged_attention_non_xla", "paged_attention_xla", "quantized_matmul_int8",
            "quantized_matmul_int8_non_xla", "quantized_matmul_int8_xla", "ragged_paged_attention",
            "ragged_paged_attention_non_xla", "ragged_paged_attention_xla",
            "repeat_with_fixed_output_size", "safe_empty_like", "tgmm",
            "to_jax_shape_dtype_struct", "trace_pallas", "trace_pallas_arg_to_payload",
        ),
    ),
    "torch_xla.experimental.eager": Module(
        "torch_xla/experimental/eager.py",
        (
            "eager_mode", "eager_mode_context", "is_eager_mode",
        ),
    ),
    "torch_xla.experimental.gradient_accumulation": Module(
        "torch_xla/experimental/gradient_accumulation.py",
        (
            "GradientAccumulationContext", "XlaBuildHelper", "gradient_accumulation",
        ),
    ),
    "torch_xla.experimental.gru": Module(
        "torch_xla/experimental/gru.py",
        (
            "GRU",
        ),
    ),
    "torch_xla.experimental.mark_pattern_utils": Module(
        "torch_xla/experimental/mark_pattern_utils.py",
        (
            "StableHLOCompositeBuilder",
        ),
    ),
    "torch_xla.experimental.plugins": Module(
        "torch_xla/experimental/plugins.py",
        (
            "DevicePlugin", "default", "register_installed_plugins", "register_plugin",
            "use_dynamic_plugins", "using_dynamic_plugins",
        ),
    ),
    "torch_xla.experimental.spmd_fully_sharded_data_parallel": Module(
        "torch_xla/experimental/spmd_fully_sharded_data_parallel.py",
        (
            "SpmdFullyShardedDataParallel",
        ),
    ),
    "torch_xla.experimental.xla_marker": Module(
        "torch_xla/experimental/xla_marker.py",
        (
            "BoundaryMetadata", "BoundaryMetadataSerializer", "deserialize_composite_attr",
            "mark_tensor", "mark_tensor_meta", "mark_tensor_xla", "serialize_composite_attr",
        ),
    ),
    "torch_xla.experimental.xla_quantized_matmul": Module(
        "torch_xla/experimental/xla_quantized_matmul.py",
        (
            "XlaQuantizedLinear", "quantized_matmul", "quantized_matmul_xla",
        ),
    ),
    "torch_xla.runtime": Module(
        "torch_xla/runtime.py",
        (
            "addressable_device_count", "addressable_runtime_device_count", "device_type",
            "get_master_ip", "get_num_cached_compilation_graph", "global_device_count",
            "global_ordinal", "global_runtime_device_attributes", "global_runtime_device_count",
            "host_index", "initialize_cache", "is_bf16_supported", "is_spmd", "local_device_count",
            "local_ordinal", "local_process_count", "process_count", "process_index",
            "runtime_device_attributes", "set_device_type", "use_spmd", "world_size",
        ),
    ),
    "torch_xla.stablehlo": Module(
        "torch_xla/stablehlo.py",
        (
            "InputLocation", "StableHLOExportOptions", "StableHLOFunc", "StableHLOFunctionMeta",
            "StableHLOGraphModule", "StableHLOJSONSerializer", "StableHLOModelBundle",
            "VariableSignature", "VariableType", "XLAExportInterpreter",
            "exported_program_to_stablehlo", "save_as_stablehlo", "save_torch_model_as_stablehlo",
            "stablehlo_obj_hook",
        ),
    ),
    "torch_xla.test.test_utils": Module(
        "torch_xla/test/test_utils.py",
        (
            "close_summary_writer", "get_summary_writer", "mp_test", "now", "print_test_update",
            "print_training_update", "write_to_summary",
        ),
    ),
    "torch_xla.utils.checkpoint": Module(
        "torch_xla/utils/checkpoint.py",
        (
            "CheckpointFunction", "CheckpointStatus", "checkpoint", "chkpt_status",
            "get_device_states", "set_device_states",
        ),
    ),
    "torch_xla.utils.serialization": Module(
        "torch_xla/utils/serialization.py",
        (
            "TensorReference", "load", "save",
        ),
    ),
    "torch_xla.utils.stablehlo_test_utils": Module(
        "torch_xla/utils/stablehlo_test_utils.py",
        (
            "compare_exported_program_and_saved_model_result", "has_tf_package",
            "load_save_model_and_inference", "wrap_func_as_nn_module",
        ),
    ),
    "torch_xla.utils.utils": Module(
        "torch_xla/utils/utils.py",
        (
            "Cleaner", "DataWrapper", "FnDataGenerator", "LazyProperty", "SampleGenerator",
            "TimedScope", "TmpFolder", "as_list", "check_env_flag", "eprint",
            "flatten_nested_tuple", "for_each_instance", "for_each_instance_rewrite",
            "get_free_tcp_ports", "get_print_fn", "getenv_as", "list_copy_append", "null_print",
            "parallel_work", "shape", "timed",
        ),
    ),
}
