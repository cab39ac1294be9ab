"""The code style in pyproject.toml ([tool.ruff]) holds on every file, as the layers contract
does: a change that breaks it fails the suite instead of waiting for someone to run ruff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")


def ruff(*arguments: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *arguments, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [("check",), ("format", "--check")])
def test_the_code_style_holds(command):
    result = ruff(*command)

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_style_check_can_fail(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "careless.py").write_text("import os\nx=1\n")

    assert ruff("check", cwd=tmp_path).returncode == 1  # an unused import
    assert ruff("format", "--check", cwd=tmp_path).returncode == 1  # `x=1` unformatted
