"""docs/sanity-lnet.md lists every sanity-lnet.sh test exactly once (issue 14 item 1).

The doc keeps the `run_test` numbers of lustre/tests/sanity-lnet.sh at lustre-release
c881f8ebcb in a fenced block (```sanity-lnet-run-test c881f8ebcb); the table must have one row
per number, no other rows, a known status in each row, and the summary line must count them.
A ported row must name a test function that exists in tests/lutf/suite_sanity/.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "sanity-lnet.md"
SUITE = Path(__file__).resolve().parents[2] / "tests" / "lutf" / "suite_sanity"
#: how many run_test entries sanity-lnet.sh has at c881f8ebcb (counted from the source)
RUN_TESTS_AT_C881F8E = 172
_BLOCK = re.compile(r"```sanity-lnet-run-test (\w+)\n(.*?)\n```", re.S)
_ROW = re.compile(r"^\| (\w+) \| .* \| "
                  r"(to port|not portable|ported: `(\w+)`(?: \(Mininet only\))?) \| (.*) \|$")


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _numbers() -> list[str]:
    m = _BLOCK.search(_doc())
    assert m is not None, "the run_test number block is missing"
    assert m.group(1) == "c881f8ebcb", "the block must cite the commit it was read at"
    return m.group(2).split()


def _rows() -> list[tuple[str, str, str | None, str]]:
    rows = []
    for line in _doc().splitlines():
        if line.startswith("| ") and not line.startswith(("| # ", "|---")):
            m = _ROW.match(line)
            assert m is not None, f"malformed table row: {line[:80]}"
            rows.append((m.group(1), m.group(2), m.group(3), m.group(4)))
    return rows


def test_number_block_matches_the_source_count() -> None:
    nums = _numbers()
    assert len(nums) == RUN_TESTS_AT_C881F8E
    assert len(set(nums)) == len(nums), "a run_test number appears twice in the block"


def test_every_run_test_number_is_one_row() -> None:
    rows = [r[0] for r in _rows()]
    nums = _numbers()
    missing = [n for n in nums if n not in rows]
    extra = [n for n in rows if n not in nums]
    twice = sorted({n for n in rows if rows.count(n) > 1})
    assert not missing and not extra and not twice, (missing, extra, twice)
    assert rows == nums, "rows must follow the file order of sanity-lnet.sh"


def test_status_reasons_and_summary() -> None:
    rows = _rows()
    for num, status, _name, needs in rows:
        assert needs.strip(), f"test {num}: say what it needs or why it is not portable"
        if status == "not portable":
            why = r"lsmod|/sys/module|kernel memory|host|module loading|C UAPI|kfi"
            assert re.search(why, needs), f"test {num}: not portable for a reason the issue " \
                                          "does not accept"
    ported = sum(1 for r in rows if r[1].startswith("ported"))
    mininet_only = sum(1 for r in rows if r[1].endswith("(Mininet only)"))
    todo = sum(1 for r in rows if r[1] == "to port")
    nope = sum(1 for r in rows if r[1] == "not portable")
    summary = (f"**{len(rows)} tests**: {ported} ported ({mininet_only} of them on Mininet only, "
               f"the rest on both backends), {todo} portable and not yet ported, "
               f"{nope} not portable.")
    assert summary in _doc()


def test_ported_rows_name_existing_tests() -> None:
    sources = "".join(p.read_text(encoding="utf-8") for p in SUITE.glob("test_*.py")) \
        if SUITE.is_dir() else ""
    for num, status, name, _needs in _rows():
        if status.startswith("ported"):
            assert name is not None and name.startswith(f"test_sanity_{num}_"), (num, name)
            assert f"def {name}(" in sources, f"{name} is not in tests/lutf/suite_sanity"
