"""docs/lnet-fixes.md holds every real-LNet fix the engine follows to a regression test
(issue 26 item 7): each test it names must exist, and no ticket or ``*_luNNNNN`` test may be
left out of it, so a change elsewhere cannot silently drop a fix's test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "lnet-fixes.md"
TICKET = re.compile(r"\bLU-\d+\b")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _section(title: str) -> list[list[str]]:
    """The table rows (cells) under the ``## title`` heading, header and rule left out."""
    text = DOC.read_text()
    body = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_fix_row_names_existing_regression_tests() -> None:
    rows = _section("Fixes followed")
    assert len(rows) >= 13
    missing = []
    for ticket, behaviour, tests in rows:
        assert ticket == "none" or TICKET.fullmatch(ticket), ticket
        assert behaviour, ticket
        refs = TEST_REF.findall(tests)
        assert refs, f"{ticket}: no regression test named"
        for path, name in refs:
            file = ROOT / path
            if not file.is_file() or name not in _functions(file):
                missing.append(f"{ticket}: {path}::{name}")
    assert not missing, missing


def test_every_ticket_named_in_the_code_is_in_the_tables() -> None:
    """A ticket cited by the engine, the testbed, faults or docs/differences.md is either a fix
    followed (with tests) or listed as named for another reason."""
    listed = {row[0] for row in _section("Fixes followed")}
    listed |= {row[0] for row in _section("Tickets named that are not fixes followed")}
    sources = [p for d in ("nodes", "testbed", "faults") for p in (ROOT / d).rglob("*.py")]
    sources.append(ROOT / "docs" / "differences.md")
    cited = {t: p for p in sources for t in TICKET.findall(p.read_text())}
    assert not {t: str(p.relative_to(ROOT)) for t, p in cited.items() if t not in listed}


def test_every_ticket_named_test_is_a_row() -> None:
    """A test named after a ticket (``..._luNNNNN``) is listed under that ticket."""
    rows = {row[0]: row[2] for row in _section("Fixes followed")}
    for path in (ROOT / "tests").rglob("test_*.py"):
        for name in _functions(path):
            m = re.search(r"_lu(\d+)$", name)
            if m and name.startswith("test_"):
                ref = f"`{path.relative_to(ROOT)}::{name}`"
                assert ref in rows.get(f"LU-{m.group(1)}", ""), f"{ref} not in docs/lnet-fixes.md"
