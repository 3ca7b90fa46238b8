"""`kubectl logs` query parameters decode and validate exactly as the 1.20 kubelet does:
the same accepted spellings, the same 400 for undecodable values and 422 for invalid
combinations, and sinceSeconds measured from the request's own clock."""

from __future__ import annotations

import datetime as dt

import pytest

from sandbox.kubelet.streaming.logopts import LogOptions, LogQueryError, parse_log_options

NOW = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, LogOptions()),
        ({"follow": ["true"]}, LogOptions(follow=True)),
        ({"follow": [""]}, LogOptions(follow=True)),  # apimachinery: only 0/false are false
        ({"follow": ["0"], "previous": ["False"]}, LogOptions()),
        ({"timestamps": ["1"]}, LogOptions(timestamps=True)),
        ({"tailLines": ["0"]}, LogOptions(tail_lines=0)),
        ({"tail": ["3"]}, LogOptions(tail_lines=3)),
        ({"tail": ["all"], "tailLines": ["3"]}, LogOptions()),
        ({"limitBytes": ["10"]}, LogOptions(limit_bytes=10)),
        ({"sinceSeconds": ["60"]}, LogOptions(since=NOW - dt.timedelta(seconds=60))),
        (
            {"sinceTime": ["2026-11-29T11:00:00Z"]},
            LogOptions(since=dt.datetime(2026, 11, 29, 11, tzinfo=dt.UTC)),
        ),
    ],
)
def test_accepted(query: dict[str, list[str]], expected: LogOptions) -> None:
    assert parse_log_options(query, NOW) == expected


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ({"tailLines": ["x"]}, 400),
        ({"sinceTime": ["yesterday"]}, 400),
        ({"tailLines": ["-1"]}, 422),
        ({"limitBytes": ["0"]}, 422),
        ({"sinceSeconds": ["0"]}, 422),
        ({"sinceSeconds": ["5"], "sinceTime": ["2026-11-29T11:00:00Z"]}, 422),
    ],
)
def test_refused(query: dict[str, list[str]], status: int) -> None:
    with pytest.raises(LogQueryError) as caught:
        parse_log_options(query, NOW)
    assert caught.value.status == status
