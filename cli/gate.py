"""`handoff gate smoke|parity|latency|task`: run one gate against a server and print its report.

Exit codes: 0 pass, 1 fail, 2 no verdict or error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from collections.abc import Callable

    from gates.common.result import GateResult
    from gates.common.settings import LatencySettings

app = typer.Typer(
    help="Run a gate (smoke, parity, latency, task) against a model server.", no_args_is_help=True
)

UrlOption = Annotated[
    str, typer.Option("--url", help="candidate server, e.g. http://127.0.0.1:8080")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
BaselineOption = Annotated[str | None, typer.Option(help="live server to compare with")]
EXIT_CODES = {True: 0, False: 1, None: 2}
# The help of options too long to declare on one line.
_HELP = {
    "top_k": "near-tie rule: each token in the other's top-k [5]",
    "near_tie_max_gap": "near-tie rule: each side preferred its token by ≤ this (nats) [0.7]",
    "probe_rel_tol": "relative tolerance of probes [0.01]",
    "require": "comparisons without which there is no verdict, comma-separated from "
    "completions,chat,teacher_forced,probes,heads (default: all the golden holds)",
    "parity_out": "write parity.json and parity.png (per prompt: first divergence, KL)",
    "rounds": "most interleaved rounds per level (it stops once certain)",
    "settings": "YAML/JSON LatencySettings; overrides the options",
    "latency_out": "write latency.json and a CDF picture per level (latency-cN.png) here",
}


def _emit(result: GateResult, *, as_json: bool) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        Console().print(Markdown(result.markdown()))
    raise typer.Exit(EXIT_CODES[result.passed])


def _fail_with_error(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def smoke(
    url: UrlOption,
    model: Annotated[str, typer.Option(help="model id /v1/models must list")],
    deadline: Annotated[float, typer.Option(help="seconds for the whole check")] = 30.0,
    as_json: JsonOption = False,
) -> None:
    """The server lists MODEL and answers one completion within the deadline."""
    from gates.smoke import run_smoke

    _emit(run_smoke(url, model_id=model, deadline_s=deadline), as_json=as_json)


@app.command()
def parity(
    url: UrlOption,
    golden: Annotated[Path, typer.Option(help="golden file from `handoff golden record`")],
    model: Annotated[str | None, typer.Option(help="model id (default: the golden's)")] = None,
    top_k: Annotated[int | None, typer.Option(help=_HELP["top_k"])] = None,
    near_tie_max_gap: Annotated[float | None, typer.Option(help=_HELP["near_tie_max_gap"])] = None,
    probe_rel_tol: Annotated[float | None, typer.Option(help=_HELP["probe_rel_tol"])] = None,
    require: Annotated[str | None, typer.Option(help=_HELP["require"])] = None,
    out: Annotated[Path | None, typer.Option(help=_HELP["parity_out"])] = None,
    as_json: JsonOption = False,
) -> None:
    """Greedy answers, teacher-forced logprobs (and probes, heads if recorded) against a
    golden file, comparing what both servers offer."""
    from gates.common.settings import ParityTolerances
    from gates.errors import GoldenError
    from gates.parity.gate import run_parity
    from gates.parity.golden_format import Golden

    try:
        reference = Golden.load(golden)
    except GoldenError as exc:
        _fail_with_error(str(exc))
    from pydantic import ValidationError

    try:
        given: dict[str, Any] = {"top_k": top_k, "near_tie_max_gap": near_tie_max_gap}
        given |= {"probe_rel_tol": probe_rel_tol}
        if require is not None:
            given["require"] = [c.strip() for c in require.split(",")]
        tolerances = ParityTolerances(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        _fail_with_error(f"invalid parity options: {exc}")
    if out is not None:  # refused before any request, not after them
        _writable(out)
    result = run_parity(url, reference, tolerances, model_id=model)
    if out is not None:
        from gates.parity.plot import write_picture

        _write_report(result, out / "parity.json", lambda: [write_picture(result.figures, out)])
    _emit(result, as_json=as_json)


@app.command()
def latency(
    url: UrlOption,
    baseline: BaselineOption = None,
    levels: Annotated[str, typer.Option(help="comma-separated concurrency levels")] = "1,16",
    max_tokens: Annotated[int, typer.Option(help="output tokens per request")] = 32,
    rounds: Annotated[int | None, typer.Option(help=_HELP["rounds"])] = None,
    settings: Annotated[Path | None, typer.Option(help=_HELP["settings"])] = None,
    out: Annotated[Path | None, typer.Option(help=_HELP["latency_out"])] = None,
    as_json: JsonOption = False,
) -> None:
    """Closed-loop load at each level; regressions against --baseline and SLOs fail."""
    from gates.errors import GateError
    from gates.latency.gate import run_latency

    chosen = _latency_settings(settings, levels=levels, max_tokens=max_tokens, rounds=rounds)
    if out is not None:  # refused before any load, not after it
        _writable(out)
    try:
        result = run_latency(url, baseline, chosen)
    except GateError as exc:
        _fail_with_error(str(exc))
    if out is not None:
        from gates.latency.plot import write_pictures

        _write_report(result, out / "latency.json", lambda: write_pictures(result.figures, out))
    _emit(result, as_json=as_json)


def _cannot_write(out: Path, exc: OSError) -> NoReturn:
    _fail_with_error(f"cannot write the report into {out}: {exc}; choose a writable --out")


def _writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _cannot_write(out, exc)


def _write_report(result: GateResult, report: Path, pictures: Callable[[], list[Path]]) -> None:
    """The result as JSON in `report`, then its pictures beside it."""
    try:
        report.write_text(result.model_dump_json(indent=2))
        written = pictures()
    except OSError as exc:
        _cannot_write(report.parent, exc)
    typer.echo(f"wrote {report} and {len(written)} picture(s)", err=True)


def _latency_settings(
    path: Path | None, *, levels: str, max_tokens: int, rounds: int | None
) -> LatencySettings:
    import yaml
    from pydantic import ValidationError

    from gates.common.settings import LatencySettings

    try:
        if path is not None:
            return LatencySettings.model_validate(yaml.safe_load(path.read_text()) or {})
        parsed = [int(level) for level in levels.split(",") if level.strip()]
        given = {} if rounds is None else {"rounds": rounds}
        return LatencySettings(levels=parsed, max_tokens=max_tokens, **given)
    except (OSError, ValueError, ValidationError, yaml.YAMLError) as exc:
        _fail_with_error(f"invalid latency settings ({path or 'options'}): {exc}")


@app.command()
def task(
    url: UrlOption,
    suite: Annotated[Path, typer.Option(help="task suite (YAML): cases and their checkers")],
    baseline: BaselineOption = None,
    golden: Annotated[
        Path | None, typer.Option(help="scores from `handoff golden record --task-suite`")
    ] = None,
    model: Annotated[str | None, typer.Option(help="candidate model id (default: first)")] = None,
    margin: Annotated[float, typer.Option(help="points the candidate may lose")] = 2.0,
    floor: Annotated[float | None, typer.Option(help="least candidate score, in %")] = None,
    as_json: JsonOption = False,
) -> None:
    """The suite's cases on both sides, scored by their checkers; a paired test decides."""
    from pydantic import ValidationError

    from gates.errors import GateError
    from gates.task.gate import TaskRule, run_task
    from gates.task.golden import load_task_golden
    from gates.task.suite import load_suite

    if (baseline is None) == (golden is None):
        _fail_with_error("give one baseline: --baseline URL (live) or --golden FILE (recorded)")
    try:
        cases = load_suite(suite)
        rule = TaskRule(margin=margin, floor=floor)
        recorded = load_task_golden(golden) if golden is not None else None
    except (GateError, ValidationError) as exc:
        _fail_with_error(str(exc))
    result = run_task(url, cases, rule, baseline_url=baseline, golden=recorded, model_id=model)
    _emit(result, as_json=as_json)
