"""et_replay.utils as chakra_trace_link uses it."""

from __future__ import annotations

import gzip
import json
from typing import Any

from .execution_trace import ExecutionTrace


def read_dictionary_from_json_file(file_path: str) -> dict[Any, Any]:
    with gzip.open(file_path, "rb") if file_path.endswith("gz") else open(file_path) as f:
        return json.load(f)


def load_execution_trace_file(et_file_path: str) -> ExecutionTrace:
    return ExecutionTrace(read_dictionary_from_json_file(et_file_path))
