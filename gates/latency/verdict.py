"""What a latency level can and cannot tell (pure): three verdicts, the power, and levels
whose baseline measured nothing.

- A metric is shown **within** its margin when its interval's bound towards the margin lies
  inside it (non-inferiority: the upper bound under the margin where higher is worse, the
  lower bound over it where lower is worse), at the confidence of the look.
- It is shown **regressed** by `gates.latency.compare` (Mann-Whitney and the whole interval past the
  margin).
- Anything else shows neither: the level has **no verdict**, and says what would decide it.

A baseline that fails (or ends after one token) more than `BASELINE_FAILED_SHARE` of its
requests at a level measured nothing there; the level is no comparison over the survivors.
"""

from __future__ import annotations

import math
import re

from gates.common.settings import LatencySettings
from gates.latency.cell import CellFigures
from gates.latency.compare import Comparison
from gates.latency.report import LevelFigures, MetricPower, streams
from gates.latency.slo import SloCheck

BASELINE_FAILED_SHARE = 0.10
"""Default of the share of a level's baseline requests that may measure nothing (failed, or
ended after one token) before the level gets no verdict. A setting where the settings model
has `max_baseline_failed_fraction`."""
QUIETER = (
    "a quieter baseline (a replica that serves no other traffic, on a node the candidate "
    "does not share)"
)
_ONE_TOKEN = re.compile(
    r"delivered [01] tokens|after [01] token events|without a single token event"
)
_REFUSED = re.compile(r"^HTTP (429|503)\b")


def baseline_share_limit(settings: LatencySettings) -> float:
    limit = getattr(settings, "max_baseline_failed_fraction", BASELINE_FAILED_SHARE)
    return float(limit)


def surely_within(c: Comparison) -> bool:
    if c.ratio_low is None or c.ratio_high is None:
        return False
    return c.ratio_high <= c.margin if c.worse_when == "higher" else c.ratio_low >= c.margin


def power_of(c: Comparison) -> MetricPower | None:
    """The smallest regression this run could have shown for `c`: the margin moved by the
    interval's spread on the side that must clear it (its low end, for higher-is-worse)."""
    point, low, high = c.ratio, c.ratio_low, c.ratio_high
    if point is None or low is None or high is None or min(point, low, high) <= 0:
        return None
    detectable = c.margin * point / low if c.worse_when == "higher" else c.margin * point / high
    return MetricPower(
        metric=c.metric,
        margin=c.margin,
        detectable=detectable,
        half_width=(high - low) / 2 / point,
    )


def unshown(
    c: Comparison,
    concurrency: int,
    *,
    rounds: int | None,
    max_rounds: int | None,
    confidence: float,
) -> str | None:
    """Why `c` shows neither a regression nor the candidate within its margin, and what
    would decide it; None when it shows either."""
    head = f"{streams(concurrency)}: {c.metric}"
    if c.outcome == "regressed" or surely_within(c):
        return None
    point, low, high = c.ratio, c.ratio_low, c.ratio_high
    if point is None or low is None or high is None:
        return f"{head}: {c.reason}; to decide: more rounds or {QUIETER}"
    where = (
        f"spans the margin {c.margin}"
        if low < c.margin < high
        else f"lies past the margin {c.margin} without a significant Mann-Whitney test"
    )
    done = f" after {rounds} of {max_rounds} rounds" if rounds and max_rounds else ""
    larger = (
        f"a margin of at least {high:.3g}"
        if c.worse_when == "higher"
        else f"a margin of at most {low:.3g}"
    )
    return (
        f"{head} candidate/baseline {point:.3f} ({confidence:.0%} interval "
        f"{low:.3f}–{high:.3f}) {where}{done}: neither within it nor a regression shown. "
        f"To decide: {_more_rounds(point, low, high, c.margin, rounds, max_rounds)}; "
        f"{QUIETER}; or {larger}"
    )


def _more_rounds(
    point: float, low: float, high: float, margin: float, rounds: int | None, max_rounds: int | None
) -> str:
    """Rounds that would narrow the interval enough, by the square-root law: the bound on the
    margin's side of the point must come closer than the margin."""
    bound = high if point < margin else low
    distance, spread = abs(math.log(margin / point)), abs(math.log(bound / point))
    now = rounds or max_rounds
    if now is None or distance < 1e-9:
        return "more rounds (`rounds`)"
    needed = math.ceil(now * (spread / distance) ** 2)
    if needed > 10 * (max_rounds or now):
        return "more rounds alone will hardly decide it (the estimate sits at the margin)"
    return f"more rounds (about {needed} a side at this spread: `rounds: {needed}`)"


def slo_unshown(check: SloCheck, concurrency: int) -> str | None:
    """An SLO is met when its p95's upper bound is under the limit and missed when the p95
    itself is over it; between the two (or with too few samples) nothing is shown."""
    if check.met is True or (check.p95_ms is not None and check.p95_ms > check.limit_ms):
        return None
    head = f"{streams(concurrency)}: SLO p95 {check.metric} {check.limit_ms} ms"
    if check.met is None or check.p95_ms is None or check.p95_upper_ms is None:
        return f"{head}: too few successful requests to check it; to decide: more rounds"
    return (
        f"{head}: p95 {check.p95_ms:.1f} ms is under it but its upper bound "
        f"{check.p95_upper_ms:.1f} ms is not; to decide: more rounds or a quieter machine"
    )


def slo_missed(check: SloCheck) -> bool:
    return check.met is False and check.p95_ms is not None and check.p95_ms > check.limit_ms


def unmeasured(cell: CellFigures) -> int:
    """Requests that measured nothing per output token: failed, or ended after one token."""
    with_tpot = cell.tpot_ms.n if cell.tpot_ms is not None else 0
    return cell.n_requests - with_tpot


def baseline_unmeasured(level: LevelFigures, settings: LatencySettings) -> str | None:
    """Why the level's baseline measured nothing, when it failed too often; else None."""
    live = level.baseline
    if live is None or not live.n_requests:
        return None
    n, limit = unmeasured(live), baseline_share_limit(settings)
    if n / live.n_requests <= limit:
        return None
    return (
        f"{streams(level.concurrency)}: {n} of {live.n_requests} baseline requests measured "
        f"nothing per token (failed or ended after one token), more than the {limit:.0%} "
        f"allowed: {_cause(live, level.concurrency, n)}. The level compares nothing"
    )


def baseline_cannot_recover(level: LevelFigures, settings: LatencySettings) -> bool:
    """Even if every later round's baseline requests succeeded, its share would stay over."""
    live, rounds, most = level.baseline, level.rounds, level.max_rounds
    if live is None or not live.n_requests or not rounds or not most:
        return False
    at_the_end = live.n_requests / rounds * most
    return unmeasured(live) / at_the_end > baseline_share_limit(settings)


def _cause(live: CellFigures, concurrency: int, n: int) -> str:
    one_token = (live.n_ok - (live.tpot_ms.n if live.tpot_ms else 0)) + sum(
        count for kind, count in live.errors.items() if _ONE_TOKEN.search(kind)
    )
    refused = sum(count for kind, count in live.errors.items() if _REFUSED.search(kind))
    errors = "; ".join(f"{kind} ({count}x)" for kind, count in live.errors.items()) or "none"
    if 2 * one_token >= n:
        return (
            "the server cut streams after one token (llama-cpp-python interrupts running "
            "streams for new ones: start it with `--interrupt_requests false`), errors: " + errors
        )
    if 2 * refused >= n:
        return (
            f"the server refused streams: {concurrency} are too many for its slots (keep the "
            "levels within them: llama.cpp `--parallel`, shown by `/props` total_slots; vLLM "
            f"`--max-num-seqs`), errors: {errors}"
        )
    slots = f"; at {concurrency} streams, perhaps more than its slots" if concurrency > 1 else ""
    return f"errors: {errors}{slots}"


def baseline_loaded(level: LevelFigures, settings: LatencySettings) -> str | None:
    """Why the level's comparisons cannot pass: the baseline generated more for others
    (the Service's clients) while measured than `max_baseline_others_share` of what it
    generated for the gate. A loaded baseline is slower, which flatters the candidate; a
    regression shown despite it still fails. None when it was not loaded, or not seen."""
    others, live = level.others, level.baseline
    if others is None or live is None or not live.throughput_tok_s:
        return None
    rate, share = others.tokens_per_s, others.share_of(live.throughput_tok_s)
    if rate is None or share is None or share <= settings.max_baseline_others_share:
        return None
    return (
        f"{streams(level.concurrency)}: the baseline generated {rate:.1f} "
        f"tokens/s for others (its Service's clients) while measured, {share:.0%} of the "
        f"{live.throughput_tok_s:.1f} tokens/s it generated for the gate, more than the "
        f"{settings.max_baseline_others_share:.0%} allowed (`max_baseline_others_share`): "
        "it was slowed by load the candidate does not carry, so the candidate is not shown "
        f"within. To decide: measure when the Service is quieter; or {QUIETER}"
    )
