"""Real captures with ``chakra-profile`` (tiny GPT-2 / BERT, DDP on CPU ranks), made once per session.

The profiler tests and the ASTRA-sim end-to-end tests read the same runs: ``captured(run)`` starts
the real launcher the first time a run is asked for and returns where it left its files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    model: str
    nproc: int
    wait: int
    warmup: int
    active: int
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.model}{self.nproc}"

    @property
    def steps(self) -> list[int]:
        return list(range(self.wait + self.warmup, self.wait + self.warmup + self.active))

    def argv(self, outdir: Path) -> list[str]:
        return [
            "--model",
            self.model,
            "--size",
            "tiny",
            "--seq-len",
            "32",
            "--batch-size",
            "2",
            "--nproc",
            str(self.nproc),
            "--steps",
            str(self.wait + self.warmup + self.active),
            "--wait",
            str(self.wait),
            "--warmup",
            str(self.warmup),
            "--active",
            str(self.active),
            "--outdir",
            str(outdir),
            "--name",
            self.name,
            *self.extra,
        ]


GPT2_2 = Run("gpt2", 2, wait=1, warmup=1, active=1, extra=("--convert",))
BERT_2 = Run("bert", 2, wait=0, warmup=1, active=1, extra=("--convert",))
GPT2_4 = Run("gpt2", 4, wait=1, warmup=1, active=1, extra=("--convert",))
BERT_4 = Run("bert", 4, wait=0, warmup=1, active=1, extra=("--convert",))  # BERT_2 on 4 ranks (test_scale)
#: Mixtral (4 experts, top-2) with its experts sharded over 2 ranks (tests/test_profiler_moe.py).
MIXTRAL_EP2 = Run("mixtral", 2, wait=0, warmup=1, active=1, extra=("--ep", "2", "--convert"))
RUNS = [
    Run("gpt2", 1, wait=0, warmup=1, active=2),
    Run("bert", 1, wait=1, warmup=1, active=1, extra=("--save-dir", "SAVE")),
    GPT2_2,
    BERT_2,
    GPT2_4,
]


@dataclass(frozen=True)
class Done:
    run: Run
    outdir: Path
    output: str

    def host(self, rank: int) -> Path:
        return self.outdir / f"{self.run.name}_rank{rank}_host.json"

    def device(self, rank: int) -> Path:
        return self.outdir / f"{self.run.name}_rank{rank}_device.json"

    def summary(self) -> dict[str, Any]:
        return json.loads((self.outdir / f"{self.run.name}_summary.json").read_text())


def offline_env(tmp: Path) -> dict[str, str]:
    """No hub, fresh caches, one thread per rank, and this checkout importable."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(tmp / "hf"),
        CHAKRA_PROFILE_CACHE=str(tmp / "cache"),
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


def capture(run: Run, tmp: Path) -> Done:
    """Run ``chakra-profile`` for ``run`` in ``tmp`` (outputs in ``tmp/outputs``)."""
    argv = [str(tmp / "save") if a == "SAVE" else a for a in run.argv(tmp / "outputs")]
    proc = subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.profiler.cli", *argv],
        cwd=tmp,
        env=offline_env(tmp),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise AssertionError(f"chakra-profile {' '.join(argv)} failed:\n{output[-4000:]}")
    return Done(run, tmp / "outputs", output)
