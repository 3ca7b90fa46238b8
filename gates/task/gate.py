"""Task gate: does the candidate still do the job its clients send?

Both sides answer the same suite (gates.task.suite) under the same sampling; each answer is
scored by its case's checker (gates.task.check; code only in gates.task.sandbox, which
refuses to run it without its sandbox: then the gate gives no verdict). The
baseline is the live server, or in place the golden scores recorded from it earlier
(`handoff golden record --task-suite`). The decision is paired, on the same cases: exact
McNemar for pass/fail cases, a paired bootstrap for graded scores (gates.task.stats).

Three outcomes (gates.task.power): fail when the candidate is worse than the baseline by
more than `margin` points AND the paired test says the loss is not chance, or when its
score is under `floor`; pass only when the loss's one-sided upper bound is within the
margin; otherwise no verdict, naming the bound and what would decide it. A baseline that
scores on too few cases for any loss beyond the margin to be shown gets no verdict: the
suite measures nothing for that model. The report states the smallest loss the suite can
show.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field

from gates.common.blocking import blocking
from gates.common.result import GateResult
from gates.common.stats import Interval
from gates.errors import ServerError
from gates.task import power
from gates.task.collect import TASK_GOLDEN_FORMAT, SideScores, collect_scores
from gates.task.report import Flip, TaskFigures
from gates.task.sandbox import SandboxUnavailable, isolation
from gates.task.stats import bootstrap_mean, wilson
from gates.task.suite import TaskSuite

TaskResult = GateResult[TaskFigures]


class TaskRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    margin: float = Field(2.0, ge=0, le=100, description="points the candidate may lose")
    floor: float | None = Field(None, ge=0, le=100, description="least score, in percent")
    confidence: float = Field(0.95, gt=0.5, lt=1)

    def describe(self, test: str, bound: str) -> str:
        floor = f"; or when its score is under {self.floor:g} %" if self.floor is not None else ""
        return (
            f"fail when the candidate scores more than {self.margin:g} points below the "
            f"baseline and {test} says the loss is not chance (one-sided, at "
            f"{1 - self.confidence:.2g}){floor}; pass when the loss's one-sided "
            f"{self.confidence:.0%} upper bound ({bound}) is at most {self.margin:g} points; "
            "otherwise no verdict"
        )


async def run_task_async(
    url: str,
    suite: TaskSuite,
    rule: TaskRule | None = None,
    *,
    baseline_url: str | None = None,
    golden: SideScores | None = None,
    model_id: str | None = None,
) -> TaskResult:
    """Score the candidate at `url` against the live `baseline_url` (both at once) or the
    recorded `golden` scores; a side that cannot answer gives no verdict."""
    rule = rule or TaskRule()
    figures = TaskFigures(
        suite=suite.name,
        n_cases=len(suite.cases),
        samples=suite.sampling.samples,
        candidate_url=url,
    )
    if (baseline_url is None) == (golden is None):
        raise ValueError("the task gate needs exactly one baseline: a live URL or golden scores")
    if any(c.check.kind in ("code", "function") for c in suite.cases):
        try:
            figures.isolation = isolation()
        except SandboxUnavailable as exc:
            reason = f"no verdict: {exc}"
            return TaskResult(name="task", passed=None, reason=reason, figures=figures)
    else:
        figures.isolation = "no code checks in this suite"
    mismatch = golden is not None and _mismatch(golden, suite)
    if mismatch:
        return TaskResult(
            name="task", passed=None, reason=f"no verdict: {mismatch}", figures=figures
        )
    try:
        if baseline_url is not None:
            candidate, baseline = await asyncio.gather(
                collect_scores(url, suite, model_id=model_id),
                collect_scores(baseline_url, suite, model_id=None),
            )
        else:
            assert golden is not None
            candidate, baseline = await collect_scores(url, suite, model_id=model_id), golden
    except ServerError as exc:
        return TaskResult.unanswered("task", exc, figures)
    where = (
        f"live {baseline.source_url}"
        if golden is None
        else f"golden scores of {baseline.model_id} recorded {baseline.recorded_at}"
    )
    return judge(suite, baseline, candidate, rule, figures.model_copy(update={"baseline": where}))


run_task = blocking(run_task_async)


def _mismatch(golden: SideScores, suite: TaskSuite) -> str | None:
    if golden.format != TASK_GOLDEN_FORMAT:
        return f"golden scores are {golden.format!r}, expected {TASK_GOLDEN_FORMAT!r}"
    if golden.suite_digest != suite.digest():
        return (
            f"the golden scores were recorded with another version of suite {golden.suite!r} "
            f"(digest {golden.suite_digest}, the suite now {suite.digest()}); record them again "
            "with `handoff golden record --task-suite`"
        )
    return None


def judge(
    suite: TaskSuite,
    baseline: SideScores,
    candidate: SideScores,
    rule: TaskRule,
    figures: TaskFigures,
) -> TaskResult:
    """The verdict on both sides' scores (pure)."""
    base = [c.score for c in baseline.cases]
    cand = [c.score for c in candidate.cases]
    n, conf, graded = len(base), rule.confidence, suite.graded
    lost = sum(b > c for b, c in zip(base, cand, strict=True))
    gained = sum(c > b for b, c in zip(base, cand, strict=True))
    loss = power.paired(base, cand, graded=graded, confidence=conf)
    smallest = power.detectable(base, graded=graded, confidence=conf, margin=rule.margin)
    figures = figures.model_copy(
        update={
            "lost": lost,
            "gained": gained,
            "margin": rule.margin,
            "floor": rule.floor,
            "confidence": conf,
            "flips": _flips(suite, baseline, candidate),
            "loss": loss.points,
            "p_value": loss.p_value,
            "detectable_cases": smallest[0] if smallest else None,
            "detectable_loss": smallest[1] if smallest else None,
        }
    )
    if graded:
        b_int, c_int = bootstrap_mean(base, confidence=conf), bootstrap_mean(cand, confidence=conf)
        figures.test, bound = "paired bootstrap", "paired bootstrap"
    else:
        b_int = wilson(sum(s >= 1 for s in base), n, confidence=conf)
        c_int = wilson(sum(s >= 1 for s in cand), n, confidence=conf)
        bound = "Newcombe's paired score interval"
    figures.baseline_score, figures.candidate_score = _points(b_int), _points(c_int)
    figures.rule = rule.describe(figures.test, bound)
    drop, high = loss.points.point, loss.points.high
    scores = (
        f"candidate {figures.candidate_score.point:.1f} % vs baseline "
        f"{figures.baseline_score.point:.1f} % ({lost} lost, {gained} gained of {n})"
    )
    failures = []
    if power.shown(loss, rule.margin):
        failures.append(f"{drop:.1f} points worse, beyond the {rule.margin:g}-point margin")
    if rule.floor is not None and figures.candidate_score.point < rule.floor:
        failures.append(f"under the floor of {rule.floor:g} %")
    passed: bool | None = None
    if failures:
        passed, reason = False, f"{scores}: " + "; ".join(failures)
    elif smallest is None:
        reason = (
            f"no verdict: {scores}: the suite measures nothing for this baseline: it scores "
            f"on {sum(s > 0 for s in base)} of {n} cases, and even a candidate losing all of "
            f"them would not show a loss beyond the {rule.margin:g}-point margin "
            f"({figures.test}, at {1 - conf:.2g}); record the baseline from a model that "
            "does the suite's tasks, or grow the suite with cases it answers"
        )
    elif high <= rule.margin:
        passed = True
        reason = (
            f"{scores}: within the {rule.margin:g}-point margin (the loss is at most "
            f"{high:.1f} points, one-sided {conf:.0%})"
        )
    else:
        needed = power.cases_needed(
            base, cand, loss, graded=graded, confidence=conf, margin=rule.margin
        )
        figures.cases_needed = needed
        decide = (
            f"a suite of about {needed} cases losing and gaining at these rates, or a margin "
            f"of at least {high:.1f} points, would pass it"
            if needed is not None
            else f"the loss seen is not within the margin, so no suite size would pass it; "
            f"a margin of at least {high:.1f} points would"
        )
        reason = (
            f"no verdict: {scores}: {drop:.1f} points lost, not shown beyond the "
            f"{rule.margin:g}-point margin, and the loss may be up to {high:.1f} points "
            f"(one-sided {conf:.0%}), over the margin; {decide}"
        )
    evidence = [
        f"{f.direction}: case {f.case_id}: baseline {f.baseline_answer!r} ({f.baseline_verdict}), "
        f"candidate {f.candidate_answer!r} ({f.candidate_verdict})"
        for f in figures.flips
    ]
    return TaskResult(name="task", passed=passed, reason=reason, figures=figures, evidence=evidence)


def _points(interval: Interval) -> Interval:
    """A fraction's interval in percent (points)."""
    return Interval(interval.point * 100, interval.low * 100, interval.high * 100)


def _flips(suite: TaskSuite, baseline: SideScores, candidate: SideScores) -> list[Flip]:
    flips = []
    for case, b, c in zip(suite.cases, baseline.cases, candidate.cases, strict=True):
        if b.score == c.score:
            continue
        flips.append(
            Flip(
                case_id=case.id,
                direction="lost" if b.score > c.score else "gained",
                input=case.shown(),
                baseline_answer=b.answers[0],
                candidate_answer=c.answers[0],
                baseline_verdict=_verdict(b.scores[0], b.details[0]),
                candidate_verdict=_verdict(c.scores[0], c.details[0]),
            )
        )
    return flips


def _verdict(score: float, detail: str) -> str:
    return "pass" if score >= 1 else f"fail: {detail}" if score == 0 else f"{score:.2f}: {detail}"
