"""chakra-convert-fast: a streaming, iterative PyTorch -> Chakra execution trace converter.

``convert(input, output)`` writes the same bytes as ``chakra_converter PyTorch`` (mlc-chakra
1.0.0), in a fraction of its time and memory and without recursion; ``convert_pair``, ``link``,
``convert_all`` and ``repair`` handle host + Kineto pairs and whole jobs (see ``api``).
"""

from . import _early  # noqa: F401 - first: signal handling for the command line's start-up
from .api import (
    ConversionResult,
    ConvertOptions,
    KinetoConversion,
    LinkResult,
    MultiRankResult,
    PairResult,
    RemovedEdge,
    RepairResult,
    convert,
    convert_all,
    convert_kineto,
    convert_pair,
    link,
    repair,
)
from .errors import ConverterError, CyclicDependencyError, TraceContentError, TraceFormatError

__all__ = [
    "ConversionResult",
    "ConvertOptions",
    "ConverterError",
    "CyclicDependencyError",
    "KinetoConversion",
    "LinkResult",
    "MultiRankResult",
    "PairResult",
    "RemovedEdge",
    "RepairResult",
    "TraceContentError",
    "TraceFormatError",
    "convert",
    "convert_all",
    "convert_kineto",
    "convert_pair",
    "link",
    "repair",
]
