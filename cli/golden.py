"""`handoff golden record|show`: record a reference server's outputs for the parity gate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gates.parity.golden_format import Golden

app = typer.Typer(help="Record and inspect golden reference outputs.", no_args_is_help=True)


@app.command()
def record(
    url: Annotated[str, typer.Option(help="reference server, e.g. http://127.0.0.1:8080")],
    out: Annotated[Path, typer.Option(help="golden file to write")],
    prompts: Annotated[Path | None, typer.Option(help="JSON Lines prompt set (parity)")] = None,
    task_suite: Annotated[
        Path | None, typer.Option(help="task suite: record its scores for the task gate instead")
    ] = None,
    reference: Annotated[
        Path | None, typer.Option(help="text scored with teacher forcing (default: built-in)")
    ] = None,
    model: Annotated[str | None, typer.Option(help="model id (default: first listed)")] = None,
    max_tokens: Annotated[int, typer.Option(help="tokens per prompt")] = 32,
    top_k: Annotated[int, typer.Option(help="logprobs recorded per position")] = 8,
    extensions: Annotated[
        str, typer.Option(help="non-standard endpoints to record too: probes,heads")
    ] = "",
    context_tokens: Annotated[
        int,
        typer.Option(
            help="long-context probes up to this prompt length (the context the Service is "
            "used with; capped by the server's); 0: none"
        ),
    ] = 2048,
    context_text: Annotated[
        Path | None, typer.Option(help="the long text the probes cut (default: built-in)")
    ] = None,
    token_ids: Annotated[
        bool,
        typer.Option(
            "--token-ids/--token-text",
            help="name tokens by id where the server offers ids, or by text, which every "
            "engine gives: --token-text for a handoff to another engine",
        ),
    ] = True,
) -> None:
    """Greedy answers (completions and chat turns) with top-k logprobs, the teacher-forced
    reference text, next-token probes at growing prompt lengths up to --context-tokens, and
    the server's probed capabilities; probes and heads on request. With --task-suite: the
    server's answers to the suite and their scores."""
    if (prompts is None) == (task_suite is None):
        typer.echo("error: give --prompts (parity golden) or --task-suite (task scores)", err=True)
        raise typer.Exit(2)
    if task_suite is not None:
        _record_task(url, task_suite, out, model)
        return
    assert prompts is not None
    from pydantic import ValidationError

    from gates.errors import GateError
    from gates.parity.golden import read_reference, record_golden
    from gates.parity.golden_format import GoldenSettings, LongContextSettings

    try:
        wanted = [name.strip() for name in extensions.split(",") if name.strip()]
        settings = GoldenSettings(
            max_tokens=max_tokens, top_k=top_k, extensions=wanted, token_ids=token_ids
        )
    except ValidationError as exc:
        typer.echo(f"error: --extensions {extensions!r}: expected probes and/or heads", err=True)
        raise typer.Exit(2) from exc
    try:
        if context_tokens:
            text = {"text": read_reference(context_text)} if context_text else {}
            long = LongContextSettings(tokens=context_tokens, **text)
            settings = settings.model_copy(update={"long_context": long})
    except ValidationError as exc:
        typer.echo(f"error: --context-tokens {context_tokens}: {exc.errors()[0]['msg']}", err=True)
        raise typer.Exit(2) from exc
    except GateError as exc:
        typer.echo(f"error: --context-text: {exc}", err=True)
        raise typer.Exit(2) from exc
    try:
        golden = record_golden(
            url, prompts, reference_file=reference, model_id=model, settings=settings
        )
    except GateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    golden.save(out)
    n_tokens = sum(len(c.steps) for c in golden.outputs.completions)
    typer.echo(
        f"recorded {len(golden.outputs.completions)} prompts ({n_tokens} tokens) from "
        f"{golden.model_id!r} at {url} into {out}; the server {golden.server.summary()}"
    )
    _echo_long_context(golden)
    for name, why in golden.outputs.not_collected.items():
        typer.echo(f"  not recorded: {name}: {why}")


def _echo_long_context(golden: Golden) -> None:
    long, planned = golden.outputs.long_context, golden.settings.long_context
    if long is None or planned is None:
        return
    reached = long.probes[-1].prompt_tokens if long.probes else 0
    typer.echo(
        f"  long context: {len(long.probes)} prompts up to {reached} tokens (asked for "
        f"{planned.tokens})" + (f"; {planned.capped}" if planned.capped else "")
    )


def _record_task(url: str, suite_file: Path, out: Path, model: str | None) -> None:
    from gates.errors import GateError
    from gates.task.golden import record_task_golden, save_task_golden
    from gates.task.suite import load_suite

    try:
        scores = record_task_golden(url, load_suite(suite_file), model_id=model)
    except GateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    save_task_golden(scores, out)
    passed = sum(c.score >= 1 for c in scores.cases)
    typer.echo(
        f"recorded suite {scores.suite!r} from {scores.model_id!r} at {url} into {out}: "
        f"{passed}/{len(scores.cases)} cases passed, score {scores.score * 100:.1f} %"
    )


@app.command()
def show(path: Annotated[Path, typer.Argument(help="golden file")]) -> None:
    """Summarise a golden file."""
    from gates.errors import GoldenError
    from gates.parity.golden_format import Golden

    try:
        golden = Golden.load(path)
    except GoldenError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    outputs = golden.outputs
    typer.echo(
        f"{path}: {golden.format}, model {golden.model_id!r} recorded "
        f"{golden.recorded_at} from {golden.source_url}"
    )
    typer.echo(
        f"  {len(outputs.completions)} prompts, "
        f"{sum(len(c.steps) for c in outputs.completions)} tokens, "
        f"{len(outputs.reference or [])} teacher-forced positions, top-k {golden.settings.top_k}"
    )
    _echo_long_context(golden)
    typer.echo(f"  server: {golden.server.summary()}")
    typer.echo(f"  sampling: {golden.settings.sampling}")
    typer.echo(f"  probes: {outputs.probes}")
    typer.echo(f"  heads: {outputs.heads}")
    for name, why in outputs.not_collected.items():
        typer.echo(f"  not recorded: {name}: {why}")
