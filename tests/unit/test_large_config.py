"""``lnetctl lnet configure --large`` / ``-l`` and which address an NI takes (api-ni.c
``lnet_net_conf_cmd``: NLM_F_APPEND sets ``ln_nis_use_large_nids``; config.c
``lnet_inet_select`` over ``lnet_inet_enumerate``; issue 26 item 8)."""

from __future__ import annotations

import pytest

from nodes.daemon.ifaddr import inet_select
from nodes.dlc import commands as C
from nodes.dlc.parse import parse
from nodes.lnet.errors import LNetConfigError


@pytest.mark.parametrize("flag", ["--large", "-l"])
def test_configure_large_flag(flag: str) -> None:
    """sanity-lnet's IPv6 mode runs ``lnet configure -l`` (LNET_CONFIG_OPT)."""
    assert parse("lnet", "configure", [flag]) == C.LnetConfigure(large=True)
    assert parse("lnet", "configure", ["--all", flag]) == C.LnetConfigure(all=True, large=True)
    assert parse("lnet", "configure", []) == C.LnetConfigure(large=False)


def test_inet_select_prefers_ipv4_then_ipv6_only_with_large() -> None:
    v6 = ["fe80::1", "2001:db8:6::1"]
    assert inet_select("eth0", "10.0.0.1", v6, True) == "10.0.0.1"  # dual stack: IPv4 first
    assert inet_select("eth0", None, v6, True) == "2001:db8:6::1"  # link-local skipped
    with pytest.raises(LNetConfigError, match="needs `lnetctl lnet configure --large`"):
        inet_select("eth0", None, v6, False)
    with pytest.raises(LNetConfigError, match=r"eth0 has no IPv4 address$"):
        inet_select("eth0", None, ["fe80::1"], True)
