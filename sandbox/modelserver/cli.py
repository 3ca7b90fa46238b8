"""The `model-server` command (`python -m sandbox.modelserver`, `handoff sandbox model-server`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sandbox.modelserver.faults import Fault


def model_server(
    ctx: typer.Context,
    profile: Annotated[
        str,
        typer.Option(
            help="gptq-30b-a3b-tp1, fp16-14b-tp2, clef-flash-pytorch, clef-flash-candle or cadence"
        ),
    ],
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one")] = 0,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    model_id: Annotated[str | None, typer.Option(help="served model name")] = None,
    fault: Annotated[list[Fault] | None, typer.Option(help="inject a fault (repeatable)")] = None,
    slow_start_s: Annotated[float, typer.Option(help="cold start for the slow_start fault")] = 5.0,
    surface: Annotated[
        str, typer.Option(help="routes: openai (all) or candle-vllm (models and chat only)")
    ] = "openai",
    load_s: Annotated[float, typer.Option(help="seconds loading before the port opens")] = 0.0,
    stall_after_tokens: Annotated[int, typer.Option(help="tokens before the stall fault")] = 4,
    slowdown: Annotated[float, typer.Option(help="multiplies step and prefill times")] = 1.0,
    ground_truth: Annotated[Path | None, typer.Option(help="JSONL of token send times")] = None,
    time_scale: Annotated[float, typer.Option(help="multiplies every simulated duration")] = 1.0,
    keep_alive_ms: Annotated[
        float | None, typer.Option(help="SSE keep-alive after idle ms")
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="override the batch cap")] = None,
    cadence_ms: Annotated[
        float | None, typer.Option(help="interval of the cadence profile")
    ] = None,
    metrics: Annotated[
        str | None, typer.Option(help="/metrics dialect: vllm, llamacpp or none")
    ] = None,
    delay_scale: Annotated[
        float, typer.Option(help="real seconds per simulated second a request asks to last")
    ] = 1.0,
    realtime: Annotated[bool, typer.Option(help="SCHED_FIFO pacing threads if permitted")] = True,
    shutdown_timeout_s: Annotated[
        float | None,
        typer.Option(help="after SIGTERM, abort requests running this long (0: at once)"),
    ] = None,
    print_config: Annotated[
        bool, typer.Option(help="print the resolved configuration as JSON and exit")
    ] = False,
) -> None:
    """Run a simulated model server; prints `listening on http://HOST:PORT` once it serves."""
    from pydantic import ValidationError

    from sandbox.modelserver import ServerConfig, serve

    # Every option but --print-config is a ServerConfig field of the same name.
    options = {name: value for name, value in ctx.params.items() if name != "print_config"}
    try:
        config = ServerConfig.model_validate(options | {"fault": tuple(fault or ())})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if print_config:
        typer.echo(config.model_dump_json())
        return
    serve(config)
