"""The layers contract in pyproject.toml is the architecture: it holds, and it can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("ragmux", "gateway", "stores", "ingestion", "retrieval")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_contract_is_kept():
    result = lint_imports(ROOT)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.fixture
def checkout_copy(tmp_path: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(checkout_copy: Path):
    (checkout_copy / "stores" / "shortcut.py").write_text("from retrieval.search import store_search\n")

    result = lint_imports(checkout_copy)

    assert result.returncode != 0
    assert "stores is not allowed to import retrieval" in result.stdout
    assert "stores.shortcut -> retrieval.search" in result.stdout


def test_the_kernel_may_not_reach_into_the_apps(checkout_copy: Path):
    (checkout_copy / "ragmux" / "core" / "shortcut.py").write_text("import gateway.connections.models\n")

    result = lint_imports(checkout_copy)

    assert result.returncode != 0
    assert "ragmux.core is not allowed to import gateway.connections" in result.stdout


def test_a_layer_renamed_away_breaks_the_contract(checkout_copy: Path):
    (checkout_copy / "gateway" / "clients").rename(checkout_copy / "gateway" / "client_api")

    result = lint_imports(checkout_copy)

    assert result.returncode != 0
    assert "gateway.clients" in result.stdout + result.stderr
