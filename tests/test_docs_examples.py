"""The documentation's examples run as written.

Every fenced ``sh`` or ``python`` block of README.md and of the pages under docs/ is an example,
run from a folder of its own that sees the repository's ``fixtures/`` and ``tests/`` as the
repository's root does (the pages' commands name them so). The blocks of one page share that
folder and run in order, so a later block uses what an earlier one wrote. An HTML comment on the
line before a block says what it needs, and the test reads it:

* ``<!-- example: astra-sim -->``: runs ASTRA-sim (the ``simulator`` fixture: skipped with the
  reason where ``ASTRA_SIM_HOME`` is unset);
* ``<!-- example: torch -->``: imports or captures with torch (marked ``torch`` and ``slow``);
* ``<!-- example: slow -->``: takes more than a few seconds;
* ``<!-- example: fails -->``: shows an error: it must end with one line on stderr and exit 1
  (needs combine: ``<!-- example: slow, fails -->``);
* ``<!-- example: not run: REASON -->``: never run, and the test reports the reason (installs,
  hours-long captures, a user's own files); a reason must be given.

The fast lane runs the examples of README.md, the Kineto quick start and the API page; the guides'
examples are marked ``slow`` (``_FAST_PAGES``).

Indented code blocks are not run: they show layouts, outputs and synopses. A page may hold no
indented command (a line starting ``chakra-convert-fast``, ``chakra-profile``, ``pip``, ``python``,
``bash``), so that none slips by untested, except the pages of ``_NOT_YET_FENCED``, whose commands
are not yet fenced: that list only shrinks (a page made fenced must leave it, a new page cannot
join it). A usage synopsis is a ``text`` block.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: docs/index.md is README.md with the site's links (test_home_page_is_the_readme): run once.
_PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")]
_LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}
_ANNOTATION = re.compile(r"^<!-- example: (?P<what>.+?) -->$")
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
#: Pages whose commands are still indented: the developers' page, which the test-lane work rewrites.
_NOT_YET_FENCED = frozenset({"docs/getting-started.md"})
_INDENTED_COMMAND = re.compile(r"^ {4}(?:\$ )?(?:chakra-convert-fast|chakra-profile|pip|python|bash)(?: |$)")
_TIMEOUT = 300


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    language: str
    code: str
    needs: frozenset[str]
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def examples(path: Path, page: str | None = None) -> list[Example]:
    """The fenced ``sh``/``python`` blocks of a Markdown page, each with its annotation."""
    page = page or path.relative_to(ROOT).as_posix()
    lines = path.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        language = _LANGUAGES.get(fence["lang"])
        if language is not None:
            note = _ANNOTATION.match(lines[index - 1].strip()) if index else None
            needs: set[str] = set()
            not_run = None
            if note is not None:
                what = note["what"]
                if what.startswith("not run"):
                    not_run = what.partition(":")[2].strip()
                    if not not_run:
                        raise ValueError(f"{page}:{index}: 'not run' needs a reason")
                else:
                    needs = {word.strip() for word in what.split(",")}
                    unknown = needs - {"astra-sim", "torch", "slow", "fails"}
                    if unknown:
                        raise ValueError(f"{page}:{index}: unknown annotation {sorted(unknown)}")
            code = "\n".join(lines[index + 1 : end]) + "\n"
            found.append(Example(page, index + 1, language, code, frozenset(needs), not_run))
        index = end + 1
    return found


_ALL = [example for path in _PAGES for example in examples(path)]


#: The pages a new user starts from: their examples run in the fast lane; the guides' are ``slow``
#: (together they take half a minute of subprocesses, more than the fast lane spends on a module).
_FAST_PAGES = frozenset({"README.md", "docs/quickstart-kineto.md", "docs/api.md"})


def _marks(example: Example) -> list[pytest.MarkDecorator]:
    marks = [] if example.page in _FAST_PAGES else [pytest.mark.slow]
    if "astra-sim" in example.needs:
        marks += [pytest.mark.astra_sim, pytest.mark.slow]
    if "torch" in example.needs:
        marks += [pytest.mark.torch, pytest.mark.slow]
    if "slow" in example.needs:
        marks.append(pytest.mark.slow)
    if example.not_run is not None:
        marks.append(pytest.mark.skip(reason=f"not run ({example.page}): {example.not_run}"))
    return marks


@dataclass
class _Page:
    folder: Path
    ran: set[int] = field(default_factory=set)


_FOLDERS: dict[str, _Page] = {}


def _folder(page: str, factory: pytest.TempPathFactory) -> _Page:
    if page not in _FOLDERS:
        folder = factory.mktemp(re.sub(r"\W", "_", page))
        for name in ("fixtures", "tests"):
            (folder / name).symlink_to(ROOT / name)
        _FOLDERS[page] = _Page(folder)
    return _FOLDERS[page]


def _run(example: Example, folder: Path) -> None:
    env = dict(os.environ)
    # the environment's commands (chakra-convert-fast) first, as an installed project has them
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    if example.language == "python":
        command = [sys.executable, "-c", example.code]
    else:
        command = ["bash", "-euo", "pipefail", "-c", example.code]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    expected = 1 if "fails" in example.needs else 0
    assert done.returncode == expected, (
        f"{example.id} exited {done.returncode}, not {expected}\n--- code\n{example.code}"
        f"--- stdout\n{done.stdout[-3000:]}--- stderr\n{done.stderr[-3000:]}"
    )
    if expected:  # the error is one line, no traceback
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("example", [pytest.param(e, id=e.id, marks=_marks(e)) for e in _ALL])
def test_example_runs(
    example: Example, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    if "astra-sim" in example.needs:
        request.getfixturevalue("simulator")  # skipped, with the reason, without ASTRA_SIM_HOME
    page = _folder(example.page, tmp_path_factory)
    # the page's earlier examples first (they write what this one reads), once per page; those
    # that need what this one does not (ASTRA-sim, torch) it cannot depend on, so they are left
    for earlier in (e for e in _ALL if e.page == example.page and e.line < example.line):
        needed = earlier.needs - {"slow", "fails"} <= example.needs
        if earlier.not_run is None and needed and earlier.line not in page.ran:
            _run(earlier, page.folder)
            page.ran.add(earlier.line)
    if example.line not in page.ran:
        _run(example, page.folder)
        page.ran.add(example.line)


def _is_command(lines: list[str], index: int) -> bool:
    """Whether an opening fence's first line (``lines[index]``) is a command, not an output."""
    if index >= len(lines) or index < 2 or not _opens(lines, index - 1):
        return False
    return _INDENTED_COMMAND.match("    " + lines[index]) is not None


def _opens(lines: list[str], index: int) -> bool:
    """Whether the fence line ``lines[index]`` opens a block (an even number of fences before it)."""
    return sum(1 for line in lines[:index] if line.startswith("```")) % 2 == 0


def test_commands_are_fenced_examples() -> None:
    """No page but those of _NOT_YET_FENCED holds an indented (untested) command, and those do."""
    for path in _PAGES:
        page = path.relative_to(ROOT).as_posix()
        lines = path.read_text().splitlines()
        stray = [n for n, line in enumerate(lines, 1) if _INDENTED_COMMAND.match(line)]
        # a fence that names no language is not run either: commands in it are as untested
        stray += [n + 1 for n, line in enumerate(lines) if line == "```" and _is_command(lines, n + 1)]
        if page in _NOT_YET_FENCED:
            assert stray, f"{page} has no indented command left: take it out of _NOT_YET_FENCED"
        else:
            assert not stray, (
                f"{page}: commands at lines {stray} (indented, or in a fence naming no language): make each "
                "a fenced ```sh example (this test "
                "runs it), with <!-- example: astra-sim --> (or torch, slow) on the line before where it "
                "needs that, or <!-- example: not run: REASON --> where it cannot run here"
            )


def test_home_page_is_the_readme() -> None:
    """docs/index.md says what README.md says: the README with its links made the site's."""
    site = _hooks().home_page((ROOT / "README.md").read_text())
    assert (ROOT / "docs" / "index.md").read_text() == site, (
        "docs/index.md differs from README.md: `python docs/hooks.py` writes it from the README"
    )


def test_annotations_are_read(tmp_path: Path) -> None:
    """A 'not run' needs a reason, and an unknown need is refused, not ignored."""
    page = tmp_path / "page.md"
    page.write_text("<!-- example: not run -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        examples(page, "page.md")
    page.write_text("<!-- example: gpu -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="unknown annotation"):
        examples(page, "page.md")
    page.write_text("text\n<!-- example: astra-sim, slow -->\n```python\nprint(1)\n```\n\n```text\nout\n```\n")
    (found,) = examples(page, "page.md")
    page.write_text("<!-- example: slow, fails -->\n```sh\nfalse\n```\n")
    assert examples(page, "page.md")[0].needs == {"slow", "fails"}
    assert (found.needs, found.language, found.line, found.code) == (
        frozenset({"astra-sim", "slow"}),
        "python",
        3,
        "print(1)\n",
    )


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_result_tables_are_copied_where_github_shows_them(page: Path) -> None:
    """Each measured table a page shows is in the page too (the site build alone would fill a bare
    marker, and GitHub would show nothing), and is the table of bench/results, not an old one."""
    text = page.read_text()
    assert _hooks().with_copies(text) == text, (
        f"docs/{page.name}: a results table is missing or stale; `python docs/hooks.py` copies them"
    )


def test_result_copies_are_made_and_refreshed() -> None:
    hooks = _hooks()
    table = hooks.results("benchmark.md", "1").strip()
    bare = "before\n<!-- results: benchmark.md#1 -->\nafter\n"
    made = hooks.with_copies(bare)
    assert made == f"before\n<!-- results: benchmark.md#1 -->\n\n{table}\n\n<!-- end results -->\nafter\n"
    stale = made.replace(table, "| old |\n|---|")
    assert hooks.with_copies(stale) == made and hooks.with_copies(made) == made
    # the site shows the table once, without the copy
    assert hooks.on_page_markdown(made).count(table.splitlines()[0]) == 1
