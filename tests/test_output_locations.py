"""Where an output cannot go, every command says so in one line, before any work, and leaves the
directory as it was; devices and FIFOs are written through, never replaced.

Each command is run as a user runs it (``convert``, ``convert --host/--device``, ``link``, ``repair``,
and ``convert-all`` for its output directory). Disk full and the file-size limit are real
(``/dev/full``, ``RLIMIT_FSIZE``); a read-only file system and a full disk under a regular file
cannot be made without mounting, so they are produced at the function level, by making the
system calls fail with those errors.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import resource
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter import io as io_module
from chakra_convert_fast.converter.convert import pipeline as pipeline_module
from chakra_convert_fast.converter.errors import OutputError
from chakra_convert_fast.converter.link import pipeline as link_module
from chakra_convert_fast.converter.ranks import pair as pair_module

from .clirun import NOBODY, as_nobody, assert_one_error, listing, obey_file_modes, run_cli, shared_directory
from .linkcases import edge_case_pair
from .tracebuild import trace, two_threads

pytestmark = [pytest.mark.slow]

#: The module (the package exports a function of the same name).
repair_module = importlib.import_module("chakra_convert_fast.converter.repair")
COMMANDS = ("convert", "pair", "link", "repair")


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A merged trace, a host + device pair, all in ``in/`` (outputs go to ``work/``)."""
    folder = tmp_path / "in"
    folder.mkdir()
    merged = folder / "merged.json"
    merged.write_text(json.dumps(trace(two_threads())))
    host, device = edge_case_pair(folder, layers=3, gz=False)
    (tmp_path / "work").mkdir()
    return {"merged": merged, "host": host, "device": device}


def command_line(command: str, inputs: dict[str, Path], output: str | Path) -> list[str | Path]:
    if command == "convert":
        return ["convert", inputs["merged"], output]
    if command == "pair":
        return ["convert", "--host", inputs["host"], "--device", inputs["device"], output]
    if command == "link":
        return ["link", "--host", inputs["host"], "--device", inputs["device"], output]
    return ["repair", inputs["host"], output]


def _missing_directory(work: Path) -> Path:
    return work / "no" / "such" / "dir" / "out"


def _directory(work: Path) -> Path:
    (work / "adir").mkdir()
    return work / "adir"


def _read_only(work: Path) -> Path:
    (work / "ro").write_text("keep me")
    (work / "ro").chmod(0o444)
    return work / "ro"


def _parent_is_a_file(work: Path) -> Path:
    (work / "afile").write_text("x")
    return work / "afile" / "out"


def _fifo_without_reader(work: Path) -> Path:
    os.mkfifo(work / "fifo")
    return work / "fifo"


def _locked_directory(work: Path) -> Path:
    (work / "locked").mkdir()
    (work / "locked").chmod(0o555)
    return work / "locked" / "out"


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))  # SIGXFSZ is the command's to handle


#: case -> (makes the output path in ``work``, preexec_fn factory, what the one error line says)
CASES: dict[str, tuple[Callable[[Path], Path | str], Callable[[], Callable[[], None] | None], str]] = {
    "missing directory": (_missing_directory, lambda: None, "does not exist"),
    "a directory": (_directory, lambda: None, "is a directory"),
    "empty path": (lambda work: "", lambda: None, "the output path is empty"),
    "read-only file": (_read_only, lambda: None, "is read-only"),
    "parent is a file": (_parent_is_a_file, lambda: None, "is not a directory"),
    "FIFO nobody reads": (_fifo_without_reader, lambda: None, "is a FIFO that no process is reading"),
    "no permission": (_locked_directory, obey_file_modes, "Permission denied"),
    "file-size limit (EFBIG)": (lambda work: work / "out", lambda: _limit_file_size, "File too large"),
    "disk full (ENOSPC, /dev/full)": (lambda work: "/dev/full", lambda: None, "No space left on device"),
}


def _snapshot(work: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry of ``work``: its type bits and, for regular files, its content."""
    found = {}
    for name in listing(work):
        mode = os.lstat(work / name).st_mode
        found[name] = (stat.S_IFMT(mode), (work / name).read_bytes() if stat.S_ISREG(mode) else None)
    return found


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_that_cannot_be_written(case: str, command: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    make, preexec, expected = CASES[case]
    work = tmp_path / "work"
    output = make(work)
    before = _snapshot(work)
    done = run_cli(*command_line(command, inputs, output), preexec_fn=preexec(), timeout=60)
    assert_one_error(done, expected)
    assert _snapshot(work) == before
    assert listing(tmp_path / "in") == sorted(p.name for p in inputs.values())


@pytest.mark.parametrize("command", COMMANDS)
def test_output_that_is_an_input(command: str, inputs: dict[str, Path]) -> None:
    victim = inputs["merged" if command == "convert" else "host"]
    content = victim.read_bytes()
    assert_one_error(run_cli(*command_line(command, inputs, victim)), "would overwrite the input")
    assert victim.read_bytes() == content


def _reader(fifo: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(fifo, "rb") as fh:
            into.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_is_written_through_never_replaced(command: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    work = tmp_path / "work"
    expected_done = run_cli(*command_line(command, inputs, work / "regular"))
    assert expected_done.returncode == 0, expected_done.stderr
    os.mkfifo(work / "fifo")
    received: list[bytes] = []
    reader = _reader(work / "fifo", received)
    done = run_cli(*command_line(command, inputs, work / "fifo"), timeout=60)
    reader.join(30)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(work / "fifo").st_mode)
    assert listing(work) == ["fifo", "regular"]
    expected = (work / "regular").read_bytes()
    if command == "link":  # the document, not its bytes: nothing else differs
        assert json.loads(received[0]) == json.loads(expected)
    else:
        assert received == [expected]


@pytest.mark.parametrize("command", COMMANDS)
def test_dev_null_stays_a_device(command: str, inputs: dict[str, Path]) -> None:
    done = run_cli(*command_line(command, inputs, "/dev/null"))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not [n for n in os.listdir("/dev") if n.startswith((".null", ".chakra"))]


def test_a_symbolic_link_is_followed_not_replaced(inputs: dict[str, Path], tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "real.et").write_bytes(b"old")
    (work / "link.et").symlink_to("real.et")
    done = run_cli("convert", inputs["merged"], work / "link.et")
    assert done.returncode == 0, done.stderr
    assert (work / "link.et").is_symlink() and (work / "real.et").read_bytes() != b"old"
    assert listing(work) == ["link.et", "real.et"]


# -- convert-all's output directory -----------------------------------------------------------------
@pytest.fixture
def job(tmp_path: Path) -> Path:
    for rank in range(2):
        edge_case_pair(tmp_path / "job", layers=3, rank=rank, world=2)
    return tmp_path / "job"


@pytest.mark.parametrize(
    ("make", "options", "expected", "status"),
    [
        (lambda tmp: tmp / "a-file", [], "exists and is not a directory", 1),
        (lambda tmp: tmp / "out", ["--prefix", "a/b"], "--prefix 'a/b': must be a plain file name", 2),
        (lambda tmp: tmp / "out", ["--prefix", ""], "must be a plain file name", 2),
        (lambda tmp: "", [], "the output directory path is empty", 1),
    ],
    ids=["OUTDIR is a file", "prefix with a slash", "empty prefix", "empty OUTDIR"],
)
def test_convert_all_output_directory(
    make: Callable[[Path], Path | str], options: list[str], expected: str, status: int, job: Path, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("keep me")
    before = listing(tmp_path)
    done = run_cli("convert-all", job, make(tmp_path), *options)
    assert_one_error(done, expected, status=status)
    assert listing(tmp_path) == before and (tmp_path / "a-file").read_text() == "keep me"


def test_convert_all_into_a_locked_directory(job: Path, tmp_path: Path) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0o555)
    done = run_cli("convert-all", job, tmp_path / "locked" / "out", preexec_fn=obey_file_modes())
    assert_one_error(done, "Permission denied")
    assert listing(tmp_path / "locked") == []


def test_convert_all_leaves_no_directory_when_every_rank_fails(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0_host.json").write_text('{"schema": "1.1.1-chakra.0.0.4", "nodes": [')
    done = run_cli("convert-all", tmp_path / "job", tmp_path / "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


# -- errors no test machine can produce for real: the system calls fail with them ---------------
@pytest.fixture
def failing_system_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[str, int], None]]:
    """``fail(call, errno)``: ``os.open`` creating a file, or ``os.write`` to a file, in ``work/``
    raises that error (as a read-only file system or a full disk would)."""
    work = str(tmp_path / "work")
    real_open, real_write = os.open, os.write

    def in_work(fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(work)
        except OSError:
            return False

    def fail(call: str, code: int) -> None:
        error = OSError(code, os.strerror(code))

        def fake_open(path: str | Path, flags: int, *args: int, **kwargs: int) -> int:
            creates = flags & (os.O_CREAT | getattr(os, "O_TMPFILE", 0))
            if call == "open" and creates and os.fspath(path).startswith(work):
                raise error
            return real_open(path, flags, *args, **kwargs)

        def fake_write(fd: int, data: bytes) -> int:
            if call == "write" and in_work(fd):
                raise error
            return real_write(fd, data)

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "write", fake_write)

    yield fail


def _call(command: str, inputs: dict[str, Path], output: Path) -> object:
    if command == "convert":
        return api.convert(inputs["merged"], output)
    if command == "pair":
        return api.convert_pair(inputs["host"], inputs["device"], output)
    if command == "link":
        return api.link(inputs["host"], inputs["device"], output)
    return api.repair(inputs["host"], output)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("open", errno.EROFS),
        ("open", errno.EDQUOT),
        ("write", errno.ENOSPC),
        ("write", errno.EFBIG),
        ("write", errno.EIO),
    ],
    ids=["read-only file system", "quota", "disk full", "file too large", "I/O error"],
)
def test_system_errors_become_output_errors(
    command: str,
    call: str,
    code: int,
    inputs: dict[str, Path],
    tmp_path: Path,
    failing_system_calls: Callable[[str, int], None],
) -> None:
    work = tmp_path / "work"
    failing_system_calls(call, code)
    with pytest.raises(OutputError, match=os.strerror(code)) as raised:
        _call(command, inputs, work / "out")
    assert "\n" not in str(raised.value)
    assert listing(work) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_input_is_reported_before_the_output_is_touched(
    command: str, inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Inputs are checked first: nothing (not even a spill file) is created for a missing input."""
    for path in inputs.values():
        path.unlink()
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0o555)
    done = run_cli(*command_line(command, inputs, tmp_path / "locked" / "out"), preexec_fn=obey_file_modes())
    assert_one_error(done, "no such file")
    assert listing(tmp_path / "locked") == []


# -- round two: no user file changed -----------------------------------------------------------------
def _state(path: Path) -> tuple[bytes, int, int, int]:
    """What must not change about a user's file: content, mode, owner, group."""
    found = os.lstat(path)
    return path.read_bytes(), stat.S_IMODE(found.st_mode), found.st_uid, found.st_gid


@pytest.mark.parametrize("command", COMMANDS)
def test_a_path_ending_in_slash_names_a_directory(command: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    """``convert IN x.et/`` used to write (replace) the file ``x.et``."""
    work = tmp_path / "work"
    (work / "x.et").write_bytes(b"keep me")
    before = _snapshot(work)
    done = run_cli(*command_line(command, inputs, f"{work / 'x.et'}/"))
    assert_one_error(done, "names a directory (it ends in '/')")
    assert _snapshot(work) == before


def test_keep_merged_on_a_device_names_the_option(inputs: dict[str, Path], tmp_path: Path) -> None:
    done = run_cli(
        "convert",
        "--host",
        inputs["host"],
        "--device",
        inputs["device"],
        tmp_path / "work" / "o.et",
        "--keep-merged",
        "/dev/null",
    )
    assert_one_error(done, "/dev/null: --keep-merged: a character device cannot hold it")
    assert listing(tmp_path / "work") == []


def test_a_terminal_that_is_not_there_is_not_called_a_fifo(inputs: dict[str, Path]) -> None:
    """``run_cli`` starts a new session, so the command has no controlling terminal: /dev/tty
    cannot be opened (ENXIO, which for a FIFO means "no reader")."""
    line = assert_one_error(run_cli("convert", inputs["merged"], "/dev/tty"), "/dev/tty: ")
    assert "FIFO" not in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_that_appears_while_the_command_runs_is_not_replaced(
    command: str,
    inputs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The output is looked at again when it is committed: a FIFO (or device) put there after the
    checks is refused, never renamed over."""
    out = tmp_path / "work" / "out"
    real_check = io_module.check_output

    def check_then_fifo(path: str | os.PathLike[str], *others: str | os.PathLike[str]) -> io_module.OutputTarget:
        target = real_check(path, *others)
        if os.fspath(path) == str(out):
            os.mkfifo(out)  # appears between the checks and the commit
        return target

    for module in (pipeline_module, pair_module, link_module, repair_module):
        monkeypatch.setattr(module, "check_output", check_then_fifo)
    with pytest.raises(OutputError, match="became a FIFO while the command ran; not replaced"):
        _call(command, inputs, out)
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert listing(tmp_path / "work") == ["out"]


@pytest.mark.parametrize("user", ["root", "nobody"])
@pytest.mark.parametrize("command", COMMANDS)
def test_replacing_an_output_keeps_its_mode_and_owner(command: str, user: str, inputs: dict[str, Path]) -> None:
    """As ``sed -i`` and editors do: a 0600 file of another user stays a 0600 file of that user
    (root), a 0640 file stays 0640 (anyone)."""
    if user == "root" and os.geteuid() != 0:
        pytest.skip("only root can replace another user's file")
    with shared_directory() as shared:
        for path in inputs.values():
            shutil.copy(path, shared / path.name)
        moved = {key: shared / path.name for key, path in inputs.items()}
        out = shared / "out"
        out.write_bytes(b"previous")
        if user == "root":
            os.chown(out, NOBODY, NOBODY)
            out.chmod(0o600)
            preexec = None
        else:
            out.chmod(0o640)
            if os.geteuid() == 0:
                os.chown(out, NOBODY, NOBODY)
            preexec = as_nobody()
        _, mode, uid, gid = _state(out)
        done = run_cli(*command_line(command, moved, out), preexec_fn=preexec)
        assert done.returncode == 0, done.stderr
        content, *attributes = _state(out)
        assert content != b"previous"
        assert attributes == [mode, uid, gid]


# -- convert-all: a run's outputs replace the previous run's together, or not at all ---------------
def _previous_run(out: Path) -> dict[str, tuple[bytes, int, int, int]]:
    out.mkdir()
    for name in ("trace.0.et", "trace.1.et", "trace.comm_group.json"):  # the job's group file
        (out / name).write_bytes(f"previous run: {name}".encode())
        (out / name).chmod(0o640)
    return {name: _state(out / name) for name in listing(out)}


def test_an_interrupted_convert_all_leaves_outdir_as_it_was(job: Path, tmp_path: Path) -> None:
    """Interrupted after rank 0 finished: rank 0's new file used to replace its old one beside
    rank 1's old one (and the old comm_group.json), under "no output written"."""
    out = tmp_path / "out"
    before = _previous_run(out)

    def interrupt(outcome: api.RankOutcome) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.convert_all(job, out, jobs=1, on_rank_done=interrupt)
    assert {name: _state(out / name) for name in listing(out)} == before


def test_an_interrupted_convert_all_leaves_a_fresh_outdir_empty(job: Path, tmp_path: Path) -> None:
    def interrupt(outcome: api.RankOutcome) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.convert_all(job, tmp_path / "out", jobs=1, on_rank_done=interrupt)
    assert not (tmp_path / "out").exists()


def test_a_complete_convert_all_replaces_every_file_keeping_modes(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    before = _previous_run(out)
    done = run_cli("convert-all", job, out, "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert listing(out) == sorted(before)
    for name, (content, *attributes) in before.items():
        now, *now_attributes = _state(out / name)
        assert now != content and now_attributes == attributes, name


# -- io.OutputSet: the one implementation of many outputs, all or nothing ---------------------------
def _output_set_targets(out: Path) -> list[io_module.OutputTarget]:
    out.mkdir()
    (out / "b").write_bytes(b"old b")
    (out / "b").chmod(0o640)
    (out / "d").write_bytes(b"old d")
    return [io_module.check_output(out / name) for name in ("a", "b", "c", "d")]


@pytest.mark.parametrize("unnamed", [False, True])
def test_output_set_commits_every_file_keeping_modes(tmp_path: Path, unnamed: bool) -> None:
    targets = _output_set_targets(tmp_path / "out")
    with io_module.OutputSet(unnamed=unnamed, shown="the set") as files:
        files.write(targets[0], [b"new ", b"a"])
        for target in targets[1:]:
            with files.open(target) as out:
                out.write(b"new " + os.path.basename(target.final).encode())
        assert not any((tmp_path / "out" / n).read_bytes().startswith(b"new") for n in ("b", "d"))
        files.commit()
    assert listing(tmp_path / "out") == ["a", "b", "c", "d"]
    assert all((tmp_path / "out" / n).read_bytes() == f"new {n}".encode() for n in "abcd")
    assert stat.S_IMODE(os.stat(tmp_path / "out" / "b").st_mode) == 0o640
    assert io_module.committed_outputs()[-1] == "the set"


def test_output_set_puts_back_what_it_replaced_when_a_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = _output_set_targets(tmp_path / "out")
    real_replace = os.replace

    def replace(source: str, destination: str) -> None:
        if destination == targets[2].final:  # "c": after "a" (new) and "b" (replaced)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(source, destination)

    committed = io_module.committed_outputs()
    with io_module.OutputSet(unnamed=True) as files:
        for target in targets:
            files.write(target, b"new")
        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(OutputError, match="c: cannot write: No space left on device; nothing written"):
            files.commit()
    assert listing(tmp_path / "out") == ["b", "d"]
    assert (tmp_path / "out" / "b").read_bytes() == b"old b" and (tmp_path / "out" / "d").read_bytes() == b"old d"
    assert io_module.committed_outputs() == committed


def test_output_set_refuses_a_fifo_that_appeared_and_replaces_nothing(tmp_path: Path) -> None:
    targets = _output_set_targets(tmp_path / "out")
    with io_module.OutputSet(unnamed=True) as files:
        for target in targets:
            with files.open(target) as out:
                out.write(b"new")
        os.unlink(targets[3].final)
        os.mkfifo(targets[3].final)  # "d" replaced by a FIFO after the checks
        with pytest.raises(OutputError, match="d: became a FIFO while the command ran; not replaced"):
            files.commit()
    assert listing(tmp_path / "out") == ["b", "d"]
    assert (tmp_path / "out" / "b").read_bytes() == b"old b" and stat.S_ISFIFO(os.lstat(targets[3].final).st_mode)
