"""Only the name the reference imports."""

from enum import Enum


class CPEdgeType(Enum):
    SYNC_DEPENDENCY = "critical_path_sync_dependency"
