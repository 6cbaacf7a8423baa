"""chakra-convert-fast: a streaming, iterative PyTorch -> Chakra execution trace converter.

``convert(input, output)`` writes the same bytes as ``chakra_converter PyTorch`` (mlc-chakra
1.0.0), in a fraction of its time and memory and without recursion.
"""

from .api import ConversionResult, RemovedEdge, convert
from .errors import ConverterError, CyclicDependencyError, TraceContentError, TraceFormatError

__all__ = [
    "ConversionResult",
    "ConverterError",
    "CyclicDependencyError",
    "RemovedEdge",
    "TraceContentError",
    "TraceFormatError",
    "convert",
]
