"""A team's engine app as a `twice/1` executor: what every engine adapter shares.

`twice run --executor "python -m twice.engines.<engine> --app myapp.refunds"` starts one
process per worker; each is a real worker of the engine, running the team's own workflows, that
twice SIGKILLs, SIGSTOPs and restarts. The team's module names which of its workflows (tasks,
graphs) does each action, in one object::

    from twice.engines import App

    twice_app = App(
        actions={"payments.refund": refund_workflow},  # called with the intent's params
        configure=configure,                            # optional: gets the checked init
        reconcile=look_up,                              # optional: settles intents left unknown
    )

What the adapter owns, the same for every engine (this module):

- an intent table in `state_dir/twice-intents.sqlite` (id, action, params, `replaces`, and what
  the adapter itself decided), written before the engine is asked to run anything, so that a
  proposal is durable before `propose_ok`;
- the job's id: the intent id, which is every engine's own idempotency for starting work (a
  second start of the same id runs nothing new);
- `replaces` (no engine has the notion): a replacement is not started while anything in the
  lineage it replaces is unresolved; it is cancelled (`failed`) when a predecessor is
  confirmed, started when every predecessor certainly has no effect, and escalated when one
  may have taken effect;
- the claims, read from the engine's own record of each job (`Record`): running is
  `submitted`; a job that raised is `failed` (as an app that trusts its engine reads it); a job
  that returned is `confirmed`, unless its output says otherwise (`read_output`);
- `drain` (bounded by `timeout_ms`), `reconcile` (the app's `reconcile`, for intents left
  `unknown`), `status`, and the events of every change, in order.

What each engine supplies is an `Engine`: launch a worker, start a job under an id, read the
engine's record of jobs, say which are still pending. `twice.engines.dbos` is one.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from twice.protocol import (
    CRASH,
    EXISTS,
    MALFORMED,
    NOT_SUPPORTED,
    TIMEOUT,
    UNAVAILABLE,
    Init,
    ProtocolError,
    emit,
    parse_init,
    protocol_output,
    serve,
)

from . import steps

#: The seven states of docs/protocol.md §7.
STATES = ("recorded", "submitted", "blocked", "unknown", "confirmed", "failed", "escalated")
#: States in which an intent may still take effect or be decided.
UNRESOLVED = ("recorded", "submitted", "blocked", "unknown")
#: The evidence fields a job's output may carry into its claim (docs/protocol.md §6).
EVIDENCE_FIELDS = (
    "key", "previous_keys", "external_id", "tx_hash", "last_error", "decision", "could_duplicate", "reason",
)  # fmt: skip
#: The longest `drain` a request may ask for.
DRAIN_MS_MAX = 600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def canonical(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


@dataclass
class App:
    """A team's app, as the adapter drives it.

    - `actions`: action name (`payments.refund`, `saas.create_workspace`, `files.put`,
      `chain.transfer`, `email.send`) -> the engine's unit of work for it (a DBOS workflow, a
      Celery task, ...), called with the intent's params as keyword arguments.
    - `configure(init)`: called once per worker process before the engine starts, with the
      checked `init` (`init.url("payments")`, `init.contract("payments")`, `init.limits`,
      `init.state_dir`): point the app's SDK clients at twice's fakes here.
    - `reconcile(intent, ended_ms)`: for an intent whose job left it `unknown`, after the job
      ended at `ended_ms`: a dict with the new `state` and evidence fields, or None while it
      cannot tell. Without it, `reconcile` settles nothing.
    - `read_output(output)`: a job's return value -> a dict with `state` and evidence fields.
      The default: a dict with a `state` is taken as it is (see `EVIDENCE_FIELDS`); any other
      return value is `confirmed`, with the dict's `external_id` or `id` as evidence.
    - `attempts(intent_id)`: write requests sent so far for the intent, when the app counts
      them (claims say 0 otherwise).
    - `on_start(intent_id)`: called in the process that starts a job, just before; an app may
      tell its own jobs from those its engine recovered after a crash.
    - `raised`: the state of a job that raised. `failed` (the default) is how an app that
      trusts its engine reads it; a careful app says `unknown`, since a job that raised past
      its retries may have acted.
    """

    actions: dict[str, Callable[..., Any]]
    configure: Optional[Callable[[Init], None]] = None
    reconcile: Optional[Callable[[dict[str, Any], int], Optional[dict[str, Any]]]] = None
    read_output: Optional[Callable[[Any], dict[str, Any]]] = None
    attempts: Optional[Callable[[str], int]] = None
    on_start: Optional[Callable[[str], None]] = None
    raised: str = "failed"


@dataclass
class Record:
    """The engine's record of one job: `status` is `pending`, `succeeded` or `failed`;
    `output` the job's return value, `error` what it raised; `ended_ms` when it ended;
    `engine_status` the engine's own word for it (shown in the claim's evidence)."""

    status: str
    output: Any = None
    error: Optional[str] = None
    ended_ms: Optional[int] = None
    engine_status: str = ""
    executor: Optional[str] = None


class Engine:
    """What an engine supplies to the adapter. Every method may raise; the adapter answers a
    crash (code 13) and goes on."""

    #: The engine's name, in the executor's name (`<engine>-<app>`).
    name = "engine"

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        """Starts this worker's engine side (after `app.configure`); a worker restarted with
        the same `worker_id` resumes the jobs its previous life left pending."""
        raise NotImplementedError

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        """Starts `work(**params)` as a job whose id is `intent_id`; durable on return. A
        second start of the same id must run nothing new."""
        raise NotImplementedError

    def recover(self, jobs: Sequence[tuple[str, Callable[..., Any], dict[str, Any]]]) -> None:
        """Called once after `launch` with every job the adapter has started (id, work, params):
        an engine that does not resume its own unfinished jobs on start resumes this worker's
        here. DBOS needs nothing (its launch recovers them)."""

    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        """The engine's record of each job in `ids` it knows (an id it has never started is
        absent)."""
        raise NotImplementedError

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        """Of the jobs `ids`, how many are pending and this worker's to finish, and how many
        are pending in all."""
        raise NotImplementedError

    def close(self) -> None:
        """At `shutdown` (or the end of input): stops what this worker started besides
        itself. Everything acknowledged is durable already."""


class IntentTable:
    """The adapter's own record of the intents, in SQLite (WAL, synchronous=FULL)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS intents (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,"
            " action TEXT NOT NULL, params TEXT NOT NULL, replaces TEXT, state TEXT, evidence TEXT, after TEXT)"
        )

    def rows(self, ids: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
        wanted = None if ids is None else set(ids)
        out = []
        for seq, id_, action, params, replaces, state, evidence, after in self.db.execute(
            "SELECT seq, id, action, params, replaces, state, evidence, after FROM intents ORDER BY seq"
        ):
            if wanted is not None and id_ not in wanted:
                continue
            out.append({"seq": seq, "id": id_, "action": action, "params": json.loads(params), "replaces": replaces,
                        "state": state, "evidence": json.loads(evidence) if evidence else {},
                        "after": json.loads(after) if after else []})  # fmt: skip
        return out

    def find(self, intent_id: str) -> Optional[dict[str, Any]]:
        rows = self.rows([intent_id])
        return rows[0] if rows else None

    def insert(self, intent_id: str, action: str, params: dict[str, Any], replaces: Optional[str],
               state: Optional[str], evidence: dict[str, Any], after: Sequence[str] = ()) -> None:  # fmt: skip
        self.db.execute(
            "INSERT INTO intents (id, action, params, replaces, state, evidence, after) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (intent_id, action, canonical(params), replaces, state, json.dumps(evidence) if evidence else None,
             json.dumps(list(after)) if after else None),
        )  # fmt: skip

    def set(self, intent_id: str, state: Optional[str], evidence: dict[str, Any]) -> None:
        self.db.execute(
            "UPDATE intents SET state = ?, evidence = ? WHERE id = ?",
            (state, json.dumps(evidence) if evidence else None, intent_id),
        )


def read_output(output: Any) -> dict[str, Any]:
    """The default reading of a job's return value (see `App.read_output`)."""
    if isinstance(output, dict) and output.get("state") in STATES:
        return {k: v for k, v in output.items() if k == "state" or k in EVIDENCE_FIELDS}
    found: dict[str, Any] = {"state": "confirmed"}
    if isinstance(output, dict):
        external = output.get("external_id", output.get("id"))
        if isinstance(external, str) and external:
            found["external_id"] = external
    return found


def check_params(action: str, work: Callable[..., Any], params: Any) -> None:
    """The params must be an object whose fields the work's signature takes by name."""
    if not isinstance(params, dict):
        raise ProtocolError(MALFORMED, "intent.params must be an object")
    try:
        signature = inspect.signature(work)
    except (TypeError, ValueError):
        return  # a callable without a signature: the engine will say
    try:
        signature.bind(**params)
    except TypeError as e:
        raise ProtocolError(MALFORMED, f"{action}: {e}") from None


class Adapter:
    """One worker: the `twice/1` requests answered from the intent table and the engine's record."""

    def __init__(self, engine: Engine, app: App, app_name: str, out: Any) -> None:
        self.engine, self.app, self.app_name, self.out = engine, app, app_name, out
        self.table: Optional[IntentTable] = None
        self.worker_id = ""
        self.limits: dict[str, Any] = {}
        self.known: dict[str, str] = {}  # intent id -> the state last told (for events)
        # The engine's records of jobs that ended: they do not change, so a poll reads only
        # the others (a Restate output or a Temporal result is a request each).
        self.ended: dict[str, Record] = {}
        self.lock = threading.Lock()

    # ---- init -------------------------------------------------------------------------
    def init(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.table is not None:
            raise ProtocolError(MALFORMED, "init was already received")
        checked = parse_init(request)
        self.worker_id, self.limits = checked.worker_id, {"pass_pause_ms": 20, **checked.limits}
        state_dir = Path(str(checked.state_dir))
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            self.table = IntentTable(state_dir / "twice-intents.sqlite")
            if self.app.configure is not None:
                self.app.configure(checked)
            self.engine.launch(checked, self.app, state_dir)
            started = [r for r in self.table_rows() if r["state"] is None]
            self.engine.recover([(r["id"], self.app.actions[r["action"]], steps.job_params(r)) for r in started])
            self.start_missing()
            for view in self.views(None):
                self.known[view["id"]] = view["state"]
        except Exception as e:  # noqa: BLE001
            # A failed init leaves nothing half-started: a second init may try again.
            if self.table is not None:
                self.table.db.close()
            self.table = None
            if isinstance(e, ProtocolError):
                raise
            raise ProtocolError(CRASH, f"cannot start {self.engine.name} in {state_dir}: {e!r}") from e
        return {
            "executor": {"name": f"{self.engine.name}-{self.app_name}", "version": "0.1.0"},
            "actions": sorted(self.app.actions),
            "features": [steps.FEATURE],
        }

    # ---- jobs -------------------------------------------------------------------------
    def start(self, row: dict[str, Any]) -> None:
        if self.app.on_start is not None:
            self.app.on_start(row["id"])
        self.engine.start(row["id"], self.app.actions[row["action"]], steps.job_params(row))

    def start_missing(self) -> None:
        """Starts the jobs of intents recorded (and released) by a life that died before."""
        rows = [r for r in self.table_rows() if r["state"] is None]
        if not rows:
            return
        have = self.records([r["id"] for r in rows])
        for row in rows:
            if row["id"] not in have:
                self.start(row)

    def table_rows(self, ids: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
        assert self.table is not None
        return self.table.rows(ids)

    # ---- propose ----------------------------------------------------------------------
    def checked_intent(self, request: dict[str, Any]) -> tuple[str, str, dict[str, Any], Optional[str], list[str]]:
        intent = request.get("intent")
        if not isinstance(intent, dict):
            raise ProtocolError(MALFORMED, "propose needs an intent object")
        unknown = sorted(set(intent) - {"id", "action", "params", "replaces", "after"})
        if unknown:
            raise ProtocolError(MALFORMED, f"intent: unknown field {unknown[0]!r}")
        intent_id, action, params, replaces = intent.get("id"), intent.get("action"), intent.get("params"), intent.get("replaces")
        if not isinstance(intent_id, str) or not intent_id:
            raise ProtocolError(MALFORMED, "intent.id must be a non-empty string")
        if not isinstance(action, str):
            raise ProtocolError(MALFORMED, "intent.action must be a string")
        if action not in self.app.actions:
            raise ProtocolError(NOT_SUPPORTED, f"action {action!r} is not supported; supported: {', '.join(sorted(self.app.actions))}")
        if replaces is not None and not isinstance(replaces, str):
            raise ProtocolError(MALFORMED, "intent.replaces must be a string or null")
        check_params(action, self.app.actions[action], params)
        recorded = {r["id"]: r["action"] for r in self.table_rows()}
        after = steps.check(intent_id, action, params, intent.get("after"), recorded)
        return intent_id, action, params, replaces, after

    def propose(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        intent_id, action, params, replaces, after = self.checked_intent(request)
        assert self.table is not None
        with self.lock:
            existing = self.table.find(intent_id)
            if existing is not None:
                same = existing["action"] == action and canonical(existing["params"]) == canonical(params)
                if not same or existing["after"] != after:
                    raise ProtocolError(EXISTS, f"intent id {intent_id} was already recorded with another action, payload or after")
                self.start_missing()
                return self.changes([]), {"intent": self.view_of(intent_id)}
            if replaces is not None and self.table.find(replaces) is None:
                raise ProtocolError(MALFORMED, f"intent {intent_id} replaces {replaces}, which this executor has never recorded")
            row = {"id": intent_id, "action": action, "params": params, "replaces": replaces, "after": after}
            state, evidence = None, {}
            if replaces is not None or after:
                state, evidence = self.release(row) or ("blocked", {})
                if state == "recorded":
                    state = None
                    self.tell_changes()  # what released it is told before it runs
            try:
                self.table.insert(intent_id, action, params, replaces, state, evidence, after)
                if state is None:
                    self.start(self.table_rows([intent_id])[0])
            except Exception as e:  # noqa: BLE001
                raise ProtocolError(CRASH, f"could not record {intent_id}: {e!r}") from e
            return self.changes([]), {"intent": self.view_of(intent_id)}

    def view_of(self, intent_id: str) -> dict[str, Any]:
        view = self.views([intent_id])[0]
        self.known[intent_id] = view["state"]
        return view

    # ---- replacements -----------------------------------------------------------------
    def released(self, replaces: str, intent_id: str) -> Optional[tuple[str, dict[str, Any]]]:
        """What intent `intent_id`, replacing `replaces`, may do now: ("recorded", {}) to run,
        ("failed", ...) cancelled, ("escalated", ...), or None (stay blocked). An escalation
        names the key its job would have run under (the intent id: every engine's handle on
        it), so that a person can look for it."""
        views = {v["id"]: v for v in self.views(None)}
        current: Optional[str] = replaces
        seen: set[str] = set()
        escalate = False
        while current is not None and current not in seen:
            seen.add(current)
            v = views.get(current)
            if v is None:
                return ("escalated", {"reason": f"the intent it replaces ({current}) is missing", "could_duplicate": False,
                                      "key": intent_id})  # fmt: skip
            state, evidence = v["state"], v.get("evidence", {})
            if state == "confirmed":
                where = "" if current == replaces else f"{current}, in the lineage of "
                return ("failed", {"reason": f"cancelled: {where}the intent it replaces ({replaces}) is confirmed"})
            if state == "escalated" and evidence.get("could_duplicate") is not False:
                escalate = True
            elif state not in ("escalated", "failed"):
                return None
            current = v.get("replaces")
        if escalate:
            return ("escalated", {"reason": f"the lineage of {replaces} is escalated; executing this one could do it twice",
                                  "could_duplicate": False, "key": intent_id})  # fmt: skip
        return ("recorded", {})

    def release(self, row: dict[str, Any]) -> Optional[tuple[str, dict[str, Any]]]:
        """What a blocked intent may do now: a step once what it comes after is settled (its
        references resolved), then a replacement once its lineage is; None: still blocked."""
        evidence: dict[str, Any] = {}
        if row["after"]:
            views = {v["id"]: v for v in self.views(row["after"])}
            got = steps.released(row["id"], row["after"], row["params"], views)
            if got is None or got[0] != "recorded":
                return got
            evidence = got[1]
        if row["replaces"] is not None:
            got = self.released(row["replaces"], row["id"])
            if got is None or got[0] != "recorded":
                return got
        return ("recorded", evidence)

    def release_pass(self) -> bool:
        """Decides every blocked intent that may now run, or end; whether any was."""
        assert self.table is not None
        changed = False
        for row in self.table_rows():
            if row["state"] != "blocked":
                continue
            got = self.release(row)
            if got is None:
                continue
            changed = True
            state, evidence = got
            if state == "recorded":
                # The resolved values are durable before the job starts (docs/protocol.md §3.2).
                self.table.set(row["id"], None, evidence)
                self.tell_changes()  # what released it is told before it runs
                self.start({**row, "state": None, "evidence": evidence})
            else:
                self.table.set(row["id"], state, evidence)
        return changed

    # ---- views ------------------------------------------------------------------------
    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        """The engine's record of each job in `ids` it knows; an ended one read once."""
        found = {i: self.ended[i] for i in ids if i in self.ended}
        found.update(self.engine.records([i for i in ids if i not in self.ended]))
        self.ended.update({i: r for i, r in found.items() if r.status != "pending"})
        return found

    def views(self, ids: Optional[Sequence[str]]) -> list[dict[str, Any]]:
        rows = self.table_rows(ids)
        if not rows:
            return []
        records = self.records([r["id"] for r in rows])
        return [self.view(r, records.get(r["id"])) for r in rows]

    def view(self, row: dict[str, Any], record: Optional[Record]) -> dict[str, Any]:
        state, evidence = self.state_of(row, record)
        evidence.update(row["evidence"])
        view = {
            "id": row["id"], "action": row["action"], "params": row["params"], "state": state,
            "attempts": self.app.attempts(row["id"]) if self.app.attempts is not None else 0,
            "evidence": {k: v for k, v in evidence.items() if v not in (None, "", {})},
        }  # fmt: skip
        if row["replaces"] is not None:
            view["replaces"] = row["replaces"]
        if row["after"]:
            view["after"] = row["after"]
        return view

    def state_of(self, row: dict[str, Any], record: Optional[Record]) -> tuple[str, dict[str, Any]]:
        decided = row["state"]
        if decided in ("blocked", "failed", "escalated", "confirmed") and record is None:
            return decided, {}
        if decided in ("confirmed", "escalated", "failed") and record is not None:
            return decided, {}  # decided by the app's reconcile
        if record is None:
            return "recorded", {}
        evidence: dict[str, Any] = {"engine_status": record.engine_status}
        if record.status == "pending":
            return "submitted", evidence
        if record.status == "failed":
            evidence["last_error"] = (record.error or "")[:300]
            return (self.app.raised if self.app.raised in STATES else "failed"), evidence
        reader = self.app.read_output or read_output
        found = dict(reader(record.output))
        state = found.pop("state", "confirmed")
        evidence.update(found)
        return (state if state in STATES else "unknown"), evidence

    # ---- events -----------------------------------------------------------------------
    def tell_changes(self) -> None:
        """Writes the events of every change since last told at once (before this request's
        reply, as docs/protocol.md §5 allows), so the timeline has them before what follows."""
        for event in self.changes([]):
            emit(self.out, {"type": "event", **event})

    def changes(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Appends an event for each intent whose state changed since last told; returns them."""
        for v in self.views(None):
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
    def drain(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        timeout_ms = request.get("timeout_ms", DRAIN_MS_MAX)
        if type(timeout_ms) is not int or not 0 <= timeout_ms <= DRAIN_MS_MAX:
            raise ProtocolError(MALFORMED, f"timeout_ms must be an integer from 0 to {DRAIN_MS_MAX}")
        deadline = time.monotonic() + timeout_ms / 1000.0
        pause_s = max(int(self.limits.get("pass_pause_ms", 20)), 20) / 1000.0
        while True:
            # Pending first, then the replacements: a job that ends in between has released
            # its replacement by the time the loop may end.
            unended = [r["id"] for r in self.table_rows() if r["id"] not in self.ended]
            mine, total = self.engine.pending(unended, self.worker_id)
            released = self.release_pass()
            self.start_missing()
            if released:
                continue
            if mine == 0 or time.monotonic() >= deadline:
                break
            time.sleep(pause_s)
        events = self.changes([])
        if total:
            others = total - mine
            text = f"{total} jobs still pending after {timeout_ms} ms" + (
                f" ({others} of them another worker's: this worker does not take them over)" if others else ""
            )
            raise ProtocolError(TIMEOUT, text, events)
        return events, {}

    def reconcile(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        assert self.table is not None
        looked_up = 0
        self.release_pass()
        self.start_missing()
        if self.app.reconcile is not None:
            records = self.records([r["id"] for r in self.table_rows()])
            for v in self.views(None):
                if v["state"] != "unknown":
                    continue
                looked_up += 1
                record = records.get(v["id"])
                ended_ms = (record.ended_ms if record is not None else None) or now_ms()
                try:
                    found = self.app.reconcile(v, ended_ms)
                except Exception as e:  # noqa: BLE001 - the lookup failed: it stays unknown
                    print(f"twice.engines: reconcile of {v['id']} failed: {e!r}", file=sys.stderr)
                    continue
                if found is None or found.get("state") not in STATES:
                    continue
                row = self.table_rows([v["id"]])[0]
                evidence = {**row["evidence"], **{k: found[k] for k in EVIDENCE_FIELDS if k in found}}
                self.table.set(v["id"], found["state"], evidence)
            self.release_pass()
        return self.changes([]), {"sent": 0, "looked_up": looked_up}

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
        if self.table is None:
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


class AppNotFound(Exception):
    """`--app` names no module, or a module without an `App`."""


def load_app(spec: str) -> tuple[App, str]:
    """`module` or `module:attribute` -> the `App` (default attribute `twice_app`) and a short
    name for it. The current directory is on the import path, as for `python -m`."""
    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "twice_app"
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise AppNotFound(f"--app {spec}: cannot import {module_name!r}: {e}") from e
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise AppNotFound(
            f"--app {spec}: {module_name} has no {attribute} = twice.engines.App(actions={{...}}) "
            f"(found {type(app).__name__})"
        )
    return app, module_name.rsplit(".", 1)[-1]


def main(engine: Engine, argv: Optional[list[str]] = None, description: str = "",
         load: Callable[[str], tuple[App, str]] = load_app) -> None:  # fmt: skip
    """The adapter's command line: `--app MODULE[:ATTRIBUTE]` (or what `load` reads) and
    `--path DIR` (put first on the import path, repeatable). Serves twice/1 on stdio until
    shutdown, then exits at once: everything acknowledged is durable, and an engine's threads
    need no goodbye."""
    import argparse

    out = protocol_output()  # before the app's imports, which may print
    parser = argparse.ArgumentParser(prog=f"python -m twice.engines.{engine.name}", description=description)
    parser.add_argument("--app", required=True, help="the module (and attribute, default twice_app) holding the App")
    parser.add_argument("--path", action="append", default=[], help="a directory to import the app from")
    args = parser.parse_args(argv)
    for path in reversed(args.path):
        sys.path.insert(0, str(Path(path).resolve()))
    try:
        app, app_name = load(args.app)
    except AppNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    adapter = Adapter(engine, app, app_name, out)
    serve(adapter.handle, out=out)
    try:
        engine.close()
    finally:
        sys.stderr.flush()
        os._exit(0)


__all__ = ["App", "Adapter", "Engine", "IntentTable", "Record", "STATES", "load_app", "main", "read_output"]

