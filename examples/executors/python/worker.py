"""A small executor for `twice`, in Python: it turns an agent's intents into refunds,
workspaces, S3 objects, chain transfers and emails, and never does anything twice.

It speaks the stdio protocol `twice/1` (docs/protocol.md) and mirrors the reference executor
(executor/src/intent_engine.rs and intent_engine/, docs/executor.md):

- every intent is written to a SQLite log (intent_log.py) with one idempotency key before
  `propose_ok`, and marked `submitted` before the first byte of its request leaves;
- an answer that proves nothing (a timeout, a reset, a 5xx) makes the intent `unknown`, never
  `failed`: a timeout is not a "no";
- an uncertain intent is resolved from the service's own records (a lookup), except where the
  contract makes a resend under the same key a replay (keys honoured, acks reliable, the key
  still retained); a "not there" from a lookup is believed only once nothing in flight can
  still land and no read can still lag;
- where acks may lie, a success is read back before it is believed, and an email is believed
  only once it is in the recipient's inbox;
- a refusal a person must act on (401, 403, 400, 422) is never sent again: the intent goes to a
  person (`escalated`) with the service's words and whether going on could write twice, once
  no earlier send of it can have landed (a lookup first, where one may have); with
  `--refusals failed` such an intent, certainly without effect, ends `failed` instead;
- leases with fencing tokens keep two workers off one intent; a replacement waits for the
  intent it replaces; what cannot be decided goes to a person (`escalated`) with evidence;
- a workflow step (`after`) waits for the intents it comes after, and resolves its parameter
  references once, from their recorded results, before its first send;
- an intent an event starts (`on_event`) is kept until a genuine, signed delivery of that
  event is kept and the payment shows it, then started once (webhooks.py).

This module is what a worker process runs; `executor.py` starts it.
"""

import argparse
import concurrent.futures
import json
import logging
import os
import sqlite3
import sys
import threading
import time
import uuid

import actions
import bugs
import services
import webhooks
from intent_log import Intent, IntentLog
from twice.protocol import (
    CRASH,
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
from twice.protocol import EXISTS as KEY_EXISTS
from services import (
    DEFAULT_CONTRACT,
    ABSENT,
    AMBIGUOUS,
    CONFLICT,
    DONE,
    FAILED,
    FENCED,
    FOUND,
    NEEDS_DECISION,
    NOT_EXECUTED,
    REJECTED,
    SUPERSEDED,
)

# Steps that build on steps: `after` and parameter references (docs/protocol.md §3.2).
FEATURE_WORKFLOWS = "workflows"
# Intents an event starts: `on_event` (docs/protocol.md §3.2; webhooks.py).
FEATURE_WEBHOOKS = "webhooks"
EXECUTOR = {"name": "twice-python-executor", "version": "0.1.0"}
LOG_FILE = "intents.sqlite"
# Added to every bound waited out before a negative answer is believed: our clock and the
# service's may disagree a little. `--timing` picks another (see `timed`).
SAFETY_MARGIN_MS = 100
SHORT_TIMEOUT_MS, SHORT_MARGIN_MS, SHORT_PAUSE_MS = 200, 25, 1
LONG_MARGIN_MS, LONG_PAUSE_MS = 500, 200
# The lease of an intent when there are no leases (`--single-worker`): never runs out.
UNLEASED_UNTIL_MS = 2**62
# Longest drain a caller may ask for. The framing (the 1 MiB line bound, msg_id checks, error
# replies, the private stdout) and the error codes are the kit's: `twice.protocol`.
DRAIN_MS_MAX = 600_000

DEFAULT_LIMITS = {
    "request_timeout_ms": 2_000,
    "lease_ms": 10_000,
    "attempts_max": 5,
    "escalate_after_ms": 60_000,
    "pass_pause_ms": 20,
    "batch_max": 64,
}

log = logging.getLogger("twice-python-executor")


def now_ms():
    """The executor's clock: every term of a contract is measured on it."""
    return int(time.time() * 1000)


def new_key():
    return str(uuid.uuid4())


def holds_a_nonce(intent):
    """Whether a signed transaction holds a nonce for the intent. Such an intent is never given
    up for want of attempts: every later transfer of the account waits behind its nonce, and
    its bytes can be broadcast again any number of times and still land at most once."""
    return bool(intent.evidence.get("raw_tx"))


def result_value(intent, field):
    """Result field `field` of a confirmed intent, as it recorded it: the id the service gave the
    effect (a refund, a workspace, the ETag of a put) is external_id, a transfer's hash tx_hash."""
    if intent.action == "chain.transfer" and field == "tx_hash":
        return intent.evidence.get("tx_hash")
    if field == "id" or (intent.action == "files.put" and field == "etag"):
        return intent.evidence.get("external_id")
    return None


class Unresolvable(Exception):
    """A step's reference cannot be resolved though its predecessors are confirmed."""


class Tally:
    """What one pass did, counted from several threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.looked_up = self.changes = 0

    def add(self, what):
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)


def timed(limits, timing):
    """The limits this executor works with under `--timing`, and its margin: never looser than
    what it was told (a shorter request timeout, lease or pause is its own choice to make)."""
    limits = dict(limits)
    if timing == "short":
        timeout = min(SHORT_TIMEOUT_MS, limits["request_timeout_ms"])
        floor = 2 * timeout + SHORT_MARGIN_MS
        limits["request_timeout_ms"] = timeout
        limits["lease_ms"] = min(limits["lease_ms"], max(limits["lease_ms"] // 2, floor))
        limits["pass_pause_ms"] = SHORT_PAUSE_MS
        return limits, SHORT_MARGIN_MS
    if timing == "long":
        limits["pass_pause_ms"] = LONG_PAUSE_MS
        return limits, LONG_MARGIN_MS
    return limits, SAFETY_MARGIN_MS


class Executor:
    def __init__(self, worker_id, state_dir, service_config, secrets, limits, announced, emit):
        self.worker_id = worker_id
        # A fresh incarnation per process: the leases of an earlier life of this worker (same
        # id, another incarnation) are recognised as dead and taken over at once.
        self.owner = f"{worker_id}#{uuid.uuid4().hex[:12]}"
        self.limits, self.margin_ms = timed(limits, bugs.TIMING)
        self.secrets = secrets
        self.announced = announced
        self.emit = emit
        self.services = {
            name: services.SERVICES[name](cfg["url"], cfg["contract"], secrets, self.limits["request_timeout_ms"])
            for name, cfg in service_config.items()
            if name in services.SERVICES
        }
        os.makedirs(state_dir, exist_ok=True)
        self.log = IntentLog(os.path.join(state_dir, LOG_FILE))
        # One thread per intent of a pass, so that one slow service does not hold the others
        # (and their leases) back.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=limits["batch_max"])
        # `--bug redo-workflow`: whether this life has run its workflows again yet.
        self.redone = False
        # Its listener, endpoint and deliveries, once a trigger is kept.
        self.webhooks = webhooks.Webhooks(self)

    # -- propose and status -----------------------------------------------------------

    def propose(self, message):
        if not isinstance(message, dict):
            raise ProtocolError(MALFORMED, "propose needs an intent object")
        intent_id, action = message.get("id"), message.get("action")
        replaces = message.get("replaces")
        if not isinstance(intent_id, str) or not intent_id:
            raise ProtocolError(MALFORMED, "intent.id must be a non-empty string")
        if not isinstance(action, str):
            raise ProtocolError(MALFORMED, "intent.action must be a string")
        if replaces is not None and not isinstance(replaces, str):
            raise ProtocolError(MALFORMED, "intent.replaces must be a string or null")
        on_event = message.get("on_event")
        if on_event is not None:
            # An intent an event starts comes after nothing and replaces nothing.
            try:
                event = webhooks.check_on_event(on_event)
            except ValueError as problem:
                raise ProtocolError(MALFORMED, f"intent {intent_id}: {problem}") from None
            if replaces is not None or message.get("after"):
                text = f"intent {intent_id}: an intent an event starts comes after nothing and replaces nothing"
                raise ProtocolError(MALFORMED, text)
        if action not in self.announced:
            raise ProtocolError(
                NOT_SUPPORTED, f'action "{action}" is not supported; supported: {", ".join(self.announced)}'
            )
        if on_event is not None and "payments" not in self.services:
            # Its event comes from the payments service, through an endpoint registered there.
            text = f'intent {intent_id} waits for {event[0]}: it needs service "payments", which init did not configure'
            raise ProtocolError(NOT_SUPPORTED, text)
        service = actions.SERVICE_OF[action]
        if service not in self.services:
            raise ProtocolError(
                NOT_SUPPORTED, f'action {action} needs service "{service}", which init did not configure'
            )
        if action == "chain.transfer" and not _valid_private_key(self.secrets.get(actions.CHAIN_KEY_SECRET)):
            # Refused now rather than recorded and never sendable.
            secret = actions.CHAIN_KEY_SECRET
            raise ProtocolError(NOT_SUPPORTED, f'action {action} needs the secret "{secret}"')
        after = message.get("after")
        if after is None:
            after = []
        if not isinstance(after, list) or not all(isinstance(a, str) and a for a in after):
            raise ProtocolError(MALFORMED, "intent.after: invalid type, expected a list of intent ids (or null)")
        params = message.get("params")
        # A step (it comes after something, or a parameter is an object, which only a
        # reference may be) is refused naming the intent, as the reference executor does.
        step = bool(after) or (isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()))
        try:
            refs = actions.references(params)
            # Everything but the references is checked now; the references below, and they are
            # replaced by their values only when the step is first sent.
            checked = actions.check(action, actions.with_placeholders(params) if refs else params)
            self.check_after(action, after, refs)
        except actions.Malformed as problem:
            raise ProtocolError(MALFORMED, f"intent {intent_id}: {problem}" if step else str(problem)) from None
        for name, reference in refs:
            checked[name] = reference  # the authorised form keeps the reference
        params = actions.canonical_json(checked)

        state, reason, could_duplicate = "recorded", None, None
        if replaces is not None and self.log.get(replaces) is None:
            text = f"intent {intent_id} replaces {replaces}, which this executor has never recorded"
            raise ProtocolError(MALFORMED, text)
        if replaces is not None or after:
            released = self.released(replaces, after)
            if released is None or released[0] == "escalated":
                # Waits; an escalated predecessor escalates it at the next pass, with an event.
                state = "blocked"
            elif released[0] == "failed":
                state, reason, could_duplicate = released
        key, now = new_key(), now_ms()
        evidence = {"key": key}
        if reason:
            evidence["reason"] = reason
        if could_duplicate is not None:
            evidence["could_duplicate"] = could_duplicate
        intent = Intent(
            id=intent_id,
            action=action,
            params=params,
            params_hash=actions.payload_hash(actions.payload_text(params, after)),
            key=key,
            state=state,
            replaces=replaces,
            after_ids=after,
            evidence=evidence,
            created_ms=now,
            updated_ms=now,
        )
        if on_event is not None:
            # Kept as a trigger (durably), not recorded: nothing is sent for it until its event.
            return self.webhooks.arm(intent, *event)
        # Durable (synchronous=FULL) before we answer: propose_ok promises it survives SIGKILL.
        outcome, stored = self.log.record(intent)
        if outcome == "conflict":
            raise ProtocolError(
                KEY_EXISTS, f"intent id {intent_id} was already recorded with another action or payload"
            )
        return stored.view()

    def check_after(self, action, after, refs):
        """A step's `after` names intents this log recorded, each once, and every reference
        reads a result field of one of them from a parameter that may take one."""
        for i, before in enumerate(after):
            if before in after[:i]:
                raise actions.Malformed(f'"after" lists {before} twice')
            if self.log.get(before) is None:
                raise actions.Malformed(f"comes after {before}, which this executor has never recorded")
        for name, reference in refs:
            source = self.log.get(reference["from"])
            from_action = source.action if source is not None else None
            actions.check_reference(action, name, reference, from_action, reference["from"] in after)

    def status(self, ids):
        return [i.view() for i in self.log.all() if ids is None or i.id in ids]

    # -- passes --------------------------------------------------------------------------

    def run_pass(self):
        """One pass over the unfinished intents. The blocked ones go first, one by one, so
        that what their lineage says is what the pass started with (a released one is sent
        in the next pass, once the event that released it is out); then every other intent
        gets its turn on a thread of its own."""
        tally = Tally()
        # A worker that listens for webhooks has its endpoint before it waits for one, and starts
        # what the events it received ask for before it looks at its intents.
        self.unless_locked(self.webhooks.ensure_endpoint)
        self.unless_locked(self.webhooks.start_received)
        if bugs.BUG == "redo-workflow" and not self.redone:
            self.redone = True
            self.redo_workflows()
        active = self.log.active()[: self.limits["batch_max"]]
        for intent in active:
            if intent.state == "blocked":
                self.turn_unless_locked(intent, tally)
        turns = [self.pool.submit(self.turn_unless_locked, i, tally) for i in active if i.state != "blocked"]
        # Every turn ends before the reply; then what a turn raised (a log failure) is raised here.
        concurrent.futures.wait(turns)
        for turn in turns:
            turn.result()
        return tally

    def drain(self, timeout_ms):
        """Passes until no intent is recorded or submitted (blocked and unknown ones do not
        hold a drain), within timeout_ms."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            tally = self.run_pass()
            busy = sum(1 for i in self.log.active() if i.state in ("recorded", "submitted"))
            # A step whose last predecessor this pass confirmed is released by the next one.
            if busy == 0 and not (tally.changes and self.a_step_can_be_released()):
                return
            if busy == 0 and time.monotonic() >= deadline:
                return  # only released steps are left, and nothing recorded holds a drain
            if time.monotonic() >= deadline:
                text = f"{busy} intents still recorded or submitted after {timeout_ms} ms"
                raise ProtocolError(TIMEOUT, text)
            # Straight on while passes make progress; pause when one changed nothing (it waits
            # for a lease, a backoff or a settle bound to pass).
            if tally.sent == 0 and tally.changes == 0:
                time.sleep(self.limits["pass_pause_ms"] / 1000)

    def unless_locked(self, work):
        """`work()`, unless the log stays locked past the busy timeout (another worker may be
        stopped in mid-commit): then the next pass does it."""
        try:
            work()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            log.warning("the intent log is locked; %s skipped this pass (%s)", work.__name__, error)

    def turn_unless_locked(self, intent, tally):
        try:
            self.turn(intent, tally)
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            # Another worker held the log's write lock past the busy timeout (it may be stopped
            # in mid-commit). Skipping the turn loses nothing: a "submitted" that was not
            # committed was not sent, and a sent request whose outcome was not committed is
            # looked up in a later pass, as after a crash.
            log.warning("intent %s: the intent log is locked; skipped this pass (%s)", intent.id, error)

    def turn(self, intent, tally):
        """One intent's turn in a pass."""
        service = self.services.get(actions.SERVICE_OF.get(intent.action))
        if service is not None and intent.state != "blocked":
            service.warm()  # the SDK's import is no part of any timed bound below
        now = now_ms()
        leased = self.lease(intent, now)
        if leased is None:
            return  # another live worker owns it
        try:
            payload = self.checked_payload(intent)
        except ValueError as problem:
            # Not executed now; an earlier send of it may have been, if it went out.
            leased.evidence["could_duplicate"] = intent.maybe_executed or intent.state in ("submitted", "unknown")
            self.escalate(intent, leased, f"not executed: {problem}", tally)
            return
        if intent.state == "blocked":
            self.release(intent, leased, tally)
            return
        if intent.state == "recorded":
            # A send that certainly did not execute (no connection, 429) is retried after a
            # pause that grows with each attempt, not on the very next pass.
            last = intent.last_sent_ms
            if last is not None and now < last + self.timeout_ms * intent.attempts:
                return
        refs = actions.references(payload)
        resolved_now = bool(refs) and not leased.evidence.get("resolved") and intent.state == "recorded"
        if resolved_now:
            # A step's references are resolved here, once, from what its predecessors recorded,
            # and written with its "submitted" (or with the row that says why it was not sent):
            # no later send, after a crash or by another worker, resolves them again.
            try:
                leased.evidence["resolved"] = self.resolve_references(refs)
            except Unresolvable as problem:
                leased.evidence["could_duplicate"] = False
                self.escalate(intent, leased, str(problem), tally)
                return
        try:
            resolved = leased.evidence.get("resolved", {})
            params = actions.check(intent.action, actions.with_resolved(payload, resolved))
        except actions.Malformed as problem:
            if resolved_now:
                # Nothing was sent, and nothing will be.
                leased.state = "failed"
                note = f"never sent: the values resolved from the intents it comes after do not fit: {problem}"
                leased.evidence["reason"] = note
                self.commit(intent, leased, note, tally)
            else:
                self.escalate(intent, leased, f"not executed: {problem}", tally)
            return
        if intent.state == "recorded":
            self.send(intent, leased, params, "sent", tally)
        elif intent.state in ("submitted", "unknown"):
            self.resolve(intent, leased, params, tally)

    def results_from_services(self, step):
        """`--bug re-resolve`: the step's parameters with each reference read from the service
        of the intent it reads from, as that service shows the result now."""
        payload = json.loads(step.params)
        values = {}
        for name, reference in actions.references(payload):
            source = self.log.get(reference["from"])
            if source is None:
                raise services.NotPrepared(f"{reference['from']} is missing from the log")
            service = self.services[actions.SERVICE_OF[source.action]]
            source_payload = json.loads(source.params)
            source_params = actions.check(
                source.action, actions.with_resolved(source_payload, source.evidence.get("resolved", {}))
            )
            value = service.current_result(source, source_params, reference["field"])
            values[name] = actions.render(reference, value)
        return actions.check(step.action, actions.with_resolved(payload, values)), values

    def redo_workflows(self):
        """`--bug redo-workflow`: after a restart (the log holds leases of an earlier life of
        this worker), every workflow whose last step is not confirmed is run again from its
        start: the outcomes of its completed steps are forgotten (a fresh key, no evidence),
        so they are sent again, and the steps after them resolve their references anew."""
        rows = self.log.all()
        restarted = any(
            r.lease_owner not in (None, self.owner) and r.lease_owner.rsplit("#", 1)[0] == self.worker_id
            for r in rows
        )
        if not restarted:
            return
        by_id = {r.id: r for r in rows}
        # Workflows: the intents joined by `after`, found by merging groups.
        group = {r.id: r.id for r in rows}

        def root(i):
            while group[i] != i:
                i = group[i]
            return i

        for r in rows:
            for before in r.after_ids:
                if before in group:
                    group[root(r.id)] = root(before)
        members = {}
        for r in rows:
            members.setdefault(root(r.id), []).append(r)
        for flow in members.values():
            if not any(r.after_ids for r in flow):
                continue  # a lone intent is no workflow
            comes_before = {b for r in flow for b in r.after_ids}
            last_steps = [r for r in flow if r.id not in comes_before]
            if all(r.state == "confirmed" for r in last_steps):
                continue
            for r in flow:
                if r.state not in ("confirmed", "recorded", "blocked"):
                    continue  # in flight, or finished otherwise: left as it is
                new = by_id[r.id].copy()
                new.key = new_key()
                new.state = "blocked" if new.after_ids else "recorded"
                new.evidence = {"key": new.key, "reason": "run again: the workflow did not finish"}
                new.attempts, new.maybe_executed = 0, False
                new.key_first_sent_ms = new.last_sent_ms = None
                new.lease_owner, new.lease_until_ms = None, 0
                new.updated_ms = now_ms()
                self.log.write(new, r.version, r.state, "run again: the workflow did not finish")

    def escalate(self, before, leased, note, tally):
        leased.state = "escalated"
        leased.evidence["reason"] = note
        self.commit(before, leased, note, tally)

    @property
    def timeout_ms(self):
        return self.limits["request_timeout_ms"]

    def checked_payload(self, intent):
        """The authorised parameters (with their references), if they and `after` still match
        their hash: a row changed behind our back is never executed."""
        if actions.payload_hash(actions.payload_text(intent.params, intent.after_ids)) != intent.params_hash:
            raise ValueError("the stored payload does not match its hash")
        return json.loads(intent.params)

    def resolve_references(self, refs):
        """The value of each reference, from the result its predecessor recorded (every one is
        confirmed by now). A missing result is never guessed."""
        values = {}
        for name, reference in refs:
            source = self.log.get(reference["from"])
            if source is None or source.state != "confirmed":
                state = "missing" if source is None else source.state
                raise Unresolvable(f'parameter "{name}" reads from {reference["from"]}, which is {state}')
            value = result_value(source, reference["field"])
            if not value:
                raise Unresolvable(
                    f'{source.id} is confirmed but recorded no "{reference["field"]}" for parameter "{name}"; '
                    "not guessing it"
                )
            values[name] = actions.render(reference, value)
        return values

    def lease(self, intent, now):
        """The intent with our lease on it (in memory: it is written with the next change), or
        None while another live worker holds it. A new owner bumps the epoch, which is the
        fencing token the services see."""
        if bugs.SINGLE_WORKER or bugs.BUG == "constant-fencing-token":
            # The only worker needs no lease: the intent is ours for as long as we act on it.
            leased = intent.copy()
            leased.lease_until_ms = UNLEASED_UNTIL_MS
            return leased
        mine = intent.lease_owner == self.owner
        owner = intent.lease_owner
        earlier_life = owner is not None and owner.rsplit("#", 1)[0] == self.worker_id
        if not (owner is None or intent.lease_until_ms < now or mine or earlier_life):
            return None
        leased = intent.copy()
        if not mine:
            leased.lease_owner = self.owner
            leased.lease_epoch += 1
        leased.lease_until_ms = now + self.limits["lease_ms"]
        return leased

    def commit(self, before, new, note, tally):
        """Writes `new` if the row is still as `before` was read; sends the event of a state
        change at once, so that the timeline shows it before anything it allows happens."""
        new.updated_ms = now_ms()
        if not self.log.write(new, before.version, before.state, note):
            return False  # another worker changed it first: its decision stands
        if new.state != before.state:
            tally.add("changes")
            self.emit({"intent_id": new.id, "from": before.state, "state": new.state, "note": note})
        return True

    # -- sending -------------------------------------------------------------------------

    def send(self, before, leased, params, note, tally, rotate_key=False, believe_answer=False):
        """Marks the intent submitted (durably), sends it, and records what the answer means."""
        service = self.services[actions.SERVICE_OF[before.action]]
        new = leased.copy()
        if bugs.BUG == "re-resolve" and before.after_ids:
            # The bug: a step's references are read again from the services at every send
            # (the object's ETag now, the workspace found by its external id now), never from
            # what was recorded before the first send; a resend may carry another value.
            try:
                params, new.evidence["resolved"] = self.results_from_services(before)
            except (services.NotPrepared, actions.Malformed) as problem:
                if before.state == "recorded":
                    self.not_prepared(before, leased, str(problem), tally)
                return
        if service.needs_preparation(new):
            # A put's precondition or a transfer's signed bytes: read and recorded with the
            # "submitted" below, before the first send; never again after it.
            try:
                new.evidence.update(service.prepare(new, params, self.log))
            except services.NotPrepared as problem:
                self.not_prepared(before, leased, str(problem), tally)
                return
        now = now_ms()
        if bugs.BUG == "key-per-attempt" and new.attempts > 0:
            # The bug: a new key for every attempt, so the service cannot tell a resend from a
            # new request.
            rotate_key = True
        if rotate_key:
            # Correctly, only once a lookup proved that nothing landed under the old key and
            # nothing can any more.
            new.evidence.setdefault("previous_keys", []).append(new.key)
            new.key, new.key_first_sent_ms = new_key(), None
        new.state = "submitted"
        new.attempts += 1
        new.key_first_sent_ms = new.key_first_sent_ms or now
        new.last_sent_ms = now
        new.evidence.update(key=new.key, last_sent_ms=now)
        new.evidence.setdefault("first_sent_ms", now)
        # Whether an earlier send may have landed: a refusal of this one says nothing of it.
        maybe_landed = leased.maybe_executed or believe_answer
        if believe_answer:
            # The service replays the first answer under this key if the first send landed, so
            # what comes back is the intent's answer.
            new.maybe_executed = False
        if not self.commit(before, new, note, tally):
            return
        # From here on the request may leave the process: "submitted" is durable, so a crash
        # now leads to a lookup, never to a blind resend.
        if now_ms() >= new.lease_until_ms:
            return  # paused or slow past our lease since the commit: another worker may own it
        tally.add("sent")
        outcome = service.write(new, params, fencing_token=new.lease_epoch)
        read_back = None
        if (
            (outcome.kind == DONE and service.reads_back_success())
            or outcome.kind == CONFLICT
            or (outcome.kind == NEEDS_DECISION and maybe_landed)
        ):
            # A success that may be hollow, a refusal our own earlier send may have caused, or
            # a refusal of a resend whose earlier send may have landed.
            read_back = service.lookup(new, params)
        if now_ms() > new.lease_until_ms:
            return  # the lease ran out while the request was out: our view is stale, write nothing
        self.record_outcome(new, params, service, outcome, read_back, tally, maybe_landed)

    def record_outcome(self, sent, params, service, outcome, read_back, tally, maybe_landed=False):
        new = sent.copy()
        # The request reached the service, if it did, before its answer (or our giving up)
        # came back. Its send time was taken before the "submitted" commit, and a process
        # starved between that stamp and the socket sends later than it says: counted from the
        # stamp alone, a "not there" would be believed while the request could still land
        # (seen once on two overloaded cores: a late commit after a resend, two workspaces).
        # So the bounds counted from the last send (see decide) start no earlier than the
        # answer, less the timeout they add back.
        new.last_sent_ms = max(new.last_sent_ms or 0, now_ms() - self.timeout_ms)
        limits = self.limits
        kind, error = outcome.kind, outcome.error
        if error:
            new.evidence["last_error"] = error
        if (
            kind == AMBIGUOUS
            and sent.action == "chain.transfer"
            and sent.attempts < limits["attempts_max"]
            and bugs.BUG == "re-sign-after-timeout"
        ):
            # The bug, the nonce trap: "the node never got it", so the transfer is signed anew
            # with the nonce the node now reports as next, and sent at once. The first one may
            # well be mined already: two transfers.
            new.maybe_executed = True
            for field in ("raw_tx", "tx_hash", "nonce", "from"):
                new.evidence.pop(field, None)
            self.send(sent, new, params, "signed again with the next nonce", tally)
            return
        if kind == FENCED:
            return  # a newer worker owns the intent; its decision stands
        if kind == DONE:
            if read_back is None or (read_back.kind == FOUND and read_back.params_match):
                new.evidence["external_id"] = outcome.external_id
                new.evidence.pop("last_error", None)
                state, note = "confirmed", "confirmed by the service"
            else:
                new.maybe_executed = True
                seen = f"{read_back.kind} {read_back.detail}".strip()
                new.evidence["last_error"] = f"a success the read-back did not show ({seen})"
                state, note = "unknown", "a success the read-back did not show"
        elif kind == NEEDS_DECISION:
            # Never sent again: a person must fix the permission or the input and propose
            # again. The first such refusal is kept, whatever later lookups say.
            decision = new.evidence.setdefault("decision", {"status": outcome.status, "error": outcome.words})
            refused = f"refused with {decision['status']}: {decision['error']}"
            if not maybe_landed and bugs.REFUSALS == "failed":
                # As honest as escalating (`--refusals failed`): no effect exists, and none can
                # appear, for a refused write is never sent again.
                state, note = "failed", f"{refused}: nothing was done, and it will not be sent again"
            elif not maybe_landed:
                new.evidence["could_duplicate"] = False
                state, note = "escalated", f"{refused}; a person must decide, and nothing was done"
            elif read_back is not None and read_back.kind == FOUND and read_back.params_match:
                new.evidence["external_id"] = read_back.external_id
                for field in ("last_error", "decision"):
                    new.evidence.pop(field, None)
                state, note = "confirmed", f"confirmed by a read-back: an earlier send of it landed ({refused})"
            elif read_back is not None and read_back.kind == FOUND:
                new.evidence["external_id"] = read_back.external_id
                new.evidence["could_duplicate"] = True
                state, note = "escalated", f"{refused}; an effect exists with parameters other than the authorised ones"
            else:
                # The earlier send may still land, or not show yet: looked up until that is
                # settled (see decide), never sent again.
                new.maybe_executed = True
                state, note = "unknown", f"{refused}; an earlier send may have landed, so it is looked up first"
        elif kind == REJECTED:
            if sent.maybe_executed:
                state, note = "unknown", f"refused, but an earlier send may have landed: {error}"
            else:
                state, note = "failed", f"refused: {error}"
        elif kind == NOT_EXECUTED:
            if sent.maybe_executed:
                state, note = "unknown", f"not executed, but an earlier send may have landed: {error}"
            elif sent.attempts >= limits["attempts_max"] and not holds_a_nonce(sent):
                state, note = "failed", f"never executed in {sent.attempts} attempts: {error}"
            else:
                state, note = "recorded", f"not executed, will retry: {error}"
        elif kind == AMBIGUOUS:
            new.maybe_executed = True
            state, note = "unknown", f"no definite answer: {error}"
        else:  # CONFLICT: the object or the account moved on; the read-back says whether by us
            # A refusal is final only if the read-back proves another version (or
            # transaction) took our place, reads cannot lag, and no earlier send may have landed.
            final = outcome.definite and service.contract["reads"] == "strong" and not sent.maybe_executed
            if read_back is not None and read_back.kind == FOUND and read_back.params_match:
                new.evidence["external_id"] = read_back.external_id
                new.evidence.pop("last_error", None)
                state, note = "confirmed", f"confirmed by a read-back: an earlier send of it landed ({error})"
            elif read_back is not None and read_back.kind == SUPERSEDED and final:
                state, note = "failed", f"refused: {error}; {read_back.detail}"
            else:
                state, note = "unknown", f"refused, and the read-back cannot tell why yet: {error}"
        new.state = state
        new.evidence["reason"] = note
        self.commit(sent, new, note, tally)

    def not_prepared(self, before, leased, problem, tally):
        """A first send whose reads failed is not sent: it counts the try and waits as after a
        connection that could not be made; after attempts_max tries it is failed (never sent)."""
        new = leased.copy()
        new.attempts += 1
        new.last_sent_ms = now_ms()  # drives the pause before the next try; nothing was sent
        new.evidence["last_error"] = problem
        if new.attempts >= self.limits["attempts_max"]:
            new.state, note = "failed", f"never sent: what its first send needs could not be read: {problem}"
        else:
            new.state, note = "recorded", f"not sent yet: {problem}"
        new.evidence["reason"] = note
        self.commit(before, new, note, tally)

    # -- resolving uncertain intents ----------------------------------------------------------

    def key_protects(self, intent, service, now):
        """Whether a resend under the intent's key is a replay of the first send, if that
        landed: the service honours keys, its successes cannot be hollow (acks that may lie,
        an accepted message: the key may hold a hollow success), and it still retains the key
        when the resend arrives (allowing for the request's own time and a margin)."""
        contract = service.contract
        retained = intent.key_first_sent_ms is not None and (
            now + self.timeout_ms + self.margin_ms < intent.key_first_sent_ms + contract["key_retention_ms"]
        )
        if bugs.BUG == "resend-after-key-expiry":
            # The bug: the key is believed to protect for ever, so a resend needs no lookup.
            retained = True
        return contract["idempotency_keys"] == "honored" and not service.success_may_be_hollow() and retained

    def resend_pause_over(self, intent, now):
        """The first resend goes at once (the request before it is over on our side); each
        later one waits one more request timeout."""
        last = intent.last_sent_ms
        return last is None or now >= last + self.timeout_ms * (intent.attempts - 1)

    def resolve(self, before, leased, params, tally):
        """An intent that may have taken effect: `submitted` by a worker that died before
        recording the answer, or `unknown`."""
        service = self.services.get(actions.SERVICE_OF[before.action])
        if service is None:
            return
        now = now_ms()
        refused = "decision" in before.evidence  # never sent again: see decide
        protected = self.key_protects(before, service, now)
        if protected and not refused and before.attempts < self.limits["attempts_max"]:
            if self.resend_pause_over(before, now):
                note = "sent again under its key: the service replays the first answer if it landed"
                self.send(before, leased, params, note, tally, believe_answer=True)
                return
        # Otherwise only the service's records can tell; reads are free.
        tally.add("looked_up")
        looked_at_ms = now_ms()
        found = service.lookup(before, params)
        self.decide(before, params, service, found, looked_at_ms, tally)

    def decide(self, before, params, service, found, looked_at_ms, tally):
        """What a lookup sent at `looked_at_ms` proves (executor/src/intent_engine/reconcile.rs,
        `decide`)."""
        now = now_ms()
        leased = self.lease(before, now)  # again: the lookup took time
        if leased is None:
            return
        if before.state == "submitted":
            # Its sender died after marking it: it may have been sent. Until a lookup proves
            # otherwise, a resend's definite refusal does not make that send unsent.
            leased.maybe_executed = True
        contract, limits = service.contract, self.limits

        def write(state, note):
            leased.state = state
            leased.evidence["reason"] = note
            self.commit(before, leased, note, tally)

        # "Not there" is final once every request sent could no longer land and every read
        # could no longer lag.
        settled_at = None
        if before.last_sent_ms is not None:
            settled_at = (
                before.last_sent_ms
                + contract["settle_ms_max"]
                + contract["read_lag_ms_max"]
                + self.timeout_ms
                + self.margin_ms
            )
        # As of when the lookup was sent: a worker paused before it read the answer must not
        # take an old "not there" for a final one.
        settled = settled_at is None or looked_at_ms >= settled_at
        # Escalate what stays unknowable too long, never before a negative answer could have
        # become final twice over.
        first_sent = before.evidence.get("first_sent_ms")
        overdue = first_sent is not None and now >= first_sent + max(
            limits["escalate_after_ms"], 2 * ((settled_at or 0) - (before.last_sent_ms or 0))
        )

        # The service refused a resend with a status a person must act on: looked up until an
        # earlier send is found or proven absent, never sent again.
        decision = before.evidence.get("decision")
        if found.kind == FOUND:
            leased.evidence["external_id"] = found.external_id
            if found.params_match:
                for field in ("last_error", "decision"):  # what was refused was a resend
                    leased.evidence.pop(field, None)
                write("confirmed", "confirmed by lookup")
            else:
                leased.evidence["could_duplicate"] = True
                write("escalated", "an effect exists with parameters other than the authorised ones")
        elif found.kind == ABSENT and settled and decision:
            leased.maybe_executed = False
            refused = f"refused with {decision['status']}: {decision['error']}"
            if bugs.REFUSALS == "failed":
                # As honest as escalating (`--refusals failed`): no send of it took effect, none
                # can any more, and it is never sent again, so none can appear.
                nothing = "nothing was done (no send of it took effect, and none can any more)"
                write("failed", f"{refused}: {nothing}, and it will not be sent again")
            else:
                leased.evidence["could_duplicate"] = False
                write("escalated", f"{refused}; no send of it took effect, and none can any more: a person must decide")
        elif found.kind == ABSENT and settled:
            if before.attempts >= limits["attempts_max"] and not holds_a_nonce(before):
                leased.maybe_executed = False
                write("failed", f"no effect after {before.attempts} attempts, and none can appear any more")
                return
            # Nothing landed and nothing can: a new attempt is safe. Where a success may be
            # hollow (acks that may lie, a message the inbox never showed), with a fresh key:
            # the service may have saved a silent no-op's success under the old one.
            leased.maybe_executed = False
            rotate = service.success_may_be_hollow() and before.last_sent_ms is not None
            self.send(before, leased, params, "absent for good: sent again", tally, rotate_key=rotate)
        elif found.kind == SUPERSEDED and settled:
            leased.maybe_executed = False
            write("failed", f"it can no longer take effect: {found.detail}")
        elif (
            found.kind == ABSENT
            and not decision
            and service.resend_is_guarded()
            and (before.attempts < limits["attempts_max"] or holds_a_nonce(before))
            and self.resend_pause_over(before, now)
        ):
            # A conditional put or a signed transaction lands at most once however often it
            # is sent, so it need not wait for the settle bound.
            if before.action == "chain.transfer":
                note = "broadcast again: the same signed bytes"
            else:
                note = "sent again under its precondition"
            self.send(before, leased, params, note, tally)
        elif found.kind == FAILED and overdue:
            leased.evidence["last_error"] = found.detail
            leased.evidence["could_duplicate"] = True
            write("escalated", f"unresolved past its deadline; the lookup failed: {found.detail}")
        elif before.state == "submitted":
            # Its sender died before recording the answer, and nothing is known yet.
            leased.maybe_executed = True
            if found.kind == FAILED:
                leased.evidence["last_error"] = found.detail
            write("unknown", "the worker that sent it stopped before recording the answer")
        # else: it stays unknown, and a later pass asks again.

    # -- lineage -------------------------------------------------------------------------

    def release(self, before, leased, tally):
        """A blocked intent, once nothing it waits for (the lineage of the intent it replaces,
        the intents it comes after) is unresolved."""
        released = self.released(before.replaces, before.after_ids)
        if released is None:
            return
        leased.state, note, could_duplicate = released
        leased.evidence["reason"] = note
        if could_duplicate is not None:
            leased.evidence["could_duplicate"] = could_duplicate
        self.commit(before, leased, note, tally)

    def released(self, replaces, after):
        """(state, reason, could_duplicate) for an intent that replaces `replaces` and comes
        after `after`, or None while something it waits for is unresolved. A failed or escalated
        predecessor decides at once: nothing could change that outcome."""
        unresolved = False
        for before_id in after:
            before = self.log.get(before_id)
            if before is None:
                return "escalated", f"waits for {before_id} (missing from the log)", False
            if before.state == "failed":
                return "failed", f"cancelled: the intent it comes after ({before_id}) failed", None
            if before.state == "escalated":
                # Nothing of this step was ever sent: continuing cannot write twice.
                return "escalated", f"waits for {before_id}, which is escalated", False
            if before.state != "confirmed":
                unresolved = True
        note = None
        if replaces is not None:
            verdict, by = self.lineage(replaces)
            if verdict == "executed":
                return "failed", cancelled(replaces, by), None
            if verdict == "escalated":
                text = f"{by}, in the lineage of {replaces}, is escalated; executing this one could do it twice"
                # Never sent: going on with it cannot repeat anything of its own.
                return "escalated", text, False
            if verdict == "unresolved":
                return None
            note = f"unblocked: nothing in the lineage of {replaces} took effect"
        if unresolved:
            return None
        return "recorded", note or f"unblocked: {', '.join(after)} confirmed", None

    def a_step_can_be_released(self):
        """Whether a blocked step could be decided now (its last predecessor was confirmed in
        the pass that just ran, after its own turn)."""
        return any(
            i.after_ids and self.released(i.replaces, i.after_ids) is not None
            for i in self.log.active()
            if i.state == "blocked"
        )

    def lineage(self, intent_id):
        """What the chain of intents ending at `intent_id` (following `replaces`) established:
        ("executed", by) if one took effect (every action is exclusive: one refund per payment,
        one workspace per external id, one version per object, one transfer per recipient),
        ("nothing", None) if none took effect or can (each failed, or was escalated with
        could_duplicate false: refused for a person's decision, which the replacement is),
        ("escalated", by) if one needs a person and may have taken effect, and ("unresolved",
        None) while one may still take effect."""
        escalated = None
        current = intent_id
        for _ in range(len(self.log.all()) + 1):  # a chain is no longer than the log
            intent = self.log.get(current)
            if intent is None:
                return "escalated", f"{current} (missing from the log)"
            if intent.state == "confirmed":
                return "executed", intent.id
            if intent.state == "escalated" and intent.evidence.get("could_duplicate") is False:
                pass  # refused for a decision, certainly without effect: as good as failed
            elif intent.state == "escalated":
                escalated = escalated or intent.id
            elif intent.state == "unknown" and bugs.BUG == "replacement-while-unknown":
                pass  # The bug: an unknown predecessor is taken as one that did nothing.
            elif intent.state != "failed":
                return "unresolved", None
            if intent.replaces is None:
                break
            current = intent.replaces
        return ("escalated", escalated) if escalated else ("nothing", None)


def cancelled(old, by):
    if old == by:
        return f"cancelled: the intent it replaces ({old}) is confirmed"
    return f"cancelled: {by}, in the lineage of the intent it replaces ({old}), is confirmed"


def _valid_private_key(text):
    if not isinstance(text, str) or not text.startswith("0x") or len(text) != 66:
        return False
    try:
        return int(text[2:], 16) != 0
    except ValueError:
        return False


# -- the protocol --------------------------------------------------------------------------


def _terms(given, defaults, what):
    """`given` over `defaults`, refusing a term we do not know: a misspelt term must never be
    silently replaced by its default."""
    if given is None:
        return dict(defaults)
    if not isinstance(given, dict):
        raise ProtocolError(MALFORMED, f"init: {what} must be an object")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ProtocolError(MALFORMED, f"init: unknown field {unknown[0]!r} in {what}")
    terms = dict(defaults)
    for name, value in given.items():
        if type(value) is not type(defaults[name]):
            raise ProtocolError(MALFORMED, f"init: {what}.{name} must be a {type(defaults[name]).__name__}")
        terms[name] = value
    return terms


class Server:
    """Answers each request exactly once, through the kit's loop (`twice.protocol.serve`)."""

    def __init__(self, out, announced):
        self.out = out
        self.announced = announced
        self.executor = None

    def emit_event(self, event):
        # Events go out as they happen (from the pass's threads), always before the reply.
        emit(self.out, {"type": "event", **event})

    def serve(self, stdin):
        serve(lambda kind, request: ((), self.handle(kind, request)), stdin=stdin, out=self.out)

    def handle(self, kind, request):
        if kind == "init":
            return self.init(request)
        if kind not in ("propose", "status", "reconcile", "drain", "shutdown"):
            raise ProtocolError(NOT_SUPPORTED, f"unknown request type {kind!r}")
        if kind == "shutdown":
            return {}
        if self.executor is None:
            raise ProtocolError(UNAVAILABLE, "send init first")
        if kind == "propose":
            return {"intent": self.executor.propose(request.get("intent"))}
        if kind == "status":
            ids = request.get("ids")
            if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
                raise ProtocolError(MALFORMED, "ids must be a list of strings")
            return {"intents": self.executor.status(None if ids is None else set(ids))}
        if kind == "reconcile":
            tally = self.executor.run_pass()
            return {"sent": tally.sent, "looked_up": tally.looked_up}
        timeout_ms = request.get("timeout_ms", DRAIN_MS_MAX)
        if type(timeout_ms) is not int or not 0 <= timeout_ms <= DRAIN_MS_MAX:
            raise ProtocolError(MALFORMED, f"timeout_ms must be an integer from 0 to {DRAIN_MS_MAX}")
        self.executor.drain(timeout_ms)
        return {}

    def init(self, request):
        if self.executor is not None:
            raise ProtocolError(MALFORMED, "init was already received")
        # The kit checks the protocol, the worker, the state directory, the services' URLs and
        # the secrets; every contract term and limit is then checked here, an unknown one refused.
        checked = parse_init(request)
        worker_id, state_dir, secrets = checked.worker_id, checked.state_dir, checked.secrets
        service_config = {}
        for name, cfg in checked.services.items():
            contract = _terms(cfg.get("contract"), DEFAULT_CONTRACT, f"{name}.contract")
            service_config[name] = {"url": cfg["url"], "contract": contract}
        limits = _terms(request.get("limits"), DEFAULT_LIMITS, "limits")
        try:
            self.executor = Executor(
                worker_id, state_dir, service_config, secrets, limits, self.announced, self.emit_event
            )
        except Exception as e:
            raise ProtocolError(CRASH, f"cannot open the state in {state_dir}: {e}") from e
        features = [FEATURE_WORKFLOWS, FEATURE_WEBHOOKS]
        return {"executor": EXECUTOR, "actions": list(self.announced), "features": features}


def main(argv):
    parser = argparse.ArgumentParser(prog="executor.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bug", choices=sorted(bugs.BUGS), help="switch on one classic bug (see bugs.py)")
    parser.add_argument("--actions", help="announce only these actions, comma-separated")
    parser.add_argument(
        "--single-worker", action="store_true", help="take no leases and send no fencing tokens (one worker only)"
    )
    parser.add_argument(
        "--refusals",
        choices=("escalated", "failed"),
        default="escalated",
        help="how a write refused for a decision (400, 401, 403, 422) ends where it certainly took no effect",
    )
    parser.add_argument(
        "--timing",
        choices=("announced", "short", "long"),
        default="announced",
        help="the request timeout, margin, lease and pause it picks within the announced limits",
    )
    args = parser.parse_args(argv)
    bugs.TIMING = args.timing
    bugs.BUG = args.bug
    bugs.SINGLE_WORKER = args.single_worker
    bugs.REFUSALS = args.refusals
    announced = actions.ACTIONS
    if args.actions is not None:
        announced = tuple(a for a in args.actions.split(",") if a)
        unknown = [a for a in announced if a not in actions.ACTIONS]
        if unknown:
            parser.error(f"--actions: unknown action {unknown[0]}; known: {', '.join(actions.ACTIONS)}")

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    # stdout is for the protocol only: a private handle on it, and file descriptor 1 pointed at
    # stderr, so that a stray print() of ours or of an SDK can never break the framing.
    out = protocol_output()
    Server(out, announced).serve(sys.stdin.buffer)
    return 0

