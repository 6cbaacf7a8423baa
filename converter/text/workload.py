"""The ASTRA-sim 1.0 text workload format, read into a ``Workload``.

Line 1: the parallelism type, then its parameters (``HYBRID_DLRM 4``;
``HYBRID_TRANSFORMER model_parallel_NPU_group: 8``; ``HYBRID_TRANSFORMER_FWD_IN_BCKWD
model_parallel_NPU_group: 4 checkpoints: 2 2 11 checkpoint_initiates: 2 19 10``). Line 2: the
number of layers. Then a line per layer, 12 whitespace-separated columns: name, a reserved
column, then for the forward pass, the input gradient and the weight gradient each a compute
time, a collective (ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL or NONE) and its size in bytes,
and last the update delay; ``HYBRID_CUSTOMIZED`` adds a 13th, the layer's own parallelism.

Values are read as ``chakra_converter`` reads them (``str.split``, ``int``), so every file it
converts reads the same here; what it would accept silently or die on (a column missing or
extra, a collective it does not know, a layer count that is not the number of layer lines) is an
error naming the line. Blank lines are skipped (ASTRA-sim 1.0 reads tokens, not lines).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TraceFormatError

#: The types ``chakra_converter Text`` converts (mlc-chakra 1.0.0's ``TextConverter.convert``).
REFERENCE_TYPES = (
    "MICRO",
    "DATA",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
)
#: The types ASTRA-sim 1.0 ran that it refuses (``Workload::decode_parallelsim``; DATA_REORDER is
#: the tutorials' exercise 4, asplos2022/isca2022/mlsys2022, which adds it to their ASTRA-sim 1.0).
ASTRA_SIM_1_TYPES = (
    "HYBRID_TRANSFORMER",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD",
    "HYBRID_CUSTOMIZED",
    "DISTRIBUTED_INFERENCE",
    "DATA_REORDER",
)
TYPES = REFERENCE_TYPES + ASTRA_SIM_1_TYPES
#: The collectives of the format; ALLREDUCEALLTOALL is parsed by ASTRA-sim 1.0 but panics there.
COLLECTIVES = ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL", "NONE")
#: Per-layer parallelisms a HYBRID_CUSTOMIZED layer may name (those with a dimension rule in 1.0).
LAYER_POLICIES = (
    "DATA",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
    "MICRO",
    "DISTRIBUTED_INFERENCE",
)
_COLUMNS = (
    "name",
    "reserved",
    "forward compute time",
    "forward collective",
    "forward collective size",
    "input-gradient compute time",
    "input-gradient collective",
    "input-gradient collective size",
    "weight-gradient compute time",
    "weight-gradient collective",
    "weight-gradient collective size",
    "update delay",
    "layer parallelism",
)
_U64, _I64 = 1 << 64, 1 << 63


@dataclass(frozen=True)
class Layer:
    line: int
    name: str
    fwd_time: int
    fwd_comm: str
    fwd_size: int
    ig_time: int
    ig_comm: str
    ig_size: int
    wg_time: int
    wg_comm: str
    wg_size: int
    policy: str = ""  # HYBRID_CUSTOMIZED: the layer's own parallelism


@dataclass(frozen=True)
class Workload:
    path: str
    text: str  # the whole file as read (universal newlines): the reference stores it in the metadata
    kind: str
    layers: tuple[Layer, ...]
    last_bottom_layer: int = 0  # HYBRID_DLRM(_ENHANCED)
    model_parallel_group: int = 0  # HYBRID_TRANSFORMER(_FWD_IN_BCKWD)
    checkpoints: frozenset[int] = field(default_factory=frozenset)
    checkpoint_initiates: frozenset[int] = field(default_factory=frozenset)


def read_workload(path: str) -> Workload:
    try:
        with open(path, encoding="utf-8") as fh:  # newline=None: what the reference's text mode reads
            text = fh.read()
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, not a workload file") from None
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, f"not a text file (byte {exc.start} is not UTF-8)") from None
    except ValueError as exc:  # a NUL byte in the path
        raise TraceFormatError(path, f"cannot open: {exc}") from None
    return parse_workload(path, text)


def parse_workload(path: str, text: str) -> Workload:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    numbered = [(number, line.split()) for number, line in enumerate(lines, 1)]
    header = [(n, cols) for n, cols in numbered[:2]]
    if not header or not header[0][1]:
        raise TraceFormatError(path, "line 1: empty; expected the parallelism type (e.g. DATA)")
    kind, params = header[0][1][0], header[0][1][1:]
    if kind not in TYPES:
        raise TraceFormatError(
            path, f"line 1: unsupported parallelism type {kind!r}; expected one of {', '.join(TYPES)}"
        )
    if len(header) < 2 or len(header[1][1]) != 1:
        raise TraceFormatError(path, "line 2: expected the number of layers, alone on its line")
    count = _int(path, 2, "the number of layers", header[1][1][0])
    body = [(n, cols) for n, cols in numbered[2:] if cols]
    if count != len(body):
        where = f" (lines {body[0][0]}-{body[-1][0]})" if body else ""
        raise TraceFormatError(path, f"line 2: says {count} layers, but the file has {len(body)} layer lines{where}")
    columns = 13 if kind == "HYBRID_CUSTOMIZED" else 12
    layers = tuple(_layer(path, n, cols, columns) for n, cols in body)
    extra = _header(path, kind, params, len(layers))
    return Workload(path, text, kind, layers, **extra)  # type: ignore[arg-type]


def _layer(path: str, line: int, cols: list[str], columns: int) -> Layer:
    if len(cols) != columns:
        raise TraceFormatError(
            path, f"line {line}: {len(cols)} columns, expected {columns} ({', '.join(_COLUMNS[:columns])})"
        )
    values: list[int] = []
    for k in (2, 4, 5, 7, 8, 10):
        what = _COLUMNS[k]
        value = _int(path, line, f"column {k + 1} ({what})", cols[k])
        if what.endswith("time") and not 0 <= value < _U64:
            raise TraceFormatError(
                path, f"line {line}: column {k + 1} ({what}) {value} is not a duration (0 to 2^64-1)"
            )
        if what.endswith("size") and not -_I64 <= value < _I64:
            raise TraceFormatError(path, f"line {line}: column {k + 1} ({what}) {value} is out of the int64 range")
        values.append(value)
    for k in (3, 6, 9):
        if cols[k] not in COLLECTIVES:
            raise TraceFormatError(
                path,
                f"line {line}: column {k + 1} ({_COLUMNS[k]}): unknown collective "
                f"{cols[k]!r}; expected one of {', '.join(COLLECTIVES)}",
            )
    policy = ""
    if columns == 13:
        policy = cols[12]
        if policy not in LAYER_POLICIES:
            raise TraceFormatError(
                path,
                f"line {line}: column 13 (layer parallelism) {policy!r}: expected one of {', '.join(LAYER_POLICIES)}",
            )
    fwd_time, fwd_size, ig_time, ig_size, wg_time, wg_size = values
    return Layer(
        line, cols[0], fwd_time, cols[3], fwd_size, ig_time, cols[6], ig_size, wg_time, cols[9], wg_size, policy
    )


def _int(path: str, line: int, what: str, token: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise TraceFormatError(path, f"line {line}: {what} is not an integer: {token!r}") from None


def _header(path: str, kind: str, params: list[str], layers: int) -> dict[str, object]:
    """The parameters after the type on line 1, as ASTRA-sim 1.0 reads them (by tokens)."""
    if kind in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        if not params:
            raise TraceFormatError(path, f"line 1: {kind} needs the last bottom layer after the type")
        return {"last_bottom_layer": _int(path, 1, "the last bottom layer", params[0])}
    if kind not in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
        return {}
    tokens = list(params)
    group = _labelled(path, tokens, "model_parallel_NPU_group:")
    if group < 1:
        raise TraceFormatError(path, f"line 1: model_parallel_NPU_group {group} must be at least 1")
    extra: dict[str, object] = {"model_parallel_group": group}
    if kind == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
        checkpoints = _layer_list(path, tokens, "checkpoints:", layers)
        initiates = _layer_list(path, tokens, "checkpoint_initiates:", layers)
        for layer in sorted(initiates):
            below = [c for c in checkpoints if c <= layer]
            if not below:
                raise TraceFormatError(
                    path, f"line 1: layer {layer} initiates re-computation but no checkpoint is at or below it"
                )
            if max(below) == layer:
                raise TraceFormatError(
                    path,
                    f"line 1: layer {layer} initiates re-computation from itself "
                    "(it is a checkpoint): nothing to re-compute",
                )
            between = [other for other in initiates if max(below) < other < layer]
            if between:  # ASTRA-sim 1.0 stops re-computing there and goes on backward from that layer
                raise TraceFormatError(
                    path,
                    f"line 1: layer {layer} re-computes from checkpoint {max(below)} "
                    f"across layer {between[0]}, which initiates re-computation too",
                )
        extra.update(checkpoints=frozenset(checkpoints), checkpoint_initiates=frozenset(initiates))
    if tokens:
        raise TraceFormatError(path, f"line 1: unexpected {' '.join(tokens)!r} after the parameters of {kind}")
    return extra


def _labelled(path: str, tokens: list[str], label: str) -> int:
    if len(tokens) < 2 or tokens[0] != label:
        found = f"{tokens[0]!r}" if tokens else "the end of the line"
        raise TraceFormatError(path, f"line 1: expected '{label} N', found {found}")
    value = _int(path, 1, label.rstrip(":"), tokens[1])
    del tokens[:2]
    return value


def _layer_list(path: str, tokens: list[str], label: str, layers: int) -> list[int]:
    count = _labelled(path, tokens, label)
    if count < 0 or len(tokens) < count:
        raise TraceFormatError(path, f"line 1: '{label} {count}' must be followed by {count} layer numbers")
    values = [_int(path, 1, f"a layer of {label.rstrip(':')}", t) for t in tokens[:count]]
    del tokens[:count]
    for value in values:
        if not 0 <= value < layers:
            raise TraceFormatError(
                path, f"line 1: {label.rstrip(':')} names layer {value}; the layers are 0-{layers - 1}"
            )
    return values
