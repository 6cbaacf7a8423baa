"""Fuzzing every command with mutated real traces (Hypothesis).

Seeds are real traces of ``tests/data/traces`` cut to a few hundred nodes (closed under their
parents). Each example applies one to three mutations (bytes flipped, inserted or cut off, a field
given a value of another type, keys and nodes reordered, a value nested 5,000 levels deep,
huge numbers and strings, gzip) and runs a command on the result. The contract, for every one:

* ``convert``: the output is byte for byte the reference converter's when the reference accepts
  the input; otherwise, and wherever we refuse, a ``ConverterError`` of one line (exit 1 with one
  stderr line through the command line). The only inputs the reference accepts and we refuse are
  its documented differences: ``ctrl_deps`` pointing at no node (then ``--allow-missing-parents``
  must give the reference's bytes), duplicate node ids (the reference keeps the last node of an
  id, silently), a boolean id (``true`` is 1 to the reference) and nesting too deep for Python's
  parser (the reference, run with a big stack, reads it; ``chakra_converter`` itself dies with
  ``RecursionError``).
* ``link`` and ``convert --host/--device``: the reference linker's document when it accepts the
  pair, except pairs we refuse as another rank or run, fields of a type the linker cannot use
  (where the reference mostly fails with a TypeError), duplicate node ids (the reference keeps
  the last node of an id) and nesting too deep; ``convert`` of a pair always gives the bytes of
  ``link`` then ``convert``.
* ``repair``: exit 0 with the last complete trace object of the file, or one error line.
* ``convert-all``: the exit status is the number of failed ranks, each a row; the other ranks'
  outputs are those of ``convert --host/--device``.
* never a traceback, a hang (a watchdog ends the run) or a file left behind.

Profiles: ``ci`` (the default) is derandomized (a fixed seed) with a bounded number of examples;
``HYPOTHESIS_PROFILE=long`` draws random examples, 20 times as many (see docs/reliability-matrix.md).
"""

from __future__ import annotations

import copy
import faulthandler
import functools
import gzip
import hashlib
import json
import os
import random
import resource
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.convert import parallel
from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.fixtures.reference import reference_convert

from .clirun import ERROR_PREFIX, as_nobody, python_for_nobody, run_cli, shared_directory
from .linkcases import edge_case_pair
from .traces import REAL_TRACES_DIR, load_trace, reference_link

pytestmark = [pytest.mark.slow]

_COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", derandomize=False, print_blob=True, **_COMMON)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
_SCALE = 20 if PROFILE == "long" else 1
WATCHDOG_SECONDS = 120  # one example running longer than this is a hang: the run stops, tracebacks dumped


def examples(count: int, *, long: int | None = None) -> settings:
    """The active profile with ``count`` examples in CI, ``_SCALE`` times ``long`` (by default
    ``count``) in ``long``."""
    return settings(settings.get_profile(PROFILE), max_examples=(long or count) * _SCALE if _SCALE > 1 else count)


# -- seeds: real traces, cut down ---------------------------------------------------------------------
def _cut(doc: dict[str, Any], count: int) -> dict[str, Any]:
    """The first ``count`` nodes by id whose parents are kept too, in file order; dependencies on
    nodes left out are dropped."""
    nodes = doc["nodes"]
    ids = {n["id"] for n in nodes}
    kept: set[int] = set()
    for node in sorted(nodes, key=lambda n: n["id"]):
        parent = node.get("ctrl_deps")
        if parent in kept or parent == node["id"] or parent not in ids:
            kept.add(node["id"])
        if len(kept) == count:
            break
    cut = [copy.deepcopy(n) for n in nodes if n["id"] in kept]
    for node in cut:
        if node.get("inter_thread_dep") not in kept:
            node["inter_thread_dep"] = None
    return {**doc, "nodes": cut}


TRACES = {
    "1.0.2 host, 2 ranks": ("host/chakra_1.0.2_host_2rank.json.gz", 263),
    "GPT-2 merged": ("cpu_gpt2_ddp2/rank0_merged_by_chakra_trace_link.json.gz", 160),
    "ResNet merged, GPU + NCCL": ("resnet_ddp_synthetic_kineto/rank0_merged_by_chakra_trace_link.json.gz", 160),
    "ResNet host": ("host/resnet_et.json.gz", 160),
}
GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"


@cache
def seed(name: str) -> dict[str, Any]:
    path, count = TRACES[name]
    return _cut(load_trace(REAL_TRACES_DIR / path), count)


@cache
def pair_seed(rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real host trace cut to its first 300 nodes, and its Kineto trace's events up to the
    last one those nodes' record-function ids name (so that most of them link)."""
    host = _cut(load_trace(GPT2 / f"rank{rank}_host.json.gz"), 300)
    device = load_trace(GPT2 / f"rank{rank}_device.json.gz")
    rf_ids = {a["value"] for n in host["nodes"] for a in n.get("attrs", ()) if a.get("name") == "rf_id"}
    events = device["traceEvents"]
    last = max(i for i, e in enumerate(events) if e.get("args", {}).get("Record function id") in rf_ids)
    return host, {**device, "traceEvents": events[: last + 1]}


# -- mutations --------------------------------------------------------------------------------------
_DEEP = "@@deep@@"  # stands for a value nested too deeply for json.dumps (put in as text)
#: Deeper than any recursion limit here: Hypothesis raises the limit by 2,000 while a test runs,
#: so a command run in-process reads values a command-line run (limit 1,000) refuses.
_DEPTH = 5000


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.sampled_from([2**64, -(2**63) - 1, 10**30]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.sampled_from(["", "x" * 100_000, "é\u2028\U0001f600", "1", "true"]),
    )


def values() -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=6,
    )


class Mutated:
    """A mutated trace: its bytes, and what was done (shown, with the bytes' digest, when an
    example fails)."""

    def __init__(self, data: bytes, steps: list[str] | None = None) -> None:
        self.data = data
        self.steps = steps or []

    def __repr__(self) -> str:
        return f"Mutated({len(self.data):,} bytes, sha1 {hashlib.sha1(self.data).hexdigest()[:12]}, {self.steps})"


def _containers(doc: dict[str, Any], array: str) -> list[tuple[Any, Any]]:
    """(container, key) pairs that can be changed: top-level keys, node/event fields, attrs."""
    places: list[tuple[Any, Any]] = [(doc, key) for key in doc if key != array]
    for node in doc.get(array, [])[:400]:
        if isinstance(node, dict):
            places += [(node, key) for key in node]
            for attr in node.get("attrs", []) if isinstance(node.get("attrs"), list) else []:
                if isinstance(attr, dict):
                    places += [(attr, key) for key in attr]
            for key in ("inputs", "outputs", "args"):
                if isinstance(node.get(key), dict):
                    places += [(node[key], k) for k in node[key]]
    return places


def _mutate_document(draw: st.DrawFn, doc: dict[str, Any], array: str, step: str) -> str:
    places = _containers(doc, array)
    if step == "swap a type" and places:
        container, key = draw(st.sampled_from(places))
        container[key] = draw(values())
        return f"{key!r} = {container[key]!r}"[:200]
    if step == "drop a key" and places:
        container, key = draw(st.sampled_from(places))
        del container[key]
        return f"dropped {key!r}"
    if step == "reorder keys":
        shuffle = random.Random(draw(st.integers(0, 2**32))).shuffle
        for container in [doc, *(n for n in doc.get(array, []) if isinstance(n, dict))]:
            keys = list(container)
            shuffle(keys)
            items = [(k, container[k]) for k in keys]
            container.clear()
            container.update(items)
        return "keys reordered"
    if step == "reorder nodes" and isinstance(doc.get(array), list):
        random.Random(draw(st.integers(0, 2**32))).shuffle(doc[array])
        return "nodes reordered"
    if step == "nest deeply" and places:
        container, key = draw(st.sampled_from(places))
        container[key] = _DEEP
        return f"{key!r} nested"
    if step == "huge value" and places:
        container, key = draw(st.sampled_from(places))
        container[key] = draw(st.sampled_from([10**400, 2**64, -(2**64), 1e308, "y" * 300_000, list(range(20_000))]))
        return f"{key!r} huge"
    if step == "duplicate a node" and doc.get(array):
        doc[array].append(copy.deepcopy(draw(st.sampled_from(doc[array]))))
        return "a node twice"
    return "unchanged"


def _mutate_bytes(draw: st.DrawFn, data: bytes, step: str) -> tuple[bytes, str]:
    if not data:
        return data, "empty"
    position = draw(st.integers(0, len(data) - 1))
    if step == "flip bytes":
        flipped = bytearray(data)
        for offset in draw(st.lists(st.integers(0, 64), min_size=1, max_size=4)):
            flipped[min(position + offset, len(data) - 1)] ^= draw(st.integers(1, 255))
        return bytes(flipped), f"bytes flipped at {position}"
    if step == "insert bytes":
        return data[:position] + draw(st.binary(min_size=1, max_size=8)) + data[position:], f"bytes in at {position}"
    return data[:position], f"cut at {position}"


DOCUMENT_STEPS = (
    "swap a type",
    "drop a key",
    "reorder keys",
    "reorder nodes",
    "nest deeply",
    "huge value",
    "duplicate a node",
)
BYTE_STEPS = ("flip bytes", "insert bytes", "truncate")


@st.composite
def mutated(draw: st.DrawFn, doc: dict[str, Any], array: str = "nodes") -> Mutated:
    doc = copy.deepcopy(doc)
    steps = draw(st.lists(st.sampled_from(DOCUMENT_STEPS + BYTE_STEPS), min_size=1, max_size=3))
    done = [_mutate_document(draw, doc, array, step) for step in steps if step in DOCUMENT_STEPS]
    data = json.dumps(doc).replace(json.dumps(_DEEP), "[" * _DEPTH + "1" + "]" * _DEPTH).encode()
    for step in (s for s in steps if s in BYTE_STEPS):
        data, what = _mutate_bytes(draw, data, step)
        done.append(what)
    if draw(st.booleans()):
        data = gzip.compress(data, compresslevel=1)
        done.append("gzipped")
    return Mutated(data, done)


# -- the contract -----------------------------------------------------------------------------------
@contextmanager
def watchdog() -> Iterator[None]:
    """A hang ends the run with every thread's traceback instead of blocking it for ever."""
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as name:
        yield Path(name)


def attempt(call: Callable[[], object]) -> ConverterError | None:
    """Run a command in-process: None if it succeeded, its error if it failed as it should (any
    other exception fails the test)."""
    try:
        call()
    except ConverterError as exc:
        assert "\n" not in str(exc), str(exc)
        return exc
    return None


def reference_bytes(source: Path, folder: Path) -> bytes | None:
    """chakra_converter's output for ``source``, or None where it fails."""
    out = folder / "reference.et"
    try:
        reference_convert(source, out)
    except Exception:
        if out.exists():  # the reference writes as it goes
            out.unlink()
        return None
    data = out.read_bytes()
    out.unlink()
    return data


#: Our errors for input the reference accepts: its documented differences (see module docstring).
MISSING_PARENT = "ctrl_deps points at no node"
TOO_DEEP = "nested too deeply"
DUPLICATE = "duplicate node id"  # the reference keeps the last node of an id, silently
BOOLEAN_ID = ("id must be a non-negative integer, got True", "id must be a non-negative integer, got False")
#: Pairs the reference links and we refuse: another rank or run, and fields of a type the linker
#: cannot use (the reference fails on most of them with a TypeError, and lets a few through).
LINK_REFUSALS = (
    "another rank or run",
    "different runs",
    "must be a",
    "malformed 'attrs'",
    "missing required field",
    DUPLICATE,
    TOO_DEEP,
)


def check_convert(source: Path, folder: Path, *, split: bool = False) -> None:
    out = folder / "out.et"
    with mock.patch.object(parallel, "MIN_SPLIT_BYTES", 0 if split else parallel.MIN_SPLIT_BYTES):
        error = attempt(lambda: api.convert(source, out))
    expected = reference_bytes(source, folder)
    if error is None:
        assert expected is None or out.read_bytes() == expected, "output differs from the reference's"
        out.unlink()
    else:
        assert not out.exists()
        if expected is not None:
            assert any(text in str(error) for text in (MISSING_PARENT, TOO_DEEP, DUPLICATE, *BOOLEAN_ID)), (
                f"the reference accepts it: {error}"
            )
            if MISSING_PARENT in str(error):
                lenient = api.ConvertOptions(allow_missing_parents=True)
                assert attempt(lambda: api.convert(source, out, lenient)) is None
                assert out.read_bytes() == expected
                out.unlink()
    assert sorted(os.listdir(folder)) == [source.name]


def write(folder: Path, name: str, mutation: Mutated) -> Path:
    path = folder / name
    path.write_bytes(mutation.data)
    return path


# -- convert ------------------------------------------------------------------------------------------
#: 150 in CI (300 took 15 s more on 2 cores): those reach every outcome the 300 did (our bytes equal
#: the reference's, both refusing, each documented difference where the reference accepts) and
#: the --allow-missing-parents retry besides; the long profile keeps 300 x 20.
@examples(150, long=300)
@given(st.sampled_from(sorted(TRACES)).flatmap(lambda name: mutated(seed(name))))
def test_fuzz_convert(mutation: Mutated) -> None:
    with watchdog(), workdir() as folder:
        check_convert(write(folder, "trace.json", mutation), folder)


@examples(50)
@given(st.sampled_from(sorted(TRACES)).flatmap(lambda name: mutated(seed(name))))
def test_fuzz_convert_in_two_processes(mutation: Mutated) -> None:
    """Any plain file is split between two processes: same bytes, same errors."""
    with watchdog(), workdir() as folder:
        check_convert(write(folder, "trace.json", mutation), folder, split=True)


@examples(30)
@given(st.sampled_from(sorted(TRACES)).flatmap(lambda name: mutated(seed(name))))
def test_fuzz_convert_command_line(mutation: Mutated) -> None:
    with watchdog(), workdir() as folder:
        source = write(folder, "trace.json", mutation)
        done = run_cli(source, folder / "out.et", timeout=WATCHDOG_SECONDS)
        assert "Traceback" not in done.stderr, done.stderr
        expected = reference_bytes(source, folder)
        if done.returncode == 0:
            assert expected is None or (folder / "out.et").read_bytes() == expected
            assert sorted(os.listdir(folder)) == ["out.et", "trace.json"]
        else:
            assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
            assert done.stderr.startswith(ERROR_PREFIX)
            allowed = (MISSING_PARENT, TOO_DEEP, DUPLICATE, *BOOLEAN_ID)
            assert expected is None or any(t in done.stderr for t in allowed), done.stderr
            assert sorted(os.listdir(folder)) == ["trace.json"]


# -- link and convert --host/--device ----------------------------------------------------------------
def _reference_merged(host: Path, device: Path, folder: Path) -> dict[str, Any] | None:
    scratch = folder / "reference"
    scratch.mkdir()
    try:
        return reference_link(host, device, scratch / "merged.json", scratch)
    except (AssertionError, OSError, ValueError):  # it failed (reference_link asserts it exits 0)
        return None
    except RecursionError:  # it wrote a value nested too deeply to read back: nothing to compare
        return None


@st.composite
def mutated_pair(draw: st.DrawFn) -> tuple[Mutated, Mutated]:
    host, device = pair_seed(draw(st.sampled_from([0, 1])))
    if draw(st.booleans()):
        return draw(mutated(host)), Mutated(json.dumps(device).encode())
    return Mutated(json.dumps(host).encode()), draw(mutated(device, "traceEvents"))


@examples(60)
@given(mutated_pair())
def test_fuzz_link_and_convert_pair(pair: tuple[Mutated, Mutated]) -> None:
    with watchdog(), workdir() as folder:
        host, device = write(folder, "host.json", pair[0]), write(folder, "device.json", pair[1])
        inputs = sorted(os.listdir(folder))
        merged, out, pair_out = folder / "merged.json", folder / "linked.et", folder / "pair.et"
        results: list[api.LinkResult] = []
        link_error = attempt(lambda: results.append(api.link(host, device, merged)))
        pair_error = attempt(lambda: api.convert_pair(host, device, pair_out))
        expected = _reference_merged(host, device, folder)
        if link_error is None:
            ours = load_trace(merged)
            # no record-function id left in the Kineto trace: linked by op order, where the
            # reference links nothing (a documented difference)
            by_order = results[0].stats.by_order
            assert expected is None or by_order or ours == expected, "merged document differs from the reference's"
            assert (attempt(lambda: api.convert(merged, out)) is None) == (pair_error is None), pair_error
            if pair_error is None:
                assert pair_out.read_bytes() == out.read_bytes()
        else:
            assert pair_error is not None and not merged.exists() and not pair_out.exists()
            assert expected is None or any(text in str(link_error) for text in LINK_REFUSALS), str(link_error)
        for name in ("merged.json", "linked.et", "pair.et", "reference"):
            if (folder / name).is_dir():
                for child in (folder / name).iterdir():
                    child.unlink()
                (folder / name).rmdir()
            elif (folder / name).exists():
                (folder / name).unlink()
        assert sorted(os.listdir(folder)) == inputs


# -- repair ---------------------------------------------------------------------------------------
@st.composite
def concatenated(draw: st.DrawFn) -> tuple[bytes, dict[str, Any] | None]:
    """Copies of a real host trace, some mutated, written one after the other, perhaps torn at the
    end: the bytes, and the last copy that is a whole, valid trace (None if mutations may have
    made the answer depend on where garbage closes a brace)."""
    base = seed("1.0.2 host, 2 ranks")
    pieces, last, exact = [], None, True
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            doc = copy.deepcopy(base)
            doc["pid"] = draw(st.integers(0, 10**6))
            pieces.append(json.dumps(doc).encode())
            last = doc
        else:
            mutation = draw(mutated(base))
            data = gzip.decompress(mutation.data) if mutation.data[:2] == b"\x1f\x8b" else mutation.data
            pieces.append(data)
            exact = False
        pieces.append(draw(st.sampled_from([b"", b"\n", b"  \r\n"])))
    if draw(st.booleans()):
        torn = json.dumps(base).encode()
        pieces.append(torn[: draw(st.integers(1, len(torn) - 1))])
    return b"".join(pieces), (last if exact else None)


#: 75 in CI (150 took 5 s more on 2 cores): those reach every outcome the 150 did (a whole copy kept,
#: plain and gzipped, exact or not; a cut-off trace salvaged; no complete object, plain and
#: gzipped); the long profile keeps 150 x 20.
@examples(75, long=150)
@given(concatenated(), st.booleans())
def test_fuzz_repair(case: tuple[bytes, dict[str, Any] | None], gzipped: bool) -> None:
    data, expected = case
    with watchdog(), workdir() as folder:
        source = folder / "host.json"
        source.write_bytes(gzip.compress(data, compresslevel=1) if gzipped else data)
        out = folder / "fixed.json"
        results: list[api.RepairResult] = []
        error = attempt(lambda: results.append(api.repair(source, out)))
        if error is None:
            kept = out.read_bytes()
            document = json.loads(kept)
            assert "nodes" in document or "traceEvents" in document
            salvaged = results[0].salvaged
            if salvaged is None:
                assert kept in data
            else:  # no complete object, one cut off: its complete nodes, the document closed
                assert document["finish_ts"] is None and len(document["nodes"]) == salvaged.nodes > 0
                assert all(isinstance(node, dict) and "id" in node for node in document["nodes"])
            if expected is not None:
                assert document == expected
            out.unlink()
        else:
            assert expected is None, f"a valid trace was not kept: {error}"
            assert "holds no complete JSON object" in str(error)
        assert sorted(os.listdir(folder)) == ["host.json"]


# -- convert-all ------------------------------------------------------------------------------------
@examples(8)
@given(st.sampled_from(["host", "device"]), st.data())
def test_fuzz_convert_all(which: str, data: st.DataObject) -> None:
    with watchdog(), workdir() as folder:
        job = folder / "job"
        job.mkdir()
        for rank in (0, 1):
            host, device = pair_seed(rank)
            (job / f"rank{rank}_host.json").write_text(json.dumps(host))
            (job / f"rank{rank}_device.json").write_text(json.dumps(device))
        broken = data.draw(
            mutated(pair_seed(1)[0 if which == "host" else 1], "nodes" if which == "host" else "traceEvents")
        )
        (job / f"rank1_{which}.json").write_bytes(broken.data)
        done = run_cli("convert-all", job, folder / "out", "--jobs", "2", timeout=WATCHDOG_SECONDS)
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        failed = [line for line in done.stderr.splitlines() if " FAILED " in line]
        assert done.returncode == len(failed), done.stderr
        outputs = sorted(os.listdir(folder / "out")) if (folder / "out").exists() else []
        assert not [name for name in outputs if name.startswith(".")]
        for rank in (0, 1):
            single = folder / f"single{rank}.et"
            error = attempt(
                functools.partial(
                    api.convert_pair, job / f"rank{rank}_host.json", job / f"rank{rank}_device.json", single, rank=rank
                )
            )
            if error is None:
                assert (folder / "out" / f"trace.{rank}.et").read_bytes() == single.read_bytes()
            else:
                assert f"trace.{rank}.et" not in outputs


# -- round two: the hostile campaign's classes ---------------------------------------------------------
_LONG_INT = "7" * 5_000  # more digits than Python converts (4,300)
_WORKER_PATHS = """
import sys
from chakra_convert_fast.converter import cli
from chakra_convert_fast.converter.convert import feed, parallel
from chakra_convert_fast.converter.link import pipeline
parallel.MIN_SPLIT_BYTES, parallel.MIN_RANGE_BYTES = 1 << 16, 1 << 15  # small inputs take the worker paths
feed.MIN_FEED_BYTES = 1 << 12
pipeline._MIN_PARALLEL_BYTES = 1 << 12
sys.exit(cli.main(sys.argv[1:]))
"""


def _with_long_int(text: str) -> str:
    """The trace with its first node id written with 5,000 digits."""
    at = text.index('"id":') + len('"id":')
    end = min(text.index(",", at), text.index("}", at))
    return f"{text[:at]} {_LONG_INT}{text[end:]}"


def _run_paths(*args: str | Path, preexec_fn: Callable[[], None] | None = None) -> Any:
    """The command line with the worker paths taken for small inputs (byte ranges, gzip feed, the
    linker's second process)."""
    import subprocess
    import sys

    python, prelude = python_for_nobody() if getattr(preexec_fn, "nobody", False) else (sys.executable, "")
    return subprocess.run(
        [python, "-c", prelude + _WORKER_PATHS, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=preexec_fn,
    )


def _assert_outcome(done: Any, *expected: str) -> None:
    """Success (the command's own summary), or the failure contract: exactly one line, exit
    1, no traceback (a worker's own output, Python's included, never reaches stderr)."""
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    if done.returncode == 0:
        assert not any(line.startswith(ERROR_PREFIX) for line in lines), done.stderr
        return
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    assert done.returncode == 1 and len(errors) == 1 and len(lines) == 1, done.stderr
    for text in expected:
        assert text in errors[0], errors[0]


@pytest.fixture(scope="module")
def long_int_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("long-int")
    merged = json.dumps(seed(sorted(TRACES)[0]))
    bad = _with_long_int(merged) + " " * 70_000  # past the (lowered) size where byte ranges start
    paths = {"plain": folder / "m.json", "gzip": folder / "m.json.gz"}
    paths["plain"].write_text(bad)
    with gzip.open(paths["gzip"], "wt") as fh:
        fh.write(bad)
    host, device = edge_case_pair(folder, layers=300, rank=0, world=1, gz=False)
    host.write_text(_with_long_int(host.read_text()))
    paths["host"], paths["device"] = host, device
    return paths


@pytest.mark.parametrize(
    "path", ["one process", "byte ranges", "gzip feed", "PyTorch form", "link", "convert --host/--device", "repair"]
)
def test_a_number_of_5000_digits_is_one_line_on_every_read_path(
    path: str, long_int_traces: dict[str, Path], tmp_path: Path
) -> None:
    t = long_int_traces
    cases: dict[str, list[str | Path]] = {
        "one process": ["convert", t["plain"], tmp_path / "o.et", "--jobs", "1"],
        "byte ranges": ["convert", t["plain"], tmp_path / "o.et", "--jobs", "2"],
        "gzip feed": ["convert", t["gzip"], tmp_path / "o.et", "--jobs", "2"],
        "PyTorch form": ["PyTorch", "--input", t["gzip"], "--output", tmp_path / "o.et"],
        "link": ["link", "--host", t["host"], "--device", t["device"], tmp_path / "m.json"],
        "convert --host/--device": ["convert", "--host", t["host"], "--device", t["device"], tmp_path / "o.et"],
        "repair": ["repair", t["host"], tmp_path / "r.json"],
    }
    done = _run_paths(*cases[path])
    if path == "repair":  # the only object is not a trace that reads: nothing to keep
        _assert_outcome(done, "holds no complete JSON object to keep")
    else:
        _assert_outcome(done, "a number too long to read (an integer of more than 4,300 digits)")
    assert done.returncode == 1
    assert os.listdir(tmp_path) == []


def _et_seed(folder: Path) -> bytes:
    source = folder / "in.json"
    source.write_text(json.dumps(seed(sorted(TRACES)[0])))
    api.convert(source, folder / "seed.et", api.ConvertOptions(astra_sim=True))
    return (folder / "seed.et").read_bytes()


@cache
def _et_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        return _et_seed(Path(folder))


@st.composite
def mutated_et(draw: st.DrawFn) -> bytes:
    """A .et file with bytes flipped, inserted (over-long varints among them) or cut."""
    data = bytearray(_et_bytes())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "insert", "varint", "cut", "wire"]))
        if kind == "flip":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "varint":
            data[at:at] = b"\xff" * draw(st.integers(9, 12)) + b"\x01"
        elif kind == "wire":  # the same field number, another wire type
            data[at] = (data[at] & ~7) | draw(st.sampled_from([1, 2, 5]))
        else:
            del data[at : at + draw(st.integers(1, 32))]
    return bytes(data)


@examples(300)
@given(mutated_et())
def test_fuzz_check_decodes_any_bytes(data: bytes) -> None:
    """``check`` reads any byte string: a report, or one of the package's errors (an over-long
    varint, a wrong wire type on ctrl_deps/data_deps/attr used to raise TypeError/OverflowError)."""
    with workdir() as folder:
        (folder / "x.0.et").write_bytes(data)
        try:
            report = api.check([folder / "x.0.et"])
        except ConverterError as exc:
            assert "\n" not in str(exc)
        else:
            assert len(report.files) == 1


def test_check_of_a_5000_digit_pg_name_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    """Written with the real schema (mlc-chakra's protobuf classes): a collective whose group name
    has 5,000 digits used to end ``check`` in Python's digit-limit ValueError."""
    from chakra.schema.protobuf import et_def_pb2 as pb
    from google.protobuf.internal.encoder import _VarintBytes

    node = pb.Node(id=1, name="all_reduce", type=pb.COMM_COLL_NODE)
    node.attr.add(name="comm_type", int64_val=pb.ALL_REDUCE)
    node.attr.add(name="comm_size", int64_val=1024)
    node.attr.add(name="pg_name", string_val="7" * 5_000)
    with open(tmp_path / "a.0.et", "wb") as fh:
        for message in (pb.GlobalMetadata(version="0.0.4"), node):
            data = message.SerializeToString()
            fh.write(_VarintBytes(len(data)) + data)
    report = api.check(tmp_path / "a.0.et")
    assert not report.ok
    assert any("is not a decimal group id" in problem.line() for problem in report.problems)
    done = run_cli("check", tmp_path / "a.0.et")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr


def test_repair_of_millions_of_objects_is_bounded(tmp_path: Path) -> None:
    """8 million tiny objects took 2.2 GB and printed a 177 MB line: now a count and the first few."""
    count = 400_000
    source = tmp_path / "many.json"
    with open(source, "w") as fh:
        fh.write('{"a":1}' * count)
        fh.write(json.dumps(seed(sorted(TRACES)[0])))
    limit = 400 << 20  # the list of every object took ~100 bytes each: 8 million, 2.2 GB
    done = run_cli(
        "repair", source, tmp_path / "r.json", preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    )
    assert done.returncode == 0, done.stderr
    line = done.stderr.strip()
    assert len(line) < 500 and f"dropped {count:,} earlier complete object(s)" in line, line


@pytest.mark.parametrize(
    "limit",
    [
        ("RLIMIT_AS", 40 << 20),
        ("RLIMIT_AS", 48 << 20),
        ("RLIMIT_AS", 56 << 20),
        ("RLIMIT_AS", 64 << 20),
        ("RLIMIT_AS", 80 << 20),
        ("RLIMIT_AS", 100 << 20),
        ("RLIMIT_NOFILE", 8),
        ("RLIMIT_NOFILE", 12),
        ("RLIMIT_NOFILE", 24),
    ],
    ids=lambda limit: f"{limit[0]}={limit[1]}",
)
@pytest.mark.parametrize("path", ["gzip feed", "byte ranges", "link"])
def test_resource_limits_give_one_line(
    path: str, limit: tuple[str, int], long_int_traces: dict[str, Path], tmp_path: Path
) -> None:
    """MemoryError, EMFILE and threads that cannot start (a stack that does not fit) on the worker
    paths: success or one line, never a traceback (MemoryError and EMFILE used to be tracebacks)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(seed(sorted(TRACES)[0])) + " " * 70_000)
    packed = tmp_path / "good.json.gz"
    with gzip.open(packed, "wt") as fh:
        fh.write(good.read_text())
    host, device = edge_case_pair(tmp_path / "pair", layers=300, rank=0, world=1, gz=False)
    cases: dict[str, list[str | Path]] = {
        "gzip feed": ["convert", packed, tmp_path / "o.et", "--jobs", "2"],
        "byte ranges": ["convert", good, tmp_path / "o.et", "--jobs", "2"],
        "link": ["link", "--host", host, "--device", device, tmp_path / "m.json"],
    }
    name, value = limit

    def restrict() -> None:
        resource.setrlimit(getattr(resource, name), (value, value))

    _assert_outcome(_run_paths(*cases[path], preexec_fn=restrict))


def test_a_process_limit_as_nobody_gives_one_line(tmp_path: Path) -> None:
    """RLIMIT_NPROC binds an unprivileged user (root ignores it): worker processes and threads
    that cannot start are one line (or the command does the work in one process), and the
    workers that did start print nothing."""
    with shared_directory() as shared:
        good = shared / "good.json.gz"
        with gzip.open(good, "wt") as fh:
            fh.write(json.dumps(seed(sorted(TRACES)[0])) + " " * 70_000)
        good.chmod(0o644)
        drop = as_nobody()

        def limited() -> None:
            if drop is not None:
                drop()
            resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))

        limited.nobody = drop is not None  # type: ignore[attr-defined]
        for jobs in ("2", "4"):
            done = _run_paths("convert", good, shared / "o.et", "--jobs", jobs, preexec_fn=limited)
            _assert_outcome(done)
            if done.returncode == 0:
                assert done.stderr.count("\n") <= 1, done.stderr
