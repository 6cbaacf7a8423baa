"""The installed package: one namespace of its own, and a light install (only tqdm and msgspec at run time)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (path,) = out.glob("chakra_convert_fast-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_every_module_is_under_the_project_namespace(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"chakra_convert_fast"}
    packaged = {name for name in wheel.namelist() if name.endswith(".py")}
    for folder in ("converter", "profiler", "fixtures"):
        for source in (ROOT / folder).rglob("*.py"):
            assert f"chakra_convert_fast/{source.relative_to(ROOT).as_posix()}" in packaged, source


def test_the_only_run_time_dependencies_are_tqdm_and_msgspec(wheel: zipfile.ZipFile) -> None:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    requires = re.findall(r"^Requires-Dist: (.+)$", wheel.read(metadata).decode(), re.M)
    assert [r for r in requires if "extra ==" not in r] == ["tqdm>=4.60", "msgspec<1,>=0.18"]
    assert not any(
        re.match(r"(mlc-chakra|protobuf|pandas|HolisticTraceAnalysis)\b", r) and "extra ==" not in r for r in requires
    )


def test_the_converter_imports_nothing_outside_the_standard_library_but_tqdm_and_msgspec() -> None:
    code = (
        "import sys; import chakra_convert_fast.converter.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'chakra', 'google', 'pandas', 'torch', 'numpy'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_sources_use_the_installed_names() -> None:
    """Inside the converter, imports are relative; elsewhere they use chakra_convert_fast.*."""
    pattern = re.compile(r"^\s*(from|import) (converter|profiler|fixtures)\b", re.M)
    offenders = [
        str(p)
        for folder in ("converter", "profiler", "fixtures", "tests", "bench")
        for p in (ROOT / folder).rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert offenders == []


def test_the_module_map_matches_the_folders() -> None:
    """Every module of the converter package is in the docs' module map (docs/how-it-works.md), and the
    map names no other."""
    readme = (ROOT / "docs" / "how-it-works.md").read_text()
    block = readme.split("    converter/\n", 1)[1].split("\n\n", 1)[0]
    mapped: set[str] = set()
    folder = ""
    for line in block.splitlines():
        name = line.split()[0]
        if name.endswith("/"):
            folder = name
        elif name.endswith(".py"):
            indent = len(line) - len(line.lstrip())
            mapped.add(f"{folder}{name}" if indent > 6 else name)
            folder = folder if indent > 6 else ""
    modules = {
        p.relative_to(ROOT / "converter").as_posix()
        for p in (ROOT / "converter").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }
    assert mapped == modules


def test_the_readme_is_short_and_for_users() -> None:
    """The README introduces; the documentation site holds the rest. No issue numbers, no paths of
    this project's own workplace."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "../shared" not in readme
    assert re.search(r"\bissue \d", readme) is None
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
