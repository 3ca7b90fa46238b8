"""Figures of the parity gate, the findings that fail it, and their markdown rendering."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from gates.common import shown
from gates.common.result import Figures
from gates.common.settings import ParityCheck, ParityTolerances
from gates.http.capabilities import Capabilities
from gates.parity.compare import HeadCheck, ProbeCheck, PromptParity, TeacherForcedFigures
from gates.parity.long_context import LongContextFigures
from gates.parity.perplexity import PerplexityCheck

MAX_DIVERGENCE_ROWS = 20
DIVERGENCE_HEADER = (
    "| prompt | position | golden token | candidate token | preferred by (nats), golden / "
    "candidate | near-tie |"
)
# the same table's separator row
DIVERGENCE_RULE = "|---|---|---|---|---|---|"


class ParityFigures(Figures):
    golden_model: str
    candidate_model: str
    candidate_url: str
    prompts: list[PromptParity] = Field(default_factory=list)
    teacher_forced: TeacherForcedFigures | None = None
    teacher_forced_compared: bool = Field(False, description="both sides scored the text")
    perplexity: PerplexityCheck | None = Field(
        None, description="the teacher-forced perplexity ratio's interval against its limit"
    )
    probes: list[ProbeCheck] = Field(default_factory=list)
    heads: list[HeadCheck] = Field(default_factory=list)
    long_context: LongContextFigures | None = None
    not_compared: dict[str, str] = Field(default_factory=dict, description="and why")
    golden_server: Capabilities | None = None
    candidate_server: Capabilities | None = None

    def compared_checks(self) -> list[ParityCheck]:
        found: list[ParityCheck] = sorted({p.api for p in self.prompts})
        if self.teacher_forced_compared:
            found.append("teacher_forced")
        if self.probes:
            found.append("probes")
        if self.heads:
            found.append("heads")
        if self.long_context is not None:
            found.append("long_context")
        return found

    @property
    def n_tokens_golden(self) -> int:
        return sum(p.n_golden_tokens for p in self.prompts)

    @property
    def n_tokens_identical(self) -> int:
        return sum(p.n_identical for p in self.prompts)

    def failures(self, tolerances: ParityTolerances) -> list[str]:
        """Every reason this candidate is not at parity; empty when it is."""
        found = [p.describe_template() for p in self.prompts if p.template_differs]
        found += [
            p.divergence.describe(p.prompt_id)
            for p in self.prompts
            if p.divergence and not p.divergence.near_tie
        ]
        found += self._teacher_forced_failures(tolerances)
        found += self._generated_failures(tolerances)
        found += _long_context_failures(self.long_context, tolerances)
        found += [
            f"probe {c.name}: golden {c.golden:.6g}, candidate {c.candidate}, relative "
            f"error {c.relative_error} above {tolerances.probe_rel_tol}"
            for c in self.probes
            if not c.passed
        ]
        found += [
            f"head {h.name}: golden {h.golden!r}, candidate {h.candidate!r}"
            for h in self.heads
            if not h.passed
        ]
        return found

    def generated_kl(self) -> list[float]:
        """KL(golden || candidate) at every generated position both sides reached alike."""
        return [k for p in self.prompts for k in p.kl if k is not None]

    def _generated_failures(self, tolerances: ParityTolerances) -> list[str]:
        """Without teacher forcing (chat: no echo) the generated positions' distributions
        are the only numeric evidence: gated like the teacher-forced ones, so that a change
        that keeps every greedy token (scaled logits) cannot pass on identical words."""
        kl = self.generated_kl()
        if self.teacher_forced_compared or not kl:
            return []
        mean, p99 = float(np.mean(kl)), float(np.quantile(kl, 0.99))
        found = []
        if mean > tolerances.kl_mean_max:
            found.append(
                f"generated positions' mean KL {mean:.3g} above {tolerances.kl_mean_max} "
                f"(over {len(kl)} positions; no teacher forcing to compare instead)"
            )
        if p99 > tolerances.kl_p99_max:
            found.append(
                f"generated positions' p99 KL {p99:.3g} above {tolerances.kl_p99_max} "
                f"(over {len(kl)} positions)"
            )
        return found

    def _teacher_forced_failures(self, tolerances: ParityTolerances) -> list[str]:
        tf = self.teacher_forced
        if not self.teacher_forced_compared:
            return []
        if tf is None:
            return [
                "teacher-forced reference: positions differ from the golden's (another "
                "tokeniser or an empty answer), so the candidate is not the same model"
            ]
        found = []
        if tf.kl_mean > tolerances.kl_mean_max:
            found.append(f"teacher-forced mean KL {tf.kl_mean:.3g} above {tolerances.kl_mean_max}")
        if tf.kl_p99 > tolerances.kl_p99_max:
            found.append(f"teacher-forced p99 KL {tf.kl_p99:.3g} above {tolerances.kl_p99_max}")
        if self.perplexity is not None and (finding := self.perplexity.finding()):
            found.append(finding)
        if tf.top_token_agreement < tolerances.top_token_agreement_min:
            found.append(
                f"teacher-forced top-token agreement {tf.top_token_agreement:.1%} below "
                f"{tolerances.top_token_agreement_min:.1%}"
            )
        return found

    def undecided(self) -> list[str]:
        """What the comparisons made could not tell either way (no verdict, when nothing
        fails): the perplexity ratio's interval spanning its limit."""
        check = self.perplexity if self.teacher_forced_compared else None
        return [why] if check is not None and (why := check.undecided()) else []

    def markdown(self) -> str:
        lines = [
            f"Candidate `{self.candidate_model}` at {self.candidate_url} against golden "
            f"`{self.golden_model}`: {self.n_tokens_identical}/{self.n_tokens_golden} "
            f"golden tokens identical over {len(self.prompts)} prompts."
        ]
        for side, caps in (("Golden", self.golden_server), ("Candidate", self.candidate_server)):
            if caps is not None:
                lines.append(f"{side} server {caps.summary()}.")
        lines += self._divergence_table() + self._teacher_forced_lines()
        lines += _long_context_lines(self.long_context) + self._check_table()
        if self.not_compared:
            lines += ["", "**Not compared**", ""]
            lines += [f"- {name}: {why}" for name, why in self.not_compared.items()]
        return "\n".join(lines)

    def _divergence_table(self) -> list[str]:
        rows = [p for p in self.prompts if p.divergence][:MAX_DIVERGENCE_ROWS]
        if not rows:
            return []
        out = ["", DIVERGENCE_HEADER, DIVERGENCE_RULE]
        for p in rows:
            d = p.divergence
            assert d is not None
            where = f"{d.position}" + (" (char)" if d.unit == "character" else "")
            out.append(
                f"| {p.prompt_id} ({p.api}) | {where} | {d.golden_token} "
                f"({_lp(d.golden_logprob)}) | {d.candidate_token} ({_lp(d.candidate_logprob)}) "
                f"| {_gap(d.golden_gap)} / {_gap(d.candidate_gap)} "
                f"| {'yes' if d.near_tie else 'no'} |"
            )
        return out

    def _teacher_forced_lines(self) -> list[str]:
        tf = self.teacher_forced
        if not self.teacher_forced_compared:
            return []
        if tf is None:
            return ["", "Teacher-forced reference: not comparable."]
        return [
            "",
            f"Teacher-forced reference ({tf.n_positions} positions): mean KL "
            f"{tf.kl_mean:.3g}, p99 KL {tf.kl_p99:.3g}, top-token agreement "
            f"{tf.top_token_agreement:.1%}, perplexity ratio "
            + (
                self.perplexity.interval_text()
                if self.perplexity is not None
                else shown.ratio(tf.perplexity_ratio)
            )
            + (
                f" (over the {tf.perplexity_positions} positions the golden scored; at "
                f"{tf.perplexity_bounded} the candidate ranked the token below its top-k and "
                "counts at the bound that gives)."
                if tf.perplexity_bounded
                else "."
            ),
        ]

    def _check_table(self) -> list[str]:
        if not (self.probes or self.heads):
            return []
        out = ["", "| check | golden | candidate | ok |", "|---|---|---|---|"]
        out += [
            f"| probe {c.name} | {c.golden:.6g} | {c.candidate} | {_ok(c.passed)} |"
            for c in self.probes
        ]
        out += [
            f"| head {h.name} | {h.golden} | {h.candidate} | {_ok(h.passed)} |" for h in self.heads
        ]
        return out


def _long_context_failures(
    figures: LongContextFigures | None, tolerances: ParityTolerances
) -> list[str]:
    """A prompt refused that the golden's server answered; KL too high deep in the context;
    KL that grows with position (significantly, and by more than the set rise: a benign
    change stays flat, a position-dependent one rises from nothing at the first tokens)."""
    if figures is None:
        return []
    if figures.refused:
        return [
            f"long context: the candidate refused {figures.refused}, which the golden's server "
            "answered: its context is shorter than the one the Service is used with"
        ]
    if not figures.buckets:
        return [
            "long context: the candidate's answers cannot be compared with the golden's "
            "(no logprobs, or another tokeniser)"
        ]
    late, found = figures.buckets[-1], []
    where = f"prompts of {late.first_token}-{late.last_token} tokens"
    if late.kl_mean > tolerances.context_kl_mean_max:
        found.append(
            f"long context: mean next-token KL {late.kl_mean:.3g} over {where}, above "
            f"{tolerances.context_kl_mean_max}"
        )
    rise, p = figures.rise, figures.trend_p
    grows = p is not None and p <= tolerances.context_trend_alpha
    if grows and rise is not None and rise > tolerances.context_kl_rise_max:
        found.append(
            f"long context: KL grows with position (Spearman rho {figures.trend_rho:.2f}, "
            f"p {p:.3g}): {late.kl_mean:.3g} over {where}, {rise:.3g} above the shortest "
            f"quarter's {figures.buckets[0].kl_mean:.3g} (at most "
            f"{tolerances.context_kl_rise_max})"
        )
    return found


def _long_context_lines(figures: LongContextFigures | None) -> list[str]:
    if figures is None:
        return []
    lines = [
        "",
        f"Long context ({figures.n_probes} prompts up to {figures.reached_tokens} tokens"
        + (f"; {figures.capped}" if figures.capped else "")
        + "):",
    ]
    if figures.refused:
        return [*lines, f"the candidate refused {figures.refused}."]
    lines += [
        "",
        "| prompt tokens | prompts | mean KL | top-token agreement |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {b.first_token}-{b.last_token} | {b.n} | {b.kl_mean:.3g} | "
        f"{b.top_token_agreement:.0%} |"
        for b in figures.buckets
    ]
    if figures.trend_rho is not None:
        lines.append(
            f"\nTrend of KL with position: Spearman rho {figures.trend_rho:.2f}, one-sided "
            f"p {figures.trend_p:.3g}."
        )
    return lines


def _lp(logprob: float | None) -> str:
    return "n/a" if logprob is None else f"logprob {logprob:.3f}"


def _gap(gap: float | None) -> str:
    return "not listed" if gap is None else f"{gap:.3f}"


def _ok(passed: bool) -> str:
    return "yes" if passed else "NO"
