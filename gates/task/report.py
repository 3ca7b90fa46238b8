"""The task gate's figures and their markdown: both sides' scores with intervals, the
paired test, the rule, and every case that flipped either way with both answers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gates.common.result import Figures
from gates.common.stats import Interval

ANSWER_SHOWN = 160  # characters of an answer in the report


class Flip(BaseModel):
    case_id: str
    direction: Literal["lost", "gained"]
    input: str
    baseline_answer: str
    candidate_answer: str
    baseline_verdict: str
    candidate_verdict: str


class TaskFigures(Figures):
    suite: str
    n_cases: int
    samples: int
    candidate_url: str
    baseline: str = ""  # where the baseline's scores come from
    test: Literal["exact McNemar", "paired bootstrap"] = "exact McNemar"
    baseline_score: Interval | None = None  # percent
    candidate_score: Interval | None = None
    loss: Interval | None = None  # baseline - candidate, points, bounds one-sided at confidence
    detectable_cases: int | None = None  # fewest lost cases the suite shows as a loss
    detectable_loss: float | None = None  # their loss in points; None: the suite measures nothing
    cases_needed: int | None = None  # about how many would decide a no verdict
    lost: int = 0
    gained: int = 0
    p_value: float | None = None  # exact McNemar, candidate worse
    margin: float = 2.0
    floor: float | None = None
    confidence: float = 0.95
    rule: str = ""
    isolation: str = ""
    flips: list[Flip] = Field(default_factory=list)

    def markdown(self) -> str:
        lines = [
            f"Suite **{self.suite}**: {self.n_cases} cases, {self.samples} sample(s) each; "
            f"{self.test}.",
            "",
            f"| side | score (% of cases) | {self.confidence:.0%} interval |",
            "|---|---|---|",
        ]
        for name, where, score in (
            ("baseline", self.baseline, self.baseline_score),
            ("candidate", self.candidate_url, self.candidate_score),
        ):
            if score is not None:
                shown = f"{score.point:.1f} | {score.low:.1f} – {score.high:.1f}"
                lines.append(f"| {name} ({where}) | {shown} |")
        lines.append("")
        lines.append(f"Cases lost by the candidate: {self.lost}; gained: {self.gained}.")
        if self.p_value is not None:
            lines.append(f"Exact McNemar, one-sided (candidate worse): p = {self.p_value:.4f}.")
        if self.loss is not None:
            d = self.loss
            lines.append(
                f"Loss (baseline − candidate): {d.point:+.1f} points, one-sided "
                f"{self.confidence:.0%} bounds {d.low:+.1f} to {d.high:+.1f}; margin "
                f"{self.margin:g}."
            )
        if self.detectable_loss is not None:
            lines.append(
                f"Power: the smallest loss this suite can show is {self.detectable_loss:.1f} "
                f"points ({self.detectable_cases} of {self.n_cases} cases lost, none gained)."
            )
        elif self.loss is not None:
            lines.append("Power: none; the baseline scores on too few cases to show any loss.")
        if self.cases_needed is not None:
            lines.append(f"About {self.cases_needed} cases would decide it at these rates.")
        lines += [
            "",
            f"**Rule:** {self.rule}",
            "",
            f"**Isolation of code checks:** {self.isolation}",
        ]
        if self.flips:
            lines += [
                "",
                "**Flipped cases**",
                "",
                "| case | flip | input | baseline answer | verdict | candidate answer | verdict |",
                "|---|---|---|---|---|---|---|",
            ]
            for f in self.flips:
                cells = [
                    f.case_id, f.direction, f.input, f.baseline_answer, f.baseline_verdict,
                    f.candidate_answer, f.candidate_verdict,
                ]  # fmt: skip
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        return "\n".join(lines)


def _cell(text: str) -> str:
    text = text if len(text) <= ANSWER_SHOWN else text[: ANSWER_SHOWN - 1] + "…"
    return repr(text)[1:-1].replace("|", "\\|")
