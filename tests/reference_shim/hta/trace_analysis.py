"""Critical-path analysis that fails the way HTA 0.5.0 does under pandas 3 (caught by the reference)."""

from typing import Any


class TraceAnalysis:
    def __init__(self, trace_dir: str, trace_files: dict[int, str]) -> None:
        self.trace_files = trace_files

    def critical_path_analysis(self, rank: int, annotation: str, instance_id: Any) -> Any:
        raise ValueError("critical path analysis unavailable (stand-in for HTA)")
