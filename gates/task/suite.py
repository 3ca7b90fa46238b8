"""The task suite: cases a model server must still answer correctly, each with its checker.

A suite is a YAML (or JSON) file: `name`, optional `sampling` and `max_tokens`, and `cases`.
A case is a raw completion (`prompt`) or a chat turn (`messages`), and one checker:

- `exact` / `normalised`: the answer equals the text (normalised: case, spaces, punctuation
  at the ends ignored); `regex`: the pattern is found (Python `re.search`);
- `number`: the first number in the answer is within `tolerance` of `value`;
- `json`: the answer (or its first fenced block) is JSON valid against `schema`;
- `function`: Python source defining `check(answer)` returning a bool or a score in [0, 1];
- `code`: the answer's code (its first fenced block, or all of it), then `tests`, whose
  top-level asserts are judged outside the sandbox (gates.task.tests says which forms).

`function` and `code` run only in the sandbox (gates.task.sandbox).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gates.common.prompts import Turn
from gates.errors import GateError
from yamlfile import read_mapping


class SuiteError(GateError):
    """A task suite file cannot be used."""


class _Checker(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Exact(_Checker):
    kind: Literal["exact"] = "exact"
    expected: str


class Normalised(_Checker):
    kind: Literal["normalised"] = "normalised"
    expected: str


class Regex(_Checker):
    kind: Literal["regex"] = "regex"
    pattern: str
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return value


class Number(_Checker):
    kind: Literal["number"] = "number"
    value: float
    tolerance: float = Field(0.0, ge=0)


class JsonSchema(_Checker):
    kind: Literal["json"] = "json"
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"not a JSON schema: {exc.message}") from exc
        return value


class Function(_Checker):
    kind: Literal["function"] = "function"
    source: str = Field(description="Python defining check(answer) -> bool | float in [0, 1]")


class Code(_Checker):
    kind: Literal["code"] = "code"
    tests: str = Field(description="asserts on the answer's values (gates.task.tests)")

    @field_validator("tests")
    @classmethod
    def _judgeable(cls, value: str) -> str:
        from gates.task.tests import plan

        plan(value)
        return value


Checker = Annotated[
    Exact | Normalised | Regex | Number | JsonSchema | Function | Code, Field(discriminator="kind")
]


class Limits(BaseModel):
    """What one isolated check may use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_s: int = Field(5, ge=1, description="CPU seconds")
    wall_s: float = Field(10.0, gt=0, description="wall-clock seconds, then it is killed")
    memory_mb: int = Field(512, ge=64, description="address space")


class TaskSampling(BaseModel):
    """Neutral greedy by default; `samples` > 1 draws k answers a case at `temperature`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    samples: int = Field(1, ge=1, le=20)
    temperature: float = Field(0.0, ge=0, le=2)

    @model_validator(mode="after")
    def _sampled(self) -> TaskSampling:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError("samples > 1 needs a temperature above 0 (greedy repeats itself)")
        return self


class TaskCase(Turn):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int | None = Field(None, ge=1)
    check: Checker
    reference: str | None = Field(
        None,
        description="an answer that passes its check: for the reader, for the suite's own "
        "test, and for the sandbox's simulated servers; the gate never reads it",
    )

    def shown(self) -> str:
        """The case's input as a report shows it."""
        if self.prompt is not None:
            return self.prompt
        return " | ".join(f"{m.role}: {m.content}" for m in self.messages or [])


class TaskSuite(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    max_tokens: int = Field(64, ge=1, description="per case unless the case sets its own")
    sampling: TaskSampling = TaskSampling()
    limits: Limits = Limits()
    cases: list[TaskCase] = Field(min_length=1)

    @field_validator("cases")
    @classmethod
    def _unique_ids(cls, value: list[TaskCase]) -> list[TaskCase]:
        seen = [c.id for c in value]
        twice = sorted({i for i in seen if seen.count(i) > 1})
        if twice:
            raise ValueError(f"case ids given twice: {', '.join(twice)}")
        return value

    @property
    def graded(self) -> bool:
        """Scores are fractions (k samples, or a function may grade): decided by bootstrap."""
        return self.sampling.samples > 1 or any(c.check.kind == "function" for c in self.cases)

    def digest(self) -> str:
        """Identifies the suite's content: golden scores hold only for the suite they were
        recorded with. A case's reference answer is not part of what is asked or checked."""
        asked = self.model_dump_json(by_alias=True, exclude={"cases": {"__all__": {"reference"}}})
        return hashlib.sha256(asked.encode()).hexdigest()[:16]


def load_suite(path: Path) -> TaskSuite:
    """Read and validate a suite file; a bad one raises SuiteError naming file and field."""
    raw = read_mapping(path, "the task suite", SuiteError)
    try:
        return TaskSuite.model_validate(raw)
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise SuiteError(f"{path}: invalid task suite: {fields}") from None
