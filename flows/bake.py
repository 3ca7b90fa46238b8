"""Bake: after the swap and the scale-up, watch the candidate under real traffic while
the old workload stays Ready, serving nothing, for the spec's `bake.duration_s`.

Watches only what it can see from outside the data path: the candidate pods' restarts
and readiness (the Kubernetes API), the server's own request counters on `/metrics`
where it exposes them (`http_requests_total` by status class, vLLM's instrumentator; a
server without them is named in the report), and a light synthetic probe through the
Service: a few greedy chat turns from the parity golden, each on a connection of its
own, compared on their first tokens. A breach of `bake.slo` side by side moves the
Service back to the old pods at once (they are warm: no cold start; the rollback is
recorded first, so a crash finishes it), stops the candidate once the proxies have left
it (its clients' kept-alive connections would otherwise stay on a failing server), and
the handoff then rolls back as usual. In
place, or once the old workload is already gone (a scale-up that had to follow the
retirement), there is nothing warm to go back to: the bake reports and alerts only,
and says so. A pass goes on to the retirement.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx
from prefect import get_run_logger

from flows import rollback
from flows.bake_report import BakeReport
from flows.capacity import Strategy
from flows.errors import PermanentError
from flows.kube import read
from flows.kube.objects import PodSnapshot
from flows.kube.portforward import Forward, pod_forward
from flows.run import HandoffRun
from flows.spec import BakeSpec
from flows.warm import candidate_selector
from gates.http.counters import request_counts
from gates.parity.golden_format import Golden

ASK_S = 5.0  # one /metrics answer


class BakeBreached(PermanentError):
    """The candidate breached the spec's bake SLOs; the Service is back on the old pods."""


def way_back(run: HandoffRun) -> tuple[str | None, str]:
    """(the old workloads a breach returns to, or None; why there is none)."""
    if run.plan.strategy is Strategy.IN_PLACE:
        return None, "in place: the old pods stopped before the candidate started"
    if run.plan.decision.scale_after_retire:
        return None, "the target fit only once the old workload retired, before the bake"
    names = [w.name for w in run.ledger.snapshot.workloads]
    return ", ".join(f"Deployment {n}" for n in names), ""


class _Watch:
    """One bake's observations; `look()` returns the breach it finds, if any."""

    def __init__(self, run: HandoffRun, stack: contextlib.ExitStack[bool | None]) -> None:
        self.run, self.spec, self.stack = run, run.spec.bake, stack
        self.selector = candidate_selector(run)
        self.watched: list[str] = []
        self.not_watched: list[str] = []
        self.restarts_at_start: dict[str, int] = {}
        self.restarts = 0
        self.not_ready_since: float | None = None
        self.metrics: dict[str, tuple[httpx.Client, tuple[int, int]]] = {}
        self.answers = self.errors = 0
        self.probe_turns = self.probe_failures = 0
        self.last_probe_failure = ""
        self.next_probe = 0.0
        self.turn = 0
        self.probe_url, self.cases = self._probe_setup()

    # -- pods and metrics ---------------------------------------------------------------

    def start(self) -> None:
        pods = self._pods()
        self.restarts_at_start = {p.name: p.restart_count for p in pods}
        names = ", ".join(sorted(self.restarts_at_start)) or "none"
        self.watched.append(f"restarts and readiness of the candidate's pods ({names})")
        for pod in pods:
            self._open_metrics(pod.name)
        if self.metrics:
            self.watched.append(
                f"http_requests_total on /metrics of {', '.join(sorted(self.metrics))}"
            )

    def _pods(self) -> list[PodSnapshot]:
        pods = read.list_pods(self.run.kube, self.run.spec.namespace, self.selector)
        return [p for p in pods if not p.terminating]

    def _open_metrics(self, pod: str) -> None:
        port = self.run.spec.candidate.port
        forward: Forward = self.stack.enter_context(
            pod_forward(self.run.kube, self.run.spec.namespace, pod, port)
        )
        client = self.stack.enter_context(
            httpx.Client(base_url=forward.url, timeout=ASK_S, trust_env=False)
        )
        name = f"Deployment {self.run.candidate_name}'s server on pod {pod}"
        try:
            answer = client.get("/metrics")
        except httpx.HTTPError as exc:
            self.not_watched.append(f"{name}: /metrics unreadable ({exc})")
            return
        counts = request_counts(answer.text) if answer.status_code == 200 else None
        if answer.status_code != 200:
            self.not_watched.append(
                f"{name} exposes no /metrics on port {port} (HTTP {answer.status_code}): "
                "its request errors are seen only through the probe"
            )
        elif counts is None:
            self.not_watched.append(
                f"{name}: /metrics has no request counter (http_requests_total): its "
                "request errors are seen only through the probe"
            )
        else:
            self.metrics[pod] = (client, counts)

    def _pod_breach(self, now: float) -> str | None:
        pods = self._pods()
        slo = self.spec.slo
        self.restarts = sum(p.restart_count - self.restarts_at_start.get(p.name, 0) for p in pods)
        if self.restarts > slo.max_restarts:
            exits = "; ".join(f"{p.name}: {p.last_exit}" for p in pods if p.last_exit)
            return (
                f"the candidate's containers restarted {self.restarts} time(s) in the bake "
                f"(bake.slo.max_restarts {slo.max_restarts})" + (f": {exits}" if exits else "")
            )
        unready = sorted(p.name for p in pods if not p.ready)
        if not unready or not pods:
            self.not_ready_since = None
            return None
        self.not_ready_since = self.not_ready_since or now
        if now - self.not_ready_since > slo.max_not_ready_s:
            return (
                f"candidate pod(s) {', '.join(unready)} not Ready for "
                f"{now - self.not_ready_since:.0f} s (bake.slo.max_not_ready_s "
                f"{slo.max_not_ready_s:g})"
            )
        return None

    def _metrics_breach(self) -> str | None:
        answers = errors = 0
        for client, (first_answers, first_errors) in self.metrics.values():
            with contextlib.suppress(httpx.HTTPError):
                counts = request_counts(client.get("/metrics").text)
                if counts is not None:
                    answers += counts[0] - first_answers
                    errors += counts[1] - first_errors
        self.answers, self.errors = max(self.answers, answers), max(self.errors, errors)
        slo = self.spec.slo
        if self.answers >= slo.min_requests and self.errors > slo.max_error_ratio * self.answers:
            return (
                f"the candidate's servers answered {self.errors} of {self.answers} "
                f"generation requests with HTTP 5xx in the bake ({self.errors / self.answers:.0%}; "
                f"bake.slo.max_error_ratio {slo.max_error_ratio:g})"
            )
        return None

    # -- the probe ----------------------------------------------------------------------

    def _probe_setup(self) -> tuple[str | None, list[tuple[dict[str, Any], str]]]:
        """The Service's URL and the turns (request body, the golden's answer) to send."""
        run, probe = self.run, self.spec.probe
        url = probe.url
        service = run.plan.service
        if url is None and run.kube.in_cluster and service.cluster_ip and service.ports:
            url = f"http://{service.cluster_ip}:{service.ports[0].port}"
        if url is None:
            self.not_watched.append(
                f"the probe: the flow runs outside the cluster and cannot reach Service "
                f"{run.spec.namespace}/{run.spec.service}; set bake.probe.url to an "
                "address of it that the flow reaches"
            )
            return None, []
        parity = run.spec.gates.parity
        if parity is None:
            self.not_watched.append(
                "the probe: no parity golden (gates.parity) to take its turns from"
            )
            return None, []
        golden = Golden.load(parity.golden)
        prompts = {p.id: p for p in golden.settings.prompts if p.api == "chat"}
        sampling = golden.settings.sampling or {"temperature": 0}
        cases = []
        for done in golden.outputs.completions:
            case = prompts.get(done.prompt_id)
            if case is None or not done.text:
                continue
            body = {
                "model": run.spec.gates.model_id,
                "messages": [m.model_dump() for m in case.messages or []],
                "max_tokens": probe.first_tokens,
                **sampling,
            }
            if case.stop:
                body["stop"] = case.stop
            cases.append((body, done.text))
        if not cases:
            self.not_watched.append(
                f"the probe: golden {parity.golden} holds no answered chat turn to compare with"
            )
            return None, []
        self.watched.append(
            f"a probe through {url}: {probe.turns} greedy chat turn(s) every "
            f"{probe.every_s:g} s, first {probe.first_tokens} tokens against the golden"
        )
        return url, cases

    def _probe_breach(self, now: float) -> str | None:
        if self.probe_url is None or now < self.next_probe:
            return None
        self.next_probe = now + self.spec.probe.every_s
        for _ in range(self.spec.probe.turns):
            body, golden = self.cases[self.turn % len(self.cases)]
            self.turn += 1
            self.probe_turns += 1
            failure = self._turn(body, golden)
            if failure:
                self.probe_failures += 1
                self.last_probe_failure = failure
        limit = self.spec.slo.max_probe_failures
        if self.probe_failures > limit:
            return (
                f"{self.probe_failures} of {self.probe_turns} probe turns through the Service "
                f"failed (bake.slo.max_probe_failures {limit}); the last: "
                f"{self.last_probe_failure}"
            )
        return None

    def _turn(self, body: dict[str, Any], golden: str) -> str:
        """'' if the turn answered the golden's first tokens, else what went wrong. A
        connection of its own each time, so the turns spread over the Service's pods."""
        assert self.probe_url is not None
        try:
            answer = httpx.post(
                f"{self.probe_url}/v1/chat/completions",
                json=body,
                timeout=self.spec.probe.timeout_s,
                headers={"connection": "close"},
                trust_env=False,
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if answer.status_code != 200:
            return f"HTTP {answer.status_code}: {answer.text[:160]}"
        try:
            text = answer.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            return f"an answer without choices[0].message.content: {answer.text[:160]}"
        if not text or not golden.startswith(text):
            return f"answered {text!r}, the golden begins {golden[: len(text) + 16]!r}"
        return ""

    def look(self, now: float) -> str | None:
        return self._pod_breach(now) or self._metrics_breach() or self._probe_breach(now)


def bake(run: HandoffRun) -> BakeReport | None:
    """Watch for bake.duration_s; BakeBreached once the Service is back on the warm old
    pods (side by side), else report. None when the spec asks for no bake."""
    spec: BakeSpec = run.spec.bake
    log = get_run_logger()
    if not spec.duration_s:
        log.info("no bake (bake.duration_s is 0): the old workload retires now")
        return None
    back, why = way_back(run)
    started, wall = time.monotonic(), time.time()
    breach, restored_s = None, None
    with contextlib.ExitStack() as stack:
        watch = _Watch(run, stack)
        watch.start()
        log.info(
            "bake for %g s: watching %s%s",
            spec.duration_s,
            "; ".join(watch.watched),
            f"; not watching {'; '.join(watch.not_watched)}" if watch.not_watched else "",
        )
        while (now := time.monotonic()) - started < spec.duration_s:
            breach = watch.look(now)
            if breach is not None:
                break
            time.sleep(min(spec.interval_s, spec.probe.every_s, spec.duration_s - (now - started)))
        ended = time.monotonic()
        if breach is not None and back is not None:
            cause = f"bake breached: {breach}; the Service goes back to the warm pods of {back}"
            run.ledger = rollback.back_to_warm(run.kube, run.spec, run.ledger, cause=cause)
            restored_s, ended = time.monotonic() - ended, time.monotonic()
            rollback.stop_breached(run.kube, run.spec, run.ledger)
    report = BakeReport(
        verdict="pass" if breach is None else "breach",
        started=wall,
        seconds=round(ended - started, 3),
        duration_s=spec.duration_s,
        warm_way_back=back,
        why_no_way_back=why,
        watched=watch.watched,
        not_watched=watch.not_watched,
        breach=breach,
        restored_s=None if restored_s is None else round(restored_s, 3),
        probe_turns=watch.probe_turns,
        probe_failures=watch.probe_failures,
        answers=watch.answers,
        errors=watch.errors,
        restarts=watch.restarts,
    )
    run.bake = report
    if breach is None:
        log.info(
            "bake passed after %.0f s: %d restart(s), %d of %d answers 5xx, %d of %d probe "
            "turns failed",
            report.seconds,
            report.restarts,
            report.errors,
            report.answers,
            report.probe_failures,
            report.probe_turns,
        )
        return report
    if back is not None:
        raise BakeBreached(
            f"bake breached: {breach}; the Service was back on the warm pods of {back} "
            f"{report.restored_s:.1f} s later (no cold start), and the handoff rolls back"
        )
    log.error("bake breached: %s; %s: nothing to go back to, reported only", breach, why)
    _alert(run, breach, why)
    return report


def _alert(run: HandoffRun, breach: str, why: str) -> None:
    if run.notifier is None:
        return
    spec = run.spec
    run.notifier.send(
        "bake",
        f"handoff {spec.name}: the bake breached, nothing to go back to",
        f"Handoff `{run.ledger.handoff_id}` of Service `{spec.namespace}/{spec.service}`: "
        f"{breach}. No warm way back ({why}): the candidate keeps serving; look at it now.",
    )
