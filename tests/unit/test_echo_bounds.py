"""A user's value quoted in an error is cut (issue 11, ``nodes/echo.py``): the topology
loader, lnetctl's parse errors and ``lnetctl import`` name the bad value by its first 80
characters and its length, never by a copy of a 100 KB argument or a megabyte scalar."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodes.dlc.cmdline import Stop
from nodes.dlc.parse import parse
from nodes.dlc.verbs import lnetctl_config
from nodes.echo import MAX_SHOWN_CHARS, clip, shown, shown_path

BIG = "x" * 100_000


def test_shown_and_clip() -> None:
    assert shown("c1") == "'c1'" and shown(12) == "12" and clip("tcp") == "tcp"
    assert shown(BIG) == repr("x" * MAX_SHOWN_CHARS) + "... (100000 characters)"
    assert clip(BIG) == "x" * MAX_SHOWN_CHARS + "... (100000 characters)"
    assert len(shown([BIG] * 1000)) <= MAX_SHOWN_CHARS + 3  # cut before the repr is built
    assert len(shown({"a": [[[[BIG]]]]})) <= MAX_SHOWN_CHARS + 3


@pytest.mark.parametrize("group, sub, args", [
    ("peer", "add", ["--prim_nid", BIG]),
    ("peer", "add", ["--prim_nid", "10.0.0.1@tcp", "--nid", BIG]),
    ("udsp", "del", ["--idx", BIG]),
    ("set", None, [BIG, "1"]),
    ("net", "add", ["--" + BIG]),
    ("net", "add", ["--net", "tcp", "--if", "eth0", "--numa", BIG]),
], ids=["prim_nid", "nidrange", "udsp-idx", "set-name", "long-option", "numa"])
def test_lnetctl_parse_errors_quote_a_value_cut(group: str, sub: str | None,
                                                args: list[str]) -> None:
    try:
        result: Any = parse(group, sub, args)
    except Stop as e:
        result = e.result
    assert isinstance(result, tuple), result
    text = result[1] + result[2]
    assert "xxxx" in text and "(100000 characters)" in text, text[:300]
    assert max(len(line) for line in text.splitlines()) < 300


@pytest.mark.parametrize("doc", [
    f"net:\n  - net type: {BIG}\n",
    f"peer:\n  - primary nid: {BIG}@tcp\n",
    f"route:\n  - net: {BIG}\n    gateway: 10.0.0.1@tcp\n",
    f"global:\n  {BIG}: 1\n".replace(f"  {BIG}:", f"  ? {BIG}\n  :"),
], ids=["net-type", "primary-nid", "route-net", "global-key"])
def test_import_errors_quote_a_value_cut(doc: str, tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(doc)
    # refused while the document becomes commands: a configured node, never consulted
    rt: Any = SimpleNamespace(engine=SimpleNamespace(configured=True))
    rc, out, err = asyncio.run(lnetctl_config.run(rt, "import", [str(path)]))
    assert rc != 0
    assert "xxxx" in out + err and max(len(ln) for ln in (out + err).splitlines()) < 300, \
        (out + err)[:300]


def test_clip_words_cuts_each_long_word_and_leaves_a_shown_value_whole() -> None:
    """Issue 27 item 7: the CLI's last guard (argparse quotes a bad argument whole)."""
    from nodes.echo import clip_words

    long = "x" * 5000
    text = clip_words(f"argument: invalid choice: '{long}' (choose from 'down', 'up')")
    assert "x" * (MAX_SHOWN_CHARS + 1) not in text and "(5002 characters)" in text
    assert text.endswith("(choose from 'down', 'up')")
    already = f"bad name {shown(long)}: must match"
    assert clip_words(already) == already
    assert clip_words("short words stay") == "short words stay"


def test_shown_of_an_integer_past_str_digits_is_not_a_valueerror() -> None:
    """Issue 27 item 9: ``repr`` of a 0x-read integer past 4,300 digits raises ValueError."""
    assert shown(int("f" * 5000, 16)) == "<an integer of 20000 bits>"
    assert shown(12345) == "12345"


def test_one_line_escapes_what_a_terminal_would_act_on() -> None:
    """Issue 27 (found by tests/hostile/test_cli_property.py): ``testbed status '\\r0'`` printed
    ``unrecognized arguments: \\r0`` raw, a carriage return hiding the start of its line; a
    lone surrogate (a non-UTF-8 argv byte) could not be printed at all."""
    from nodes.echo import one_line

    assert one_line("arguments: \r0 \x1e1 \udcff é") == "arguments: \\r0 \\x1e1 \\udcff é"
    assert one_line("plain") == "plain"
    assert "x" * (MAX_SHOWN_CHARS + 1) not in one_line("x" * 500 + "\n")


def test_a_long_path_keeps_its_file_name() -> None:
    """A path past 80 characters is cut in its middle: the file it names stays in the error
    (an xdist worker's tmp_path alone passes 64 characters, and cutting at the end named
    only the directory: test_cli_check_exit_status failed under -n 2)."""
    path = "/tmp/pytest-of-root/pytest-12/popen-gw1/" + "d" * 60 + "/missing.jsonl"
    text = shown_path(path)
    assert text.endswith(f"/missing.jsonl' ({len(path)} characters)")
    assert text.startswith("'/tmp/pytest-of-root")
    assert len(text) < 120
    assert shown_path("/tmp/x.jsonl") == "'/tmp/x.jsonl'"
