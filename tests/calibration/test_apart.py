"""The kit's self-measurement stays apart from what a user's run executes: no module of the
harness outside harness/calibration imports it (lazy imports included)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return names


def test_no_product_module_imports_calibration():
    users = sorted(str(p.relative_to(REPO)) for p in (REPO / "harness").rglob("*.py")
                   if "calibration" not in p.parts
                   and any(n == "harness.calibration" or n.startswith("harness.calibration.") for n in _imported(p)))
    assert users == []


def test_the_check_sees_an_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from harness.calibration.refserver import VOCAB\n")
    assert "harness.calibration.refserver" in _imported(f)
