"""Per-rank entry point: pretraining of GPT-2 / BERT over a data x tensor x pipeline parallel layout
(``layouts.py``, ``parallel.py``) with one host+device trace per rank.

Runs under ``chakra-profile`` or a user's own ``torchrun ... -m profiler.train ARGS``; without
torchrun's environment it is a one-rank job. Rank 0 logs every step and writes
``{outdir}/{name}_summary.json`` (model, layout and groups, ranks, step times, trace sizes). On gloo
each collective's process group is recorded in the host trace (``groups.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from chakra_convert_fast.converter import overhead
from chakra_convert_fast.converter.ranks import alltoallv
from chakra_convert_fast.converter.ranks.layoutscale import LAYOUT_SUFFIX
from chakra_convert_fast.profiler import convert, data, experts, groups, memory, models, parallel, tokenizers, tracing
from chakra_convert_fast.profiler.cli import layout_of, parse_args, threads_for
from chakra_convert_fast.profiler.layouts import Layout, shape_problems

log = logging.getLogger("profiler")


@dataclass(frozen=True)
class Placement:
    """Where this process sits in the job and what it computes on."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str


@dataclass
class StepRecord:
    """What one rank measured; gathered on rank 0 for the summary."""

    rank: int
    step_times_s: list[float] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)  # None on pipeline stages without the loss
    groups: dict[str, Any] | None = None  # this rank's group on each mesh dimension
    finalize_s: float = 0.0
    host: dict[str, Any] | None = None
    device: dict[str, Any] | None = None
    et: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None  # the traced step's memory truth (profiler/memory.py)
    expert_loads: list[list[list[int]]] | None = None  # --ep: per MoE layer, per forward, rows per local expert


def placement(args: argparse.Namespace) -> Placement:
    """Rank layout from torchrun's environment (one rank without it), plus device and backend."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    device_kind = args.device
    if device_kind == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        device_kind = "cuda" if gpus >= local_world_size else "cpu"
    device = torch.device("cuda", local_rank) if device_kind == "cuda" else torch.device("cpu")
    backend = args.backend if args.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    return Placement(rank, world_size, local_rank, local_world_size, device, backend)


def init_distributed(where: Placement) -> None:
    """Join the process group; a lone process uses an in-memory store and needs no port."""
    kwargs: dict[str, Any] = {}
    if where.device.type == "cuda":
        torch.cuda.set_device(where.device)
        kwargs["device_id"] = where.device
    if "MASTER_ADDR" not in os.environ and where.world_size == 1:
        from torch._C._distributed_c10d import HashStore  # torch.distributed's own (not re-exported)

        kwargs.update(store=HashStore(), rank=0, world_size=1)
    dist.init_process_group(backend=where.backend, **kwargs)


@contextmanager
def local_leader_first(where: Placement) -> Iterator[None]:
    """Local rank 0 fills the caches (datasets, vocabulary) before the others read them."""
    if where.local_rank != 0:
        dist.barrier()
    yield
    if where.local_rank == 0:
        dist.barrier()


def shared_tokenizer(args: argparse.Namespace, dataset: Any, where: Placement) -> Any:
    """Every rank gets the same ids: a trained WordPiece vocabulary is made on rank 0 and sent."""
    if args.model != "bert" or args.tokenizer:
        return tokenizers.load_tokenizer(args.model, [], args.tokenizer)
    payload: list[str | None] = [None]
    if where.rank == 0:
        payload[0] = tokenizers.to_json(tokenizers.bert_tokenizer(data.texts_of(dataset)))
    dist.broadcast_object_list(payload, src=0)
    if payload[0] is None:
        raise RuntimeError("rank 0 sent no tokenizer")
    return tokenizers.from_json(payload[0])


def configure_logging(rank: int) -> None:
    """Rank 0 speaks; the others only warn."""
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"[rank{rank}] %(message)s",
        stream=sys.stderr,
        force=True,
    )


def train_steps(
    trainer: parallel.Trainer,
    stream: Iterator[dict[str, torch.Tensor]],
    args: argparse.Namespace,
    where: Placement,
    paths: tracing.TracePaths,
    schedule: tracing.Schedule,
) -> StepRecord:
    """The training loop, profiled by ``schedule`` when tracing is on."""
    record = StepRecord(rank=where.rank)
    cuda = where.device.type == "cuda"
    cm = (
        tracing.capture(
            paths,
            schedule,
            cuda,
            host=args.host_trace,
            shapes=args.record_shapes,
            memory=getattr(args, "profile_memory", False),
        )
        if args.enable_tracing
        else tracing.no_capture()
    )
    finalize = 0.0
    active = schedule.active_steps() if args.enable_tracing else []
    with cm as prof:
        for step in range(args.steps):
            if active and step == active[0]:
                record.memory = {
                    "state_bytes_at_start": memory.state_bytes(trainer.module, trainer.optimizer, where.device),
                    **memory.ddp_bucket_bytes(trainer.module),
                    **memory.begin_step(where.device),
                }
            start = time.perf_counter()
            batch = {k: v.to(where.device, non_blocking=True) for k, v in next(stream).items()}
            loss_value = trainer.step(batch)  # .item() also waits for the GPU
            elapsed = time.perf_counter() - start
            if active and step == active[-1] and record.memory is not None:
                record.memory.update(memory.end_step(where.device))
            phase = schedule.phase(step) if args.enable_tracing else "untraced"
            record.step_times_s.append(elapsed)
            record.phases.append(phase)
            record.losses.append(None if math.isnan(loss_value) else loss_value)
            log.info("step %d/%d loss %.4f time %.1f ms [%s]", step + 1, args.steps, loss_value, elapsed * 1e3, phase)
            tick = time.perf_counter()
            prof.step()
            finalize += time.perf_counter() - tick
        tick = time.perf_counter()
    record.finalize_s = finalize + time.perf_counter() - tick  # Kineto export + observer unregister
    return record


def inspect_and_convert(record: StepRecord, args: argparse.Namespace, paths: tracing.TracePaths, name: str) -> None:
    """Check this rank's finished traces and convert them when asked; the profiler has exited."""
    record.host = tracing.inspect_host(paths.host) if args.host_trace else None
    record.device = tracing.inspect_device(paths.device)
    if record.memory is not None and getattr(args, "profile_memory", False):
        record.memory.update(memory.window_truth(paths.device, record.memory))
    write_calibration(record, args, paths)
    if args.convert:
        out = convert.et_path(Path(args.outdir), name, record.rank)
        tick = time.perf_counter()
        info = convert.convert_rank(
            paths.host if args.host_trace else None,
            paths.device,
            out,
            record.rank,
            args.converter,
            compact=getattr(args, "compact", False),
            roofline=getattr(args, "roofline", False),
            target=getattr(args, "target", "captured"),
        )
        record.et = {
            "path": str(out),
            "bytes": out.stat().st_size,
            "converter": args.converter,
            **info,
            "seconds": round(time.perf_counter() - tick, 3),
        }
        log.info("wrote %s with the %s converter", out, args.converter)
        if info.get("tracing_overhead"):
            log.info("%s: %s", out.name, info["tracing_overhead"])
        for warning in info["warnings"]:
            log.info("%s: %s", out.name, warning)


def write_calibration(record: StepRecord, args: argparse.Namespace, paths: tracing.TracePaths) -> None:
    """The rank's traced and untraced step times beside its traces (``{name}_rank{N}_overhead.json``),
    where the converter finds them to take the tracing's time out (``converter/overhead.py``)."""
    found = overhead.calibration(
        record.rank,
        record.step_times_s,
        record.phases,
        torch=torch.__version__,
        host_trace=args.host_trace,
        record_shapes=args.record_shapes,
        profile_memory=getattr(args, "profile_memory", False),
    )
    out = overhead.calibration_path(paths.device)
    if found is None or out is None:
        return
    out.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    log.info("tracing overhead calibration: %s", out)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 6) if values else None


def summarize(meta: dict[str, Any], records: list[StepRecord], active: int) -> dict[str, Any]:
    """Job-wide figures: median untraced vs traced step time, trace bytes per traced step.

    Step 0 is left out of the untraced median: it pays for DDP's bucket setup and lazy inits.
    """
    untraced = [
        t
        for r in records
        for i, (t, ph) in enumerate(zip(r.step_times_s, r.phases, strict=True))
        if i > 0 and ph in ("wait", "untraced")
    ]
    traced = [t for r in records for t, ph in zip(r.step_times_s, r.phases, strict=True) if ph == "active"]
    per_step: dict[str, float] = {}
    for kind in ("host", "device"):
        sizes = [getattr(r, kind)["bytes"] for r in records if getattr(r, kind)]
        if sizes:
            per_step[kind] = round(statistics.mean(sizes) / active)
    return {
        **meta,
        "step_time_s": {"untraced_median": _median(untraced), "traced_median": _median(traced)},
        "trace_bytes_per_step_per_rank": per_step,
        "ranks": [vars(r) for r in records],
    }


def build_meta(
    args: argparse.Namespace,
    where: Placement,
    size: str,
    shape: models.Shape,
    parameters: int,
    vocab_size: int,
    name: str,
) -> dict[str, Any]:
    """The run's fixed facts for the summary."""
    import transformers

    return {
        "name": name,
        "model": args.model,
        "size": size,
        "shape": shape.as_dict(),
        "parameters": parameters,
        "vocab_size": vocab_size,
        "world_size": where.world_size,
        "backend": where.backend,
        "device": where.device.type,
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "precision": args.precision,
        "steps": args.steps,
        "tracing": args.enable_tracing,
        "host_trace": args.host_trace,
        "record_shapes": args.record_shapes,
        "profile_memory": getattr(args, "profile_memory", False),
        "schedule": {"wait": args.wait, "warmup": args.warmup, "active": args.active},
        "data": args.data or data.SAMPLE,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "malloc": malloc_in_use(),
        **accelerator_facts(where),
    }


def accelerator_facts(where: Placement) -> dict[str, Any]:
    """What the step times were measured on: the GPU's name, CUDA's and NCCL's versions (None on
    CPU; a number nobody can place is worth little next to a table of GPU results)."""
    facts: dict[str, Any] = {"gpu": None, "gpu_count": 0, "cuda": torch.version.cuda, "nccl": None}
    if where.device.type == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(where.device)
        facts["gpu_count"] = torch.cuda.device_count()
        facts["gpu_memory_bytes"] = torch.cuda.get_device_properties(where.device).total_memory
    if where.backend == "nccl":
        nccl_version: Any = torch.cuda.nccl.version  # untyped in torch
        version = nccl_version()  # a tuple on recent torch, an int (2.18.1 -> 21801) before
        facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return facts


#: Allocators that replace glibc's malloc when preloaded (``LD_PRELOAD``), as their libraries are named.
_MALLOCS = ("tcmalloc", "jemalloc", "mimalloc")


def malloc_in_use(maps: Path = Path("/proc/self/maps")) -> str:
    """The C allocator this process runs on: the preloaded one's library name, else ``glibc``
    (``unknown`` without ``/proc``). It changes the measured step on CPU: glibc maps every
    allocation over 32 MiB afresh and the first touch of each page is a fault (GPT-2's 103 MB
    logits), where a caching allocator reuses its memory."""
    try:
        text = maps.read_text()
    except OSError:
        return "unknown"
    for line in text.splitlines():
        library = line.rsplit("/", 1)[-1]
        if any(name in library for name in _MALLOCS):
            return library
    return "glibc"


def prepare_batches(
    args: argparse.Namespace, where: Placement, seq_len: int, layout: Layout
) -> tuple[Any, Iterator[Any]]:
    """Tokenizer and endless per-replica batches (the ranks of one data-parallel replica, its
    tensor and pipeline ranks, see the same ones); local rank 0 fills the ``datasets`` cache first."""
    with local_leader_first(where):
        dataset = data.load_squad(args.data)
    tokenizer = shared_tokenizer(args, dataset, where)
    with local_leader_first(where):
        encoded = data.encode(dataset, args.model, tokenizer, seq_len)
    replica = layout.coords(where.rank)["dp"]
    collator = data.Collator(args.model, tokenizer, args.seed + replica)
    return tokenizer, data.batches(encoded, collator, args.batch_size, replica, layout.dp, args.seed)


def write_comm_groups(outdir: Path, name: str, world_size: int) -> dict[str, Any]:
    """ASTRA-sim's communicator groups for the job, next to its .et files (rank 0, after all ranks
    have written their traces)."""
    devices = [tracing.TracePaths.for_rank(outdir, name, rank).device for rank in range(world_size)]
    out = convert.comm_group_path(outdir, name)
    groups = convert.comm_groups(devices, out)
    log.info("communicator groups: %s %s", out, groups)
    return {"path": str(out), "groups": groups}


def even_all_to_all(outdir: Path, name: str, world_size: int) -> dict[str, int]:
    """One size per all-to-all on every rank's .et (rank 0, after all ranks have written theirs):
    the dispatch and combine move different bytes on different ranks, and ASTRA-sim hangs on
    ranks that disagree (``converter/ranks/alltoallv.py``, what ``convert-all`` does)."""
    paths = [str(convert.et_path(outdir, name, rank)) for rank in range(world_size)]
    collectives, nodes = alltoallv.even_all_to_all(paths)
    log.info(
        "all-to-all with splits: %d collective(s) given their largest rank's input (%d node(s))", collectives, nodes
    )
    return {"collectives": collectives, "nodes": nodes}


def write_layout(
    outdir: Path, name: str, layout: Layout, records: list[StepRecord | None], moe: dict[str, Any] | None = None
) -> str:
    """``{name}.layout.json`` beside the .et files: the mesh and each rank's group per mesh
    dimension, what ``chakra-convert-fast scale`` needs to scale this layout; under expert
    parallelism also ``ep`` and ``moe`` (experts, top-k, the routing's imbalance)."""
    out = outdir / f"{name}{LAYOUT_SUFFIX}"
    ranks = [r.groups if r is not None else None for r in records]
    out.write_text(
        json.dumps(
            {
                "dp": layout.dp,
                "tp": layout.tp,
                "pp": layout.pp,
                "dp_mode": layout.dp_mode,
                "microbatches": layout.microbatches,
                "schedule": layout.schedule,
                "ranks": ranks,
                **({"ep": layout.ep, "moe": moe} if layout.ep > 1 else {}),
            }
        )
        + "\n",
        encoding="utf-8",
    )
    log.info("layout: %s", out)
    return str(out)


def write_summary(summary: dict[str, Any], outdir: Path, name: str) -> Path:
    out = outdir / f"{name}_summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    log.info(
        "summary: %s (untraced %s s/step, traced %s s/step)",
        out,
        summary["step_time_s"]["untraced_median"],
        summary["step_time_s"]["traced_median"],
    )
    return out


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    """Train and trace on this rank; returns the summary on rank 0, None elsewhere."""
    where = placement(args)
    configure_logging(where.rank)
    if args.convert:
        convert.ensure_available(args.converter)
    torch.set_num_threads(threads_for(args))
    init_distributed(where)
    if where.backend == "gloo":
        groups.record_groups()
    try:
        layout = layout_of(args, where.world_size)
        size = models.resolve_size(args.model, args.size, where.device.type == "cuda")
        shape = models.resolve_shape(args.model, size, {k: getattr(args, k) for k in models.Shape.knobs()})
        name = args.name or f"{args.model}_{size}_np{where.world_size}"
        problems = shape_problems(
            layout, shape.n_layer, shape.hidden, shape.n_head, shape.intermediate, args.batch_size
        )
        if problems:
            raise ValueError("the layout does not divide the model: " + "; ".join(problems))
        tokenizer, stream = prepare_batches(args, where, shape.seq_len, layout)
        special = {
            "bos": tokenizer.bos_token_id or 0,
            "eos": tokenizer.eos_token_id or 0,
            "pad": tokenizer.pad_token_id or 0,
        }
        torch.manual_seed(args.seed)
        vocab_size = models.embedding_rows(shape, len(tokenizer), trained=args.model == "bert" and not args.tokenizer)
        # transformers wraps Module.to with functools.wraps, which mypy types without its self
        moe = models.MOE_PRESETS.get((args.model, size), (0, 0))
        model = models.build_model(args.model, shape, vocab_size, special, moe).to(where.device)  # type: ignore[arg-type]
        meta = build_meta(args, where, size, shape, models.count_parameters(model), vocab_size, name)
        meta["layout"] = layout.as_dict()
        if args.model in models.MOE_MODELS:
            meta["moe"] = {"experts": moe[0], "top_k": moe[1], "ep": layout.ep}
        log.info(
            "%s %s: %s, %d parameters, %d rank(s) on %s/%s, layout dp=%d (%s) tp=%d pp=%d",
            args.model,
            size,
            shape,
            meta["parameters"],
            where.world_size,
            where.device.type,
            where.backend,
            layout.dp,
            layout.dp_mode,
            layout.tp,
            layout.pp,
        )
        trainer, mesh_groups = parallel.build(args.model, model, layout, where.rank, where.device, args.lr)
        trainer.autocast = torch.bfloat16 if args.precision == "bf16" else None
        schedule = tracing.Schedule(args.wait, args.warmup, args.active)
        paths = tracing.TracePaths.for_rank(Path(args.outdir), name, where.rank)
        record = train_steps(trainer, stream, args, where, paths, schedule)
        record.groups = mesh_groups
        record.expert_loads = [layer.loads for layer in trainer.moe_layers] or None
        if args.enable_tracing:
            inspect_and_convert(record, args, paths, name)
        records: list[StepRecord | None] = [None] * where.world_size
        dist.all_gather_object(records, record)
        summary = None
        if where.rank == 0:
            summary = summarize(meta, [r for r in records if r is not None], args.active)
            if layout.ep > 1:
                loads = [r.expert_loads or [] for r in records if r is not None]
                summary["moe"]["imbalance"] = experts.imbalance(loads)
            if args.enable_tracing and args.convert and args.converter == "fast":
                summary["comm_groups"] = write_comm_groups(Path(args.outdir), name, where.world_size)
                summary["layout_file"] = write_layout(Path(args.outdir), name, layout, records, summary.get("moe"))
                if layout.ep > 1:
                    summary["moe"]["all_to_all_evened"] = even_all_to_all(Path(args.outdir), name, where.world_size)
            write_summary(summary, Path(args.outdir), name)
            if args.save_dir:
                model.save_pretrained(args.save_dir)
                tokenizer.save_pretrained(args.save_dir)
                log.info("saved model and tokenizer to %s", args.save_dir)
        # Every rank reaches the end before the group goes away: a gloo peer that tears down
        # while rank 0 still works made rank 0 abort at exit ("terminate called without an
        # active exception", seen in CI). Only on success: after an error a barrier could hang.
        dist.barrier()
        return summary
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m profiler.train ARGS`` (one rank per process); returns the exit status."""
    args = parse_args(argv, prog="python -m profiler.train")
    try:
        run(args)
    except (convert.ConverterUnavailable, FileNotFoundError, ValueError) as e:
        log.error("error: %s", e)  # every rank fails alike: bad options, missing files or tools
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
