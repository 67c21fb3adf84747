"""`twice.engines`, what every engine adapter shares: the intent table, the claims read from an
engine's record, `replaces`, `drain`, `reconcile` and the app's module. The engine here is a
small one that runs each job in a thread of this process and keeps its record in memory, so
that the adapter's own logic is tested without an engine's SDK (the engines themselves are
tested under `examples/engines/*/test_*_twice1.py`, with twice running them)."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pytest

from twice.engines import Adapter, App, AppNotFound, Engine, Record, load_app, read_output
from twice.protocol import EXISTS, MALFORMED, NOT_SUPPORTED, Init, ProtocolError


class ThreadEngine(Engine):
    """Each job in a thread; its record in memory. A job's `gate` holds it until released."""

    name = "threads"

    def __init__(self) -> None:
        self.record: dict[str, Record] = {}
        self.starts: dict[str, int] = {}
        self.gate = threading.Event()
        self.gate.set()

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        pass

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        self.starts[intent_id] = self.starts.get(intent_id, 0) + 1
        if intent_id in self.record:
            return
        self.record[intent_id] = Record("pending", engine_status="RUNNING")

        def run() -> None:
            self.gate.wait(10)
            try:
                self.record[intent_id] = Record("succeeded", output=work(**params), ended_ms=1000, engine_status="DONE")
            except Exception as e:  # noqa: BLE001
                self.record[intent_id] = Record("failed", error=repr(e), ended_ms=1000, engine_status="ERROR")

        threading.Thread(target=run, daemon=True).start()

    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        return {i: self.record[i] for i in ids if i in self.record}

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        n = sum(1 for i in ids if i in self.record and self.record[i].status == "pending")
        return n, n


def refund(payment_intent: str, amount: int) -> Any:
    if amount == 403:
        raise RuntimeError("refused")
    if amount == 7:
        return {"state": "unknown", "key": "k-7"}
    return {"id": f"re_{payment_intent}"}


def adapter(tmp_path: Path, engine: Optional[ThreadEngine] = None, **app: Any) -> Adapter:
    adapted = Adapter(engine or ThreadEngine(), App(actions={"payments.refund": refund}, **app), "test", io.StringIO())
    adapted.handle("init", {"protocol": "twice/1", "worker_id": "w1", "state_dir": str(tmp_path / "state")})
    return adapted


def propose(a: Adapter, intent_id: str, amount: int = 100, **more: Any) -> dict[str, Any]:
    intent = {"id": intent_id, "action": "payments.refund", "params": {"payment_intent": "pi_1", "amount": amount}, **more}
    return a.handle("propose", {"intent": intent})[1]["intent"]


def settled(a: Adapter) -> dict[str, dict[str, Any]]:
    a.handle("drain", {"timeout_ms": 5000})
    return {v["id"]: v for v in a.handle("status", {})[1]["intents"]}


def test_init_announces_the_apps_actions_and_a_job_that_returned_is_confirmed(tmp_path: Path) -> None:
    a = Adapter(ThreadEngine(), App(actions={"payments.refund": refund}), "test", io.StringIO())
    _, reply = a.handle("init", {"protocol": "twice/1", "worker_id": "w1", "state_dir": str(tmp_path)})
    assert reply == {"executor": {"name": "threads-test", "version": "0.1.0"}, "actions": ["payments.refund"],
                     "features": ["workflows"]}  # fmt: skip
    assert (tmp_path / "twice-intents.sqlite").exists()
    propose(a, "r1")
    view = settled(a)["r1"]
    assert (view["state"], view["evidence"]["external_id"], view["params"]) == ("confirmed", "re_pi_1", {"amount": 100, "payment_intent": "pi_1"})


def test_a_job_that_raised_is_failed_or_what_the_app_says(tmp_path: Path) -> None:
    plain = adapter(tmp_path / "a")
    propose(plain, "r1", amount=403)
    assert settled(plain)["r1"]["state"] == "failed"
    careful = adapter(tmp_path / "b", raised="unknown")
    propose(careful, "r1", amount=403)
    view = settled(careful)["r1"]
    assert view["state"] == "unknown" and "refused" in view["evidence"]["last_error"]


def test_the_same_proposal_twice_starts_nothing_new_and_other_params_are_refused(tmp_path: Path) -> None:
    engine = ThreadEngine()
    a = adapter(tmp_path, engine)
    first = propose(a, "r1")
    again = propose(a, "r1")
    assert first["id"] == again["id"] and engine.starts["r1"] == 1
    with pytest.raises(ProtocolError) as refused:
        propose(a, "r1", amount=200)
    assert refused.value.code == EXISTS


def test_bad_proposals_get_the_protocols_codes(tmp_path: Path) -> None:
    a = adapter(tmp_path)
    cases = [
        ({"id": "x", "action": "files.put", "params": {}}, NOT_SUPPORTED),
        ({"id": "x", "action": "payments.refund", "params": {"payment_intent": "pi", "amount": 1, "currency": "eur"}}, MALFORMED),
        ({"id": "x", "action": "payments.refund", "params": {"payment_intent": "pi"}}, MALFORMED),
        ({"id": "", "action": "payments.refund", "params": {}}, MALFORMED),
        ({"id": "x", "action": "payments.refund", "params": {"payment_intent": "pi", "amount": 1}, "replaces": "nothing"}, MALFORMED),
    ]
    for intent, code in cases:
        with pytest.raises(ProtocolError) as refused:
            a.handle("propose", {"intent": intent})
        assert refused.value.code == code, (intent, refused.value.text)


def workspace(external_id: str, name: str) -> Any:
    if name.endswith("403"):
        raise RuntimeError("refused")
    return {"id": f"ws_{external_id}"}


def put(bucket: str, key: str, body: str) -> Any:
    return {"state": "confirmed", "external_id": f'"etag-of-{body}"'}


def step_adapter(tmp_path: Path, engine: ThreadEngine) -> Adapter:
    app = App(actions={"workspaces.create": workspace, "files.put": put, "payments.refund": refund})
    adapted = Adapter(engine, app, "test", io.StringIO())
    adapted.handle("init", {"protocol": "twice/1", "worker_id": "w1", "state_dir": str(tmp_path / "state")})
    return adapted


def welcome(after: str = "create", **ref: Any) -> dict[str, Any]:
    body = {"from": after, "field": "id", "format": "Welcome to {}", **ref}
    return {"intent": {"id": "welcome", "action": "files.put", "after": [after],
                       "params": {"bucket": "docs", "key": "welcome.txt", "body": body}}}  # fmt: skip


def test_a_step_waits_then_runs_once_with_its_reference_resolved_and_recorded(tmp_path: Path) -> None:
    engine = ThreadEngine()
    engine.gate.clear()
    a = step_adapter(tmp_path, engine)
    a.handle("propose", {"intent": {"id": "create", "action": "workspaces.create", "params": {"external_id": "acme", "name": "Acme"}}})
    assert a.handle("propose", welcome())[1]["intent"]["state"] == "blocked"
    assert "welcome" not in engine.starts
    engine.gate.set()
    view = settled(a)["welcome"]
    assert view["state"] == "confirmed" and view["evidence"]["resolved"] == {"body": "Welcome to ws_acme"}
    assert view["params"]["body"] == {"from": "create", "field": "id", "format": "Welcome to {}"}
    assert view["after"] == ["create"]
    # A new life starts nothing again, and knows the values it resolved.
    again = step_adapter(tmp_path, engine)
    assert settled(again)["welcome"]["evidence"]["resolved"] == {"body": "Welcome to ws_acme"}
    assert engine.starts["welcome"] == 1


def test_a_step_after_a_failed_intent_is_cancelled_and_after_an_escalated_one_escalated(tmp_path: Path) -> None:
    a = step_adapter(tmp_path / "failed", ThreadEngine())
    a.handle("propose", {"intent": {"id": "create", "action": "workspaces.create", "params": {"external_id": "x", "name": "x403"}}})
    a.handle("propose", welcome())
    view = settled(a)["welcome"]
    assert (view["state"], view["evidence"]["reason"]) == ("failed", "cancelled: the intent it comes after (create) failed")
    b = step_adapter(tmp_path / "escalated", ThreadEngine())
    propose(b, "r7", amount=7)  # the job says unknown; reconcile has no lookup: it stays so
    b.handle("propose", {"intent": {"id": "after-r7", "action": "workspaces.create", "after": ["r7"],
                                    "params": {"external_id": "y", "name": {"from": "r7", "field": "id"}}}})  # fmt: skip
    assert settled(b)["after-r7"]["state"] == "blocked"
    b.table.set("r7", "escalated", {"could_duplicate": True})
    b.handle("reconcile", {})
    view = settled(b)["after-r7"]
    assert (view["state"], view["evidence"]["could_duplicate"]) == ("escalated", False)


def test_bad_steps_are_refused_naming_the_problem(tmp_path: Path) -> None:
    a = step_adapter(tmp_path, ThreadEngine())
    a.handle("propose", {"intent": {"id": "create", "action": "workspaces.create", "params": {"external_id": "a", "name": "A"}}})
    cases = {
        "never recorded": welcome(after="nobody"),
        "is not in `after`": {"intent": {**welcome()["intent"], "after": []}},
        "exactly once": welcome(format="no placeholder"),
        "unknown key": welcome(extra=1),
        "has no result field 'etag'": welcome(field="etag"),
        "cannot take a reference": {"intent": {"id": "k", "action": "files.put", "after": ["create"],
                                               "params": {"bucket": "b", "body": "x", "key": {"from": "create", "field": "id"}}}},
        "twice": {"intent": {**welcome()["intent"], "after": ["create", "create"]}},
    }  # fmt: skip
    for words, request in cases.items():
        with pytest.raises(ProtocolError) as refused:
            a.handle("propose", request)
        assert refused.value.code == MALFORMED and words in refused.value.text, (words, refused.value.text)


def test_a_replacement_waits_for_its_lineage_and_is_cancelled_when_the_first_is_confirmed(tmp_path: Path) -> None:
    engine = ThreadEngine()
    engine.gate.clear()  # r1 stays pending until released
    a = adapter(tmp_path, engine)
    propose(a, "r1")
    assert propose(a, "r2", replaces="r1")["state"] == "blocked"
    engine.gate.set()
    views = settled(a)
    assert views["r1"]["state"] == "confirmed"
    assert views["r2"]["state"] == "failed" and "cancelled" in views["r2"]["evidence"]["reason"]
    assert "r2" not in engine.starts


def test_a_replacement_runs_once_its_lineage_certainly_had_no_effect(tmp_path: Path) -> None:
    engine = ThreadEngine()
    a = adapter(tmp_path, engine)
    propose(a, "r1", amount=403)
    settled(a)
    view = propose(a, "r2", amount=100, replaces="r1")
    assert view["state"] in ("submitted", "confirmed") and engine.starts["r2"] == 1
    assert settled(a)["r2"]["state"] == "confirmed"


def test_reconcile_settles_what_a_job_left_unknown_through_the_apps_lookup(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []

    def look_up(intent: dict[str, Any], ended_ms: int) -> Optional[dict[str, Any]]:
        seen.append((intent["id"], ended_ms))
        return {"state": "confirmed", "external_id": "re_found", "reason": "found by lookup", "ignored": 1}

    a = adapter(tmp_path, reconcile=look_up)
    propose(a, "r1", amount=7)
    assert settled(a)["r1"]["state"] == "unknown"
    events, reply = a.handle("reconcile", {})
    assert reply == {"sent": 0, "looked_up": 1} and seen == [("r1", 1000)]
    assert events == [{"intent_id": "r1", "from": "unknown", "state": "confirmed", "note": "found by lookup"}]
    view = settled(a)["r1"]
    assert view["evidence"]["external_id"] == "re_found" and "ignored" not in view["evidence"]


def test_a_reconcile_that_finds_it_failed_is_believed_over_the_jobs_record(tmp_path: Path) -> None:
    a = adapter(tmp_path, reconcile=lambda intent, ended_ms: {"state": "failed", "reason": "refused, for good"})
    propose(a, "r1", amount=7)
    a.handle("reconcile", {})
    view = settled(a)["r1"]
    assert (view["state"], view["evidence"]["reason"]) == ("failed", "refused, for good")


def test_a_failed_init_leaves_nothing_half_started(tmp_path: Path) -> None:
    class Broken(ThreadEngine):
        tries = 0

        def launch(self, init: Init, app: App, state_dir: Path) -> None:
            Broken.tries += 1
            if Broken.tries == 1:
                raise RuntimeError("the server did not answer")

    a = Adapter(Broken(), App(actions={"payments.refund": refund}), "test", io.StringIO())
    init = {"protocol": "twice/1", "worker_id": "w1", "state_dir": str(tmp_path / "state")}
    with pytest.raises(ProtocolError) as refused:
        a.handle("init", init)
    assert "the server did not answer" in refused.value.text
    with pytest.raises(ProtocolError):
        a.handle("status", {})  # not initialised: "send init first"
    a.handle("init", init)
    assert a.handle("status", {})[1] == {"intents": []}


def test_a_new_life_on_the_same_state_knows_every_intent(tmp_path: Path) -> None:
    a = adapter(tmp_path)
    propose(a, "r1")
    settled(a)
    again = Adapter(ThreadEngine(), App(actions={"payments.refund": refund}), "test", io.StringIO())
    again.handle("init", {"protocol": "twice/1", "worker_id": "w1", "state_dir": str(tmp_path / "state")})
    # The new engine had no record of r1: the adapter started it again, under the same id.
    assert settled(again)["r1"]["state"] == "confirmed"


def test_outputs_are_read_by_convention() -> None:
    assert read_output({"state": "escalated", "could_duplicate": False, "extra": 1}) == {"state": "escalated", "could_duplicate": False}
    assert read_output({"external_id": "re_1"}) == {"state": "confirmed", "external_id": "re_1"}
    assert read_output("done") == {"state": "confirmed"}
    assert read_output({"state": "maybe"}) == {"state": "confirmed"}


def test_an_app_module_is_found_by_name_or_refused_with_what_to_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myapp.py").write_text(
        "from twice.engines import App\ndef refund(payment_intent, amount): ...\n"
        "twice_app = App(actions={'payments.refund': refund})\nother = App(actions={})\nplain = 1\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    app, name = load_app("myapp")
    assert name == "myapp" and list(app.actions) == ["payments.refund"]
    assert load_app("myapp:other")[0].actions == {}
    with pytest.raises(AppNotFound, match=r"myapp has no plain = twice.engines.App"):
        load_app("myapp:plain")
    with pytest.raises(AppNotFound, match="cannot import 'nosuchapp'"):
        load_app("nosuchapp")


def test_drain_is_bounded_and_says_what_is_still_pending(tmp_path: Path) -> None:
    engine = ThreadEngine()
    engine.gate.clear()
    a = adapter(tmp_path, engine)
    propose(a, "r1")
    started = time.monotonic()
    with pytest.raises(ProtocolError) as timed_out:
        a.handle("drain", {"timeout_ms": 200})
    assert timed_out.value.code == 0 and "1 jobs still pending after 200 ms" in timed_out.value.text
    assert time.monotonic() - started < 5
    engine.gate.set()


def test_a_restate_mapping_file_fills_its_placeholders_keeping_types(tmp_path: Path) -> None:
    from twice.engines.restate import Handler, fill, init_values, load, load_mapping

    init = Init("w1", str(tmp_path), {"payments": {"url": "http://127.0.0.1:9", "contract": {"settle_ms_max": 500}}}, {},
                {"request_timeout_ms": 700}, {})  # fmt: skip
    values = {**init_values(init), "intent.id": "r1", "params.amount": 2500}
    assert fill({"amount": "{params.amount}", "id": "order {intent.id}", "n": 3}, values) == {"amount": 2500, "id": "order r1", "n": 3}
    assert fill("{payments.contract.settle_ms_max|30000}/{payments.contract.read_lag_ms_max|0}", values) == "500/0"
    assert fill("{limits.request_timeout_ms}", values) == 700
    with pytest.raises(KeyError, match="params.currency"):
        fill("{params.currency}", values)
    mapping = tmp_path / "twice-app.json"
    mapping.write_text(
        '{"command": ["node", "app.mjs"], "actions": {"payments.refund": {"handler": "Refunds/refund",'
        ' "input": {"pi": "{params.payment_intent}", "amount": "{params.amount}", "order": "{intent.id}"}}},'
        ' "claim": {"external_id": "refund_id"}, "raised": "escalated"}'
    )
    app = load_mapping(mapping)
    handler = app.actions["payments.refund"]
    assert isinstance(handler, Handler) and handler.params == ["amount", "payment_intent"]
    assert app.raised == "escalated" and app.read_output is not None
    assert app.read_output({"refund_id": "re_1", "amount": 2500}) == {"state": "confirmed", "external_id": "re_1"}
    (tmp_path / "broken.json").write_text('{"actions": {"payments.refund": {}}}')
    with pytest.raises(AppNotFound, match="broken.json"):
        load(str(tmp_path / "broken.json"))


def test_an_endpoint_port_is_reserved_below_the_ephemeral_range_while_its_case_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from twice.engines import servers

    monkeypatch.setattr(servers, "PORTS_DIR", tmp_path / "ports")
    low, high = servers.reserved_range()
    first, second = tmp_path / "case-1", tmp_path / "case-2"
    first.mkdir()
    second.mkdir()
    # A port the kernel never hands out for port 0, and another case never gets while the
    # first lives, even with nothing listening on it.
    taken = servers.reserved_port(first)
    assert low <= taken < high
    assert (tmp_path / "ports" / str(taken)).read_text() == str(first.resolve())
    others = {servers.reserved_port(second) for _ in range(20)}
    assert taken not in others
    # Once the first case's directory is gone, its port may be reserved again.
    first.rmdir()
    monkeypatch.setattr(servers.random, "randrange", lambda a, b: taken)
    assert servers.reserved_port(second) == taken
