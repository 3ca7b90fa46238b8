"""A webhook receiver on 127.0.0.1 (records every request's JSON body, answers 200) and
a Prefect Custom Webhook block that posts to it."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.settings import PREFECT_API_URL, temporary_settings


@dataclass
class Receiver:
    url: str
    received: list[dict[str, Any]] = field(default_factory=list)

    def texts(self) -> list[str]:
        return [str(body.get("text")) for body in self.received]


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            receiver.received.append(json.loads(self.rfile.read(length) or b"{}"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def webhook_block(url: str, api_url: str) -> str:
    """A Custom Webhook block posting Slack's {"text": ...} to `url`, saved on the
    Prefect server at `api_url`; its address for the spec's notify.block."""
    name = f"approvers-{uuid.uuid4().hex[:8]}"
    with temporary_settings({PREFECT_API_URL: api_url}):
        CustomWebhookNotificationBlock(
            name="approvers", url=url, json_data={"text": "{{subject}}\n\n{{body}}"}
        ).save(name)
    return f"custom-webhook/{name}"
