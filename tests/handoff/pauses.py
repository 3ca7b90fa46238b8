"""A handoff run as a real process, answered from the command line while it pauses:
its flow run id read from its output, its pauses read from the real Prefect server."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from flows.pause_clock import description_key
from sandbox.prefect_server import own_headers
from tests.world import handoff_cli, spec_in, start_handoff

# The latency SLO is the spec's business; the machine may be busy with other tests,
# and the approval and outage tests are not about latency, so the SLO is relaxed.
RELAXED = {"latency": {"slo": {"tpot_ms": 500, "ttft_ms": 10000}}}
# A latency SLO no server meets: the gates fail once the candidate is warm, and it rolls back.
IMPOSSIBLE = {"latency": {"slo": {"tpot_ms": 0.001, "ttft_ms": 10000}}}


def coder_spec(namespace: str, out_dir: Path, **changes: Any) -> Path:
    """The in-place coder spec in `namespace`, latency SLO relaxed, with changes (to the
    gates too: merged over the relaxed SLO)."""
    gates = {**RELAXED, **changes.pop("gates", {})}
    return spec_in(namespace, "coder-14b-fp16", out_dir, gates=gates, **changes)


RUN_ID = re.compile(r"/runs/flow-run/([0-9a-f-]{36})")


@dataclass
class PausingRun:
    """`handoff run` without --auto-approve; its output is drained in the background."""

    process: subprocess.Popen[str]
    api: str
    lines: list[str] = field(default_factory=list)
    run_id: str | None = None
    _seen: threading.Event = field(default_factory=threading.Event)
    _drainer: threading.Thread = field(init=False)
    # One client for the polls of its state: each new one loads the CA bundle (~20 ms CPU).
    _prefect: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10))

    @classmethod
    def start(cls, spec_file: Path, env: dict[str, str]) -> PausingRun:
        return cls(start_handoff(spec_file, env), env["PREFECT_API_URL"])

    def __post_init__(self) -> None:
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            match = RUN_ID.search(line)
            if match and self.run_id is None:
                self.run_id = match.group(1)
                self._seen.set()
        self._seen.set()

    @property
    def output(self) -> str:
        """Its output so far; once it has exited, all of it (the drain may lag the exit)."""
        if self.process.poll() is not None:
            self._drainer.join(timeout=5)
        return "".join(self.lines)

    def state(self) -> dict[str, object]:
        assert self.run_id
        url = f"{self.api}/flow_runs/{self.run_id}"
        return self._prefect.get(url, headers=own_headers()).json()["state"]

    def wait_paused(self, *, other_than: str | None = None, timeout_s: float = 180) -> str:
        """Wait until the run pauses (at a pause key other than `other_than`); its key."""
        assert self._seen.wait(timeout_s) and self.run_id, "no flow run id printed"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "handoff exited before pausing:\n" + self.output
            state = self.state()
            key = str((state.get("state_details") or {}).get("pause_key") or "")
            if state["type"] == "PAUSED" and key != other_than:
                return key
            time.sleep(0.3)
        raise AssertionError(f"flow run {self.run_id} never paused (other than {other_than})")

    def description(self, pause_key: str) -> str:
        """The text the Resume form shows for the pause at `pause_key`."""
        assert self.run_id
        url = f"{self.api}/flow_runs/{self.run_id}/input/{description_key(pause_key)}"
        # Prefect has no update for a run input, so the clock replaces it (delete, then
        # create): a read can fall between the two. A missing form for longer is a failure.
        for _ in range(20):
            response = httpx.get(url, headers=own_headers(), timeout=10)
            if response.status_code != 404:
                break
            time.sleep(0.1)
        return str(response.json())

    def finish_without_pausing(self, *, other_than: str, timeout_s: float = 300) -> int:
        """Wait for the run's exit; fail at once if it pauses again (for anyone)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return code
            state = self.state()
            key = (state.get("state_details") or {}).get("pause_key")
            if state["type"] == "PAUSED" and key != other_than:
                raise AssertionError(f"the handoff paused again, at {key}:\n{self.output[-2000:]}")
            time.sleep(0.3)
        raise AssertionError(f"the handoff did not finish in {timeout_s:.0f} s")

    def answer(
        self,
        env: dict[str, str],
        approver: str,
        reason: str,
        *,
        reject: bool = False,
        key: Path | None = None,
    ) -> None:
        """`handoff approve` as a person types it (signed with `key`); done once it reports
        the run resumed (on a loaded machine the process may take long to exit after)."""
        assert self.run_id
        args = ["approve", self.run_id, "--approver", approver, "--reason", reason]
        args += ["--reject"] if reject else []
        args += ["--key", str(key)] if key else []
        process = subprocess.Popen(
            handoff_cli(*args),
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert process.stdout is not None
        said = ""
        try:
            for line in process.stdout:  # until it says it resumed the run, or exits
                said += line
                if f"flow run {self.run_id} as {approver}" in line:
                    break
        finally:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        assert f"d flow run {self.run_id} as {approver}" in said, said

    def wait(self, timeout_s: float = 300) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()
