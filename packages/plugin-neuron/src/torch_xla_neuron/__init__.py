"""torch-xla plugin for AWS NeuronCores (Trainium, Inferentia) through libneuronxla.

libneuronxla is imported only when the library path is asked for.
"""

from torch_xla_neuron.plugin import NeuronPlugin

__version__ = "0.1.0"

__all__ = ["NeuronPlugin", "__version__"]
