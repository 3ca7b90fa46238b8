"""Latency gate: the candidate under closed-loop load, against the live baseline if given.

At each concurrency level both servers get the same requests (prompts, seed, max_tokens,
ignore_eos, temperature 0). After a warm-up that is excluded, baseline and candidate rounds
alternate (B C, C B, B C, ...) so that drift on the machine hits both alike. Each level ends
with one of three verdicts (`gates.latency.verdict`): pass when every metric is shown within
its margin and every SLO met, fail when a regression (`gates.latency.compare`), a missed SLO or too
many failed candidate requests is shown, and otherwise no verdict, saying what would decide
it. A level whose baseline itself failed too often has no verdict: it compares nothing.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TypeVar

from gates.common.blocking import blocking
from gates.common.result import GateResult, verdict_of
from gates.common.settings import LatencySettings
from gates.errors import ServerError
from gates.http import api
from gates.http.capabilities import discover
from gates.http.client import CHAT_PATH, COMPLETIONS_PATH
from gates.latency.cell import CellFigures, CellSamples, summarise_cell
from gates.latency.compare import compare_cells
from gates.latency.load import Api, RequestShape, Run, StreamPool
from gates.latency.others import OthersLoad, OthersMeter
from gates.latency.report import LatencyFigures, LevelFigures, power_line, streams
from gates.latency.slo import check_slos
from gates.latency.slots import Slots, within_slots
from gates.latency.verdict import (
    baseline_cannot_recover,
    baseline_loaded,
    baseline_unmeasured,
    power_of,
    slo_missed,
    slo_unshown,
    surely_within,
    unshown,
)

LatencyResult = GateResult[LatencyFigures]
CANDIDATE, BASELINE = "candidate", "baseline"
MIN_ROUNDS_AS_UNITS = 3
T = TypeVar("T")


@dataclass(frozen=True)
class _Side:
    label: str
    url: str
    shape: RequestShape


async def run_latency_async(
    candidate_url: str,
    baseline_url: str | None,
    settings: LatencySettings,
    *,
    candidate_model: str | None = None,
    baseline_model: str | None = None,
    slots: Slots | None = None,
) -> LatencyResult:
    """Measure and decide; model ids default to the first each server lists. With the
    servers' slots known (the fewer of the two sides'), default levels stay within them."""
    settings, slots_note = within_slots(settings, slots)
    figures = LatencyFigures(
        candidate_url=candidate_url,
        baseline_url=baseline_url,
        levels=[],
        settings=settings,
        slots=slots,
        slots_note=slots_note,
    )
    try:
        sides = [await _side(CANDIDATE, candidate_url, candidate_model, settings)]
        if baseline_url is not None:
            sides.append(await _side(BASELINE, baseline_url, baseline_model, settings))
    except ServerError as exc:  # nothing measured: no verdict, and why
        return LatencyResult.unanswered("latency", exc, figures)
    figures.candidate_model = sides[0].shape.model
    figures.baseline_model = sides[1].shape.model if len(sides) > 1 else None
    figures.levels = [await _measure_level(sides, c, settings) for c in settings.levels]
    return _result(figures, has_baseline=baseline_url is not None)


run_latency = blocking(run_latency_async)


async def _side(label: str, url: str, model: str | None, settings: LatencySettings) -> _Side:
    """The request shape this server can take: the configured endpoint, or with "auto"
    completions where offered and chat otherwise (candle-vllm has no completions)."""
    async with api.make_client(url, timeout_s=settings.read_timeout_s) as client:
        model_id = await api.resolve_model_id(client, model)
        caps = await discover(client, model_id, logprobs=False)
    chosen = settings.api
    if chosen == "auto":
        chosen = "completions" if caps.completions else "chat"
    if not getattr(caps, chosen):
        other: Api = "chat" if chosen == "completions" else "completions"
        path = COMPLETIONS_PATH if chosen == "completions" else CHAT_PATH
        todo = (
            f"set the latency gate's `api: {other}` (or auto), which it serves"
            if getattr(caps, other)
            else "it serves neither endpoint: point the gate at an OpenAI-compatible server"
        )
        raise ServerError(
            f"POST {url.rstrip('/')}{path}: {caps.server_name(url)} has no "
            f"{chosen} endpoint ({caps.summary()}); {todo}"
        )
    shape = RequestShape(
        model=model_id,
        max_tokens=settings.max_tokens,
        api=chosen,
        seed=settings.seed,
        extensions=caps.extended_sampling,
    )
    return _Side(label, url, shape)


async def _measure_level(
    sides: list[_Side], concurrency: int, settings: LatencySettings
) -> LevelFigures:
    """Interleaved rounds until the last look, or an earlier look whose verdict is certain."""
    runs: dict[str, list[Run]] = {side.label: [] for side in sides}
    looks, at_look = settings.looks(), settings.at_each_look()
    level: LevelFigures | None = None
    async with AsyncExitStack() as stack:
        pools = [
            await stack.enter_async_context(
                StreamPool(
                    side.url,
                    concurrency=concurrency,
                    read_timeout_s=settings.read_timeout_s,
                    transport=settings.transport,
                    proxy=settings.proxy,
                )
            )
            for side in sides
        ]
        meter = None
        if len(sides) > 1:  # the baseline's load from others, read around candidate rounds
            reader = api.make_client(sides[1].url, timeout_s=settings.read_timeout_s)
            meter = OthersMeter(await stack.enter_async_context(reader))
        for side, pool in zip(sides, pools, strict=True):  # warm-up, discarded
            n_warm = settings.warmup_requests_per_stream * concurrency
            await pool.run(side.shape, settings.prompts, n_requests=n_warm)
        n_round = settings.requests_per_round(concurrency)
        order = interleave(list(zip(sides, pools, strict=True)), rounds=settings.rounds)
        for round_index, (side, pool) in order:
            watched = meter if side.label == CANDIDATE else None
            if watched is not None:
                await watched.before_round()
            run = await pool.run(
                side.shape,
                settings.prompts,
                n_requests=n_round,
                label=side.label,
                round_index=round_index,
            )
            if watched is not None:
                await watched.after_round()
            runs[side.label].append(run)
            done = len(runs[side.label])
            if all(len(r) == done for r in runs.values()) and done in looks:
                others = meter.load if meter is not None else None
                level = evaluate_level(runs, concurrency, at_look, rounds=done, others=others)
                if done == settings.rounds or is_certain(level, at_look):
                    break
    assert level is not None  # the last round is always a look
    return level


def evaluate_level(
    runs: dict[str, list[Run]],
    concurrency: int,
    settings: LatencySettings,
    *,
    rounds: int,
    others: OthersLoad | None = None,
) -> LevelFigures:
    """Figures and verdict of one level from its runs so far and what the baseline served
    others meanwhile (pure: benchmarks replay it)."""
    by_round = _by_round(concurrency, settings, rounds)
    samples = {
        label: CellSamples.from_runs(side_runs, by_round=by_round)
        for label, side_runs in runs.items()
    }
    cells = {
        label: summarise_cell(s, label=label, concurrency=concurrency, slo=settings.slo)
        for label, s in samples.items()
    }
    candidate, baseline = samples[CANDIDATE], samples.get(BASELINE)
    level = LevelFigures(
        concurrency=concurrency,
        candidate=cells[CANDIDATE],
        baseline=cells.get(BASELINE),
        comparisons=[],
        slo_checks=check_slos(candidate, settings.slo, settings),
        passed=None,
        findings=[],
        rounds=rounds,
        max_rounds=settings.rounds,
        others=others,
    )
    if baseline and baseline_unmeasured(level, settings) is None:  # else: no survivors' test
        level.comparisons = compare_cells(candidate, baseline, settings)
    return _decide_level(level, settings)


def _by_round(concurrency: int, settings: LatencySettings, rounds: int) -> bool:
    """Whole rounds are the bootstrap's unit when streams run side by side, from
    MIN_ROUNDS_AS_UNITS a side: drawn from fewer, an interval has next to no spread (from
    one round, none), so single requests are drawn then."""
    return concurrency > 1 and settings.resample == "round" and rounds >= MIN_ROUNDS_AS_UNITS


def is_certain(level: LevelFigures, settings: LatencySettings) -> bool:
    """Stop early: a regression or too many failures already shown, a baseline that failed
    too often whatever its later rounds do, or every metric surely within its margin and
    every SLO surely met. A missed SLO is not certain before the end (its test is one-sided
    towards failing)."""
    regressed = any(c.outcome == "regressed" for c in level.comparisons)
    if regressed or _too_many_failed(level.candidate, level.baseline, settings):
        return True
    if baseline_cannot_recover(level, settings):
        return True
    checks = [surely_within(c) for c in level.comparisons] + [
        s.met is True for s in level.slo_checks
    ]
    return bool(checks) and all(checks)


def _too_many_failed(
    cell: CellFigures, live: CellFigures | None, settings: LatencySettings
) -> bool:
    """More failed candidate requests than live's plus the tolerated share (the live server
    is judged alike: a candidate no worse than live passes this)."""
    live_rate = live.n_failed / live.n_requests if live and live.n_requests else 0.0
    allowed = live_rate + settings.max_failed_fraction
    return bool(cell.n_requests) and cell.n_failed / cell.n_requests > allowed


def interleave(items: list[T], *, rounds: int) -> list[tuple[int, T]]:
    """Order of a run's rounds: A B, B A, A B, ... so slow drift on the machine hits both."""
    return [(r, item) for r in range(rounds) for item in (items if r % 2 == 0 else items[::-1])]


def _decide_level(level: LevelFigures, settings: LatencySettings) -> LevelFigures:
    """Three verdicts. Fail: too many failed candidate requests (`_too_many_failed`), a
    regressed metric, an SLO whose p95 is over its limit. Pass: nothing failed, every metric
    shown within its margin, every SLO shown met. Otherwise no verdict, each reason in
    `undecided`; so too for a level whose baseline measured nothing (`baseline_unmeasured`),
    which then compares nothing but the failures."""
    findings, undecided, cell, live = [], [], level.candidate, level.baseline
    if _too_many_failed(cell, live, settings):
        than_live = f" (live: {live.n_failed} of {live.n_requests})" if live else ""
        findings.append(
            f"{cell.n_failed} of {cell.n_requests} candidate requests failed at "
            f"{level.concurrency} streams{than_live}: {cell.errors}"
        )
    comparisons, slo_checks = level.comparisons, level.slo_checks
    if (broken := baseline_unmeasured(level, settings)) is not None:
        comparisons, slo_checks = [], []
        undecided.append(broken)
    head = streams(level.concurrency)
    findings += [f"{head}: {c.reason}" for c in comparisons if c.outcome == "regressed"]
    findings += [
        f"{head}: p95 {s.metric} {s.p95_ms:.1f} ms (upper bound {s.p95_upper_ms:.1f} ms) "
        f"exceeds the SLO {s.limit_ms} ms"
        for s in slo_checks
        if slo_missed(s) and s.p95_ms is not None and s.p95_upper_ms is not None
    ]
    for c in comparisons:
        why = unshown(
            c,
            level.concurrency,
            rounds=level.rounds,
            max_rounds=level.max_rounds,
            confidence=settings.confidence,
        )
        undecided += [why] if why else []
    undecided += [why for s in slo_checks if (why := slo_unshown(s, level.concurrency))]
    if comparisons and (why := baseline_loaded(level, settings)) is not None:
        undecided.append(why)
    power = [p for c in comparisons if (p := power_of(c)) is not None]
    decided = bool(comparisons or slo_checks) and not undecided
    return level.model_copy(
        update={
            "findings": findings,
            "undecided": undecided,
            "power": power,
            "comparisons": comparisons,
            "passed": verdict_of(findings, decided=decided),
        }
    )


def _result(figures: LatencyFigures, *, has_baseline: bool) -> LatencyResult:
    """Fail if any level failed; no verdict if any level has none; pass only when every
    level passed."""
    levels = figures.levels
    findings = [f for level in levels for f in level.findings]
    undecided = [u for level in levels for u in level.undecided]
    passed: bool | None
    if findings:
        passed = False
        reason = f"{len(findings)} finding(s): " + "; ".join(findings[:3])
    elif levels and all(lv.passed for lv in levels):
        passed = True
        reason = (
            "every metric shown within its margin (its interval's bound inside it) and every "
            "SLO met, at every level"
        )
    else:
        passed = None
        why = "too few successful requests" if has_baseline else "no baseline and no SLO"
        reason = "no verdict: " + (
            "; ".join(undecided[:3]) if undecided else f"{why} to decide on; figures only"
        )
    power = [f"{streams(lv.concurrency)}: {power_line(lv.power)}" for lv in levels if lv.power]
    evidence = [
        f"{lv.concurrency} streams: {e} ({n}x, {lv_cell.label})"
        for lv in levels
        for lv_cell in (lv.candidate, lv.baseline)
        if lv_cell
        for e, n in lv_cell.errors.items()
    ]
    return LatencyResult(
        name="latency",
        passed=passed,
        reason=reason,
        figures=figures,
        evidence=findings + undecided + power + evidence,
    )
