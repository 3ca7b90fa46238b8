"""`exec` over WebSocket, as the 1.20 kubelet serves it, for the one command a simulated
container has: `cat` of its network tables (`/proc/net/tcp`, `/proc/net/tcp6`, see
procnet.py), which is how a client counts a pod's connections.

The command comes as repeated `?command=` values; stdout on channel 1, stderr on 2, and
the outcome on channel 3 as a metav1.Status (v4.channel.k8s.io), then the close. Any
other command fails as a runtime fails an executable missing from the image.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

from sandbox.kubelet.streaming import procnet, websocket
from sandbox.kubelet.streaming.http import Request

WEBSOCKET_PROTOCOLS = {"v4.channel.k8s.io": True, "v4.base64.channel.k8s.io": False}
STDOUT, STDERR, ERROR = 1, 2, 3


def run_command(
    command: list[str], pod_ip: str, ports: Mapping[int, int]
) -> tuple[bytes, dict[str, Any]]:
    """(stdout, status) of `command` in the simulated container."""
    if command[:1] == ["cat"] and command[1:] and set(command[1:]) <= set(procnet.FILES):
        out = "".join(procnet.read(path, pod_ip, ports) for path in command[1:])
        return out.encode(), {"metadata": {}, "status": "Success"}
    name = command[0] if command else ""
    return b"", {
        "metadata": {},
        "status": "Failure",
        "message": f"OCI runtime exec failed: exec failed: unable to start container process: "
        f'exec: "{name}": executable file not found in $PATH: unknown',
        "reason": "InternalError",
    }


async def serve_exec(
    request: Request, writer: asyncio.StreamWriter, *, pod_ip: str, ports: Mapping[int, int]
) -> None:
    sock = await websocket.accept(request, writer, WEBSOCKET_PROTOCOLS)
    if sock is None:
        return
    out, status = run_command(request.query.get("command", []), pod_ip, ports)
    try:
        if out and request.query.get("output") == ["1"]:
            await sock.send(STDOUT, out)
        await sock.send(ERROR, json.dumps(status).encode())
    finally:
        with contextlib.suppress(ConnectionError):
            await sock.close()
