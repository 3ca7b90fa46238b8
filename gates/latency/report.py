"""Figures of the latency gate and their markdown rendering."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from gates.common import shown
from gates.common.result import Figures
from gates.common.settings import LatencySettings
from gates.latency.cell import CellFigures
from gates.latency.compare import Comparison, MetricName
from gates.latency.metrics import LatencySummary
from gates.latency.others import OthersLoad
from gates.latency.slo import SloCheck
from gates.latency.slots import Slots


class MetricPower(BaseModel):
    """What one comparison of a level could have told: its interval's spread in margin terms."""

    metric: MetricName
    margin: float
    detectable: float = Field(
        description="the smallest regression (a ratio past the margin) whose interval, at "
        "this run's spread, would have lain wholly past the margin"
    )
    half_width: float = Field(description="half the interval's width, relative to its point")


class LevelFigures(BaseModel):
    concurrency: int
    candidate: CellFigures
    baseline: CellFigures | None
    comparisons: list[Comparison]
    slo_checks: list[SloCheck]
    passed: bool | None
    findings: list[str]
    undecided: list[str] = Field(
        default_factory=list,
        description="why the level has no verdict: what was not shown, and what would decide it",
    )
    power: list[MetricPower] = Field(
        default_factory=list,
        description="per compared metric, the smallest regression it could show",
    )
    rounds: int | None = Field(None, description="rounds run a side before the verdict")
    max_rounds: int | None = Field(None, description="the most it could have run")
    others: OthersLoad | None = Field(
        None, description="what the baseline generated for others while measured"
    )


class LatencyFigures(Figures):
    candidate_url: str
    baseline_url: str | None
    candidate_model: str | None = None
    baseline_model: str | None = None
    levels: list[LevelFigures]
    settings: LatencySettings
    slots: Slots | None = Field(None, description="requests the servers run at once, if known")
    slots_note: str = Field("", description="how the levels stand to the slots")

    def markdown(self) -> str:
        parts = [
            f"Candidate `{self.candidate_model}` at {self.candidate_url}"
            + (
                f", baseline `{self.baseline_model}` at {self.baseline_url}"
                if self.baseline_url
                else ", no baseline"
            )
            + f"; {self.settings.max_tokens} output tokens per request."
            + (f" Slots: {self.slots_note}." if self.slots_note else "")
        ]
        for level in self.levels:
            parts += ["", render_level(level)]
        return "\n".join(parts)


def _fmt(
    summary: LatencySummary | None, *fields: str, render: Callable[[float], str] = shown.ms
) -> str:
    if summary is None:
        return "no samples"
    return " / ".join(render(getattr(summary, name)) for name in fields)


def _little(cell: CellFigures) -> str:
    if cell.little is None:
        return "n/a"
    return (
        f"{cell.little.measured_tok_s:.1f} / {cell.little.predicted_tok_s:.1f} "
        f"({shown.ratio(cell.little.ratio)})"
    )


_ROWS: list[tuple[str, Callable[[CellFigures], str]]] = [
    ("requests ok / failed", lambda c: f"{c.n_ok} / {c.n_failed}"),
    ("N_out counted from events (no usage)", lambda c: str(c.n_out_guessed)),
    ("ended by the model before max_tokens", lambda c: str(c.n_ended_early)),
    ("TTFT ms p50 / p95 / p99", lambda c: _fmt(c.ttft_ms, "p50", "p95", "p99")),
    ("TPOT ms mean / p50 / p95", lambda c: _fmt(c.tpot_ms, "mean", "p50", "p95")),
    ("ITL ms p50 / p99", lambda c: _fmt(c.itl_ms, "p50", "p99")),
    ("E2EL ms p50 / p95", lambda c: _fmt(c.e2el_ms, "p50", "p95")),
    ("tokens per event mean", lambda c: _fmt(c.tokens_per_event, "mean", render=shown.ratio)),
    ("client queue ms p50 / p99", lambda c: _fmt(c.queue_ms, "p50", "p99")),
    ("throughput tok/s", lambda c: shown.ratio(c.throughput_tok_s)),
    ("goodput req/s", lambda c: shown.ratio(c.goodput_req_s)),
    ("Little's law tok/s measured / predicted", _little),
]


def streams(*counts: int) -> str:
    """Concurrency levels as a person says them: "1 stream", "16 streams", "1, 4 and 16
    streams" (the noun agrees with the last count)."""
    if not counts:
        return "no streams"
    named = [str(n) for n in counts]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    return f"{listed} {'stream' if counts[-1] == 1 else 'streams'}"


def verdict_word(level: LevelFigures) -> str:
    """How a level's verdict reads in the report and on its picture."""
    return {True: "pass", False: "FAIL", None: "no verdict"}[level.passed]


def render_level(level: LevelFigures) -> str:
    verdict = verdict_word(level)
    cells = [level.candidate] + ([level.baseline] if level.baseline else [])
    header = "| " + " | ".join(["", *(c.label for c in cells)]) + " |"
    lines = [f"#### {streams(level.concurrency)}: {verdict}", ""]
    if level.rounds is not None and level.max_rounds is not None:
        early = " (verdict certain: stopped early)" if level.rounds < level.max_rounds else ""
        lines += [f"{level.rounds} of at most {level.max_rounds} rounds a side{early}.", ""]
    lines += [
        header,
        "|" + "---|" * (len(cells) + 1),
    ]
    lines += [
        "| " + " | ".join([name, *(render(c) for c in cells)]) + " |" for name, render in _ROWS
    ]
    if level.comparisons:
        lines += [
            "",
            "| metric | ratio | interval | p | margin | outcome |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_comparison_row(c) for c in level.comparisons]
    if level.power:
        lines += ["", f"- {power_line(level.power)}"]
    lines += [f"- no verdict: {why}" for why in level.undecided]
    if level.others is not None and level.baseline is not None:
        line = level.others.line(level.baseline.throughput_tok_s)
        lines += [f"- {line}"] if line else []
    lines += [
        f"- SLO p95 {s.metric}: upper bound {shown.ms(s.p95_upper_ms)} ms, limit "
        f"{s.limit_ms} ms, {'met' if s.met else 'no verdict' if s.met is None else 'MISSED'}"
        for s in level.slo_checks
    ]
    return "\n".join(lines)


def power_line(power: list[MetricPower]) -> str:
    """The power a level had, as a person reads it."""
    shown_ = ", ".join(
        f"{p.metric} ×{p.detectable:.3f} (margin {p.margin}, interval ±{p.half_width:.1%})"
        for p in power
    )
    return f"smallest regression this run could show: {shown_}"


def _comparison_row(c: Comparison) -> str:
    interval = (
        "n/a" if c.ratio_low is None else f"{shown.ratio(c.ratio_low)}–{shown.ratio(c.ratio_high)}"
    )
    p_value = "n/a" if c.p_value is None else f"{c.p_value:.2g}"
    return (
        f"| {c.metric} | {shown.ratio(c.ratio)} | {interval} | {p_value} | "
        f"{c.margin} ({c.worse_when} is worse) | {c.outcome} |"
    )
