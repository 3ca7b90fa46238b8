"""The value every gate returns: a verdict, its reason, typed figures, evidence and a report.

A failure is a value, not an exception. `passed` is None when the gate could not decide
(no samples, nothing to compare against, server unreachable for parity): "no verdict" is
never reported as a pass or as 0 ms.
"""

from __future__ import annotations

from typing import Generic, Literal, Self, TypeVar

from pydantic import BaseModel, Field

from gates.common import shown


class Figures(BaseModel):
    """Base of each gate's figures; renders itself as markdown."""

    def markdown(self) -> str:
        rows = "\n".join(
            f"| {key} | {shown.figure(key, value)} |" for key, value in self.model_dump().items()
        )
        return f"| figure | value |\n|---|---|\n{rows}"


FiguresT = TypeVar("FiguresT", bound=Figures)
Verdict = Literal["pass", "fail", "no verdict"]


class GateResult(BaseModel, Generic[FiguresT]):
    """Outcome of one gate run."""

    name: str
    passed: bool | None
    reason: str
    figures: FiguresT
    evidence: list[str] = Field(default_factory=list, description="findings behind the verdict")

    @classmethod
    def unanswered(cls, name: str, exc: Exception, figures: FiguresT) -> Self:
        """No verdict: a server could not answer; `exc` says which and why."""
        return cls(
            name=name,
            passed=None,
            reason=f"no verdict: {exc}",
            figures=figures,
            evidence=[str(exc)],
        )

    @property
    def verdict(self) -> Verdict:
        return "no verdict" if self.passed is None else ("pass" if self.passed else "fail")

    def markdown(self) -> str:
        """A short report for the CLI: the verdict as its heading, then `body()`."""
        return f"## {self.name} gate: {self.verdict.upper()}\n\n" + self.body()

    def body(self, preface: str = "") -> str:
        """The report under a heading the caller writes: the reason first, then
        `preface` (what was measured, when the caller knows more), figures, evidence."""
        lines = [self.reason, ""] + ([preface, ""] if preface else [])
        lines += [self.figures.markdown(), ""]
        if self.evidence:
            lines += ["**Evidence**", ""] + [f"- {item}" for item in self.evidence] + [""]
        return "\n".join(lines)


def verdict_of(failures: list[str], *, decided: bool) -> bool | None:
    """Combine findings: any failure fails; otherwise pass if anything was decided."""
    if failures:
        return False
    return True if decided else None
