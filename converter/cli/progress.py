"""Progress bars on stderr (tqdm), for the commands that show them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

if TYPE_CHECKING:
    from .. import api


class ProgressBars:
    """tqdm bars on stderr: input bytes while reading, nodes while writing, ranks when converting many."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bars: dict[str, Any] = {}

    def __enter__(self) -> ProgressBars:
        return self

    def __exit__(self, *exc: object) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()

    @property
    def progress(self) -> api.Progress | None:
        return self._update if self.enabled else None

    def _update(self, stage: str, done: int, total: int) -> None:
        bar = self._bars.get(stage)
        if bar is None:
            for other in self._bars.values():
                other.close()
            unit = {"read": "B", "write": "node", "ranks": "rank"}.get(stage, "it")
            bar = self._bars[stage] = tqdm(
                total=total, desc=f"{stage:>5}", unit=unit, unit_scale=True, file=sys.stderr, leave=False
            )
        bar.update(done - bar.n)

    def rank_done(self, outcome: api.RankOutcome) -> None:
        if not self.enabled:
            return
        bar = self._bars.get("ranks")
        if bar is None:
            bar = self._bars["ranks"] = tqdm(desc="ranks", unit="rank", file=sys.stderr, leave=False)
        bar.set_postfix_str(f"rank {outcome.rank} {'ok' if outcome.ok else 'FAILED'}")
        bar.update(1)
