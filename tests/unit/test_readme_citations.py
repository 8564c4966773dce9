"""README names, for each guarantee, the tests that fail if it stops holding: every file
and test it names exists, so a renamed or deleted test cannot leave a promise unproven
while README still cites it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TIERS = "unit|integration|e2e|chaos|contracts"
# `e2e/test_stack.py::test_name`, `tests/e2e/test_stack.py`, or `::test_name` for one
# more test of the file named last.
CITATION = re.compile(rf"`(?:tests/)?((?:{TIERS})/[\w/]+\.py)?(::\w+)?`")


def citations(text: str) -> list[tuple[str, str | None]]:
    """(file under tests/, test name or None) for each citation, in README's order."""
    found: list[tuple[str, str | None]] = []
    last: str | None = None
    for match in CITATION.finditer(text):
        path, test = match.group(1), match.group(2)
        if path is None and test is None:
            continue
        last = path or last
        assert last is not None, f"{match.group(0)} names a test of no file named before it"
        found.append((last, test[2:] if test else None))
    return found


def defined_names(path: Path) -> set[str]:
    """The module-level functions and test-class methods of a test file."""
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names |= {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return names


def test_every_test_readme_cites_exists() -> None:
    cited = citations((ROOT / "README.md").read_text())
    assert len(cited) > 50, "README's citations were not found: has their form changed?"
    missing_files = sorted({p for p, _ in cited if not (TESTS / p).is_file()})
    assert not missing_files, f"README cites test files that do not exist: {missing_files}"
    missing = sorted(f"{p}::{t}" for p, t in cited if t and t not in defined_names(TESTS / p))
    assert not missing, f"README cites tests that do not exist: {missing}"


def test_a_citation_of_a_test_that_is_gone_is_found() -> None:
    cited = citations("`e2e/test_stack.py::test_gone`, `::test_also_gone` and `unit/x.py`")
    assert cited == [
        ("e2e/test_stack.py", "test_gone"),
        ("e2e/test_stack.py", "test_also_gone"),
        ("unit/x.py", None),
    ]
