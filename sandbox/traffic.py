"""Client traffic through a Service, to show a handoff is invisible to clients.

A bounded closed loop of streamed completions or chat turns against one loopback
address (the sandbox's service proxy), each request timed and its outcome kept, so a test
or the demo can count failures and measure how long the Service was unavailable. Clients
of a Service that moves to candle-vllm speak chat: it has no /v1/completions.

Each request is sent once, like a client without retries: a refused connection, a
connection closed before any response and a broken stream are all failures, recorded
with their cause. Nothing is re-sent, so nothing a data plane or a server gets wrong is
hidden by the client.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import httpx


@dataclass(frozen=True)
class Outcome:
    started: float  # time.monotonic()
    ended: float
    ok: bool
    detail: str


_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass
class ClientLoad:
    """`with ClientLoad(url, model="clef-flash", streams=16) as load: ...; load.failed`."""

    url: str
    model: str | None = None  # None: the server's own model (no "model" field sent)
    api: Literal["completions", "chat"] = "completions"
    streams: int = 4
    max_tokens: int = 8
    max_requests: int = 20000  # the loop is bounded in count as well as in time
    max_seconds: float = 900.0
    outcomes: list[Outcome] = field(default_factory=list)
    retried: int = 0  # always 0: each request is sent once (a failure is a failure)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> ClientLoad:
        deadline = time.monotonic() + self.max_seconds
        for i in range(self.streams):
            thread = threading.Thread(
                target=self._loop, args=(deadline,), daemon=True, name=f"client-{i}"
            )
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _loop(self, deadline: float) -> None:
        body: dict[str, object] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": True,
        }
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": "ping"}]
        else:
            body["prompt"] = "ping"
        with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0)) as client:
            while not self._stop.is_set() and time.monotonic() < deadline:
                with self._lock:
                    if len(self.outcomes) >= self.max_requests:
                        return
                self._record(*self._one(client, body))

    def _one(self, client: httpx.Client, body: dict[str, object]) -> tuple[float, bool, str]:
        """One request, sent once: its start and outcome."""
        started = time.monotonic()
        try:
            with client.stream("POST", self.url + _PATHS[self.api], json=body) as response:
                text = "".join(response.iter_text())
            if response.status_code != 200:
                return started, False, f"HTTP {response.status_code}: {text[:120]}"
            if "data: [DONE]" not in text:
                return started, False, "stream ended without [DONE]"
            return started, True, ""
        except httpx.ConnectError as exc:
            return started, False, f"connect failed: {type(exc).__name__}: {exc}"
        except httpx.RemoteProtocolError as exc:
            if "without sending a response" in str(exc):
                return started, False, f"no response: the connection closed before any byte ({exc})"
            return started, False, f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            return started, False, f"{type(exc).__name__}: {exc}"

    def _record(self, started: float, ok: bool, detail: str) -> None:
        with self._lock:
            self.outcomes.append(Outcome(started, time.monotonic(), ok, detail))
        if not ok:
            time.sleep(0.05)  # an unavailable Service is probed, not hammered

    @property
    def succeeded(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def unavailable_s(self) -> float:
        """Longest stretch between two successful requests' ends that saw only failures."""
        ordered = sorted(self.outcomes, key=lambda o: o.ended)
        longest, last_ok, in_gap = 0.0, None, False
        for o in ordered:
            if o.ok:
                if in_gap and last_ok is not None:
                    longest = max(longest, o.ended - last_ok)
                last_ok, in_gap = o.ended, False
            else:
                in_gap = True
        if in_gap and last_ok is not None:  # still failing when the load stopped
            longest = max(longest, ordered[-1].ended - last_ok)
        return longest
