"""Where the job on disk was found before ``job/`` held it: the names its importers use, from
``job/discover.py`` (each rank's traces in a directory) and ``job/files.py`` (a job's rank files)."""

from ..job.discover import DEFAULT_JOB_NAME as DEFAULT_JOB_NAME
from ..job.discover import TRACE_SUFFIXES as TRACE_SUFFIXES
from ..job.discover import FoundTraces as FoundTraces
from ..job.discover import JobMark as JobMark
from ..job.discover import discover as discover
from ..job.discover import distributed_info as distributed_info
from ..job.discover import job_name as job_name
from ..job.discover import rank_from_name as rank_from_name
from ..job.discover import trace_kind as trace_kind
from ..job.files import et_ranks as et_ranks
from ..job.files import first_gap as first_gap
from ..job.files import foreign_rank_files as foreign_rank_files
from ..job.files import job_rank_files as job_rank_files
