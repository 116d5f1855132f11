"""``lnetctl export`` / ``import`` (spec §9.4; cfg-065, cfg-165, cfg-170) on the sim backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodes.dlc.verbs.lnetctl_config import import_verbs
from nodes.lnet.errors import LNetConfigError
from testbed.sim import SimTestbed

TOPO = """
name: xi
global: {retry_count: 1, transaction_timeout: 20}
networks:
  lan0: {lnet: tcp, subnet: 10.30.0.0/24}
  lan1: {lnet: tcp1, subnet: 10.31.0.0/24}
nodes:
  a: {interfaces: [lan0, lan1]}
  b: {interfaces: [lan0, lan1]}
  c: {interfaces: [lan0, lan1]}
"""


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    topo = tmp_path / "xi.yaml"
    topo.write_text(TOPO)
    return SimTestbed.up(topo, seed=2)


def _configure_a(tb: SimTestbed) -> None:
    a = tb.node("a")
    for verb in (["peer", "add", "--prim_nid", "10.30.0.50@tcp", "--nid", "10.31.0.50@tcp1"],
                 ["peer", "add", "--prim_nid", "10.30.0.9@tcp", "--non_mr"],
                 ["set", "health_sensitivity", "50"],
                 ["udsp", "add", "--src", "tcp1", "--priority", "1"],
                 ["udsp", "add", "--dst", "10.30.0.[1-5]@tcp", "--src", "10.30.0.1@tcp"]):
        assert a.lnetctl(*verb).rc == 0, verb


@pytest.mark.requirement("cfg-170", "cfg-165", "cfg-065")
def test_export_on_one_node_import_on_fresh_node_reproduces_it(tb: SimTestbed,
                                                               tmp_path: Path) -> None:
    """cfg-170: the export of a, imported on a fresh b, gives b the same configuration."""
    _configure_a(tb)
    a, b = tb.node("a"), tb.node("b")
    exported = a.lnetctl("export", "--backup")
    assert exported.rc == 0
    doc = yaml.safe_load(exported.out)
    assert list(doc) == ["net", "peer", "global", "udsp"]        # spec §9.4 order
    assert doc["global"]["health_sensitivity"] == 50
    assert b.lnetctl("lnet", "unconfigure").rc == 0
    assert b.lnetctl("lnet", "configure").rc == 0
    path = tmp_path / "a.yaml"
    assert a.lnetctl("export", "--backup", str(path)).rc == 0
    r = b.lnetctl("import", str(path))
    assert r.rc == 0, r.err
    assert b.lnetctl("export", "--backup").out == exported.out
    peer = yaml.safe_load(b.lnetctl("peer", "show").out)["peer"]
    assert [p["Multi-Rail"] for p in peer] == [True, False]


def test_full_export_imports_too_and_del_removes(tb: SimTestbed, tmp_path: Path) -> None:
    """The verbose export (with lo, NIDs and statistics) imports; ``--del`` undoes peers and
    rules (spec §9.4)."""
    _configure_a(tb)
    a, c = tb.node("a"), tb.node("c")
    path = tmp_path / "full.yaml"
    assert a.lnetctl("export", str(path)).rc == 0
    assert "statistics" in path.read_text()
    c.lnetctl("lnet", "unconfigure")
    c.lnetctl("lnet", "configure")
    assert c.lnetctl("import", "--add", str(path)).rc == 0
    assert len(yaml.safe_load(c.lnetctl("udsp", "show").out)["udsp"]) == 2
    r = c.lnetctl("import", "--del", str(path))
    assert c.lnetctl("udsp", "show").out == ""
    assert c.lnetctl("peer", "show").out == ""
    assert r.rc == 0, r.err
    assert yaml.safe_load(c.lnetctl("net", "show").out)["net"] == [
        {"net type": "lo", "local NI(s)": [{"nid": "0@lo", "status": "up"}]}]


@pytest.mark.parametrize(("text", "msg"), [
    ("[1, 2]", "not a YAML mapping"),
    ("bogus: 1", "invalid key 'bogus'"),  # jt_import -> handle_global_parameter
    ("peer: [{Multi-Rail: true}]", "peer[0]: missing 'primary nid'"),
    ("net: [{net type: tcp, local NI(s): [{tunables: {}}]}]", "no interfaces"),
    ("udsp: {idx: 0}", "udsp: expected a list"),
])
def test_bad_import_files_give_one_line_errors(tb: SimTestbed, tmp_path: Path, text: str,
                                               msg: str) -> None:
    """A bad entry is lnetctl's error YAML under ``add: - import:`` (``yaml_lnet_print_error``
    of jt_import's handlers: errno, double-quoted descr), and nothing is configured."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    before = tb.node("a").lnetctl("export", "--backup").out
    r = tb.node("a").lnetctl("import", str(path))
    assert r.rc != 0 and "Traceback" not in r.err
    err = yaml.safe_load(r.err)["add"][0]["import"]
    assert err["errno"] == -22 and msg in err["descr"], r.err
    assert tb.node("a").lnetctl("export", "--backup").out == before
    with pytest.raises(LNetConfigError):
        import_verbs(yaml.safe_load(text))


def test_import_file_problems(tb: SimTestbed, tmp_path: Path) -> None:
    a = tb.node("a")
    assert "absolute path" in a.lnetctl("import", "rel.yaml").err
    # jt_import / cYAML_build_tree: builder error YAML (tests/unit/test_import_error.py)
    assert "cannot open '" in a.lnetctl("import", str(tmp_path / "none.yaml")).err
    (tmp_path / "syntax.yaml").write_text("net: [\n")
    r = a.lnetctl("import", str(tmp_path / "syntax.yaml"))
    assert r.rc != 0 and "Failed to handle token:" in r.err and "line 2, column 1" in r.err
    assert a.lnetctl("import", "--add", "--del", "/x").rc != 0
    (tmp_path / "ok.yaml").write_text("global: {retry_count: 0}\n")
    assert a.lnetctl("import", "--show", str(tmp_path / "ok.yaml")).out.startswith("global:")


def test_import_orders_dependent_sets(tb: SimTestbed, tmp_path: Path) -> None:
    """A retry_count above the current transaction_timeout is accepted once the file's
    transaction_timeout is in (the refused ``set`` is retried after the others)."""
    path = tmp_path / "g.yaml"
    path.write_text("global: {retry_count: 30, transaction_timeout: 100}\n")
    a = tb.node("a")
    assert a.lnetctl("import", str(path)).rc == 0
    g = yaml.safe_load(a.lnetctl("global", "show").out)["global"]
    assert (g["retry_count"], g["transaction_timeout"]) == (30, 100)
