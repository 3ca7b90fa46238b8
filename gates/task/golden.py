"""Golden task scores: a server's answers to a suite, recorded to stand in for the live
baseline when there is none (an in-place handoff)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import ValidationError

from gates.errors import GoldenError
from gates.task.collect import TASK_GOLDEN_FORMAT, SideScores, collect_scores
from gates.task.suite import TaskSuite


def record_task_golden(url: str, suite: TaskSuite, *, model_id: str | None) -> SideScores:
    return asyncio.run(collect_scores(url, suite, model_id=model_id))


def save_task_golden(scores: SideScores, path: Path) -> None:
    path.write_text(scores.model_dump_json(indent=1) + "\n")


def load_task_golden(path: Path) -> SideScores:
    try:
        text = path.read_text()
    except OSError as exc:
        raise GoldenError(f"cannot read the golden task scores {path}: {exc.strerror}") from exc
    try:
        scores = SideScores.model_validate_json(text)
    except ValidationError as exc:
        raise GoldenError(
            f"{path} is not a golden task-score file ({TASK_GOLDEN_FORMAT}): {exc.errors()[0]}; "
            "record one with `handoff golden record --task-suite`"
        ) from exc
    if scores.format != TASK_GOLDEN_FORMAT:
        raise GoldenError(f"{path} is {scores.format!r}, expected {TASK_GOLDEN_FORMAT!r}")
    return scores
