"""Command line: argument parsing and output for people; all work is done by ``converter.api``.

Forms accepted (the second is ``chakra_converter``'s, so scripts only swap the executable)::

    chakra-convert-fast INPUT OUTPUT [options]
    chakra-convert-fast [--log-filename F] PyTorch --input INPUT --output OUTPUT [--simulate]
    chakra-convert-fast {link,convert,convert-all,repair} ...   (host+device linking, see --help)
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from . import api, jsonstream
from .errors import ConverterError

PROG = "chakra-convert-fast"
_LINK_COMMANDS = ("link", "convert", "convert-all", "repair")
_DESCRIPTION = """\
Convert a PyTorch execution trace (a host trace, or a host+device trace merged by
chakra_trace_link / `chakra-convert-fast link`) into a Chakra execution trace (.et) for
simulators such as ASTRA-sim. The output is byte-identical to `chakra_converter PyTorch`
(mlc-chakra 1.0.0), but the input is streamed (.json or .json.gz), memory stays near a few
hundred bytes per node, and nothing recurses, so deep or out-of-order traces convert too.
"""
_EPILOG = f"""\
other forms:
  {PROG} [--log-filename F] PyTorch --input IN --output OUT [--simulate]
        the chakra_converter command line, accepted as is
  {PROG} link|convert|convert-all|repair ...
        link host and device traces, convert a pair or a directory of ranks,
        repair host traces holding several JSON documents (see `{PROG} link --help`)

exit status: 0 on success, 1 when the input cannot be converted (one-line reason on
stderr, no output file written), 2 on a usage error.
"""


def _add_conversion_options(parser: argparse.ArgumentParser, log_option: bool = True) -> None:
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="after writing, run the reference's simple execution model and print the simulated time",
    )
    parser.add_argument(
        "--break-cycles",
        action="store_true",
        help="instead of failing on dependency cycles, remove the edges that close them "
        "(inter-thread edges first) and list every removed edge",
    )
    parser.add_argument(
        "--allow-missing-parents",
        action="store_true",
        help="accept ctrl_deps that point at no node, as chakra_converter does "
        "(those ops and everything under them are dropped); an error by default",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    if log_option:  # the reference form takes it before the subcommand instead
        parser.add_argument(
            "--log-filename", metavar="F", help="also write the summary (and removed edges) to this file"
        )


def _short_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=_DESCRIPTION, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("input", metavar="INPUT", help="merged or host trace, .json or .json.gz")
    parser.add_argument("output", metavar="OUTPUT", help="Chakra trace to write (.et); replaced atomically")
    _add_conversion_options(parser)
    return parser


def _reference_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="chakra_converter-compatible form")
    parser.add_argument("--log-filename", metavar="F", help="also write the summary to this file")
    sub = parser.add_subparsers(dest="format", required=True)
    pytorch = sub.add_parser("PyTorch", help="convert a PyTorch host or merged trace")
    pytorch.add_argument("--input", required=True, help="merged or host trace, .json or .json.gz")
    pytorch.add_argument("--output", required=True, help="Chakra trace to write (.et)")
    _add_conversion_options(pytorch, log_option=False)
    return parser


def _first_positional(argv: Sequence[str]) -> str | None:
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--log-filename":
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = _first_positional(args_list)
    if command in _LINK_COMMANDS:
        return _run_link_command(args_list)
    parser = _reference_parser() if command == "PyTorch" else _short_parser()
    args = parser.parse_args(args_list)
    return _convert(args)


def _run_link_command(argv: list[str]) -> int:
    try:
        cli_link = importlib.import_module("converter.cli_link")
    except ModuleNotFoundError:
        print(f"{PROG}: error: the linking commands are not available in this installation", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=PROG, description=_DESCRIPTION)
    cli_link.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def _convert(args: argparse.Namespace) -> int:
    bars = _ProgressBars(enabled=not args.quiet and sys.stderr.isatty())
    if not jsonstream.C_SCANNER and not args.quiet:
        print(f"{PROG}: warning: Python's json C accelerator is missing; parsing will be several times slower",
              file=sys.stderr)
    log = _logger(args.log_filename)
    try:
        result = api.convert(
            args.input,
            args.output,
            simulate=args.simulate,
            break_cycles=args.break_cycles,
            allow_missing_parents=args.allow_missing_parents,
            progress=bars.update if bars.enabled else None,
        )
    except ConverterError as exc:
        bars.close()
        log.error(str(exc))
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        bars.close()
        print(f"{PROG}: interrupted; no output written", file=sys.stderr)
        return 130
    bars.close()
    for line in _report_lines(result):
        log.info(line)
        if not args.quiet:
            print(line, file=sys.stderr)
    return 0


def _report_lines(result: api.ConversionResult) -> list[str]:
    lines = [
        f"removed dependency {e.node_id} '{e.node_name}' -> {e.dependency_id} '{e.dependency_name}'"
        + (" (inter-thread)" if e.inter_thread else "")
        for e in result.removed_edges
    ]
    if result.removed_edges:
        lines.append(f"--break-cycles removed {len(result.removed_edges)} dependency edge(s) to make the graph acyclic")
    lines.append(
        f"wrote {result.output_path}: {result.nodes_written:,} nodes ({result.dangling_removed:,} dangling removed, "
        f"{result.comm_nodes:,} comm nodes, {result.data_deps:,} data deps) from {result.nodes_read:,} in "
        f"{result.seconds:.2f} s ({result.nodes_read / max(result.seconds, 1e-9):,.0f} nodes/s)"
    )
    if result.simulation is not None:
        lines.append(
            f"simulated execution: {result.simulation.end_time_us:,} us for {len(result.simulation.issued):,} ops"
        )
    return lines


def _logger(path: str | None) -> logging.Logger:
    log = logging.getLogger("chakra_convert_fast")
    log.handlers.clear()
    log.propagate = False
    if path:
        handler = logging.FileHandler(path, mode="w")
        handler.setFormatter(logging.Formatter("%(levelname)s [%(asctime)s] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    else:
        log.addHandler(logging.NullHandler())
    return log


class _ProgressBars:
    """One tqdm bar per stage on stderr: input bytes while reading, nodes while writing."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bars: dict[str, Any] = {}

    def update(self, stage: str, done: int, total: int) -> None:
        bar = self._bars.get(stage)
        if bar is None:
            for other in self._bars.values():
                other.close()
            unit = {"read": "B", "write": "node"}.get(stage, "it")
            bar = self._bars[stage] = tqdm(
                total=total, desc=f"{stage:>5}", unit=unit, unit_scale=True, file=sys.stderr, leave=False
            )
        bar.update(done - bar.n)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


if __name__ == "__main__":
    sys.exit(main())
