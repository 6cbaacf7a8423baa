"""Subcommands for host + device traces: ``link``, ``convert --host/--device``, ``convert-all``, ``repair``.

``register(subparsers)`` adds them to the main CLI; each sets ``func`` to a handler that returns
the exit status. Errors print as one line on stderr and exit non-zero; warnings go to stderr too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import api_link
from .errors import ConverterError

_REPAIR_HINT = "; `chakra-convert-fast repair IN OUT` keeps the last complete object"


def register(subparsers: argparse._SubParsersAction, *, include_convert: bool = True) -> None:
    """Add ``link``, ``convert-all``, ``repair`` (and ``convert`` unless the caller has its own)."""
    _add_link(subparsers)
    if include_convert:
        add_pair_arguments(subparsers.add_parser("convert", help="link a host+device pair and convert it"))
    _add_convert_all(subparsers)
    _add_repair(subparsers)


def _add_link(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "link", help="merge a host trace with its Kineto trace (chakra_trace_link)"
    )
    parser.add_argument("--rank", type=int, help="rank of the traces (checked against the Kineto trace)")
    parser.add_argument(
        "--host", "--chakra-host-trace", dest="host", required=True, help="host trace (.json[.gz])"
    )
    parser.add_argument(
        "--device", "--chakra-device-trace", dest="device", required=True, help="Kineto trace"
    )
    parser.add_argument(
        "-o", "--output-file", "--output", dest="output", required=True, help="merged JSON (.gz ok)"
    )
    _add_common(parser)
    parser.set_defaults(func=_guarded(run_link))


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """The one-shot pair options; the lead's ``convert`` parser can take them as they are."""
    parser.add_argument("--host", "--chakra-host-trace", dest="host", help="host trace to link first")
    parser.add_argument("--device", "--chakra-device-trace", dest="device", help="its Kineto trace")
    parser.add_argument("--rank", type=int, help="rank of the pair (checked against the Kineto trace)")
    parser.add_argument("--keep-merged", metavar="PATH", help="also write the merged JSON here")
    if not any(a.dest == "output" for a in parser._actions):
        parser.add_argument("output", help="Chakra .et output")
        parser.add_argument("--simulate", action="store_true", help="also simulate the converted graph")
        parser.add_argument(
            "--break-cycles", action="store_true", help="remove edges closing dependency cycles"
        )
    _add_common(parser)
    parser.set_defaults(func=_guarded(run_convert_pair))


def _add_convert_all(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert-all", help="link and convert every rank in a directory")
    parser.add_argument("directory", help="directory with each rank's host and Kineto traces")
    parser.add_argument("-o", "--output-dir", required=True, help="where <prefix>.<rank>.et files go")
    parser.add_argument("--jobs", "-j", type=int, help="parallel processes (default: CPU count)")
    parser.add_argument("--prefix", default="trace", help="output name prefix (default: trace)")
    _add_common(parser)
    parser.set_defaults(func=_guarded(run_convert_all))


def _add_repair(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "repair", help="keep the last complete object of a concatenated host trace"
    )
    parser.add_argument("input")
    parser.add_argument("output")
    parser.set_defaults(func=_guarded(run_repair))


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-mismatch", action="store_true", help="link a pair even if it looks like two runs"
    )
    parser.add_argument("--log-level", default="INFO", help=argparse.SUPPRESS)  # chakra_trace_link's option


# -- handlers ------------------------------------------------------------------------------------
def run_link(args: argparse.Namespace) -> int:
    result = api_link.link(
        args.host, args.device, args.output, rank=args.rank, allow_mismatch=args.allow_mismatch
    )
    _warn(result.warnings)
    s = result.stats
    print(
        f"linked {s.linked} of {s.host_ops} host ops and {s.gpu_linked} device ops "
        f"in {result.seconds:.2f} s: {result.output_path} ({result.nodes_written} nodes)"
    )
    return 0


def run_convert_pair(args: argparse.Namespace) -> int:
    if not args.host or not args.device:
        return _fail("convert: --host and --device go together")
    result = api_link.convert_pair(
        args.host,
        args.device,
        args.output,
        rank=args.rank,
        keep_merged=args.keep_merged,
        allow_mismatch=args.allow_mismatch,
        simulate=getattr(args, "simulate", False),
        break_cycles=getattr(args, "break_cycles", False),
    )
    _warn(result.link.warnings)
    written = getattr(result.conversion, "nodes_written", "?")
    print(f"linked {result.link.stats.linked} host ops; wrote {args.output} ({written} nodes)")
    return 0


def run_convert_all(args: argparse.Namespace) -> int:
    result = api_link.convert_all(
        args.directory,
        args.output_dir,
        jobs=args.jobs,
        prefix=args.prefix,
        allow_mismatch=args.allow_mismatch,
    )
    print(f"{'rank':>4}  {'status':6}  {'nodes':>8}  {'link s':>6}  output / problem")
    for o in result.outcomes:
        status, detail = ("ok", o.output or "") if o.ok else ("FAILED", o.message)
        print(f"{o.rank:>4}  {status:6}  {o.nodes:>8}  {o.seconds:>6.2f}  {detail}")
        if o.ok and o.message:
            print(f"{'':>4}  warning: {o.message}")
    if result.comm_group_path:
        print(f"communicator groups: {result.comm_group_path} {result.comm_groups}")
    if result.failed:
        print(f"{result.failed} of {len(result.outcomes)} ranks failed", file=sys.stderr)
    return min(result.failed, 125)


def run_repair(args: argparse.Namespace) -> int:
    result = api_link.repair(args.input, args.output)
    print(f"{result.output_path}: {result.describe()}")
    return 0


def _warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _fail(message: str) -> int:
    """Bad input: one line, exit status 1 (2 is argparse's usage error), as the main command."""
    print(f"chakra-convert-fast: error: {message}", file=sys.stderr)
    return 1


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The handler, with our errors turned into one line on stderr and a non-zero status."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except ConverterError as exc:
            message = str(exc)
            if "concatenated" in message:
                message += _REPAIR_HINT
            return _fail(message)

    return run


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen subcommand (its handler already reports errors as one line)."""
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry for these subcommands (tests; the package CLI registers them itself)."""
    parser = argparse.ArgumentParser(prog="chakra-convert-fast")
    register(parser.add_subparsers(dest="command", required=True))
    return dispatch(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
