"""What a bake watched, saw and decided (flows/bake.py), as the record keeps it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BakeReport(BaseModel):
    """What the bake watched, what it saw and what it decided, for the record."""

    model_config = ConfigDict(frozen=True)

    verdict: Literal["pass", "breach"]
    started: float = Field(description="epoch seconds")
    seconds: float
    duration_s: float = Field(description="the window the spec asked for")
    warm_way_back: str | None = Field(
        description="the old pods a breach returns to; None: reports and alerts only"
    )
    why_no_way_back: str = ""
    watched: list[str]
    not_watched: list[str] = Field(description="signals not available, and why")
    breach: str | None = None
    restored_s: float | None = Field(None, description="breach to the Service back on old pods")
    probe_turns: int = 0
    probe_failures: int = 0
    answers: int = 0
    errors: int = 0
    restarts: int = 0

    def markdown(self) -> str:
        summary = [
            f"**Way back:** the warm pods of {self.warm_way_back}"
            if self.warm_way_back
            else f"**Way back:** none ({self.why_no_way_back}): the bake reports and alerts only"
        ]
        if self.breach:
            summary.append(f"**Breach:** {self.breach}")
        if self.restored_s is not None:
            summary.append(f"**Back on the old pods:** {self.restored_s:.1f} s after the breach")
        summary.append(
            f"**Seen:** {self.restarts} restart(s); {self.errors} of {self.answers} answers "
            f"5xx on /metrics; {self.probe_failures} of {self.probe_turns} probe turns failed"
        )
        signals = [f"- watched: {w}" for w in self.watched]
        signals += [f"- not watched: {w}" for w in self.not_watched]
        heading = f"## Bake: {self.verdict} ({self.seconds:.0f} s of {self.duration_s:g} s)"
        return "\n\n".join([heading, "  \n".join(summary), "\n".join(signals)])
