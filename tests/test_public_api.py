"""The public layer: what ``chakra_convert_fast.converter`` exports, the error tree, ``--debug``."""

from __future__ import annotations

from pathlib import Path

import pytest

import chakra_convert_fast.converter as package
from chakra_convert_fast.converter import api, errors
from chakra_convert_fast.converter.cli import main as cli_main

#: What the command line needs and users do not call: never in the public API.
CLI_INTERNALS = {
    "committed_outputs",
    "forget_committed",
    "hold_signals_after_commit",
    "release_held_signals",
    "signal_deferred",
    "open_log",
    "standard_descriptors",
    "ray_run_ended_by_signal",
    "same_file",
    "shown",
    "convert_all_uses",
    "scale_uses",
    "text_uses",
}


def test_the_package_exports_the_api_and_every_error() -> None:
    assert set(api.__all__) <= set(package.__all__)
    error_classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, Exception) and not name.startswith("_")
    }
    assert error_classes <= set(package.__all__)
    assert all(hasattr(package, name) for name in package.__all__)


def test_no_command_line_internals_in_the_api() -> None:
    assert not CLI_INTERNALS & set(api.__all__)
    assert not CLI_INTERNALS & set(package.__all__)


def test_every_error_class_lives_in_errors() -> None:
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert value.__module__ == errors.__name__, name


def test_option_errors_are_value_errors_and_carry_a_hint() -> None:
    with pytest.raises(package.OptionError) as caught:
        package.convert_all("in", "out", jobs=0)
    assert isinstance(caught.value, ValueError)
    assert errors.ConverterError("m", hint="do this").hint == "do this"
    assert errors.ConverterError("m").hint is None


def _fail_inside(*_: object, **__: object) -> None:
    raise ZeroDivisionError("a bug")


def test_an_internal_error_is_one_line_and_debug_shows_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(api, "check", _fail_inside)
    et = tmp_path / "x.et"
    et.write_bytes(b"")
    assert cli_main(["check", str(et)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["chakra-convert-fast: error: internal error: ZeroDivisionError: a bug"]
    assert cli_main(["--debug", "check", str(et)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_fail_inside" in err
    assert err.splitlines()[-1] == "chakra-convert-fast: error: internal error: ZeroDivisionError: a bug"


def test_a_hint_follows_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise errors.ConverterError("x.et: cannot be checked", hint="convert it again")

    monkeypatch.setattr(api, "check", refuse)
    et = tmp_path / "x.et"
    et.write_bytes(b"")
    assert cli_main(["check", str(et)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "chakra-convert-fast: error: x.et: cannot be checked (convert it again)"
    ]
