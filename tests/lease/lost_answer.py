"""An answer lost on the way back: a TCP relay on 127.0.0.1 in front of the real API
server passes every byte both ways, except that once armed it cuts the connection as the
next answer begins to come back. The request it answers has reached the API server and
was applied; the client sees the connection drop with no answer, as after a network cut."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class LossyRelay:
    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self.dropped = 0  # answers cut so far

    def drop_next_answer(self) -> None:
        self._armed.set()

    def serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed: the relay is stopped
                return
            server = socket.create_connection(("127.0.0.1", self._upstream))
            for pump in (self._requests, self._answers):
                threading.Thread(target=pump, args=(client, server), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                server.sendall(chunk)
        _close(client, server)

    def _answers(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := server.recv(65536):
                if self._armed.is_set():
                    self._armed.clear()
                    self.dropped += 1
                    break
                client.sendall(chunk)
        _close(client, server)

    def close(self) -> None:
        self._listener.close()


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@contextlib.contextmanager
def lossy_relay(upstream_port: int) -> Iterator[LossyRelay]:
    relay = LossyRelay(upstream_port)
    threading.Thread(target=relay.serve, daemon=True).start()
    try:
        yield relay
    finally:
        relay.close()
