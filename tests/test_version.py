"""``--version`` on both commands prints the installed distribution's version and exits 0."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from tests.clirun import run_cli


def test_converter_version_is_the_installed_one() -> None:
    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"chakra-convert-fast {importlib.metadata.version('chakra-convert-fast')}"


def test_profiler_version_needs_no_torch() -> None:
    code = (
        "import sys\nfrom chakra_convert_fast.profiler.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as e:\n    status = e.code\n"
        "assert 'torch' not in sys.modules\nsys.exit(status)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"chakra-profile {importlib.metadata.version('chakra-convert-fast')}"
