"""Many outputs written all or nothing: the files of a job of many ranks.

Each file is written into a hidden folder beside the targets (``.NAME.XXXX.staging``), and only
when every one is complete are they renamed over their targets, together; a target that existed
is moved aside first and put back if a rename fails, so a failed or interrupted command leaves
neither a partial job nor a mix of two jobs (a ``SIGKILL`` can leave the hidden folder behind,
never a partial output). Every ``OSError`` is an ``OutputError`` naming the file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import suppress

from ..errors import OutputError
from ..io import OutputTarget


class StagedOutputs:
    """``write(index, data)`` the file of ``targets[index]``; ``commit()`` puts every file in place;
    ``discard()`` (always call it, in a ``finally``) removes whatever is left of the staging."""

    def __init__(self, targets: Sequence[OutputTarget]) -> None:
        self.targets = list(targets)
        directories = {os.path.dirname(t.final) for t in self.targets}
        if len(directories) != 1 or any(t.write_through for t in self.targets):
            raise OutputError(self.targets[0].path if self.targets else "",
                              "the outputs must be regular files in one directory")
        directory = directories.pop()
        name = os.path.basename(self.targets[0].final)
        try:
            self.stage = tempfile.mkdtemp(dir=directory, prefix=f".{name}.", suffix=".staging")
        except OSError as exc:
            raise OutputError(self.targets[0].path, f"cannot write in {directory}: {exc.strerror or exc}") from None
        self._written = [False] * len(self.targets)

    def staged(self, index: int) -> str:
        return os.path.join(self.stage, str(index))

    def write(self, index: int, data: bytes | Sequence[bytes]) -> int:
        """Write the whole file of ``targets[index]`` (bytes, or parts joined); returns its size."""
        target = self.targets[index]
        parts = [data] if isinstance(data, bytes) else data
        size = 0
        try:
            with open(self.staged(index), "wb") as out:
                for part in parts:
                    out.write(part)
                    size += len(part)
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {exc.strerror or exc}") from None
        self._written[index] = True
        return size

    def commit(self) -> None:
        """Rename every staged file over its target (each must have been written)."""
        missing = [t.path for t, done in zip(self.targets, self._written, strict=True) if not done]
        if missing:
            raise OutputError(missing[0], "was never written (internal error); nothing written")
        moved: list[tuple[int, str | None]] = []  # (index, where the old target went)
        try:
            for index, target in enumerate(self.targets):
                backup: str | None = os.path.join(self.stage, f"old.{index}")
                if os.path.lexists(target.final):
                    os.replace(target.final, str(backup))
                else:
                    backup = None
                moved.append((index, backup))
                os.chmod(self.staged(index), 0o666 & ~_umask())
                os.replace(self.staged(index), target.final)
        except BaseException as exc:
            self._roll_back(moved)
            if isinstance(exc, OSError):
                failed = self.targets[len(moved) - 1 if moved else 0].path
                raise OutputError(failed, f"cannot write: {exc.strerror or exc}; nothing written") from None
            raise

    def _roll_back(self, moved: list[tuple[int, str | None]]) -> None:
        for index, backup in reversed(moved):
            final = self.targets[index].final
            with suppress(OSError):
                if backup is not None:
                    os.replace(backup, final)
                elif os.path.exists(final) and not os.path.exists(self.staged(index)):
                    os.unlink(final)

    def discard(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
