"""The teacher-forced perplexity check's three outcomes, from an interval (pure).

The ratio is exp(mean(golden logprob - candidate logprob)) over the reference text's
positions. Its point alone says little over a short text: a benign kernel change moves each
position's logprob a little either way, and over 45 positions that noise alone can put the
point past a 3 % limit (flash attention on llama.cpp: 1.06), while over 300 it sits at 0.5 %.
So the check decides on the interval of the mean: **within** when the whole interval lies
inside the limit, **beyond** when it lies wholly outside, otherwise **undecided** (no
verdict), naming what would decide it. Neighbouring positions of one text move together, so
the bootstrap draws runs of `BLOCK` positions, not single ones.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from gates.common import shown
from gates.common.stats import bootstrap_interval

BLOCK = 8
RESAMPLES = 2000
SEED = 0
Outcome = Literal["within", "beyond", "undecided"]


class PerplexityCheck(BaseModel):
    """The mean log gap's interval against the limit (all in log units)."""

    model_config = ConfigDict(frozen=True)

    point: float
    low: float
    high: float
    limit: float
    positions: int
    confidence: float

    @property
    def outcome(self) -> Outcome:
        if -self.limit <= self.low and self.high <= self.limit:
            return "within"
        if self.low > self.limit or self.high < -self.limit:
            return "beyond"
        return "undecided"

    @property
    def half_width(self) -> float:
        """The smallest change of perplexity this reference can show, in log units."""
        return (self.high - self.low) / 2

    def interval_text(self) -> str:
        return (
            f"{shown.ratio(math.exp(self.point))} ({self.confidence:.0%} interval "
            f"{math.exp(self.low):.3f}-{math.exp(self.high):.3f} over {self.positions} "
            "positions)"
        )

    def finding(self) -> str | None:
        """Why the candidate fails, when it does."""
        if self.outcome != "beyond":
            return None
        return (
            f"teacher-forced perplexity ratio {self.interval_text()}: |log| surely above "
            f"{self.limit}"
        )

    def undecided(self) -> str | None:
        """Why this text cannot tell, and what would, when it cannot."""
        if self.outcome != "undecided":
            return None
        room = self.limit - abs(self.point)
        if room > 0 and 0 < self.half_width < math.inf:
            needed = math.ceil(self.positions * (self.half_width / room) ** 2)
            decide = (
                f"a reference text of about {needed} positions would show it within at this "
                "spread (`handoff golden record --reference FILE`), or a wider "
                "log_perplexity_ratio_max"
            )
        else:
            decide = (
                "a longer reference text (`handoff golden record --reference FILE`) would show "
                "whether it is beyond"
            )
        return (
            f"teacher-forced perplexity ratio {self.interval_text()}: the interval spans the "
            f"|log| limit {self.limit}, so the text shows neither parity nor a regression; "
            + decide
        )


def check_perplexity(
    log_gaps: list[float], *, limit: float, confidence: float
) -> PerplexityCheck | None:
    """The check over the per-position log gaps; None when there are none. Fewer than two
    runs of `BLOCK` positions give an interval as wide as their spread allows: identical
    logprobs still show within, anything else stays undecided."""
    if not log_gaps:
        return None
    gaps = np.asarray(log_gaps, dtype=float)
    point = float(gaps.mean())
    n_blocks = len(gaps) // BLOCK
    if n_blocks < 2:
        constant = bool(np.all(gaps == gaps[0]))
        low, high = (point, point) if constant else (-math.inf, math.inf)
    else:
        blocks = np.array_split(gaps, n_blocks)
        interval = bootstrap_interval(
            blocks,
            lambda v: np.mean(v, axis=-1),
            confidence=confidence,
            n_resamples=RESAMPLES,
            seed=SEED,
        )
        low, high = interval.low, interval.high
    return PerplexityCheck(
        point=point,
        low=low,
        high=high,
        limit=limit,
        positions=len(gaps),
        confidence=confidence,
    )
