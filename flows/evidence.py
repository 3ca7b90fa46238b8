"""What the gates found, as the approval, the report and the pictures read it: one
summary per gate and the evidence binding them to the pinned image by a hash. Data only,
so the report can read it without importing the gating step."""

from __future__ import annotations

from pydantic import BaseModel


class GateSummary(BaseModel):
    name: str
    verdict: str
    reason: str
    markdown: str
    figures: dict[str, object]


class Evidence(BaseModel):
    image: str | None
    gates: list[GateSummary]
    sha256: str
    # Failed port-forward connections while measuring: a gate's failure may be theirs.
    port_forward_problems: list[str] = []

    @property
    def passed(self) -> bool:
        return all(g.verdict == "pass" for g in self.gates)

    @property
    def undecided(self) -> list[GateSummary]:
        """The gates that could not tell and leave the decision to the approval (side by
        side): the evidence showed neither a pass nor a regression, so neither passing
        silently nor rolling back is the handoff's to decide."""
        return [g for g in self.gates if g.verdict == "no verdict"]

    @property
    def for_a_person(self) -> bool:
        """Nothing failed; what is not a pass is a no verdict a person may weigh."""
        undecided = {g.name for g in self.undecided}
        return all(g.verdict == "pass" or g.name in undecided for g in self.gates)

    def verdict(self) -> str:
        """The gates' verdict and its reason, in one line."""
        failed = [g for g in self.gates if g.verdict != "pass"]
        if not self.gates:
            return "no gates ran"
        if not failed:
            names = ", ".join(g.name for g in self.gates)
            return f"PASS: all {len(self.gates)} gates pass ({names})"
        if self.for_a_person:
            return (
                "NO VERDICT, for the approver to weigh: "
                + "; ".join(f"{g.name}: {g.reason}" for g in failed)
                + " (every other gate passes)"
            )
        return "FAIL: " + "; ".join(f"{g.name} {g.verdict}: {g.reason}" for g in failed)

    def brief(self) -> str:
        """The verdict, the image and the hash binding an approval to this evidence."""
        return (
            f"**Verdict:** {self.verdict()}  \n**Image:** `{self.image}`  \n"
            f"**Evidence sha256:** `{self.sha256}`"
        )

    def markdown(self) -> str:
        """The verdict and its reason first, then one section per gate (its verdict as
        the heading, its reason first)."""
        head = self.brief() + "\n"
        tail = "".join(f"\n- {p}" for p in self.port_forward_problems)
        return (
            head
            + "\n".join(f"\n### {g.name}: {g.verdict}\n\n{g.markdown}" for g in self.gates)
            + (f"\n\n### port-forward failures\n{tail}" if tail else "")
        )
