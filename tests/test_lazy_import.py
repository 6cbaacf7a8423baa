"""The package's lazy face (PEP 562): importing it, or running ``--version``, loads almost nothing;
a command loads its own module, not the others'. Asserted on what is imported (a fresh
interpreter's ``sys.modules``), never on a wall-clock time a loaded machine could break."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import chakra_convert_fast.converter as package
from chakra_convert_fast.converter import api

PACKAGE = "chakra_convert_fast.converter"
cli_main = importlib.import_module(f"{PACKAGE}.cli.main")  # the package re-exports main()


def _modules_after(code: str) -> list[str]:
    """The package's modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith({PACKAGE!r}))))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout.splitlines()[-1]))


def _command_line(*argv: str) -> str:
    return (
        "import contextlib, sys\n"
        "from chakra_convert_fast.converter.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(sys.stderr):\n"
        f"    main({list(argv)!r})"
    )


def test_importing_the_package_loads_no_implementation() -> None:
    assert _modules_after(f"import {PACKAGE}") == [PACKAGE, f"{PACKAGE}._early"]


def test_version_imports_neither_the_api_nor_a_command() -> None:
    loaded = _modules_after(_command_line("--version"))
    assert f"{PACKAGE}.api" not in loaded
    commands = {f"{PACKAGE}.cli.{module}" for module in set(cli_main._MODULE_OF.values())}
    assert not commands & set(loaded)
    assert len(loaded) <= 25, loaded  # the command line's frame: errors, io, lifecycle, report


def test_a_command_imports_its_own_module_only() -> None:
    loaded = set(_modules_after(_command_line("check", "--help")))
    commands = {f"{PACKAGE}.cli.{module}" for module in set(cli_main._MODULE_OF.values())}
    assert commands & loaded == {f"{PACKAGE}.cli.check"}


def test_every_public_name_resolves_and_functions_keep_their_subpackages_names() -> None:
    subpackages = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert set(api.__all__) & subpackages == package._SHADOWED
    for name in api.__all__:
        assert getattr(package, name) is getattr(api, name), name
    assert callable(package.convert) and callable(package.check) and callable(package.simulate)


def test_the_public_names_are_written_once() -> None:
    assert package.__all__ is api.__all__
    assert "__all__" not in vars(package) or vars(package)["__all__"] is api.__all__
