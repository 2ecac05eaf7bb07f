"""`torch_xla.core.dynamo_bridge`: the module PyTorch's `openxla` dynamo backend imports
(torch/_dynamo/backends/torchxla.py); the bridge itself is `torch_xla._dynamo.dynamo_bridge`."""

from torch_xla._dynamo.dynamo_bridge import (
    GraphFunction,
    GraphInputMatcher,
    NoneRemover,
    alias_with_buffer_donor_config,
    dynamo_debug,
    extract_compiled_graph,
    extract_internal,
    get_fallback_ops,
    is_xla_tensor,
    ptxla_debug,
)

__all__ = ["GraphFunction", "GraphInputMatcher", "NoneRemover", "alias_with_buffer_donor_config",
           "dynamo_debug", "extract_compiled_graph", "extract_internal", "get_fallback_ops",
           "is_xla_tensor", "ptxla_debug"]
