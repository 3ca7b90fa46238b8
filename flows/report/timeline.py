"""A handoff on one time axis: each step's start and length, and the Service's ready
endpoints as the flow saw them (sampled while it ran), counted per workload: the live one,
the candidate, the twin; the bake, and the way back once the old pods are retired (a
cold start of the recorded length). What was not measured is said so: steps of an older record are
laid end to end from their durations, an older record's endpoints are one count, and the
clients' error rate is not known to the flow (it sends no client traffic)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field

from flows.wayback import WayBack

SAMPLE_INTERVAL_S = 1.0
SAMPLES_KEPT = 120  # changes only; a flapping endpoint must not fill the history annotation
NOT_MEASURED_CLIENTS = "client error rate: not measured by the handoff (it sends no client traffic)"
# What serves, as the sampler tells the Service's ready pods apart (flows/ready_workloads.py).
LIVE, CANDIDATE, TWIN, UNKNOWN = "live", "candidate", "twin", "unknown"
WORKLOADS = (LIVE, TWIN, CANDIDATE, UNKNOWN)  # bottom to top in the picture
ONE_COUNT = "ready"  # an older record's endpoints, of no workload in particular
BY_WORKLOAD = (
    f"each classed by its pod: {TWIN}, a pod of the twin Deployment; {CANDIDATE}, one "
    f"labelled with the handoff's revision; {LIVE}, any other"
)

Counts = dict[str, int]


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
    ready_by_workload: list[tuple[float, Counts]] = Field(
        default_factory=list, description="empty in records older than the per-workload count"
    )
    workloads: dict[str, str] = Field(default_factory=dict, description="role: Deployment")
    endpoints_note: str | None = None
    bake: BakeWindow | None = None
    way_back: list[WayBack] = Field(
        default_factory=list, description="what going back cost once the old pods were retired"
    )

    def retired_at(self) -> float | None:
        """When the retirement ended (epoch seconds), from its span, if recorded."""
        ends = [s.start + s.seconds for s in self.spans() if s.name == "retire"]
        return max(ends) if ends else None

    def way_back_line(self) -> str | None:
        """The caption's words on the way back: warm while the bake kept the old pods
        Ready, a cold start once they were retired."""
        if not self.way_back or self.retired_at() is None:
            return None
        cold = "; ".join(w.line() for w in self.way_back)
        kept = (
            "until then the bake kept it a selector write to the warm old pods; "
            if self.bake is not None and self.bake.warm_way_back
            else ""
        )
        return f"dashed from the retirement, the way back: {kept}after it, {cold}"

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

    def stacked(self) -> list[tuple[str, list[tuple[float, int]]]]:
        """Each workload's ready endpoints over time, bottom to top; an older record's one
        count is the single layer ONE_COUNT."""
        if not self.ready_by_workload:
            return [(ONE_COUNT, list(self.ready_endpoints))] if self.ready_endpoints else []
        seen = {w for _, counts in self.ready_by_workload for w in counts}
        return [
            (w, [(at, counts.get(w, 0)) for at, counts in self.ready_by_workload])
            for w in (*WORKLOADS, *sorted(seen - set(WORKLOADS)))
            if w in seen
        ]

    def label(self, workload: str) -> str:
        """A workload as the legend names it: its role and its Deployment, if recorded."""
        name = self.workloads.get(workload)
        return f"{workload} ({name})" if name else workload

    def caption(self) -> str:
        steps = (
            "steps: start and end as the flow timed them"
            if self.measured_steps
            else "steps: laid end to end from their recorded durations (no start times recorded)"
        )
        how = BY_WORKLOAD if self.ready_by_workload else "one count: no workloads recorded"
        ready = (
            f"ready endpoints: the Service's Endpoints read every {SAMPLE_INTERVAL_S:g} s by the "
            "flow while it ran"
            + (f" ({self.endpoints_note})" if self.endpoints_note else "")
            + f", {how}"
            if self.ready_endpoints
            else f"ready endpoints: not sampled ({self.endpoints_note or 'not recorded'})"
        )
        bake = f"; shaded, the {self.bake.line()}" if self.bake else ""
        back = f"; {line}" if (line := self.way_back_line()) else ""
        return f"{steps}; {ready}{bake}{back}; {NOT_MEASURED_CLIENTS}."


def _hms(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M:%S")


def _epoch(stamp: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(stamp or "").timestamp()
    except ValueError:
        return None


def totals(samples: list[tuple[float, Counts]]) -> list[tuple[float, int]]:
    """The ready endpoints of every workload together, at each sample."""
    return [(at, sum(counts.values())) for at, counts in samples]


class ReadyEndpoints:
    """Counts the Service's ready endpoints per workload every SAMPLE_INTERVAL_S in a thread
    while the block runs; keeps (epoch seconds, counts) at each change, the first and the
    last. A workload without ready endpoints is left out of its counts."""

    def __init__(self, count: Callable[[], Counts], interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._count = count
        self._interval_s = interval_s
        self._changes: list[tuple[float, Counts]] = []
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
            count = {w: n for w, n in self._count().items() if n}
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

    def samples(self) -> list[tuple[float, Counts]]:
        """Every change so far, after one more reading."""
        self.sample()
        with self._lock:
            return list(self._changes)
