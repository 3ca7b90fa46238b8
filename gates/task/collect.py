"""Ask one server every case of a task suite and score its answers.

Requests go one at a time, with the neutral sampling of gates.http.sampling: greedy, or with
`samples` > 1 the suite's temperature and the sample's index as seed, the same on both
sides. A request that fails is a ServerError: a server that cannot answer gets no score.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, Field

from gates.errors import ServerError
from gates.http import api
from gates.http.capabilities import discover
from gates.task.check import check
from gates.task.suite import TaskCase, TaskSuite

TASK_GOLDEN_FORMAT = "handoff.task-golden/v1"
REQUEST_TIMEOUT_S = 300.0
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class CaseOutcome(BaseModel):
    """One case on one side: each sample's answer, score and the checker's word on it."""

    id: str
    answers: list[str]
    scores: list[float]
    details: list[str]

    @property
    def score(self) -> float:
        return sum(self.scores) / len(self.scores)


class SideScores(BaseModel):
    """A server's answers to a suite and their scores; saved, it is the golden task file."""

    format: str = TASK_GOLDEN_FORMAT
    suite: str
    suite_digest: str
    model_id: str
    source_url: str
    recorded_at: str
    sampling: dict[str, Any] = Field(description="the sampling fields every request carried")
    cases: list[CaseOutcome]

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cases) / len(self.cases)


async def collect_scores(url: str, suite: TaskSuite, *, model_id: str | None) -> SideScores:
    """Answers and scores of the server at `url` (ServerError when it cannot answer)."""
    async with api.make_client(url, timeout_s=REQUEST_TIMEOUT_S) as client:
        model = await api.resolve_model_id(client, model_id)
        caps = await discover(client, model, logprobs=False)
        base = caps.greedy_sampling()
        cases = []
        for case in suite.cases:
            if not getattr(caps, case.api):
                raise ServerError(f"{url} has no {PATHS[case.api]}, which case {case.id} needs")
            answers = [
                await _answer(client, model, case, suite, _sampled(base, suite, i))
                for i in range(suite.sampling.samples)
            ]
            verdicts = await asyncio.gather(
                *(asyncio.to_thread(check, case.check, a, suite.limits) for a in answers)
            )
            cases.append(
                CaseOutcome(
                    id=case.id,
                    answers=answers,
                    scores=[v.score for v in verdicts],
                    details=[v.detail for v in verdicts],
                )
            )
    return SideScores(
        suite=suite.name,
        suite_digest=suite.digest(),
        model_id=model,
        source_url=url,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        sampling=_sampled(base, suite, 0),
        cases=cases,
    )


def _sampled(base: dict[str, Any], suite: TaskSuite, index: int) -> dict[str, Any]:
    if suite.sampling.samples == 1:
        return base
    return base | {"temperature": suite.sampling.temperature, "seed": index}


async def _answer(
    client: httpx.AsyncClient, model: str, case: TaskCase, suite: TaskSuite, fields: dict
) -> str:
    body: dict[str, Any] = {"model": model, "max_tokens": case.max_tokens or suite.max_tokens}
    body |= fields
    if case.stop:
        body["stop"] = case.stop
    answer = f"{client.base_url}'s answer to case {case.id}"
    if case.messages is not None:
        body["messages"] = [m.model_dump() for m in case.messages]
        payload = await api.post_json(client, "/v1/chat/completions", body)
        return str(api.first_choice(payload, answer).get("message", {}).get("content") or "")
    body["prompt"] = case.prompt
    payload = await api.post_json(client, "/v1/completions", body)
    return str(api.first_choice(payload, answer).get("text") or "")
