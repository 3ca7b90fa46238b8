"""Runs one untrusted check inside the sandbox (started by gates.task.sandbox).

Standard library only: it runs as a script under `python -I -S`, reads its job as JSON on
stdin, and writes one JSON object on the descriptor that was stdout; the check's own
stdout and stderr go to /dev/null. It returns data, never a verdict: for a `code` job
the value of each probe expression (gates.task.tests) encoded as plain data, or the
exception it raised; for a `function` job what `check(answer)` returned. Whatever this
process says is untrusted: the parent decodes it as data and compares it with what only
it holds. Nothing here is a boundary; the sandbox around it is.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import sys

MAX_DEPTH = 48
_SEQUENCES: dict[type, str] = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}


def encode(value: object, depth: int = 0) -> object:
    """Plain data for the parent (gates.task.tests.decode): exact built-in types only."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if depth > MAX_DEPTH:
        return {"other": "nested too deep"}
    if kind in _SEQUENCES:
        return {_SEQUENCES[kind]: [encode(v, depth + 1) for v in value]}  # type: ignore[attr-defined]
    if kind is dict:
        items = value.items()  # type: ignore[attr-defined]
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in items]}
    if kind is bytes:
        return {"bytes": value.hex()}  # type: ignore[attr-defined]
    if kind is complex:
        return {"complex": [value.real, value.imag]}  # type: ignore[attr-defined]
    return {"other": kind.__name__[:60]}


def summary(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:200]
    except BaseException:
        return type(exc).__name__[:60]


def run_code(job: dict) -> dict:
    scope: dict = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["answer"], "answer.py", "exec"), scope)
    except BaseException as exc:
        return {"answer_error": summary(exc)}
    steps: list[dict] = []
    for step in job["steps"]:
        try:
            if "run" in step:
                exec(compile(step["run"], "tests.py", "exec"), scope)
                steps.append({"ran": True})
            else:
                value = eval(compile(step["eval"], "tests.py", "eval"), scope)
                steps.append({"value": encode(value)})
        except BaseException as exc:
            steps.append({"error": summary(exc)})
    return {"steps": steps}


def run_function(job: dict) -> dict:
    scope: dict = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["source"], "check.py", "exec"), scope)
        return {"value": encode(scope["check"](job["answer"]))}
    except BaseException as exc:
        return {"error": summary(exc)}


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    out = os.fdopen(os.dup(1), "w")
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    # No new processes (enforced where the sandbox's user is not root outside it).
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    result = run_code(job) if job["kind"] == "code" else run_function(job)
    try:
        text = json.dumps(result)
    except BaseException as exc:
        text = json.dumps({"error": f"unsendable result: {summary(exc)}"})
    out.write(text + "\n")
    out.flush()
    os._exit(0)  # skip interpreter teardown: nothing of the check's may run after this


if __name__ == "__main__":
    main()
