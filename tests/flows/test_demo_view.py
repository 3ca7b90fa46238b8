"""What `handoff demo` shows while a flow runs: the live step table on the terminal,
Prefect's log lines in a file (a real flow run against a real Prefect server)."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest
from prefect import flow, get_run_logger
from prefect.settings import PREFECT_API_URL, temporary_settings
from rich.cells import cell_len
from rich.console import Console

from cli.demo import summary
from cli.demo_run import DemoResult, link_printer
from flows.logfile import logs_to
from flows.report.stepview import STEPS, StepEvent, listening, notify, shown_live
from tests.webhook.servers import PrefectServer

LINE = "a line the flow logs"


@flow(name="demo-view-probe")
def probe() -> None:
    get_run_logger().info(LINE)
    notify(StepEvent("wait-for-image", "started"))
    notify(StepEvent("wait-for-image", "done", 1.25))
    notify(StepEvent("warm", "started"))
    notify(StepEvent("warm", "failed", 3.5))


def test_steps_on_the_terminal_prefect_lines_in_the_file(
    prefect: PrefectServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    screen = io.StringIO()
    console = Console(file=screen, width=100, color_system=None)
    log = tmp_path / "logs" / "demo.log"
    handlers_before = list(logging.getLogger().handlers)
    with (
        temporary_settings({PREFECT_API_URL: prefect.api_url}),
        logs_to(log),
        shown_live(console, title="handoff probe"),
        listening(link_printer(console, "probe")),
    ):
        probe()
    terminal = capfd.readouterr()
    assert LINE in log.read_text() and "Finished in state Failed" not in log.read_text()
    assert "Completed" in log.read_text(), log.read_text()
    assert LINE not in terminal.err + terminal.out + screen.getvalue()
    shown = screen.getvalue()
    assert "handoff probe" in shown
    # where to find the run (and approve it), since Prefect's "View at" line is in the file
    assert re.search(r"handoff probe: http://127\.0\.0\.1:\d+/runs/flow-run/[0-9a-f-]{36}", shown)
    assert re.search(r"│ wait-for-image\s+│ done\s+│\s+1\.2 │", shown), shown
    assert re.search(r"│ warm\s+│ failed\s+│\s+3\.5 │", shown), shown
    assert re.search(r"│ swap\s+│ pending\s+│", shown), shown
    assert logging.getLogger().handlers == handlers_before  # the terminal has them back


def _result(spec: str, outcome: str = "done") -> DemoResult:
    return DemoResult(
        spec=spec,
        outcome=outcome,
        strategy="in-place",
        image="registry.local/candle-vllm@sha256:" + "0" * 64,
        requests_ok=812,
        requests_failed=0,
        unavailable_s=0.0,
        declared_estimate_s=21.0,
        declared_downtime_s=90.0,
        measured_downtime_s=18.4,
        seconds=143.2,
    )


@pytest.mark.parametrize("width", [80, 120])
def test_the_demo_output_has_no_line_glued_to_a_table(width: int) -> None:
    """The demo's printing as a pipe or a file takes it: lines said, a live step table per
    handoff with its run's link printed as its first step starts, then the summary. Every
    table ends its line and every line fits the width."""
    screen = io.StringIO()
    console = Console(file=screen, width=width, color_system=None)
    console.print("[bold]handoff demo[/bold]: bringing the sandbox up")
    for spec in ("clef-candle", "coder-14b-fp16"):

        def link(event: StepEvent, spec: str = spec) -> None:
            if event.state == "started" and event.name == STEPS[0]:
                console.print(f"handoff {spec}: http://127.0.0.1:4200/runs/flow-run/{'0' * 36}")

        with shown_live(console, title=f"handoff {spec}"), listening(link):
            for name in STEPS:
                notify(StepEvent(name, "started"))
                notify(StepEvent(name, "done", 2.25))
        console.print(f"after {spec}")
    console.print(summary([_result("clef-candle"), _result("coder-14b-fp16", "rolled back")]))
    console.print("history:")
    lines = screen.getvalue().splitlines()
    assert not [line for line in lines if re.search(r"[┘╯┛]\s*\S", line)], screen.getvalue()
    assert all(cell_len(line) <= width for line in lines), screen.getvalue()
    run_link = re.compile(r"handoff (clef-candle|coder-14b-fp16):")
    links = [i for i, line in enumerate(lines) if run_link.match(line)]
    assert len(links) == 2 and lines[links[1] - 1] == "after clef-candle"
    assert lines[-1] == "history:" and re.match(r"[└┗]", lines[-2]), lines[-2:]
    assert "rolled" in screen.getvalue()  # the summary's rows are there (wrapped at 80)
