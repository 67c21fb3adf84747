"""The durable intent log: one SQLite file, `intents.sqlite`, in the state directory.

Several workers (processes) share the file, so:

- WAL mode, so that readers never wait for the writer;
- `synchronous=FULL`, so that a commit survives power loss, not only a crash: `propose_ok`
  and every "submitted" promise durability (docs/protocol.md §8);
- a busy timeout, so that a writer waits for another process's transaction instead of
  failing at once;
- every write is conditional on the row's `version` (compare-and-set), so that a worker
  whose view is stale (it was paused, another worker took over) changes nothing;
- writes begin with `BEGIN IMMEDIATE`: the write lock is taken first, so a transaction never
  fails half-way when it tries to upgrade a read lock another process's commit made stale.

A transfer's nonce is claimed in the `nonces` table in the same transaction as the row that
records its signed bytes: one nonce, one intent, however many workers sign.
"""

import contextlib
import copy
import dataclasses
import json
import sqlite3
import threading
import time

import bugs

# How long a writer waits for another process's lock before the write fails (code 13).
BUSY_TIMEOUT_S = 5.0

# States in which an intent is not finished.
ACTIVE_STATES = ("recorded", "blocked", "submitted", "unknown")

_COLUMNS = (
    "id",
    "action",
    "params",
    "params_hash",
    "idem_key",
    "state",
    "attempts",
    "replaces",
    "evidence",
    "maybe_executed",
    "lease_owner",
    "lease_epoch",
    "lease_until_ms",
    "version",
    "created_ms",
    "updated_ms",
    "key_first_sent_ms",
    "last_sent_ms",
    "after_ids",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS intents (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    action TEXT NOT NULL,
    params TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    replaces TEXT,
    evidence TEXT NOT NULL,
    maybe_executed INTEGER NOT NULL,
    lease_owner TEXT,
    lease_epoch INTEGER NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    version INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    key_first_sent_ms INTEGER,
    last_sent_ms INTEGER,
    after_ids TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS intents_state ON intents(state);
CREATE TABLE IF NOT EXISTS nonces (
    account TEXT NOT NULL,
    nonce INTEGER NOT NULL,
    intent_id TEXT NOT NULL,
    PRIMARY KEY (account, nonce)
);
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    owner TEXT,
    epoch INTEGER NOT NULL,
    note TEXT
);
CREATE TABLE IF NOT EXISTS triggers (
    intent_id TEXT PRIMARY KEY,
    event_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    proposal TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id TEXT PRIMARY KEY,
    event_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    started_ms INTEGER
);
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    worker_id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    secret TEXT NOT NULL,
    url TEXT NOT NULL
);
"""


@dataclasses.dataclass
class Intent:
    """One row of the log."""

    id: str
    action: str
    params: str  # canonical JSON, exactly as recorded
    params_hash: str
    key: str  # the idempotency key in use
    state: str
    attempts: int = 0  # write requests sent, over the intent's whole life
    replaces: str | None = None
    evidence: dict = dataclasses.field(default_factory=dict)
    # An earlier send may have taken effect (its answer was lost or ambiguous), so a definite
    # refusal of a later send does not prove that nothing happened.
    maybe_executed: bool = False
    lease_owner: str | None = None  # "worker_id#incarnation"
    lease_epoch: int = 0  # grows with every new owner; it is also the fencing token
    lease_until_ms: int = 0
    version: int = 0  # every write is conditional on it
    created_ms: int = 0
    updated_ms: int = 0
    key_first_sent_ms: int | None = None  # the key's retention runs from about then
    last_sent_ms: int | None = None
    # The intents this one comes after (a step of a workflow): authorised with the parameters,
    # covered by the payload hash, never changed. The values its references resolved to are
    # evidence["resolved"], written with its first "submitted" and kept by every later write.
    after_ids: list = dataclasses.field(default_factory=list)

    def copy(self):
        return dataclasses.replace(self, evidence=copy.deepcopy(self.evidence), after_ids=list(self.after_ids))

    def view(self):
        """The intent view of docs/protocol.md §6: what propose_ok and status_ok carry."""
        view = {
            "id": self.id,
            "action": self.action,
            "params": json.loads(self.params),
            "state": self.state,
            "attempts": self.attempts,
            "evidence": {k: v for k, v in self.evidence.items() if v not in (None, "", [])},
        }
        if self.replaces is not None:
            view["replaces"] = self.replaces
        if self.after_ids:
            view["after"] = list(self.after_ids)
        return view


def _row_values(intent):
    """The row's values in _COLUMNS order: evidence as JSON, the flag as an integer."""
    values = []
    for column in _COLUMNS:
        value = getattr(intent, "key" if column == "idem_key" else column)
        if column in ("evidence", "after_ids"):
            value = json.dumps(value, sort_keys=True)
        elif column == "maybe_executed":
            value = int(value)
        values.append(value)
    return values


def _intent(row):
    fields = dict(zip(_COLUMNS, row))
    fields["key"] = fields.pop("idem_key")
    fields["evidence"] = json.loads(fields["evidence"])
    fields["after_ids"] = json.loads(fields["after_ids"])
    fields["maybe_executed"] = bool(fields["maybe_executed"])
    return Intent(**fields)


def holds_nonce(intent):
    """Whether a transfer keeps its claimed nonce: all but one that failed, or was escalated
    for a person's decision, with no send that may have reached the node, whose nonce is unused
    and goes back to the pool of free ones (else every later transfer would wait for ever
    behind a nonce nobody will use)."""
    escalated_unsent = intent.state == "escalated" and intent.evidence.get("could_duplicate") is False
    return not (intent.state == "failed" or escalated_unsent) or intent.maybe_executed


# How long to wait between two tries at switching a new log to WAL.
WAL_RETRY_S = 0.01


def _wal(db):
    """Switch the log to WAL mode.

    Workers started together on a new state directory all ask at once. SQLite answers a
    concurrent switch with "database is locked" straight away, without waiting out the busy
    timeout, so ask again until the file is WAL, within that same timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            # By its message, as the executor tells a locked log: sqlite_errorname is 3.11's.
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(WAL_RETRY_S)


class IntentLog:
    def __init__(self, path):
        if bugs.BUG == "memory-only":
            # The bug: the intents live in this process only; a crash forgets them.
            path = ":memory:"
        # isolation_level=None: no implicit transactions; every write below says BEGIN and
        # COMMIT itself. check_same_thread=False: the pass's threads share this connection,
        # one at a time under self.lock.
        self.db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self.lock = threading.Lock()
        self.db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _wal(self.db)
        self.db.execute("PRAGMA synchronous = FULL")
        # Create the tables only when they are missing. Opening an existing log must not need
        # the write lock: another worker may hold it, stopped (SIGSTOP) in mid-commit, and the
        # harness resumes it only after this worker's init is answered.
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'history'"
        if not self.db.execute(exists).fetchone():
            with self.transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
        # A log written before workflows has no after_ids: its intents come after none.
        columns = [row[1] for row in self.db.execute("PRAGMA table_info(intents)")]
        if "after_ids" not in columns:
            with self.transaction() as db:
                db.execute("ALTER TABLE intents ADD COLUMN after_ids TEXT NOT NULL DEFAULT '[]'")

    @contextlib.contextmanager
    def transaction(self):
        """One write transaction; committed when the block ends, rolled back on an error."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _select(self, where="", args=()):
        with self.lock:
            rows = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM intents {where} ORDER BY seq", args)
            return [_intent(r) for r in rows.fetchall()]

    def get(self, intent_id):
        found = self._select("WHERE id = ?", (intent_id,))
        return found[0] if found else None

    def all(self):
        """Every intent, in the order they were recorded."""
        return self._select()

    def active(self):
        """The intents that are not finished, in the order they were recorded."""
        marks = ", ".join("?" for _ in ACTIVE_STATES)
        return self._select(f"WHERE state IN ({marks})", ACTIVE_STATES)

    def record(self, intent):
        """Inserts a new intent, durably, unless its id is taken. Returns ("new", intent),
        ("existing", the stored one) for the same action and payload, or ("conflict", the
        stored one) for another."""
        with self.transaction() as db:
            select = f"SELECT {', '.join(_COLUMNS)} FROM intents WHERE id = ?"
            row = db.execute(select, (intent.id,)).fetchone()
            if row is not None:
                stored = _intent(row)
                same = stored.action == intent.action and stored.params_hash == intent.params_hash
                return ("existing" if same else "conflict"), stored
            marks = ", ".join("?" for _ in _COLUMNS)
            db.execute(f"INSERT INTO intents ({', '.join(_COLUMNS)}) VALUES ({marks})", _row_values(intent))
            self._history(db, intent, None, "recorded")
        return "new", intent

    def write(self, new, expect_version, from_state, note):
        """Writes `new` if its row still has `expect_version` (and, for a signed transfer, if
        no other intent holds its nonce), with its history, in one transaction. On success
        `new.version` becomes the stored version and True is returned; False means another
        worker changed the row first (or took the nonce), and nothing was written."""
        with self.transaction() as db:
            claim = self._claim_nonce(db, new)
            if claim == "taken":
                return False
            assignments = ", ".join(f"{c} = ?" for c in _COLUMNS if c not in ("id", "version"))
            values = [v for c, v in zip(_COLUMNS, _row_values(new)) if c not in ("id", "version")]
            if bugs.BUG == "constant-fencing-token":
                # The bug: with a fencing token on every write, the row's version seems not to
                # matter, so whoever writes last wins, whatever changed the row meanwhile.
                row = db.execute("SELECT version FROM intents WHERE id = ?", (new.id,)).fetchone()
                expect_version = row[0] if row else expect_version
            written = db.execute(
                f"UPDATE intents SET {assignments}, version = version + 1 WHERE id = ? AND version = ?",
                (*values, new.id, expect_version),
            ).rowcount
            if written and from_state != new.state:
                self._history(db, new, from_state, note)
            if (not written and claim == "new") or (written and not holds_nonce(new)):
                self._release_nonce(db, new)
        if written:
            new.version = expect_version + 1
        return bool(written)

    def claimed_nonces(self, account):
        """The nonces of `account` that intents of this log have signed with."""
        with self.lock:
            rows = self.db.execute("SELECT nonce FROM nonces WHERE account = ?", (account,)).fetchall()
        return {n for (n,) in rows}

    def _claim_nonce(self, db, intent):
        """"none" (no signed transfer), "new", "held" (already this intent's) or "taken"."""
        account, nonce = intent.evidence.get("from"), intent.evidence.get("nonce")
        if account is None or nonce is None or not holds_nonce(intent):
            return "none"
        inserted = db.execute(
            "INSERT INTO nonces (account, nonce, intent_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (account, nonce, intent.id),
        ).rowcount
        if inserted:
            return "new"
        (owner,) = db.execute(
            "SELECT intent_id FROM nonces WHERE account = ? AND nonce = ?", (account, nonce)
        ).fetchone()
        return "held" if owner == intent.id else "taken"

    def _release_nonce(self, db, intent):
        account, nonce = intent.evidence.get("from"), intent.evidence.get("nonce")
        if account is not None and nonce is not None:
            db.execute(
                "DELETE FROM nonces WHERE account = ? AND nonce = ? AND intent_id = ?",
                (account, nonce, intent.id),
            )

    def _history(self, db, intent, from_state, note):
        db.execute(
            "INSERT INTO history (intent_id, at_ms, from_state, to_state, owner, epoch, note)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                intent.id,
                intent.updated_ms,
                from_state,
                intent.state,
                intent.lease_owner,  # who made the change, for people reading the history
                intent.lease_epoch,
                note,
            ),
        )

    # -- intents an event starts (docs/protocol.md §3.2, "Intents an event starts") -------------
    #
    # A trigger is kept as the proposal that arms it; starting it proposes that intent, whose
    # id the intents table holds at most once, so an event taken twice still starts it once.
    # An event is kept in webhook_events before its delivery is answered 2xx (a second delivery
    # of it finds it there), and noted as started once a pass has started its triggers. A
    # worker's endpoint (its id and whsec_ secret) is kept in webhook_endpoints under its
    # worker id, so that a restarted worker keeps the endpoint the service owes deliveries to.

    def arm(self, intent_id, event_type, object_id, proposal):
        """Keeps a trigger unless its id is kept already: "kept" (now, or before with the same
        event and proposal) or "conflict" (kept with another)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO triggers (intent_id, event_type, object_id, proposal) VALUES (?, ?, ?, ?)",
                (intent_id, event_type, object_id, proposal),
            )
            kept = db.execute(
                "SELECT event_type, object_id, proposal FROM triggers WHERE intent_id = ?", (intent_id,)
            ).fetchone()
        return "kept" if tuple(kept) == (event_type, object_id, proposal) else "conflict"

    def has_triggers(self):
        """Whether any trigger is kept: only then does a worker need an endpoint."""
        with self.lock:
            return self.db.execute("SELECT 1 FROM triggers LIMIT 1").fetchone() is not None

    def triggers_for(self, event_type, object_id):
        """The triggers an event of `event_type` about `object_id` starts, in the order armed:
        (intent id, proposal)."""
        with self.lock:
            rows = self.db.execute(
                "SELECT intent_id, proposal FROM triggers WHERE event_type = ? AND object_id = ? ORDER BY rowid",
                (event_type, object_id),
            )
            return rows.fetchall()

    def receive_event(self, event_id, event_type, object_id, at_ms):
        """Keeps event `event_id` as received, durably, unless it was: True when it is new (a
        second delivery of it changes nothing)."""
        with self.transaction() as db:
            return (
                db.execute(
                    "INSERT OR IGNORE INTO webhook_events (event_id, event_type, object_id, received_ms)"
                    " VALUES (?, ?, ?, ?)",
                    (event_id, event_type, object_id, at_ms),
                ).rowcount
                == 1
            )

    def events_waiting(self):
        """The events received whose triggers have not started yet, oldest first: (event id,
        type, object id)."""
        with self.lock:
            rows = self.db.execute(
                "SELECT event_id, event_type, object_id FROM webhook_events WHERE started_ms IS NULL"
                " ORDER BY received_ms, event_id"
            )
            return rows.fetchall()

    def event_started(self, event_id, at_ms):
        """Notes that event `event_id` started its triggers."""
        with self.transaction() as db:
            db.execute(
                "UPDATE webhook_events SET started_ms = ? WHERE event_id = ? AND started_ms IS NULL",
                (at_ms, event_id),
            )

    def event_started_for(self, event_type, object_id):
        """Whether an event of `event_type` about `object_id` started its triggers (a trigger
        armed after that starts at once)."""
        with self.lock:
            return (
                self.db.execute(
                    "SELECT 1 FROM webhook_events WHERE event_type = ? AND object_id = ? AND started_ms IS NOT NULL",
                    (event_type, object_id),
                ).fetchone()
                is not None
            )

    def all_triggers_started(self):
        """Whether every trigger kept has started (its intent is recorded): until then a worker
        that may have missed an event reads the service's events from the API."""
        with self.lock:
            return (
                self.db.execute(
                    "SELECT 1 FROM triggers WHERE intent_id NOT IN (SELECT id FROM intents) LIMIT 1"
                ).fetchone()
                is None
            )

    def endpoint(self, worker_id):
        """Worker `worker_id`'s endpoint, (id, secret, url), or None. An empty id and secret: a
        registration to `url` kept before it left, whose answer never came (yet)."""
        with self.lock:
            return self.db.execute(
                "SELECT endpoint_id, secret, url FROM webhook_endpoints WHERE worker_id = ?", (worker_id,)
            ).fetchone()

    def keep_endpoint(self, worker_id, endpoint_id, secret, url):
        """Keeps worker `worker_id`'s endpoint: a new one, or the old one at a new URL."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO webhook_endpoints (worker_id, endpoint_id, secret, url) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (worker_id) DO UPDATE SET endpoint_id = excluded.endpoint_id,"
                " secret = excluded.secret, url = excluded.url",
                (worker_id, endpoint_id, secret, url),
            )
