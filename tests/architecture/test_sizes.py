"""How large product code may grow (issue 43): no module over 500 lines, and at most six
functions over 50 lines in the whole product. A product module is one of the five packages',
migrations aside; tests and the benchmarks are not product."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ragmux", "gateway", "stores", "ingestion", "retrieval")
MAX_MODULE_LINES = 500
LONG_FUNCTION_LINES = 50
MAX_LONG_FUNCTIONS = 6


def product_modules() -> list[Path]:
    return sorted(path for name in PACKAGES for path in (ROOT / name).rglob("*.py") if "migrations" not in path.parts)


def long_functions(paths: list[Path]) -> list[str]:
    """Each function of ``paths`` longer than LONG_FUNCTION_LINES: path:line name (its length)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > LONG_FUNCTION_LINES:
                    found.append(f"{path.name}:{node.lineno} {node.name} ({length})")
    return found


def test_no_product_module_is_over_the_limit():
    over = {
        path.relative_to(ROOT).as_posix()
        for path in product_modules()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }

    assert over == set()


def test_few_product_functions_are_long():
    found = long_functions(product_modules())

    assert len(found) <= MAX_LONG_FUNCTIONS, found


def test_a_function_one_line_over_is_counted_and_one_at_the_limit_is_not(tmp_path):
    def function(name: str, lines: int) -> str:
        return f"def {name}():\n" + "".join(f"    x = {number}\n" for number in range(lines - 1))

    sample = tmp_path / "sample.py"
    sample.write_text(function("over", LONG_FUNCTION_LINES + 1) + "\n\n" + function("at", LONG_FUNCTION_LINES))

    assert long_functions([sample]) == [f"sample.py:1 over ({LONG_FUNCTION_LINES + 1})"]
