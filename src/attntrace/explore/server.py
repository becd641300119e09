"""The explore page's server: the standard library's ``ThreadingHTTPServer`` on 127.0.0.1, a
port the system picks, and a token in the URL as Jupyter has one. Every request without the
token is refused (403); a bad parameter is one line (400); nothing is fetched from elsewhere.

Routes (each takes ``?token=…``):

- ``/``: the page (:mod:`attntrace.explore.page`, its script and style inline);
- ``/api/trace?S=…&h=…``: the steps of the controls' config (:func:`api.trace_document`);
- ``/api/prompt``: the prompt's tokens and layers (empty without ``--prompt``);
- ``/api/token?index=I``: query I's attention row in every head of every layer.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from attntrace.errors import AttntraceError

#: The only address the server binds: the page is for the person at this machine.
HOST = "127.0.0.1"


@dataclass
class ExploreState:
    """What the server holds: the URL token, the page's language and, with --prompt, the rows
    of every layer (:class:`attntrace.explore.prompt_rows.PromptRows`)."""

    token: str = field(default_factory=lambda: secrets.token_hex(24))
    lang: str = "en"
    prompt: Any = None


class ExploreServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that holds the state its handlers answer from."""

    daemon_threads = True

    def __init__(self, state: ExploreState, port: int = 0) -> None:
        super().__init__((HOST, port), Handler)
        self.state = state

    @property
    def url(self) -> str:
        """The page's address, token included."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/?token={self.state.token}"


class Handler(BaseHTTPRequestHandler):
    """GET only; the token first, then the route."""

    server: ExploreServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        given = query.pop("token", "")
        if not hmac.compare_digest(given.encode(), self.server.state.token.encode()):
            self._send(HTTPStatus.FORBIDDEN, b"403: the token is missing or wrong\n", "text/plain")
            return
        try:
            self._route(parts.path, query)
        except AttntraceError as error:
            line = " ".join(str(error).split())
            self._send(HTTPStatus.BAD_REQUEST, f"{line}\n".encode(), "text/plain; charset=utf-8")

    def _route(self, path: str, query: dict[str, str]) -> None:
        state = self.server.state
        if path == "/":
            from attntrace.explore.page import page

            self._send(HTTPStatus.OK, page(state.lang).encode(), "text/html; charset=utf-8")
        elif path == "/api/trace":
            from attntrace.explore.api import trace_document

            self._json(trace_document(query))
        elif path == "/api/prompt":
            self._json(state.prompt.summary() if state.prompt is not None else {"tokens": []})
        elif path == "/api/token":
            self._json(_token_rows(state, query))
        else:
            self._send(HTTPStatus.NOT_FOUND, b"404: no such page\n", "text/plain")

    def _json(self, doc: Any) -> None:
        body = json.dumps(doc, allow_nan=False).encode()
        self._send(HTTPStatus.OK, body, "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", "default-src 'self' 'unsafe-inline'")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not every request."""


def _token_rows(state: ExploreState, query: dict[str, str]) -> Any:
    from attntrace.explore.api import ParameterError

    if state.prompt is None:
        raise ParameterError("no prompt: start explore with --prompt TEXT (and --model DIR)")
    text = query.get("index", "")
    if not text.isdigit() or not 0 <= int(text) < len(state.prompt.tokens):
        last = len(state.prompt.tokens) - 1
        raise ParameterError(f"index must be a token's position, 0 to {last}, got {text!r}")
    return state.prompt.rows(int(text))


def start(state: ExploreState, port: int = 0) -> tuple[ExploreServer, threading.Thread]:
    """The server, serving in a thread (tests and the command stop it with ``shutdown()``).

    >>> server, thread = start(ExploreState(token="t"))
    >>> server.server_address[0], server.url.endswith("/?token=t")
    ('127.0.0.1', True)
    >>> server.shutdown(); server.server_close()
    """
    server = ExploreServer(state, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
