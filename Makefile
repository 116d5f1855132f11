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
APT_PKGS := mininet bridge-utils iproute2 iptables net-tools python3-venv python3-dev \
            libnetfilter-queue-dev build-essential tshark wireshark-common iperf3
STAMP := $(VENV)/.installed

.PHONY: demo test deps venv lint clean-testbeds

demo: venv
	$(PY) -m testbed.demo

# Every test on the real path (Mininet), then the LUTF suites again on the in-process simulator
# (same tests, virtual clock: backend parity), then one traceability report over both runs.
test: venv
	$(PY) -m pytest -n auto -p no:cacheprovider --junitxml=reports/junit.xml \
	  --lnet-trace=reports/trace.md
	$(PY) -m pytest tests/lutf --lnet-backend=sim -n auto -p no:cacheprovider \
	  --junitxml=reports/junit-sim.xml --lnet-trace=reports/trace-sim.md
	$(VENV)/bin/testbed trace --data reports/trace.json:reports/trace-sim.json \
	  > reports/trace-all.md

deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# Mininet comes from Debian for /usr/bin/python3, hence a venv on that interpreter that also
# sees the system site-packages.
venv: deps $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,report,faults]'
	touch $(STAMP)

lint: venv
	$(VENV)/bin/ruff check nodes testbed faults tests

clean-testbeds: venv
	$(VENV)/bin/testbed clean
