"""MkDocs hooks: the command-line reference generated from the argparse parsers (never hand-copied),
and the figures of ``bench/results`` published beside the pages that show them.

``<!-- cli: chakra-convert-fast -->`` (or ``chakra-profile``) in a page becomes, for every command,
its usage line and a table of its options, read from the same parser the command line uses;
``<!-- cli: chakra-convert-fast simulate -->`` the same for one command (the topic pages end with
their commands' options).
``<!-- results: NAME.md#N -->`` is the N-th table of ``bench/results/NAME.md`` (``#N`` left
out: the whole file), so a measured table is written once, by the script that measured it. The
page holds a copy of it too, between that line and ``<!-- end results -->``, so that GitHub shows
the table as well; the site always shows the table of ``bench/results``, and ``python docs/hooks.py``
rewrites the pages' copies from it (``tests/test_docs_examples.py`` fails while a copy is stale).
The home page, ``docs/index.md``, is README.md with the site's links: ``python docs/hooks.py`` writes
it too.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mkdocs.structure.files import Files

ROOT = Path(__file__).resolve().parent.parent
_MARKER = re.compile(r"<!-- cli: (?P<prog>[\w-]+)(?: (?P<command>[\w-]+))? -->")
_END = "<!-- end results -->"
#: the marker, and the page's copy of the table after it where there is one (up to its end line)
_RESULTS = re.compile(
    r"<!-- results: (?P<name>[\w.-]+\.md)(?:#(?P<table>\d+))? -->"
    r"(?P<copy>\n(?:(?!<!-- results: )(?!<!-- end results -->).)*?\n<!-- end results -->)?",
    re.DOTALL,
)


def tables(text: str) -> list[str]:
    """The Markdown tables of a text, in order (runs of lines starting with ``|``)."""
    found: list[list[str]] = []
    previous = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row and not previous:
            found.append([])
        if is_row:
            found[-1].append(line)
        previous = is_row
    return ["\n".join(rows) for rows in found]


def results(name: str, table: str | None) -> str:
    path = ROOT / "bench" / "results" / name
    text = path.read_text()
    if table is None:
        return text
    found = tables(text)
    if not 1 <= int(table) <= len(found):
        raise ValueError(f"{path} has {len(found)} table(s), not a table {table}")
    return found[int(table) - 1]


def with_copies(text: str) -> str:
    """A page's text with each results marker followed by a fresh copy of its table (the form
    GitHub shows), ended by ``<!-- end results -->``."""

    def block(m: re.Match[str]) -> str:
        head = m.group(0).split("\n", 1)[0]
        return f"{head}\n\n{results(m.group('name'), m.group('table')).strip()}\n\n{_END}"

    return _RESULTS.sub(block, text)


def home_page(readme: str) -> str:
    """docs/index.md: the README, its links made the site's (``docs/X.md`` -> ``X.md``)."""
    site = re.sub(r"\]\(docs/", "](", readme).replace("](CHANGELOG.md)", "](changelog.md)")
    return site.replace("[CHANGELOG.md](changelog.md)", "[the changelog](changelog.md)")


def _parsers(prog: str) -> list[tuple[str, argparse.ArgumentParser]]:
    if prog == "chakra-convert-fast":
        from chakra_convert_fast.converter.cli.main import build_parser

        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return [(prog, parser), *((f"{prog} {name}", p) for name, p in sub.choices.items())]
    if prog == "chakra-profile":
        from chakra_convert_fast.profiler.cli import build_parser as build_profile

        return [(prog, build_profile())]
    raise ValueError(f"no parser for {prog!r}")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option(action: argparse.Action) -> tuple[str, str, str]:
    if action.option_strings:
        names = ", ".join(f"`{s}`" for s in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (action.dest.upper() if not action.choices else None)
            if action.choices and not action.metavar:
                metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
            names += f" `{metavar}`"
    else:
        names = f"`{action.metavar or action.dest}`"
    default = ""
    if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        default = f"`{action.default}`"
    return (
        names,
        _cell(
            (action.help or "") % {"default": action.default, "prog": "", "dest": action.dest}
            if action.help and "%(" in action.help
            else action.help or ""
        ),
        default,
    )


def reference(prog: str, command: str | None = None, level: int = 2) -> str:
    """Every command of ``prog`` (or the one ``command``): heading, description, usage, options, examples."""
    out: list[str] = []
    parsers = _parsers(prog)
    if command is not None:
        parsers = [(n, p) for n, p in parsers if n == f"{prog} {command}"]
        if not parsers:
            raise ValueError(f"{prog} has no command {command!r}")
    for name, parser in parsers:
        if name == prog and prog == "chakra-convert-fast":
            continue
        out.append(f"{'#' * level} `{name}`\n")
        if parser.description:
            out.append(_cell(parser.description) + "\n")
        usage = parser.format_usage().replace("usage: ", "", 1).strip()
        out.append("```\n" + usage + "\n```\n")
        rows = [
            _option(a)
            for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        ]
        if rows:
            out.append("| option | what it does | default |\n|---|---|---|")
            out.extend(f"| {n} | {h} | {d} |" for n, h, d in rows)
            out.append("")
        if parser.epilog:
            out.append("```\n" + parser.epilog.strip("\n") + "\n```\n")
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = markdown.replace("<!-- changelog -->", (ROOT / "CHANGELOG.md").read_text())
    markdown = _RESULTS.sub(lambda m: "\n" + results(m.group("name"), m.group("table")).strip() + "\n", markdown)
    return _MARKER.sub(
        lambda m: reference(m.group("prog"), m.group("command"), 2 if m.group("command") is None else 3), markdown
    )


def on_files(files: Files, config: Any, **_: Any) -> Files:
    from mkdocs.structure.files import File

    results = ROOT / "bench" / "results"
    for figure in sorted(results.glob("*.png")):
        files.append(
            File(f"results/{figure.name}", str(results.parent), config["site_dir"], config["use_directory_urls"])
        )
    return files


if __name__ == "__main__":
    # python docs/hooks.py: the home page written from the README, and every page's copies of its
    # result tables rewritten from bench/results
    home = ROOT / "docs" / "index.md"
    if home.read_text() != (text := home_page((ROOT / "README.md").read_text())):
        home.write_text(text)
        print("docs/index.md: written from README.md")
    for page in sorted((ROOT / "docs").glob("*.md")):
        old = page.read_text()
        new = with_copies(old)
        if new != old:
            page.write_text(new)
            print(f"{page.relative_to(ROOT)}: result tables copied from bench/results")
