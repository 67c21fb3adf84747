"""`twice.protocol`, the `twice/1` plumbing for executors written in Python: the loop's framing
and errors (docs/protocol.md §1 and §4) on in-memory streams, `init`'s checks, and the
protocol's own copy of stdout in a real child process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from twice.protocol import (
    CRASH,
    LINE_BYTES_MAX,
    MALFORMED,
    NOT_SUPPORTED,
    ProtocolError,
    parse_init,
    serve,
)


def run(lines: list[bytes], handle: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    assert serve(handle, stdin=io.BytesIO(b"".join(lines)), out=out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def echo(kind: str, request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if kind == "drain":
        return [{"intent_id": "a", "from": "recorded", "state": "confirmed"}], {}
    if kind == "boom":
        raise RuntimeError("the state is gone")
    if kind == "refuse":
        raise ProtocolError(NOT_SUPPORTED, "no", events=[{"intent_id": "b", "state": "failed"}])
    return [], {"seen": request.get("n")}


def test_each_request_gets_its_events_then_one_reply_in_order() -> None:
    got = run([b'{"type":"status","msg_id":1,"n":7}\n', b"\n", b'{"type":"drain","msg_id":2}\n'], echo)
    assert got == [
        {"type": "status_ok", "in_reply_to": 1, "seen": 7},
        {"type": "event", "intent_id": "a", "from": "recorded", "state": "confirmed"},
        {"type": "drain_ok", "in_reply_to": 2},
    ]


def test_bad_lines_get_error_12_and_the_loop_goes_on() -> None:
    got = run(
        [b"not json\n", b"[1]\n", b'{"type":"x","msg_id":"7"}\n', b'{"type":"x","msg_id":-1}\n',
         b'{"msg_id":3}\n', b'{"type":"status","msg_id":4}\n'],  # fmt: skip
        echo,
    )
    assert [(m["type"], m.get("code"), m.get("in_reply_to")) for m in got] == [
        ("error", MALFORMED, None),
        ("error", MALFORMED, None),
        ("error", MALFORMED, "7"),
        ("error", MALFORMED, -1),
        ("error", MALFORMED, 3),
        ("status_ok", None, 4),
    ]


def test_a_line_over_1_mib_is_refused_whole_and_skipped() -> None:
    long = b'{"type":"status","msg_id":1,"pad":"' + b"x" * LINE_BYTES_MAX + b'"}\n'
    got = run([long, b'{"type":"status","msg_id":2}\n'], echo)
    assert got[0]["code"] == MALFORMED and got[0]["in_reply_to"] is None, got[0]
    assert got[1] == {"type": "status_ok", "in_reply_to": 2, "seen": None}


def test_errors_carry_their_events_and_a_crash_is_a_reply_not_a_hang() -> None:
    got = run([b'{"type":"refuse","msg_id":1}\n', b'{"type":"boom","msg_id":2}\n', b'{"type":"status","msg_id":3}\n'], echo)
    assert got[0] == {"type": "event", "intent_id": "b", "state": "failed"}
    assert got[1] == {"type": "error", "in_reply_to": 1, "code": NOT_SUPPORTED, "text": "no"}
    assert got[2]["code"] == CRASH and "the state is gone" in got[2]["text"], got[2]
    assert got[3]["type"] == "status_ok"


def test_shutdown_is_answered_and_ends_the_loop() -> None:
    got = run([b'{"type":"shutdown","msg_id":1}\n', b'{"type":"status","msg_id":2}\n'], lambda kind, r: ([], {}))
    assert got == [{"type": "shutdown_ok", "in_reply_to": 1}]


def test_init_is_checked_as_the_protocol_says() -> None:
    init = parse_init(
        {"protocol": "twice/1", "worker_id": "w1", "state_dir": "/tmp/s", "extra": True,
         "services": {"payments": {"url": "http://127.0.0.1:1", "contract": {"reads": "strong"}}},
         "secrets": {"payments_api_key": "sk"}, "limits": {"request_timeout_ms": 500}}  # fmt: skip
    )
    assert (init.worker_id, init.state_dir, init.url("payments"), init.url("files")) == ("w1", "/tmp/s", "http://127.0.0.1:1", None)
    assert init.contract("payments") == {"reads": "strong"} and init.limits == {"request_timeout_ms": 500}
    bad = [
        ({"protocol": "twice/2", "worker_id": "w", "state_dir": "d"}, NOT_SUPPORTED),
        ({"protocol": "twice/1", "worker_id": "", "state_dir": "d"}, MALFORMED),
        ({"protocol": "twice/1", "worker_id": "w"}, MALFORMED),
        ({"protocol": "twice/1", "worker_id": "w", "state_dir": "d", "services": []}, MALFORMED),
        ({"protocol": "twice/1", "worker_id": "w", "state_dir": "d", "services": {"payments": {}}}, MALFORMED),
        ({"protocol": "twice/1", "worker_id": "w", "state_dir": "d", "secrets": {"k": 1}}, MALFORMED),
        ({"protocol": "twice/1", "worker_id": "w", "state_dir": "d", "limits": 5}, MALFORMED),
    ]
    for request, code in bad:
        with pytest.raises(ProtocolError) as refused:
            parse_init(request)
        assert refused.value.code == code, request
    assert parse_init({"protocol": "twice/1", "worker_id": "w"}, state_dir_required=False).state_dir is None


def test_a_stray_print_goes_to_stderr_and_the_protocol_keeps_stdout() -> None:
    script = textwrap.dedent(
        """
        from twice.protocol import protocol_output, serve
        out = protocol_output()
        print("a library's chatter")
        def handle(kind, request):
            print("more chatter from", kind)
            return [], {"ok": True}
        raise SystemExit(serve(handle, out=out))
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        input=b'{"type":"status","msg_id":1}\n{"type":"shutdown","msg_id":2}\n',
        capture_output=True,
        timeout=30,
    )
    assert child.returncode == 0, child.stderr
    lines = [json.loads(line) for line in child.stdout.decode().splitlines()]
    assert lines == [{"type": "status_ok", "in_reply_to": 1, "ok": True}, {"type": "shutdown_ok", "in_reply_to": 2, "ok": True}]
    assert b"a library's chatter" in child.stderr and b"more chatter from status" in child.stderr
