"""A handoff on one time axis: each step's start and length, and the Service's ready
endpoints as the flow saw them (sampled while it ran). What was not measured is said so:
steps of an older record are laid end to end from their durations, and the clients' error
rate is not known to the flow (it sends no client traffic)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field

SAMPLE_INTERVAL_S = 1.0
SAMPLES_KEPT = 120  # changes only; a flapping endpoint must not fill the history annotation
NOT_MEASURED_CLIENTS = "client error rate: not measured by the handoff (it sends no client traffic)"


class StepSpan(BaseModel):
    name: str
    start: float = Field(description="epoch seconds")
    seconds: float
    state: str = Field(description="done or failed; recorded: only its duration is known")


class BakeWindow(BaseModel):
    """The bake as the timeline draws it (a handoff record's `bake`, flows/bake.py)."""

    model_config = ConfigDict(extra="ignore")

    verdict: str
    started: float = Field(description="epoch seconds")
    seconds: float
    warm_way_back: str | None = None
    restored_s: float | None = Field(None, description="breach to the Service back on old pods")

    def line(self) -> str:
        kept = (
            f"the old pods ({self.warm_way_back}) kept Ready"
            if self.warm_way_back
            else "no warm way back: it reported only"
        )
        back = (
            f", back on them {self.restored_s:.1f} s after the breach (no cold start)"
            if self.restored_s is not None
            else ""
        )
        return f"bake: {self.verdict} after {self.seconds:.0f} s, {kept}{back}"


class Timeline(BaseModel):
    """What a timeline is drawn from: a handoff record (or its history entry) as it is."""

    model_config = ConfigDict(extra="ignore")

    handoff_id: str = "-"
    spec: str | None = None
    namespace: str | None = None
    service: str | None = None
    outcome: str | None = None
    started_at: str | None = None
    durations_s: dict[str, float] = Field(default_factory=dict)
    steps: list[StepSpan] = Field(default_factory=list)
    ready_endpoints: list[tuple[float, int]] = Field(default_factory=list)
    endpoints_note: str | None = None
    bake: BakeWindow | None = None

    @property
    def measured_steps(self) -> bool:
        return bool(self.steps)

    def spans(self) -> list[StepSpan]:
        """The recorded spans, else the durations laid end to end from the start."""
        if self.steps or not self.durations_s:
            return list(self.steps)
        at = _epoch(self.started_at) or 0.0
        laid = []
        for name, seconds in self.durations_s.items():
            laid.append(StepSpan(name=name, start=at, seconds=seconds, state="recorded"))
            at += seconds
        return laid

    def caption(self) -> str:
        steps = (
            "steps: start and end as the flow timed them"
            if self.measured_steps
            else "steps: laid end to end from their recorded durations (no start times recorded)"
        )
        ready = (
            f"ready endpoints: the Service's Endpoints read every {SAMPLE_INTERVAL_S:g} s by the "
            "flow while it ran" + (f" ({self.endpoints_note})" if self.endpoints_note else "")
            if self.ready_endpoints
            else f"ready endpoints: not sampled ({self.endpoints_note or 'not recorded'})"
        )
        bake = f"; shaded, the {self.bake.line()}" if self.bake else ""
        return f"{steps}; {ready}{bake}; {NOT_MEASURED_CLIENTS}."


def _hms(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M:%S")


def _epoch(stamp: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(stamp or "").timestamp()
    except ValueError:
        return None


class ReadyEndpoints:
    """Counts the Service's ready endpoints every SAMPLE_INTERVAL_S in a thread while the
    block runs; keeps (epoch seconds, count) at each change, the first and the last."""

    def __init__(self, count: Callable[[], int], interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._count = count
        self._interval_s = interval_s
        self._changes: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-endpoints", daemon=True)
        self.error: str | None = None

    def __enter__(self) -> ReadyEndpoints:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10 * self._interval_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._interval_s)

    def sample(self) -> None:
        try:
            count = self._count()
        except Exception as exc:  # a read that fails is named in the picture, not fatal
            self.error = f"{type(exc).__name__}: {exc}"[:200]
            return
        now = round(time.time(), 2)
        with self._lock:
            if self._changes and self._changes[-1][1] == count:
                equals = len(self._changes) > 1 and self._changes[-2][1] == count
                if equals or len(self._changes) >= SAMPLES_KEPT:
                    self._changes[-1] = (now, count)  # the last sample of a run of equals moves
                else:
                    self._changes.append((now, count))
            elif len(self._changes) < SAMPLES_KEPT:
                self._changes.append((now, count))
            elif self.error is None:
                self.error = f"more than {SAMPLES_KEPT} changes: not kept after {_hms(now)} UTC"

    def samples(self) -> list[tuple[float, int]]:
        """Every change so far, after one more reading."""
        self.sample()
        with self._lock:
            return list(self._changes)
