"""Slow clients are timed out: a request's head and body must arrive within REQUEST_READ_SECONDS.

A client that opens a connection and sends its request a byte at a time (slowloris), or declares a body and never
sends it, held its socket open for ever: uvicorn closes idle keep-alive connections (timeout_keep_alive) but sets
no deadline on reading a request. DeadlineH11Protocol is uvicorn's h11 protocol with one: armed when the
connection opens and again after each response (the next request on a kept-alive connection), cleared once the
request (head and body) has been read; when it expires the connection is closed. A handler waiting for the body
then sees the disconnect (web/api.py reads bodies as they arrive); work already running is unaffected, having its
own budget (web/worker.py). `trainledger serve` runs uvicorn with this protocol (cli/serve.py).
"""

from __future__ import annotations

from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_READ_SECONDS = 10.0      # a request is at most 64 KiB (web/guard.py MAX_BODY_BYTES): seconds on any link


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with a deadline on reading each request (module docstring)."""

    read_seconds = REQUEST_READ_SECONDS

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._deadline = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._armed_for = self.cycle                 # the request read next is a cycle other than this one
        self._deadline = self.loop.call_later(self.read_seconds, self._expired)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()
        self._deadline = None

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if self._deadline is not None and cycle is not None and cycle is not self._armed_for and not cycle.more_body:
            self._disarm()                           # head and body read: the handler has all it needs

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()
