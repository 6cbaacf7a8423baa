"""Test helpers (imported, not fixtures): where the real traces are, the reference oracle, trace rewriting,
and the real schema's reader of ``.et`` files."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from chakra_convert_fast.fixtures.reference import reference_convert

ROOT = Path(__file__).resolve().parent.parent
#: Copies of ../shared/traces (real traces nobody here wrote; provenance in its README).
REAL_TRACES_DIR = Path(__file__).resolve().parent / "data" / "traces"


def load_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def write_trace(trace: dict[str, Any], path: Path) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as fh:
        json.dump(trace, fh)
    return path


def reorder(trace: dict[str, Any], order: str, seed: int = 7) -> dict[str, Any]:
    """The same trace with its node list reversed or shuffled (what makes the reference recurse)."""
    nodes = list(trace["nodes"])
    if order == "reversed":
        nodes.reverse()
    elif order == "shuffled":
        random.Random(seed).shuffle(nodes)
    return {**trace, "nodes": nodes}


def oracle_bytes(input_path: Path, workdir: Path) -> bytes:
    """What chakra_converter writes for this input (run with a big stack where it would crash)."""
    out = workdir / (input_path.name + ".reference.et")
    reference_convert(input_path, out)
    return out.read_bytes()


def read_et(path: Path) -> tuple[Any, list[Any]]:
    """Decode a .et file with the real schema: (GlobalMetadata, [Node, ...])."""
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage

    with open(path, "rb") as fh:
        metadata = GlobalMetadata()
        assert decodeMessage(fh, metadata), f"{path}: no GlobalMetadata"
        nodes: list[Any] = []
        while True:
            node = Node()
            if not decodeMessage(fh, node):
                return metadata, nodes
            nodes.append(node)


SHIM = Path(__file__).parent / "reference_shim"


def reference_link(host: Path, device: Path, out: Path, tmp: Path, rank: int = 0) -> dict[str, Any]:
    """The real chakra_trace_link (et_replay and HTA replaced by tests/reference_shim, see its
    README); it needs a plain host file. Returns the parsed merged document."""
    plain = tmp / "ref_host.json"
    with (
        gzip.open(host, "rb") if str(host).endswith(".gz") else open(host, "rb") as src,
        open(plain, "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    env = {**os.environ, "PYTHONPATH": str(SHIM)}
    code = "import sys; from chakra.src.trace_link.trace_link import main; sys.exit(main())"
    args = ["--rank", str(rank), "--chakra-host-trace", str(plain), "--chakra-device-trace", str(device)]
    run = subprocess.run(
        [sys.executable, "-c", code, *args, "--output-file", str(out), "--log-level", "ERROR"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return load_trace(out)
