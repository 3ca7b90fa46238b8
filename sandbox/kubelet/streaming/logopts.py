"""PodLogOptions from the query string, decoded and validated as the 1.20 kubelet does.

Bad values answer 400 `{"message": "Unable to decode query."}`, invalid combinations 422
`{"message": "Invalid request."}` (the kubelet's own wording, JSON-looking text and all).
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict


class LogQueryError(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


DECODE_ERROR = LogQueryError(400, '{"message": "Unable to decode query."}')
INVALID_ERROR = LogQueryError(422, '{"message": "Invalid request."}')


class LogOptions(BaseModel):
    model_config = ConfigDict(frozen=True)

    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None  # None: the whole log
    limit_bytes: int | None = None  # None: no limit
    since: dt.datetime | None = None  # only lines logged at or after this instant


def _flag(query: dict[str, list[str]], name: str) -> bool:
    # apimachinery's string->bool conversion: anything but "0"/"false" (even "") is true.
    values = query.get(name)
    if not values:
        return False
    return values[0] != "0" and values[0].lower() != "false"


def _integer(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        raise DECODE_ERROR from None


def _since_time(query: dict[str, list[str]]) -> dt.datetime | None:
    values = query.get("sinceTime")
    if not values:
        return None
    try:
        return dt.datetime.fromisoformat(values[0].replace("Z", "+00:00"))
    except ValueError:
        raise DECODE_ERROR from None


def parse_log_options(query: dict[str, list[str]], now: dt.datetime) -> LogOptions:
    """Decode and validate; raises LogQueryError with the kubelet's status and text."""
    query = dict(query)
    if tail := query.get("tail"):  # the pre-tailLines spelling; "all" means no tail
        query.pop("tailLines", None)
        if tail[0] != "all":
            query["tailLines"] = tail
    tail_lines, limit_bytes = _integer(query, "tailLines"), _integer(query, "limitBytes")
    since_seconds, since_time = _integer(query, "sinceSeconds"), _since_time(query)
    if (
        (tail_lines is not None and tail_lines < 0)
        or (limit_bytes is not None and limit_bytes < 1)
        or (since_seconds is not None and since_seconds < 1)
        or (since_seconds is not None and since_time is not None)
    ):
        raise INVALID_ERROR
    since = now - dt.timedelta(seconds=since_seconds) if since_seconds else since_time
    return LogOptions(
        follow=_flag(query, "follow"),
        previous=_flag(query, "previous"),
        timestamps=_flag(query, "timestamps"),
        tail_lines=tail_lines,
        limit_bytes=limit_bytes,
        since=since,
    )
