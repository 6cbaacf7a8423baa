"""The ranges of ``simulate``'s numbers, wherever they are given: on the command line
(``cli/simulate.py``'s ``argparse`` types), in ``SimulateOptions`` (``options.py``) and in the
user's config files (``configfiles.py``). Wide enough for any real machine, narrow enough that
ASTRA-sim's integer ticks neither overflow nor round to nothing."""

from __future__ import annotations

from ..arguments import MAX_RANKS as MAX_RANKS

BANDWIDTH_GBPS = (1e-3, 1e6)  # a link's, or the memory's (1 MB/s .. 1 PB/s)
LATENCY_NS = (1e-3, 1e9)  # a link's (1 ps .. 1 s)
PEAK_TFLOPS = (1e-3, 1e6)
TIMEOUT_S = (1e-3, 1e7)  # (about 116 days)
MAX_ACTIVE_CHUNKS = 1024
#: A collective is cut into this many chunks at most (``preferred-dataset-splits``; ASTRA-sim's
#: examples use 1 and 4; 0 divides by zero in it, a negative count never ends).
MAX_DATASET_SPLITS = 1024
#: A delay in cycles (ns): ``endpoint-delay``, ``local-reduction-delay`` (an int in ASTRA-sim).
MAX_DELAY_CYCLES = 1_000_000_000
#: Network dimensions (each of 2 NPUs or more, their product at most ``MAX_RANKS``).
MAX_DIMENSIONS = 20
