"""The local PyTRIO server's HTTP side: routes the SDK's Control (`/api/...`, JSON) and
Actor (`/actor/...`, msgpack events, JSON sampling) requests to `LocalTrio`, plus an
OpenAI-compatible `/api/openai/v1/chat/completions`. It listens on 127.0.0.1 only.

Every refusal is a 4xx body `{code, message}` (never a retryable 5xx), which the SDK
raises as its own error with that message; a request that breaks anything else fails
alone, and the server goes on serving. Telemetry is answered and dropped: nothing the
SDK reports leaves the machine.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgpack

from rlvr.service.pytrio import wire
from rlvr.service.pytrio.events import EventQueue
from rlvr.service.pytrio.runs import LocalTrio

HOST = "127.0.0.1"
MAX_BODY = 256 << 20  # bytes; a bigger request is refused before it is read
SESSION = r"openapi/v1/service-sessions/(?P<session>[^/]+)"
ROUTES = [  # (method, path under /api/ or /actor/, handler name)
    ("GET", r"api/openapi/v1/api-key/verify", "verify"),
    ("GET", r"api/sdk/bootstrap", "bootstrap"),
    ("POST", r"api/openapi/v1/service-sessions", "open_session"),
    ("POST", rf"api/{SESSION}/close", "close_session"),
    ("POST", rf"api/{SESSION}/training-runs", "training_run"),
    ("PATCH", rf"api/{SESSION}/training-runs/(?P<run>[^/]+)", "bind_state"),
    ("POST", rf"api/{SESSION}/sampling-runs", "sampling_run"),
    ("GET", r"api/openapi/v1/training-runs/by-checkpoint-uri", "checkpoint_run"),
    ("POST", r"api/openapi/v1/(?:training|sampling)-runs/(?P<run>[^/]+)/renew", "renew"),
    ("GET", r"api/models", "models"),
    ("POST", r"api/telemetry/event", "telemetry"),
    ("POST", r"api/openai/v1/chat/completions", "chat"),
    ("POST", r"actor/v1/events", "submit"),
    ("GET", r"actor/v1/events/(?P<event>[^/]+)", "poll"),
    ("POST", r"actor/v1/sampling-runs/(?P<run>[^/]+)/sample", "sample"),
    ("POST", r"actor/v1/client/heartbeat", "heartbeat"),
]


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, trio: LocalTrio, port: int = 0, log=None) -> None:
        super().__init__((HOST, port), Handler)
        self.trio = trio
        self.log = log or (lambda line: print(f"[rlvr pytrio] {line}", file=sys.stderr))
        trio.log = self.log
        self.events = EventQueue(trio.execute, self.log)
        self.url = f"http://{HOST}:{self.server_address[1]}"

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="pytrio-http", daemon=True)
        thread.start()
        return thread

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a script ending with a connection open) is no error."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            self.log(traceback.format_exc())

    def stop(self) -> None:
        self.shutdown()
        self.events.close()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per event is logged instead (pytrio.runs)

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path.strip("/")
        try:
            body = self._body()
            for verb, pattern, name in ROUTES:
                match = re.fullmatch(pattern, path)
                if match and verb == method:
                    return getattr(self, name)(body, **match.groupdict())
            self._send(404, wire.error("not_found", f"{method} /{path} is not served locally"))
        except wire.WireError as err:
            status = 404 if err.code in ("not_found", "unknown_model") else 400
            self._send(status, wire.error(err.code, str(err)))
        except (ValueError, TypeError) as err:
            self._send(400, wire.error("invalid_request", str(err).splitlines()[0][:2000]))
        except Exception as err:  # the request fails alone; the server goes on
            self.server.log(traceback.format_exc())
            self._send(400, wire.error("internal", f"{type(err).__name__}: {err}"[:2000]))

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_BODY:
            raise wire.WireError(f"request body of {length} bytes is over {MAX_BODY}")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            if "msgpack" in self.headers.get("Content-Type", ""):
                return msgpack.unpackb(raw, raw=False, strict_map_key=True)
            return json.loads(raw)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as err:
            raise wire.WireError(f"the request body does not decode: {err}") from None

    def _send(self, status: int, body: Any, msgpack_body: bool = False) -> None:
        if msgpack_body:
            data, kind = msgpack.packb(body, use_bin_type=True), "application/msgpack"
        else:
            data, kind = json.dumps(body).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # Control -------------------------------------------------------------------------------

    def verify(self, body: Any) -> None:
        self._send(200, wire.api_key_info())

    def bootstrap(self, body: Any) -> None:
        self._send(200, wire.bootstrap(self.query.get("sdk_version", "")))

    def open_session(self, body: Any) -> None:
        self._send(200, wire.session(self.server.trio.open_session()))

    def close_session(self, body: Any, session: str) -> None:
        self.server.trio.close_session(session)
        self._send(200, {})

    def training_run(self, body: Any, session: str) -> None:
        run = self.server.trio.create_training_run(session, _dict(body))
        self._send(200, {**run, **wire.actor(self._actor(), run["training_run_cuid"])})

    def bind_state(self, body: Any, session: str, run: str) -> None:
        bound = self.server.trio.bind_state(run, _dict(body))
        self._send(200, {**bound, "trainer": wire.NO_LIMITS, **wire.actor(self._actor(), run)})

    def sampling_run(self, body: Any, session: str) -> None:
        run = self.server.trio.create_sampling_run(session, _dict(body))
        self._send(200, {**run, **wire.actor(self._actor(), run["sampling_run_cuid"])})

    def checkpoint_run(self, body: Any) -> None:
        self._send(200, self.server.trio.checkpoint_run(self.query.get("checkpoint_uri", "")))

    def renew(self, body: Any, run: str) -> None:
        ids = {"training_run_cuid": run, "sampling_run_cuid": run}
        self._send(200, {**ids, **wire.run_ids(run, "local"), **wire.actor(self._actor(), run)})

    def models(self, body: Any) -> None:
        self._send(200, self.server.trio.model_list())

    def telemetry(self, body: Any) -> None:
        self._send(200, {})

    def chat(self, body: Any) -> None:
        self._send(200, self.server.trio.chat(_dict(body)))

    def _actor(self) -> str:
        return f"{self.server.url}/actor"

    # Actor ---------------------------------------------------------------------------------

    def submit(self, body: Any) -> None:
        event = self.server.events.submit(wire.envelope(body))
        if event is None:
            self._send(409, wire.error("event_exists", "this event was accepted already"), True)
        else:
            self._send(200, event.body(), True)

    def poll(self, body: Any, event: str) -> None:
        match = re.search(r"wait=(\d+(?:\.\d+)?)", self.headers.get("Prefer", ""))
        found = self.server.events.get(event, float(match.group(1)) if match else 0.0)
        if found is None:
            self._send(404, wire.error("not_found", f"event {event!r:.40} is unknown"), True)
        else:
            self._send(200, found.body(), True)

    def sample(self, body: Any, run: str) -> None:
        self._send(200, self.server.trio.sample(run, _dict(body)))

    def heartbeat(self, body: Any) -> None:
        self._send(200, {"heartbeat_ms": 60_000})


def _dict(body: Any) -> dict:
    if not isinstance(body, dict):
        raise wire.WireError(f"the request body must be an object, got {type(body).__name__}")
    return body
