"""axe-core in the browser tests: every page they show is checked, and a serious or critical
violation fails the test. axe is vendored under static/vendor/axe-core for the tests only; no
page of the dashboard loads it."""

from __future__ import annotations

from pathlib import Path

AXE = Path(__file__).resolve().parents[3] / "static" / "vendor" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")

RUN_AXE = """async () => {
    const result = await axe.run(document, { resultTypes: ["violations"] });
    return result.violations.map((v) => ({
        id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")),
    }));
}"""


def blocking_violations(page) -> list[dict]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return [violation for violation in page.evaluate(RUN_AXE) if violation["impact"] in BLOCKING]


def assert_accessible(page) -> None:
    found = blocking_violations(page)
    assert not found, f"{page.url}: " + "; ".join(
        f"{v['impact']} {v['id']} ({v['help']}) at {', '.join(v['nodes'][:3])}" for v in found
    )
