"""``testbed ui`` at scale (issue 31): 1,000 simulated nodes in headless chromium.

A generated routed topology (``--nodes`` in all: four routers on four segments, clients on
lan0/lan1 (net ``tcp``) and servers on lan2/lan3 (``tcp1``), three clients per server, each
with routes through the four routers) is brought up on the sim server (``testbed up
--backend sim``, speed 1), ``testbed ui`` serves it, and Debian's chromium (selenium,
headless) opens the page. Measured, as a user would meet them:

* ``paint_ms``: time to first paint, from navigation start to the first animation frame after
  the page applied the snapshot (``performance.now()`` in the page); ``snapshot_kb`` the
  snapshot's size on the wire, ``apply_ms`` the page's own work on it;
* ``update_ms``: update latency, from asking the sim server to take ``NODE eth1`` down (what
  ``testbed link`` sends: ``Testbed.link``) to the frame that draws the page's graph element
  of that NI red (the page stamps the change with
  ``performance.timeOrigin + now()``, the same epoch clock as this process), median and worst
  of ``--links`` links taken down one after another while a traffic burst runs;
  ``server_ms`` the part until the delta left the server (its poll period, 0.25 s, bounds the
  wait), ``page_ms`` the part from the delta's arrival to the frame that draws it (medians);
* ``frame_gap_ms``: the longest gap between animation frames during those updates (how long
  the page stopped answering at worst: a page that stays responsive keeps it low).

The reference, in the same run: the same figures on ``topologies/mr-routers.yaml`` (4 nodes);
``x_ref`` is the 1,000-node figure over the 4-node one. Needs chromium and chromium-driver
(Makefile APT_PKGS), the ``ui`` and ``test`` extras; no root. About a minute:

    .venv/bin/python benchmarks/ui.py [--nodes 1000] [--links 5]
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import testbed  # noqa: E402
from tests.integration.test_ui_browser import RED  # noqa: E402  (the page's red)

ROUTERS = 4
#: page hooks: stamp each NI turning red; record animation frame gaps while armed
HOOKS = """
const ui = window.lnetUI;
ui.redAt = {};
ui.cy.on('data', 'node', (e) => {
  const n = e.target;
  if (n.data('colour') !== arguments[0] || n.id() in ui.redAt) return;
  const sent = ui.deltaSent, got = ui.deltaAt;
  ui.redAt[n.id()] = null;
  requestAnimationFrame(() => {
    ui.redAt[n.id()] = [sent, got, performance.timeOrigin + performance.now()]; });
});
ui.maxGap = 0;
let last = performance.now();
const frame = (t) => { ui.maxGap = Math.max(ui.maxGap, t - last); last = t;
                       requestAnimationFrame(frame); };
requestAnimationFrame(frame);
"""


def topology_yaml(nodes: int) -> str:
    servers = max(1, (nodes - ROUTERS) // 4)
    clients = nodes - ROUTERS - servers
    gws = [f"r{i}" for i in range(1, ROUTERS + 1)]
    lines = ["name: uibench", "global: {health_sensitivity: 100, retry_count: 2,",
             "         transaction_timeout: 10}", "networks:"]
    lines += [f"  lan{i}: {{lnet: {'tcp' if i < 2 else 'tcp1'}, subnet: 10.{10 + i}.0.0/16}}"
              for i in range(4)]
    lines.append("nodes:")
    lines += [f"  {r}: {{interfaces: [lan0, lan1, lan2, lan3], routing: true}}" for r in gws]

    def routes(net: str) -> str:
        return ", ".join(f"{{net: {net}, gateway: {g}, hop: 1}}" for g in gws)

    lines += [f"  c{i}: {{interfaces: [lan0, lan1], routes: [{routes('tcp1')}]}}"
              for i in range(1, clients + 1)]
    lines += [f"  s{i}: {{interfaces: [lan2, lan3], routes: [{routes('tcp')}]}}"
              for i in range(1, servers + 1)]
    return "\n".join(lines) + "\n"


def cli(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    res = subprocess.run([sys.executable, "-m", "testbed.cli", *args], env=env, cwd="/",
                         capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"testbed {' '.join(args[:3])}: {res.stderr.strip()}")
    return res.stdout


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    driver.set_script_timeout(30)
    return driver


def wait(driver: Any, script: str, timeout: float) -> Any:
    end = time.monotonic() + timeout
    while not (value := driver.execute_script(script)):
        if time.monotonic() > end:
            logs = [e["message"] for e in driver.get_log("browser")][-5:]
            raise SystemExit(f"timed out waiting for: {script} (console: {logs})")
        time.sleep(0.02)
    return value


def measure(env: dict[str, str], topology: Path, links: list[str],
            screenshot: str | None = None) -> dict[str, float]:
    name = f"uib{uuid.uuid4().hex[:6]}"
    t = time.monotonic()
    cli(env, "up", "--backend", "sim", "-n", name, str(topology))
    up_s = time.monotonic() - t
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "ui", "-n", name, "--port",
                             "0"], env=env, cwd="/", stdout=subprocess.PIPE, text=True)
    driver = None
    try:
        assert proc.stdout is not None
        if not select.select([proc.stdout], [], [], 120)[0]:
            raise SystemExit("testbed ui printed no URL in 120 s")
        url = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        driver = browser()
        driver.get(url)
        wait(driver, "return window.lnetUI && window.lnetUI.firstPaintMs", 120)
        paint = driver.execute_script("return [lnetUI.firstPaintMs, lnetUI.snapshotMs,"
                                      " performance.getEntriesByName(location.origin +"
                                      " '/api/stream').length, lnetUI.cy.nodes('.node')"
                                      ".length]")
        size = len(subprocess.run(["curl", "-s", url + "api/snapshot"], capture_output=True,
                                  timeout=60).stdout)
        driver.execute_script(HOOKS, RED)
        burst = subprocess.Popen([sys.executable, "-m", "testbed.cli", "traffic", "-n", name,
                                  links[0].split(":")[0], "--to", "s1", "--count", "2000"],
                                 env=env, cwd="/", stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        lat: list[float] = []
        server: list[float] = []  # link down -> the delta saying so leaves the server
        page: list[float] = []  # the delta in the page -> the frame drawing the NI red
        tb = testbed.attach(name)
        for ni in links:
            node, iface = ni.split(":")
            done = time.time()  # (asked now; the server applies it before it answers)
            tb.link(node, iface, "down")
            sent, got, red = wait(driver, f"return lnetUI.redAt['ni:{ni}']", 30)
            lat.append(red - done * 1000)
            server.append(sent - done * 1000)
            page.append(red - got)
        gap = driver.execute_script("return lnetUI.maxGap")
        if screenshot:
            driver.save_screenshot(screenshot)
        burst.terminate()  # (its figures are not what is measured)
        burst.wait(10)
        return {"nodes": paint[3], "up_s": up_s, "paint_ms": paint[0], "apply_ms": paint[1],
                "snapshot_kb": size / 1024, "update_ms": statistics.median(lat),
                "update_max_ms": max(lat), "server_ms": statistics.median(server),
                "page_ms": statistics.median(page), "frame_gap_ms": gap}
    finally:
        if driver is not None:
            driver.quit()
        proc.terminate()
        proc.wait(10)
        cli(env, "down", "-n", name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--links", type=int, default=5, help="links taken down (update latency)")
    p.add_argument("--screenshot", metavar="PNG", help="the large page, after the updates")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LNET_TESTBED")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        env["LNET_TESTBED_RUNROOT"] = os.environ["LNET_TESTBED_RUNROOT"] = str(Path(tmp) / "run")
        big = Path(tmp) / "uibench.yaml"
        big.write_text(topology_yaml(args.nodes))
        ref = measure(env, ROOT / "topologies" / "mr-routers.yaml",
                      ["c1:eth1", "s1:eth1", "c1:eth0", "s1:eth0", "r1:eth3"][:args.links])
        res = measure(env, big, [f"c{i}:eth1" for i in range(1, args.links + 1)],
                      args.screenshot)
    for label, r in (("ref", ref), ("ui", res)):
        print(label, " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in r.items()))
    print("x_ref", " ".join(f"{k}={res[k] / ref[k]:.1f}" for k in
                            ("paint_ms", "snapshot_kb", "update_ms", "frame_gap_ms")
                            if ref[k] > 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
