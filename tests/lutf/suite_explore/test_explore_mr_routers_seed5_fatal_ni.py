"""Found by `testbed explore topologies/mr-routers.yaml --seed 5 --planted-bug fatal-ni-by-health` on the sim backend (testbed explore, issue 17).

Found with the planted bug 'fatal-ni-by-health' (nodes/planted.py): it fails with
LNET_TESTBED_PLANTED_BUG=fatal-ni-by-health in the environment and passes without it.

What broke (on the sim):
    first violated invariant: fatal_ni (safety phase): c1 sent GET message 119 on 10.11.0.1@tcp (link down) while 10.10.0.1@tcp on the same net was not
        #770 {"cause": "carrier", "kind": "ni_link", "link": "down", "nid": "10.11.0.1@tcp", "node": "c1", "t": 22.85}
        #820 {"attempt": 0, "deadline": 34.0, "dst": "10.10.0.3@tcp", "event": "send", "fixed_ni": false, "forwarded": false, "kind": "msg", "lpni": "10.10.0.3@tcp", "msg": 119, "ni": "10.11.0.1@tcp", "node": "c1", "retry_count": 2, "src": "10.11.0.1@tcp", "t": 24.0, "type": "GET"}

Shrunk from 158 faults and 6 workload streams to 3 and 0
(51 re-runs); tunables: as the topology sets them.
Every re-run kept also failed with its steps moved by up to 0.6 s, messages jittered
and the engines' timers at another phase (2 perturbed runs), so it does not need one exact
interleaving.

The faults stay on until the last one ends (112.6 s; the shrunk run proved it by 35.753 s):
on Mininet the daemons' timers run from their own start, so which fault cycle
shows the failure varies from run to run.

Run it on the simulator (the exploration run, event for event):
    pytest test_explore_mr_routers_seed5_fatal_ni.py --lnet-backend=sim
and on Mininet (root; the same steps on wall-clock time, waits included):
    pytest test_explore_mr_routers_seed5_fatal_ni.py
"""

from pathlib import Path

import pytest

from testbed.explore.replay import Replay
from testbed.explore.testkit import assert_safe, explore_testbed

__all__ = ["explore_testbed"]  # the fixture, found by pytest through this module
# Mininet by default; on --lnet-backend=sim the simulator (no root needed)
pytestmark = [pytest.mark.mininet, pytest.mark.slow]
TOPOLOGY = Path(__file__).parent / 'mr-routers.yaml'
SIM_SEED = 0


def test_explore_mr_routers_seed5_fatal_ni(explore_testbed):
    r = Replay(explore_testbed)
    r.at(1.0)
    r.fault('blackhole', node='r2', iface='eth2', direction='out', duration=51.7, seed=952065491)
    r.at(2.6)
    r.fault('flap', node='c1', iface='eth1', style='carrier', down=8.0, up=2.0, count=11, seed=1849425174)
    r.at(9.5)
    r.fault('flap', node='r2', iface='eth0', style='carrier', down=8.0, up=2.0, count=9, seed=488690078)
    r.at(112.6)  # the end of the safety phase: the last fault's end (shrunk: 35.753)
    assert_safe(r)
