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
from rich.console import Console

from cli.demo_run import link_printer
from flows.logfile import logs_to
from flows.report.stepview import StepEvent, listening, notify, shown_live
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
