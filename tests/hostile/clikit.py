"""The CLI side of the hostile suite (issue 27): the ``testbed`` CLI run in this process
against one sim testbed, and the oracle every hostile command line must satisfy.

Theory of operation: ``sim_cli`` brings up ``pair.yaml`` on the sim backend (``--speed 0``: the
clock moves only when a verb moves it) under a private RUNROOT, once per module; ``call``
runs ``testbed.cli.main(argv)`` with stdout and stderr captured (in-process: a command costs
milliseconds, not an interpreter start, so Hypothesis can try hundreds in CI's budget).
``assert_clean`` is what a new user is promised: the command succeeds, or fails with exactly one
``testbed: error:`` line (argparse's usage line may precede it) or the passed-through tool's own
output; never a traceback or ``internal error``; no output line longer than ``MAX_LINE``; done
within ``MAX_SECONDS``. Afterwards ``status`` of the testbed still answers.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import runstate

HERE = Path(__file__).resolve().parent
PAIR = HERE / "pair.yaml"
#: an output line longer than this echoes its input (an 80-character quote plus the message)
MAX_LINE = 2000
#: a command of the suite that takes longer has hung or gone quadratic (each takes < 1 s)
MAX_SECONDS = 30.0


@dataclass
class Ran:
    argv: list[str]
    rc: int
    out: str
    err: str
    seconds: float


@dataclass
class SimCli:
    name: str
    rundir: Path

    def call(self, argv: list[str]) -> Ran:
        """``testbed ARGV`` in this process: status, output, time taken."""
        from testbed import cli

        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(argv)
            except SystemExit as exc:  # argparse: --help (0), a usage error (2)
                rc = exc.code if isinstance(exc.code, int) else 1
        return Ran(argv, rc, out.getvalue(), err.getvalue(), time.monotonic() - started)


def assert_clean(ran: Ran) -> None:
    """The oracle of the module doc, for one command line."""
    what = f"testbed {' '.join(ran.argv)}"[:300]
    both = ran.out + ran.err
    assert "Traceback" not in both and "internal error" not in both, f"{what}: {both[-2000:]}"
    assert ran.seconds < MAX_SECONDS, f"{what}: took {ran.seconds:.1f} s"
    longest = max((len(line) for line in both.splitlines()), default=0)
    assert longest <= MAX_LINE, f"{what}: a {longest}-character line"
    errors = [ln for ln in ran.err.splitlines() if ln.startswith("testbed: error:")]
    if ran.rc == 0:
        assert not errors, f"{what}: rc 0 with {errors[0][:300]}"
        return
    if errors:  # refused by the testbed (a passed-through tool speaks for itself otherwise)
        assert len(errors) == 1 and ran.err.rstrip("\n").splitlines()[-1] == errors[0], \
            f"{what}: {ran.err[-1000:]}"


@pytest.fixture(scope="module")
def sim_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCli]:
    """The pair testbed on the sim, under a private RUNROOT, for one module."""
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("hostile-cli")
        mp.setenv(runstate.ENV_RUNROOT, str(root / "run"))
        mp.delenv("LST_SESSION", raising=False)
        mp.chdir(root)  # (files a command writes land here)
        tb = SimCli(f"hcli{uuid.uuid4().hex[:6]}", root / "run")
        up = tb.call(["up", "--backend", "sim", "--speed", "0", "--record-period", "0",
                      "-n", tb.name, str(PAIR)])
        assert up.rc == 0, up
        try:
            yield tb
        finally:
            down = tb.call(["down", "-n", tb.name])
            assert down.rc == 0, down
            left = runstate.list_testbeds(root / "run")
            for name in left:  # (a test that brought one up by mistake)
                from testbed.clean import clean_testbed

                clean_testbed(name, root / "run")
            assert not left, left
            assert os.environ.get(runstate.ENV_RUNROOT) == str(root / "run")
