"""`twice/1` for an executor written in Python: the stdio plumbing every executor repeats.

`twice run --executor CMD` starts CMD once per worker and speaks to it in JSON lines: a request
per line on stdin, events and one reply per request on stdout (docs/protocol.md). What does not
depend on what an executor does lives here, on the standard library alone:

- `protocol_output()`: a private copy of file descriptor 1 for protocol lines; fd 1 and
  `sys.stdout` then go to stderr, so that a stray `print` or a library's log line can never
  break the framing;
- `ProtocolError` and the error codes of docs/protocol.md §4;
- `parse_init()`: an `init` request checked (protocol, worker, state directory, services,
  secrets, limits) into an `Init`;
- `serve()`: the loop. Each line is read (at most 1 MiB: a longer one is refused and skipped),
  parsed and checked for an integer `msg_id`, handed to the handler, and answered with the
  handler's events and then its reply, in order; `shutdown` and the end of input end it.

A handler is any callable `handle(kind, request) -> (events, fields)`: `fields` are the reply's
(its `type` and `in_reply_to` are added), each event a dict (`intent_id`, `from`, `state`,
`note`, ...). It raises `ProtocolError` for an error reply; any other exception is answered as a
crash (code 13), and the loop goes on::

    from twice.protocol import NOT_SUPPORTED, ProtocolError, parse_init, protocol_output, serve

    out = protocol_output()

    def handle(kind, request):
        if kind == "init":
            init = parse_init(request)
            return [], {"executor": {"name": "mine", "version": "1"}, "actions": ["payments.refund"]}
        if kind == "shutdown":
            return [], {}
        raise ProtocolError(NOT_SUPPORTED, f"unknown request type {kind!r}")

    serve(handle, out=out)
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, Callable, Iterable, Iterator, Optional, Union

#: `drain` ran out of time with intents unresolved (indefinite).
TIMEOUT = 0
#: An unknown request type, another protocol version, an action not announced (definite).
NOT_SUPPORTED = 10
#: A request before `init` (definite).
UNAVAILABLE = 11
#: Not JSON, not an object, no integer `msg_id`, a line over 1 MiB, a bad field (definite).
MALFORMED = 12
#: The executor failed inside (indefinite).
CRASH = 13
#: `propose` of an id already recorded with another action or payload (definite).
EXISTS = 21

#: The longest request line read, not counting its newline (docs/protocol.md §1).
LINE_BYTES_MAX = 1_048_576

Event = dict[str, Any]
Fields = dict[str, Any]
Handler = Callable[[str, dict[str, Any]], tuple[Iterable[Event], Fields]]


class ProtocolError(Exception):
    """An error reply: `code` and `text`, and the events to send before it (a `drain` that
    made progress and then failed says what it did)."""

    def __init__(self, code: int, text: str, events: Iterable[Event] = ()) -> None:
        super().__init__(text)
        self.code, self.text, self.events = code, text, list(events)


@dataclass
class Init:
    """An `init` request, checked. `services` maps a service to its `url` and `contract`."""

    worker_id: str
    state_dir: Optional[str]
    services: dict[str, dict[str, Any]]
    secrets: dict[str, str]
    limits: dict[str, Any]
    request: dict[str, Any] = field(repr=False)

    def url(self, service: str) -> Optional[str]:
        """The base URL of `service`, or None when `init` did not configure it."""
        return self.services.get(service, {}).get("url")

    def contract(self, service: str) -> dict[str, Any]:
        """What `service` promises (every term optional; docs/protocol.md §3.1)."""
        return dict(self.services.get(service, {}).get("contract") or {})


def parse_init(request: dict[str, Any], *, state_dir_required: bool = True) -> Init:
    """Checks an `init` request as docs/protocol.md §3.1 says, raising `ProtocolError` (10 for
    another protocol, 12 for anything malformed); unknown top-level fields are ignored."""
    if request.get("protocol") != "twice/1":
        raise ProtocolError(NOT_SUPPORTED, f"protocol {request.get('protocol')!r} is not supported; this executor speaks twice/1")
    worker_id = request.get("worker_id")
    if not isinstance(worker_id, str) or not worker_id:
        raise ProtocolError(MALFORMED, "init: worker_id must be a non-empty string")
    state_dir = request.get("state_dir")
    if state_dir is not None and (not isinstance(state_dir, str) or not state_dir):
        raise ProtocolError(MALFORMED, "init: state_dir must be a non-empty string")
    if state_dir is None and state_dir_required:
        raise ProtocolError(MALFORMED, "init: no state_dir")
    services = _object(request, "services")
    for name, service in services.items():
        if not isinstance(service, dict) or not isinstance(service.get("url"), str):
            raise ProtocolError(MALFORMED, f"init: services.{name} must be an object with a string url")
        if not isinstance(service.get("contract", {}), dict):
            raise ProtocolError(MALFORMED, f"init: services.{name}.contract must be an object")
    secrets = _object(request, "secrets")
    if not all(isinstance(v, str) for v in secrets.values()):
        raise ProtocolError(MALFORMED, "init: secrets must be an object of strings")
    limits = _object(request, "limits")
    return Init(worker_id, state_dir, services, secrets, limits, request)


def _object(request: dict[str, Any], name: str) -> dict[str, Any]:
    value = request.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(MALFORMED, f"init: {name} must be an object")
    return value


def protocol_output() -> IO[str]:
    """A line-buffered writer on a private copy of fd 1, for protocol lines only; fd 1 and
    `sys.stdout` then go to stderr. Call it before importing libraries that may print."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


_EMIT_LOCK = threading.Lock()


def emit(out: IO[str], message: dict[str, Any]) -> None:
    """Writes one protocol line, keys sorted, and flushes it; safe from any thread (an executor
    may send events as its workers make them, before the reply)."""
    line = json.dumps(message, separators=(",", ":"), sort_keys=True) + "\n"
    with _EMIT_LOCK:
        out.write(line)
        out.flush()


def _lines(stdin: BinaryIO) -> Iterator[Optional[bytes]]:
    """Each request line without its newline, or None for a line over [`LINE_BYTES_MAX`]
    (read no further than that, then skipped up to its newline)."""
    while True:
        line = stdin.readline(LINE_BYTES_MAX + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line[:-1]
        elif len(line) <= LINE_BYTES_MAX:
            yield line  # the last line, without a newline
        else:
            while line and not line.endswith(b"\n"):
                line = stdin.readline(LINE_BYTES_MAX + 1)
            yield None


def _reply_to(msg_id: Any) -> Union[int, str, None]:
    return msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None


def serve(handle: Handler, *, stdin: Optional[BinaryIO] = None, out: Optional[IO[str]] = None) -> int:
    """Answers requests from `stdin` (default: the process's) with `handle` on `out` (default:
    `sys.stdout`) until `shutdown` or the end of input; returns 0, the exit code for both."""
    stdin = stdin if stdin is not None else sys.stdin.buffer
    out = out if out is not None else sys.stdout
    for line in _lines(stdin):
        if line is None:
            emit(out, {"type": "error", "in_reply_to": None, "code": MALFORMED, "text": f"a request line is over {LINE_BYTES_MAX} bytes"})
            continue
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as e:
            emit(out, {"type": "error", "in_reply_to": None, "code": MALFORMED, "text": f"not JSON: {e}"})
            continue
        if not isinstance(request, dict):
            emit(out, {"type": "error", "in_reply_to": None, "code": MALFORMED, "text": "a request is a JSON object"})
            continue
        msg_id, kind = request.get("msg_id"), request.get("type")
        if type(msg_id) is not int or msg_id < 0:
            emit(out, {"type": "error", "in_reply_to": _reply_to(msg_id), "code": MALFORMED, "text": "a request needs a numeric msg_id"})
            continue
        if not isinstance(kind, str):
            emit(out, {"type": "error", "in_reply_to": msg_id, "code": MALFORMED, "text": "a request needs a string type"})
            continue
        events: Iterable[Event] = []
        try:
            events, fields = handle(kind, request)
            reply = {**fields, "type": f"{kind}_ok", "in_reply_to": msg_id}
        except ProtocolError as e:
            events = e.events
            reply = {"type": "error", "in_reply_to": msg_id, "code": e.code, "text": e.text}
        except Exception as e:  # noqa: BLE001  (an executor's fault is a reply, never a hang)
            traceback.print_exc(file=sys.stderr)
            reply = {"type": "error", "in_reply_to": msg_id, "code": CRASH, "text": f"{kind}: {type(e).__name__}: {e}"}
        for event in events:
            emit(out, {**event, "type": "event"})
        emit(out, reply)
        if reply["type"] == "shutdown_ok":
            break
    return 0
