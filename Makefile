# lnet-testbed: two entry points for a fresh Debian 12 machine (run as root).
#   make demo   install everything, bring up the default topology, drive traffic, break a link,
#               show the result, tear down
#   make test   install everything, run the whole test suite in parallel
# Both are idempotent: packages and the venv are installed only when missing.

SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
# wireshark-common: dumpcap for `testbed capture` (tshark depends on it; named for clarity)
# iperf3: the TCP reference of benchmarks/throughput.py and multirail.py
# chromium chromium-driver: the headless browser tests/integration/test_ui_browser.py drives
APT_PKGS := mininet bridge-utils iproute2 iptables net-tools python3-venv python3-dev \
            libnetfilter-queue-dev build-essential tshark wireshark-common iperf3 \
            chromium chromium-driver
STAMP := $(VENV)/.installed
BASE_STAMP := $(VENV)/.base
LOCK := flock $(VENV)/.lock
NATIVE_STAMP := $(VENV)/.native
# The sources the compiled modules are built from and checked against (nodes/native.py's
# COMPILED and COMPILED_ONLY, with the digest's coverage): an edit elsewhere needs no rebuild.
# None on a fresh box before apt brings python3 (the sub-makes after it read them).
NATIVE_SRCS := $(shell python3 nodes/native.py 2>/dev/null)
# Run again with the engine as pure Python (LNET_TESTBED_PURE_PYTHON=1), the fallback where
# no C compiler is: the unit tests of the engine and of the other compiled modules (the whole
# suite runs on the compiled ones).
PURE_TESTS := $(shell grep -lE "from (nodes\.(lnet|lnd|selftest|driver)|testbed\.sim)" \
                tests/unit/test_*.py 2>/dev/null)
# What `mypy --strict` checks: the sans-I/O layers and every compiled module
MYPY_PATHS := nodes/lnet nodes/lnd nodes/o2ib nodes/selftest nodes/driver.py nodes/lndtimeouts.py nodes/recorder.py nodes/daemon/runtime.py nodes/native.py testbed/sim/fabric.py \
              testbed/sim/conns.py testbed/sim/links.py testbed/sim/netfaults.py testbed/sim/paths.py \
              testbed/sim/sched.py testbed/sim/simdriver.py testbed/sim/simfabric.py \
              testbed/sim/watched.py testbed/sim/netmodels.py
# The vagrant and hosts backends (issue 15, vagrant/README.md): Vagrant with its LXC and
# libvirt providers, QEMU, the box builder's tools: 131 packages, 240 MB, 25 s here, so only
# the Vagrant targets pull them in; `make test` does not need them.
VAGRANT_APT_PKGS := vagrant vagrant-lxc vagrant-libvirt lxc libvirt-daemon-system \
            libvirt-clients qemu-system-x86 qemu-utils debootstrap dnsmasq-base ebtables \
            fdisk extlinux syslinux-common

.PHONY: demo test deps venv native native-background lint clean-testbeds vagrant-deps boxes smoke-vagrant \
        smoke-vagrant-libvirt mutation mutation-ci

# The demo starts on the pure-Python modules and the runtime dependencies alone (issue 31
# item 1: neither the compile, ~100 CPU s, nor the extras are on its path): apt, then the base
# venv, then the extras and the compile in the background at the lowest priority (log in
# $(VENV)/native.log; the next run uses them) while the demo runs. Each part is timed
# (LNET_DEMO_TIMES: when make started, when apt was done) and the demo's closing note says so.
demo:
	@t0=$$(date +%s.%N); $(MAKE) --no-print-directory deps; t1=$$(date +%s.%N); \
	$(MAKE) --no-print-directory $(BASE_STAMP) && \
	$(MAKE) --no-print-directory native-background && \
	LNET_DEMO_TIMES="$$t0 $$t1" $(PY) -m testbed.demo

# Lint and static types first (issue 12 item 5: either failing fails the run), then every
# test on the real path (Mininet), then the LUTF suites again on the in-process simulator
# (same tests, virtual clock: backend parity), then one traceability report over both runs.
test: venv native
	$(VENV)/bin/ruff check nodes testbed faults tests benchmarks vagrant/tests
	$(VENV)/bin/mypy --strict $(MYPY_PATHS)
	$(PY) -m pytest -n auto -p no:cacheprovider -m "not lxc_guests and not idle_host" \
	  --junitxml=reports/junit.xml --lnet-trace=reports/trace.md
	$(PY) -m pytest -p no:cacheprovider -m idle_host tests/lutf --junitxml=reports/junit-idle.xml
	LNET_TESTBED_PURE_PYTHON=1 $(PY) -m pytest -n auto -p no:cacheprovider -q $(PURE_TESTS)
	$(PY) -m pytest tests/lutf --lnet-backend=sim -n auto -p no:cacheprovider -m "not lxc_guests" \
	  --junitxml=reports/junit-sim.xml --lnet-trace=reports/trace-sim.md
	$(VENV)/bin/testbed trace --data reports/trace.json:reports/trace-sim.json \
	  > reports/trace-all.md
	$(MAKE) --no-print-directory mutation-ci

# Mutation testing of the engine's decision modules (issue 33, benchmarks/mutation.py): the
# full run is a benchmark (cached in build/mutation/SUITE, stopped after MUTATION_BUDGET s, a
# rerun goes on); mutation-ci, which `make test` runs, kills the hand mutants of the five
# behaviours and a fixed sample of mutants chosen by seed (< 5 min), failing if one survives.
MUTATION_BUDGET ?= 3600
mutation: venv
	@mkdir -p reports
	$(PY) benchmarks/mutation.py --suite lutf --budget $(MUTATION_BUDGET) \
	  --report reports/mutation-lutf.md
	$(PY) benchmarks/mutation.py --suite unit+lutf --budget $(MUTATION_BUDGET) \
	  --report reports/mutation-unit-lutf.md

mutation-ci: venv
	$(PY) benchmarks/mutation_hand.py
	$(PY) benchmarks/mutation.py --sample benchmarks/mutation_sample.txt --budget 240

# $(call apt_ensure,PACKAGES): install the ones missing (no recommends for the Vagrant set:
# they would pull a desktop's worth of libvirt tools).
define apt_ensure
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing \
	  && echo "apt: done in $${SECONDS} s"; \
	fi
endef

deps:
	$(call apt_ensure,$(APT_PKGS))

vagrant-deps: deps
	$(call apt_ensure,$(VAGRANT_APT_PKGS),--no-install-recommends)

# Both boxes from one debootstrap root, cached in /var/cache/lnet-testbed (cold ~2.5 min).
boxes: venv vagrant-deps
	vagrant/build-box

# The Vagrant smoke suite: LXC guests (client and server, two rails each; the crash path; two
# hosts over VXLAN), then every packet fault kind on LXC guests (test_fault_kinds.py) and large
# (IPv6) NIDs on them (test_ipv6_guests.py). Serial, after `make test`: guest boots want both cores.
smoke-vagrant: boxes
	$(PY) -m pytest vagrant/tests -m "not libvirt" -p no:cacheprovider --timeout 1800 \
	  --junitxml=reports/junit-vagrant.xml
	$(PY) -m pytest tests/lutf/suite_faults/test_fault_kinds.py tests/lutf/suite_ipv6/test_ipv6_guests.py \
	  -m lxc_guests -p no:cacheprovider --timeout 1800 --junitxml=reports/junit-vagrant-faults.xml

# The same smoke on libvirt VMs (QEMU TCG here, KVM where it works): minutes, ~1.5 GiB per VM.
smoke-vagrant-libvirt: boxes
	$(PY) -m pytest vagrant/tests -m libvirt -p no:cacheprovider --timeout 1800 \
	  --junitxml=reports/junit-vagrant-libvirt.xml

# Mininet comes from Debian for /usr/bin/python3, hence a venv on that interpreter that also
# sees the system site-packages.
venv: deps $(STAMP)

# The project and its runtime dependencies, as pure Python (fast: what the demo needs); then
# the extras (test, report, faults, ui, explore, mutation), by their requirements from pyproject.toml so that the
# project itself is not reinstalled under a running demo. `make native` compiles (`make test`
# needs it, `make demo` starts it in the background). One pip at a time (flock).
$(BASE_STAMP): pyproject.toml
	test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(LOCK) $(PY) -m pip install -q --upgrade pip 'setuptools>=77'  # PEP 639 license; wheels built without isolation (testbed/vagrant)
	LNET_TESTBED_PURE_PYTHON=1 PYTHONWARNINGS=ignore $(LOCK) $(PY) -m pip install -q \
	  --no-build-isolation -e .  # (the setuptools just installed; mypy is not needed pure)
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(PY) -c 'import tomllib; x = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	  print(*(r for k in ("test", "report", "faults", "ui", "explore", "mutation") for r in x["optional-dependencies"][k]), sep="\n")' \
	  > $(VENV)/extras.txt
	$(LOCK) $(PY) -m pip install -q -r $(VENV)/extras.txt
	touch $(STAMP)

# The engine and the packages around it compiled with mypyc (setup.py), in place, into each
# package's _native/, when gcc and python3-dev are there: ~100 CPU s, C files compiled in
# parallel and cached in build/ (an edit recompiles what it changed). Rebuilt when a source of
# theirs changed since; until then they run from their sources (nodes/native.py checks the
# sources' hash the build recorded). Without a compiler they stay pure Python. One build at a
# time (flock: `make test` waits for the demo's background build).
native: venv $(NATIVE_STAMP)

$(NATIVE_STAMP): $(NATIVE_SRCS) nodes/native.py setup.py
	$(LOCK) $(PY) setup.py -q build_ext --inplace
	touch $(NATIVE_STAMP)

# `make native` (and the extras before it) detached, at the lowest CPU and I/O priority,
# logging to $(VENV)/native.log (setsid: no terminal, so its progress goes to the log); nothing
# when both are up to date.
native-background: $(BASE_STAMP)
	@if $(MAKE) -q $(STAMP) $(NATIVE_STAMP) 2>/dev/null; then echo "compiled modules: up to date"; else \
	  setsid nice -n 19 ionice -c 3 $(MAKE) --no-print-directory native \
	    > $(VENV)/native.log 2>&1 < /dev/null & \
	  echo "extras and compiled modules: installing in the background at low priority" \
	    "(log: $(VENV)/native.log)"; fi

lint: venv
	$(VENV)/bin/ruff check nodes testbed faults tests benchmarks vagrant/tests
	$(VENV)/bin/mypy --strict $(MYPY_PATHS)

clean-testbeds: venv
	$(VENV)/bin/testbed clean
