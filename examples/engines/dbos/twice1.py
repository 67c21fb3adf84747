"""A `twice/1` executor (docs/protocol.md) that IS a DBOS application process: either refund app
of this folder (idiomatic.py or careful.py), driven by `twice run --executor`.

    twice run --executor "target/engines/dbos/venv/bin/python examples/engines/dbos/twice1.py --app careful"

- `init` launches DBOS on a SQLite system database in `state_dir` (`dbos.sqlite`), with a
  fixed application version and `executor_id` = the worker's id: a restarted worker (same
  `worker_id`) recovers its own PENDING workflows, which `DBOS.launch()` does in the background.
- `propose` of a `payments.refund` records the intent in a small table of the adapter's own
  (`twice1.sqlite`: id, parameters, `replaces`, and what the adapter itself decided), then starts
  the app's workflow under the intent id (`SetWorkflowID`): DBOS has written the workflow's
  record before `start_workflow` returns, so it is durable before `propose_ok`, and starting
  the same id again runs nothing new.
- `replaces` is handled by the adapter, not by DBOS (which has no such notion): the
  replacement's workflow is not started while anything in the lineage it replaces is
  unresolved; it is cancelled (`failed`) if one of them is confirmed, released (its workflow
  started) when all of them certainly have no effect (`failed`, or `escalated` with
  `could_duplicate: false`), and escalated when one may have taken effect.
- `drain` waits (bounded by `timeout_ms`) until no workflow of this worker is pending.
- `reconcile`: careful app only, a lookup (by the workflow id in the refund's metadata) of
  every intent the workflow left `unknown`; the idiomatic app has nothing to reconcile with.
- `status` maps DBOS's record (status and output) to the intent view; `attempts` is the count
  of refund requests the step made (sends.py, appended before each request leaves).

The framing, the error codes, `init`'s checks and the loop are the kit's (`twice.protocol`);
stdout carries protocol lines only: fd 1 is moved to stderr at start (DBOS's logging, any stray
print), and the protocol writes to a duplicate of the original fd 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from twice.protocol import (
    CRASH,
    EXISTS,
    MALFORMED,
    NOT_SUPPORTED,
    TIMEOUT,
    UNAVAILABLE,
    ProtocolError,
    emit,
    parse_init,
    protocol_output,
    serve,
)

# Protocol output: a private copy of fd 1; then fd 1 (and sys.stdout) go to stderr.
_PROTO = protocol_output()

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ACTION = "payments.refund"
PENDING = ("PENDING", "ENQUEUED", "DELAYED")
UNRESOLVED = ("recorded", "submitted", "blocked", "unknown")
DRAIN_MS_MAX = 600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def canonical(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class Adapter:
    def __init__(self, app_name: str) -> None:
        self.app_name = app_name
        self.app: Any = None
        self.db: Optional[sqlite3.Connection] = None
        self.worker_id = ""
        self.limits: dict[str, Any] = {}
        self.contract: dict[str, Any] = {}
        self.known: dict[str, str] = {}  # intent id -> last state told (for events)
        self.lock = threading.Lock()

    # ---- init -------------------------------------------------------------------------
    def init(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.db is not None:
            raise ProtocolError(MALFORMED, "init was already received")
        checked = parse_init(request)
        worker_id, state_dir = checked.worker_id, str(checked.state_dir)
        payments = checked.services.get("payments")
        self.limits = {"request_timeout_ms": 2000, "pass_pause_ms": 20, **checked.limits}
        self.worker_id = worker_id
        try:
            import importlib

            from dbos import DBOS

            import sends

            os.makedirs(state_dir, exist_ok=True)
            self.state_dir = Path(state_dir)
            self.db = sqlite3.connect(self.state_dir / "twice1.sqlite", timeout=30, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS intents (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,"
                " params TEXT NOT NULL, replaces TEXT, state TEXT, evidence TEXT)"
            )
            self.app = importlib.import_module(self.app_name)
            if isinstance(payments, dict) and isinstance(payments.get("url"), str):
                self.contract = payments.get("contract") or {}
                if self.app_name == "careful":  # the careful app uses what the contract promises
                    self.app.configure(payments["url"], self.limits["request_timeout_ms"] / 1000.0, contract=self.contract)
                else:
                    self.app.configure(payments["url"], self.limits["request_timeout_ms"] / 1000.0)
                self.payments = True
            else:
                self.payments = False
            sends.PATH = self.state_dir / "sends.jsonl"
            DBOS(
                config={
                    "name": "dbos-refunds",
                    "system_database_url": f"sqlite:///{self.state_dir / 'dbos.sqlite'}",
                    "run_admin_server": False,
                    "log_level": "WARNING",
                    "application_version": f"twice1-{self.app_name}",
                    "executor_id": worker_id,
                }
            )
            DBOS.launch()  # recovers this executor's PENDING workflows in the background
            self.DBOS = DBOS
            # Intents recorded by a life that died before starting their workflow.
            self.start_missing()
            for view in self.views(None):
                self.known[view["id"]] = view["state"]
        except ProtocolError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ProtocolError(CRASH, f"cannot open the state in {state_dir}: {e!r}") from e
        return {
            "executor": {"name": f"dbos-{self.app_name}-twice1", "version": "0.1.0"},
            "actions": [ACTION],
        }

    # ---- the adapter's table ----------------------------------------------------------
    def rows(self, ids: Optional[list[str]] = None) -> list[dict[str, Any]]:
        assert self.db is not None
        out = []
        for seq, id_, params, replaces, state, evidence in self.db.execute(
            "SELECT seq, id, params, replaces, state, evidence FROM intents ORDER BY seq"
        ):
            if ids is not None and id_ not in ids:
                continue
            out.append(
                {"seq": seq, "id": id_, "params": json.loads(params), "replaces": replaces, "state": state,
                 "evidence": json.loads(evidence) if evidence else {}}
            )  # fmt: skip
        return out

    def set_row(self, intent_id: str, state: Optional[str], evidence: dict[str, Any]) -> None:
        assert self.db is not None
        self.db.execute(
            "UPDATE intents SET state = ?, evidence = ? WHERE id = ?",
            (state, json.dumps(evidence) if evidence else None, intent_id),
        )

    def start(self, row: dict[str, Any]) -> None:
        from dbos import SetWorkflowID

        if hasattr(self.app, "started_here"):
            self.app.started_here.add(row["id"])
        with SetWorkflowID(row["id"]):
            self.DBOS.start_workflow(self.app.refund_workflow, row["params"]["payment_intent"], row["params"]["amount"])

    def start_missing(self) -> None:
        rows = [r for r in self.rows() if r["state"] is None]
        if not rows:
            return
        have = {s.workflow_id for s in self.DBOS.list_workflows(workflow_ids=[r["id"] for r in rows], load_input=False, load_output=False)}
        for row in rows:
            if row["id"] not in have:
                self.start(row)

    # ---- propose ----------------------------------------------------------------------
    def propose(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        intent = request.get("intent")
        if not isinstance(intent, dict):
            raise ProtocolError(MALFORMED, "propose needs an intent object")
        unknown = sorted(set(intent) - {"id", "action", "params", "replaces", "after"})
        if unknown:
            raise ProtocolError(MALFORMED, f"intent: unknown field {unknown[0]!r}")
        intent_id, action, params = intent.get("id"), intent.get("action"), intent.get("params")
        replaces = intent.get("replaces")
        if not isinstance(intent_id, str) or not intent_id:
            raise ProtocolError(MALFORMED, "intent.id must be a non-empty string")
        if not isinstance(action, str):
            raise ProtocolError(MALFORMED, "intent.action must be a string")
        if action != ACTION:
            raise ProtocolError(NOT_SUPPORTED, f"action {action!r} is not supported; supported: {ACTION}")
        if not self.payments:
            raise ProtocolError(NOT_SUPPORTED, f'action {ACTION} needs service "payments", which init did not configure')
        if intent.get("after"):
            raise ProtocolError(MALFORMED, "intent.after: this executor has no workflows feature")
        if replaces is not None and not isinstance(replaces, str):
            raise ProtocolError(MALFORMED, "intent.replaces must be a string or null")
        if not isinstance(params, dict):
            raise ProtocolError(MALFORMED, "intent.params must be an object")
        extra = sorted(set(params) - {"payment_intent", "amount"})
        if extra:
            raise ProtocolError(MALFORMED, f"payments.refund: unknown parameter {extra[0]!r}")
        if not isinstance(params.get("payment_intent"), str) or not params["payment_intent"]:
            raise ProtocolError(MALFORMED, 'payments.refund: "payment_intent" must be a non-empty string')
        amount = params.get("amount")
        if type(amount) is not int or amount <= 0:
            raise ProtocolError(MALFORMED, 'payments.refund: "amount" must be a positive integer')
        assert self.db is not None
        with self.lock:
            existing = self.db.execute("SELECT params FROM intents WHERE id = ?", (intent_id,)).fetchone()
            if existing is not None:
                if existing[0] != canonical(params):
                    raise ProtocolError(EXISTS, f"intent id {intent_id} was already recorded with another action or payload")
                self.start_missing()
                view = self.views([intent_id])[0]
                self.known[intent_id] = view["state"]
                return self.changes([]), {"intent": view}
            if replaces is not None and self.db.execute("SELECT 1 FROM intents WHERE id = ?", (replaces,)).fetchone() is None:
                raise ProtocolError(MALFORMED, f"intent {intent_id} replaces {replaces}, which this executor has never recorded")
            state, evidence = None, {}
            if replaces is not None:
                state, evidence = self.released(replaces) or ("blocked", {})
                if state == "recorded":
                    state, evidence = None, {}
            if replaces is not None and state is None:
                self.tell_changes()  # the lineage's resolution is told before the replacement runs
            try:
                self.db.execute(
                    "INSERT INTO intents (id, params, replaces, state, evidence) VALUES (?, ?, ?, ?, ?)",
                    (intent_id, canonical(params), replaces, state, json.dumps(evidence) if evidence else None),
                )
                if state is None:
                    self.start(self.rows([intent_id])[0])
            except Exception as e:  # noqa: BLE001
                raise ProtocolError(CRASH, f"could not record {intent_id}: {e!r}") from e
            view = self.views([intent_id])[0]
            self.known[intent_id] = view["state"]
            # Events for what changed meanwhile (e.g. the predecessor this one was released by).
            return self.changes([]), {"intent": view}

    # ---- replacements -----------------------------------------------------------------
    def released(self, replaces: str) -> Optional[tuple[str, dict[str, Any]]]:
        """What an intent replacing `replaces` may do now: ("recorded", {}) to run,
        ("failed", ...) cancelled, ("escalated", ...), or None (stay blocked)."""
        views = {v["id"]: v for v in self.views(None)}
        current: Optional[str] = replaces
        seen = set()
        verdict = "clear"
        while current is not None and current not in seen:
            seen.add(current)
            v = views.get(current)
            if v is None:
                return ("escalated", {"reason": f"the intent it replaces ({current}) is missing", "could_duplicate": False})
            st, ev = v["state"], v.get("evidence", {})
            if st == "confirmed":
                return ("failed", {"reason": f"cancelled: the intent it replaces ({replaces}) is confirmed"
                                   if current == replaces else f"cancelled: {current}, in the lineage of the intent it replaces ({replaces}), is confirmed"})
            if st == "escalated" and ev.get("could_duplicate") is not False:
                verdict = "escalate"
            elif st == "escalated" or st == "failed":
                pass
            else:
                return None
            current = v.get("replaces")
        if verdict == "escalate":
            return ("escalated", {"reason": f"the lineage of {replaces} is escalated; executing this one could do it twice", "could_duplicate": False})
        return ("recorded", {})

    def release_pass(self, events: list[dict[str, Any]]) -> None:
        for row in self.rows():
            if row["state"] != "blocked":
                continue
            got = self.released(row["replaces"])
            if got is None:
                continue
            state, evidence = got
            if state == "recorded":
                self.set_row(row["id"], None, {})
                self.tell_changes()  # the lineage's resolution is told before the replacement runs
                self.start({**row, "state": None})
            else:
                self.set_row(row["id"], state, evidence)

    # ---- views ------------------------------------------------------------------------
    def views(self, ids: Optional[list[str]]) -> list[dict[str, Any]]:
        rows = self.rows(ids)
        if not rows:
            return []
        statuses = {s.workflow_id: s for s in self.DBOS.list_workflows(workflow_ids=[r["id"] for r in rows])}
        import sends

        counted = sends.read(self.state_dir / "sends.jsonl")
        return [self.view(r, statuses.get(r["id"]), counted[r["id"]]) for r in rows]

    def view(self, row: dict[str, Any], status: Any, attempts: int) -> dict[str, Any]:
        evidence: dict[str, Any] = {}
        if row["state"] in ("blocked", "failed", "escalated", "confirmed") and status is None:
            state = row["state"]
        elif row["state"] in ("confirmed", "escalated") and status is not None:
            state = row["state"]  # decided by the adapter's reconcile (a lookup)
        elif status is None:
            state = "recorded"
        elif status.status in PENDING:
            state = "submitted"
            evidence["dbos_status"] = status.status
        else:
            evidence["dbos_status"] = status.status
            if self.app_name == "idiomatic":
                if status.status == "SUCCESS":
                    state = "confirmed"
                    evidence["external_id"] = (status.output or {}).get("refund_id")
                else:
                    state = "failed"  # as the idiomatic app reads a workflow that raised
                    evidence["last_error"] = repr(status.error)[:300]
            else:
                output = dict(status.output or {}) if status.status == "SUCCESS" else {}
                state = output.pop("state", "unknown")
                if "refund_id" in output:
                    evidence["external_id"] = output.pop("refund_id")
                if output.get("key"):
                    evidence["key"] = output["key"]
                if "decision" in output:
                    d = output["decision"]
                    evidence["decision"] = {"status": d.get("status"), "error": f"{d.get('code')}: {d.get('message')}"}
                if "could_duplicate" in output:
                    evidence["could_duplicate"] = output["could_duplicate"]
                if output.get("last_error"):
                    evidence["last_error"] = output["last_error"]
                if status.status != "SUCCESS":
                    evidence["last_error"] = repr(status.error)[:300]
                if output.get("found_by"):
                    evidence["reason"] = f"found by {output['found_by']}"
        evidence.update(row["evidence"])
        view = {"id": row["id"], "action": ACTION, "params": row["params"], "state": state, "attempts": attempts,
                "evidence": {k: v for k, v in evidence.items() if v not in (None, "", {})}}  # fmt: skip
        if row["replaces"] is not None:
            view["replaces"] = row["replaces"]
        return view

    def tell_changes(self) -> None:
        """Writes the events of every change since last told at once (before this request's
        reply, as §5 allows), so the timeline has them before what follows."""
        for event in self.changes([]):
            emit(_PROTO, {"type": "event", **event})

    def changes(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Appends an event for each intent whose state changed since last told; returns them."""
        views = self.views(None)
        for v in views:
            before = self.known.get(v["id"])
            if before != v["state"]:
                event = {"intent_id": v["id"], "state": v["state"]}
                if before is not None:
                    event["from"] = before
                if v["evidence"].get("reason"):
                    event["note"] = v["evidence"]["reason"]
                events.append(event)
                self.known[v["id"]] = v["state"]
        return events

    # ---- drain, reconcile, status -----------------------------------------------------
    def mine_pending(self) -> tuple[int, int]:
        pending = self.DBOS.list_workflows(status=list(PENDING), load_input=False, load_output=False)
        ids = {r["id"] for r in self.rows()}
        pending = [p for p in pending if p.workflow_id in ids]
        mine = sum(1 for p in pending if p.executor_id == self.worker_id)
        return mine, len(pending)

    def drain(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        timeout_ms = request.get("timeout_ms", DRAIN_MS_MAX)
        if type(timeout_ms) is not int or not 0 <= timeout_ms <= DRAIN_MS_MAX:
            raise ProtocolError(MALFORMED, f"timeout_ms must be an integer from 0 to {DRAIN_MS_MAX}")
        deadline = time.monotonic() + timeout_ms / 1000.0
        events: list[dict[str, Any]] = []
        pause = max(self.limits.get("pass_pause_ms", 20), 20) / 1000.0
        while True:
            self.release_pass(events)
            self.start_missing()
            mine, total = self.mine_pending()
            if mine == 0:
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(pause)
        self.changes(events)
        if total:
            others = total - mine
            text = f"{total} workflows still pending after {timeout_ms} ms" + (
                f" ({others} of them another worker's: DBOS has no leases, this worker does not take them over)" if others else ""
            )
            raise ProtocolError(TIMEOUT, text, events)
        return events, {}

    def reconcile(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        events: list[dict[str, Any]] = []
        looked_up = 0
        self.release_pass(events)
        self.start_missing()
        if self.app_name == "careful":
            for v in self.views(None):
                if v["state"] != "unknown":
                    continue
                looked_up += 1
                try:
                    found = self.look_up(v["params"]["payment_intent"], v["id"])
                except Exception as e:  # noqa: BLE001 - the lookup failed: stays unknown
                    print(f"twice1: lookup of {v['id']} failed: {e!r}", file=sys.stderr)
                    continue
                row = self.rows([v["id"]])[0]
                ev = dict(row["evidence"])
                if found is not None:
                    refund_id, amount = found
                    if amount == v["params"]["amount"]:
                        ev.update({"external_id": refund_id, "reason": "confirmed by lookup"})
                        self.set_row(v["id"], "confirmed", ev)
                    else:
                        ev.update({"external_id": refund_id, "could_duplicate": True,
                                   "reason": f"found with amount {amount}, not {v['params']['amount']}"})
                        self.set_row(v["id"], "escalated", ev)
                elif self.absence_final(v["id"]):
                    ev.update({"could_duplicate": False,
                               "reason": "no refund found once nothing sent could still land; the workflow is over, a person decides"})
                    self.set_row(v["id"], "escalated", ev)
            self.release_pass(events)
        self.changes(events)
        return events, {"sent": 0, "looked_up": looked_up}

    def look_up(self, payment_intent: str, workflow_id: str) -> Optional[tuple[str, int]]:
        client = self.app._client
        refunds = client.v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
        for refund in refunds.data:
            d = refund.to_dict(recursive=True)
            if (d.get("metadata") or {}).get(self.app.METADATA_KEY) == workflow_id:
                return str(refund.id), int(d.get("amount") or 0)
        return None

    def absence_final(self, workflow_id: str) -> bool:
        statuses = self.DBOS.list_workflows(workflow_ids=[workflow_id], load_input=False, load_output=False)
        if not statuses:
            return False
        ended = statuses[0].completed_at or statuses[0].updated_at or now_ms()
        bound = (
            int(self.contract.get("settle_ms_max", 30000)) + int(self.contract.get("read_lag_ms_max", 0))
            + int(self.limits["request_timeout_ms"]) + 100
        )  # fmt: skip
        return now_ms() >= ended + bound

    def status(self, request: dict[str, Any]) -> dict[str, Any]:
        ids = request.get("ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            raise ProtocolError(MALFORMED, "ids must be a list of strings")
        return {"intents": self.views(ids)}

    # ---- dispatch ---------------------------------------------------------------------
    def handle(self, kind: str, request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if kind == "shutdown":
            return [], {}
        if kind == "init":
            return [], self.init(request)
        if kind not in ("propose", "status", "drain", "reconcile"):
            raise ProtocolError(NOT_SUPPORTED, f"unknown request type {kind!r}")
        if self.db is None:
            raise ProtocolError(UNAVAILABLE, "send init first")
        try:
            if kind == "propose":
                return self.propose(request)
            if kind == "status":
                return [], self.status(request)
            if kind == "drain":
                return self.drain(request)
            return self.reconcile()
        except ProtocolError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ProtocolError(CRASH, f"{kind}: {e!r}") from e


def run(adapter: Adapter) -> None:
    serve(adapter.handle, out=_PROTO)
    sys.stderr.flush()
    # Everything acknowledged is durable; DBOS's threads need no goodbye.
    os._exit(0)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=("idiomatic", "careful"), required=True)
    args = parser.parse_args(argv)
    run(Adapter(args.app))


if __name__ == "__main__":
    main(sys.argv[1:])
