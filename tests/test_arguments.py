"""One layer of argument checks (``converter/arguments.py``): every API entry refuses the values the
command line refuses, before any work, and library messages name parameters, which the command
line shows as its flags."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.cli.main import build_parser
from chakra_convert_fast.converter.cli.report import flags_of, with_flags
from chakra_convert_fast.converter.errors import OptionError

from .clirun import assert_one_error, run_cli

# the API as an untyped caller sees it: the calls below are wrong on purpose
loose: Any = api
SIM = api.SimulateOptions


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (
            lambda p: loose.convert_kineto(p / "k.json", p / "o.et", step=-1),
            OptionError,
            "`step` -1: must be from 0 to 9,223,372,036,854,775,807",
        ),
        (lambda p: loose.convert_kineto(p / "k.json", p / "o.et", rank=1 << 20), OptionError, "`rank` 1048576"),
        (lambda p: loose.convert_kineto(p / "k.json", p / "o.et", drop=["x"]), OptionError, "`drop`: unknown x"),
        (lambda p: loose.convert_pair(p / "h", p / "d", p / "o", rank=-1), OptionError, "`rank` -1: must be from 0"),
        (lambda p: loose.link(p / "h", p / "d", None, rank=-2), OptionError, "`rank` -2"),
        (lambda p: loose.convert_all(p, p / "out", step=-1), OptionError, "`step` -1"),
        (lambda p: loose.convert_all(p, p / "out", jobs=5000), OptionError, "`jobs` 5000: must be from 1 to 4,096"),
        (lambda p: loose.convert_all(p, p / "out", ray_address=3), TypeError, "ray_address must be a str"),
        (lambda p: loose.ConvertOptions(rank=-1), OptionError, "`rank` -1"),
        (lambda p: loose.ConvertOptions(world_size=0), OptionError, "`world_size` 0"),
        (lambda p: loose.ConvertOptions(target="gpu"), OptionError, "`target` 'gpu': one of captured, accelerator"),
        (lambda p: loose.ConvertOptions(target="accelerator"), OptionError, "`target` accelerator needs `roofline`"),
        (lambda p: loose.scale(p / "j", p / "o", 0), OptionError, "`ranks` 0: must be from 1 to 1,048,576"),
        (lambda p: loose.scale(p / "j", p / "o", True), TypeError, "ranks must be an int"),
        (lambda p: loose.scale(p / "j", p / "o", 4, progress=3), TypeError, "progress must be callable"),
        (lambda p: loose.scale(p / "j", p / "o", 4, compact="yes"), TypeError, "compact must be a bool"),
        (lambda p: loose.comm_group_path(3), TypeError, "prefix must be a path"),
        (lambda p: loose.simulate(p / "j", ranks=0), OptionError, "`ranks` 0"),
        (lambda p: loose.simulate(p / "j", exact=True), OptionError, "`exact` is only with `ranks`"),
        (lambda p: loose.simulate(p / "j", work_dir=p, compact=True), OptionError, "`work_dir`, `compact` are only"),
        (lambda p: loose.simulate(p / "j", "Ring"), TypeError, "options must be a SimulateOptions or None"),
        (
            lambda p: loose.simulate(p / "j", SIM(network_config="n.yml", bandwidth="50")),
            OptionError,
            "`bandwidth` is only without `network_config`",
        ),
        (lambda p: loose.simulate(p / "j", timeline=5), TypeError, "timeline must be a path"),
        (lambda p: loose.simulate_sweep(p / "j", [2], ["Ring"], key="nodes"), OptionError, "`key` 'nodes': one of"),
        (lambda p: loose.simulate_sweep(p / "j", [2], ["Ring"], jobs=0), OptionError, "`jobs` 0: must be at least 1"),
        (lambda p: loose.simulate_sweep(p / "j", [2], ["Ring"], jobs=2, ray="auto"), OptionError, "`jobs` is only"),
        (
            lambda p: loose.simulate_sweep(p / "j", [50], ["Ring"], key="bandwidth", exact=True),
            OptionError,
            "`exact` is only with `key` 'ranks'",
        ),
        (
            lambda p: loose.simulate_sweep(p / "j", [50], ["Ring"], SIM(bandwidth="10"), key="bandwidth"),
            OptionError,
            "`bandwidth` is only for one bandwidth",
        ),
        (
            lambda p: loose.simulate_sweep(p / "j", ["h100"], ["Ring"], SIM(peak_tflops=1.0), key="accelerator"),
            OptionError,
            "`peak_tflops` is only for one roofline",
        ),
        (lambda p: loose.simulate_sweep(p / "j", [2], "Ring"), TypeError, "topologies must be a sequence"),
        (lambda p: loose.text(p / "w.txt", p / "w", 0), OptionError, "`npus` 0: must be from 1 to 1,048,576"),
        (lambda p: loose.text(p / "w.txt", p / "w", "4"), TypeError, "npus must be an int"),
        (lambda p: loose.text(p / "w.txt", p / "w", 4, -1), OptionError, "`passes` -1"),
        (lambda p: loose.text(p / "w.txt", p / "w", 4, first_dim=0), OptionError, "`first_dim` 0"),
        (lambda p: loose.compact(1, p / "o.et"), TypeError, "input_path must be a path"),
        (lambda p: loose.compact_ranks(p / "a", p / "b", on_rank_done=1), TypeError, "on_rank_done must be callable"),
        (lambda p: loose.jsonize(p / "a.et", p / "a.json", "xml"), OptionError, "`layout` 'xml': one of document"),
        (lambda p: loose.jsonize(p / "a.et", p / "a.json", jobs=0), OptionError, "`jobs` 0"),
        (lambda p: loose.generate(p, "all"), TypeError, "options must be a GenerateOptions or None"),
        (lambda p: loose.visualize(p / "a.et", p / "g.dot", "all"), TypeError, "cut must be a GraphCut or None"),
        (lambda p: loose.visualize(p / "a.et", p / "g.dot", api.GraphCut(ids=(5, 1))), OptionError, "above the last"),
        (lambda p: loose.visualize(p / "a.et", p / "g.dot", api.GraphCut(around=(1, -1))), OptionError, "`depth` -1"),
        (lambda p: loose.visualize(p / "a.et", p / "g.dot", laid_out=1), TypeError, "laid_out must be a bool"),
    ],
)
def test_every_entry_refuses_what_the_command_line_refuses(
    call: Callable[[Path], object], error: type[Exception], text: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")) as raised:
        call(tmp_path)
    assert "--" not in str(raised.value)  # the API's words, never a flag
    assert os_listing(tmp_path) == []  # refused before any work


def os_listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_option_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="`ranks` 0"):
        api.scale("a", "b", 0)


def test_the_command_line_shows_each_parameter_as_its_flag() -> None:
    flags = flags_of(build_parser(), "scale")
    assert with_flags("`ranks` 0: must be from 1", flags) == "--ranks 0: must be from 1"
    assert with_flags("convert with `astra_sim`", flags) == "convert with --astra-sim"  # another command's
    assert with_flags("`steps` links them", flags) == "--step N or --all-steps links them"  # spelt otherwise
    assert with_flags("`world_size`, `a b`", flags) == "`world_size`, `a b`"  # no command takes these
    assert flags_of(build_parser(), "generate")["default_comm_size"].startswith("--default")


def test_an_option_error_is_a_usage_error_of_one_line_naming_the_flag(tmp_path: Path) -> None:
    """ConvertOptions refuses --target accelerator without --roofline: the command line has no check
    of its own, and says it in its own words."""
    done = run_cli("convert", tmp_path / "in.json", tmp_path / "o.et", "--target", "accelerator")
    line = assert_one_error(done, "--target accelerator needs --roofline", status=2)
    assert "`" not in line


#: Modules whose messages still quote flags: none.
_FLAGS_LEFT: tuple[str, ...] = ()


@pytest.mark.slow
def test_library_errors_quote_no_flags() -> None:
    """What a library module raises names parameters (`ranks`), never the command line's flags."""
    import ast
    import re

    root = Path(api.__file__).parent
    flag = re.compile(r"(?<![\w-])--[a-z]")
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("cli/", *_FLAGS_LEFT)):
            continue
        for raised in ast.walk(ast.parse(path.read_text())):
            if not isinstance(raised, ast.Raise) or raised.exc is None:
                continue
            for part in ast.walk(raised.exc):
                if not isinstance(part, ast.Constant) or not isinstance(part.value, str):
                    continue
                if flag.search(part.value.split("chakra-profile")[0]):  # another program's command line may
                    found.append(f"{relative}:{part.lineno}: {part.value}")
    assert found == []
