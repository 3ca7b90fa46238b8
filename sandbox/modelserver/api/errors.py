"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

import json

from sandbox.modelserver.httpd.wire import BadRequest, response_head

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "BadRequestError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def error_body(exc: ApiError) -> bytes:
    error = {
        "message": exc.message,
        "type": _TYPES.get(exc.status, "Error"),
        "param": exc.param,
        "code": exc.status,
    }
    return json.dumps({"error": error}).encode()


def unframeable(exc: BadRequest) -> bytes:
    """The whole response to bytes that are not a readable request (the connection closes)."""
    body = error_body(ApiError(exc.status, str(exc)))
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    return response_head(exc.status, [*headers, ("connection", "close")]) + body
