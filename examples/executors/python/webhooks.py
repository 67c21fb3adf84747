"""Intents an event starts (docs/protocol.md §3.2, "Intents an event starts"): the feature
`webhooks` of `twice/1`, after the reference executor's design (docs/executor.md,
executor/src/intent_engine/webhooks.rs and executor/src/log/webhooks.rs).

- **At `propose`** an intent with `on_event` gets every check a plain proposal gets (worker.py),
  and is then kept in the log's `triggers` table, not recorded as an intent: nothing is sent
  for it, and `status` does not list it. The same id kept with another event or payload is a
  conflict (21). A trigger whose event was already started is started at once.
- **The endpoint.** Once a trigger is kept, the next pass makes the process listen on a port of
  its own (127.0.0.1, port 0, path `/webhooks`) and registers that URL with the payments
  service through stripe-python (`POST /v1/webhook_endpoints`, under an idempotency key of
  the worker's own for that URL, so that a registration whose answer was lost is answered
  again with the same endpoint), keeping its id and `whsec_` secret in `webhook_endpoints`
  under the worker id. A restarted worker (same worker id, a new port) moves that endpoint to
  its new URL (`POST /v1/webhook_endpoints/{id}`) rather than making another: the service
  still owes the old one its retries.
- **A registration is a write like any other.** It is kept before it leaves (a row with the
  URL and no id or secret: "in flight"). One that fails (an error, a timeout, no answer), or
  one an earlier life left in flight, may have made an endpoint whose secret this worker never
  learnt, and the service sends that moment's events there only: the worker registers again
  and then, at every pass until every trigger kept has started, lists the service's own
  `payment_intent.succeeded` events (`GET /v1/events`, authenticated, so genuine) and keeps
  those a trigger names as received. Where the payments contract's acks may lie, a
  registration's (or a move's) 200 is read back (`GET /v1/webhook_endpoints/{id}`) until it
  shows this life's URL; once the settle and read-lag bounds, the request timeout and the
  margin have passed since the answer without that, the 200 did nothing: a create is made
  again (under a new key), a move sent again, and the events of the meantime are listed.
- **A delivery**, one at a time: the `Stripe-Signature` is checked with stripe-python's own
  `stripe.Webhook.construct_event` against the secret and the wall clock (its default
  tolerance, 300 s; a forgery or a replay gets a 400 and nothing is kept); an event of a type
  no trigger names is answered 200; a `payment_intent.succeeded` is kept in `webhook_events`
  (durably: `synchronous=FULL`) and only then answered 200. A second delivery of a kept event
  finds it there: 200, and nothing else.
- **Its work** is done by the passes, not by the handler (a handler that did it would depend
  on the service's few retries for its own reads): at the start of every pass, each kept event
  not yet started has its payment read from the API (the event's copy of it may be stale, or a
  lie), and once that shows `succeeded` the event's triggers are proposed as plain intents
  (the log holds an id once, so a second start finds it) and the event is noted as started. A
  read that fails or does not show `succeeded` yet is tried again at the next pass.

Three classic bugs act here (bugs.py), each one `if bugs.BUG == ...` in `take`, where a
webhook handler's wrong belief acts: `webhook-no-dedupe`, `webhook-ack-first` and
`webhook-trusts-body`.
"""

import hashlib
import json
import logging
import sqlite3
import threading
import time
import uuid

import actions
import bugs
import light_imports
from twice.protocol import EXISTS, ProtocolError

# The event types an endpoint asks for: those a trigger can name.
EVENT_TYPES = ("payment_intent.succeeded",)
# Where deliveries are posted.
WEBHOOK_PATH = "/webhooks"
# The largest delivery read; a larger one is refused (Stripe's events are a few KiB).
DELIVERY_BYTES_MAX = 1024 * 1024

log = logging.getLogger("twice-python-executor")


def now_ms():
    return int(time.time() * 1000)


def check_on_event(on_event):
    """The event an intent waits for, as (type, payment intent); raises ValueError for one
    that is not an object with a string `type` and `payment_intent`."""
    if not isinstance(on_event, dict):
        raise ValueError("intent.on_event must be an object with a string type and payment_intent")
    kind, payment_intent = on_event.get("type"), on_event.get("payment_intent")
    if not isinstance(kind, str) or not kind or not isinstance(payment_intent, str) or not payment_intent:
        raise ValueError("intent.on_event needs a string type and a string payment_intent")
    return kind, payment_intent


def _text(value, *path):
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None


class Webhooks:
    """One worker life's webhooks: its listener, its endpoint, the deliveries it takes and the
    work they start."""

    def __init__(self, executor):
        self.executor = executor
        self.log = executor.log
        self.worker_id = executor.worker_id
        # This life's endpoint URL, once it listens.
        self.url = None
        # Whether the log keeps a trigger (then the worker listens and registers).
        self.armed = False
        # Whether this life's endpoint is registered, or moved here.
        self.endpoint_ready = False
        # A registration's fate was unknown (an error, no answer, or one in flight in an earlier
        # life): events may have gone where this worker cannot verify them, so the service's own
        # are read from the API until every trigger kept has started.
        self.missed_events = False
        # Where acks may lie: when this life's registration (or move) was answered 200, until
        # it is read back.
        self.unconfirmed_since_ms = None
        # The creates this life read back as having done nothing (each next one gets a new key).
        self.hollow_creates = 0
        # One delivery at a time, as the reference takes them.
        self.turn = threading.Lock()
        # Listening and registering, once, whichever thread's pass comes first.
        self.setup = threading.Lock()
        # `--bug webhook-ack-first`: the events answered 200 and kept in this process only.
        self.in_memory = []

    def payments(self):
        return self.executor.services.get("payments")

    # -- propose -------------------------------------------------------------------------

    def arm(self, intent, kind, payment_intent):
        """Keeps the checked, unrecorded `intent` as a trigger of the event (`kind`,
        `payment_intent`); its view. An event of it started before starts it at once."""
        proposal = actions.canonical_json({"action": intent.action, "params": intent.params})
        if self.log.arm(intent.id, kind, payment_intent, proposal) == "conflict":
            raise ProtocolError(EXISTS, f"intent id {intent.id} was already kept with another event or payload")
        self.armed = True
        if self.log.event_started_for(kind, payment_intent):
            return self.fire(intent.id, proposal)
        return intent.view()

    def fire(self, intent_id, proposal):
        """Proposes the intent a trigger keeps, as a plain one: recorded once (the log holds
        an id at most once, so a second start finds it). Its view."""
        kept = json.loads(proposal)
        message = {"id": intent_id, "action": kept["action"], "params": json.loads(kept["params"])}
        return self.executor.propose(message)

    def start(self, intent_id, proposal):
        """Starts one trigger; False (and tried again at the next pass) if it cannot be."""
        try:
            self.fire(intent_id, proposal)
            return True
        except (ProtocolError, ValueError, KeyError) as problem:
            log.warning("trigger %s: not started: %s", intent_id, getattr(problem, "text", problem))
            return False

    # -- the endpoint --------------------------------------------------------------------

    def listen(self):
        """Listens on 127.0.0.1, on a port of its own, at WEBHOOK_PATH; deliveries go to
        `receive`, each on a thread of the server's."""
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hooks = self

        class Delivery(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                if self.path.split("?", 1)[0] != WEBHOOK_PATH:
                    return self.answer(404, f"only POST {WEBHOOK_PATH} is served here")
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    return self.answer(400, "a delivery needs a Content-Length")
                if not 0 <= length <= DELIVERY_BYTES_MAX:
                    return self.answer(413, f"a delivery of at most {DELIVERY_BYTES_MAX} bytes")
                body = self.rfile.read(length)
                status, note = hooks.receive(self.headers.get("Stripe-Signature"), body)
                self.answer(status, note)

            def answer(self, status, note):
                text = json.dumps({"note": note}).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args):
                pass  # stderr stays for what matters; stdout is the protocol's

        server = ThreadingHTTPServer(("127.0.0.1", 0), Delivery)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="webhooks", daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}{WEBHOOK_PATH}"

    def registration_key(self, url):
        """The idempotency key of this worker's registration at `url`.

        The reference sends `twice-endpoint-<worker>`; this one adds a hash of the URL, and a
        count of the creates this life found did nothing. A later life listens at another URL:
        under the reference's key, where keys are honoured and still retained, its create would
        be answered with the endpoint an earlier life made, which delivers to the earlier
        life's port. The same life sending it again (its answer lost) gets the same endpoint
        and secret back. And where acks may lie, a create read back as having done nothing is
        made again under a new key: the old one would replay the hollow 200."""
        key = f"twice-endpoint-{self.worker_id}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"
        return f"{key}-{self.hollow_creates}" if self.hollow_creates else key

    def ensure_endpoint(self):
        """Once a trigger is kept, at every pass: listens, and registers this worker's endpoint
        (or moves the one it kept to this life's URL), once per life; where acks may lie, reads
        that registration back until it shows; and after a registration whose fate is unknown,
        reads the events it may have missed from the API. A failure is tried again at the next
        pass."""
        payments = self.payments()
        if payments is None:
            return
        if not self.armed:
            # A restarted worker, or a second one on the same log, finds the triggers kept.
            if not self.log.has_triggers():
                return
            self.armed = True
        if self.endpoint_ready and self.unconfirmed_since_ms is None and not self.missed_events:
            return
        with self.setup:
            if self.url is None:
                self.listen()
            if not self.endpoint_ready:
                try:
                    payments.warm()
                    self.register(payments, self.url)
                    self.endpoint_ready = True
                except Exception as error:  # noqa: BLE001  (the next pass tries again)
                    # An endpoint may have been made whose secret never reached us: once one is
                    # registered, the events sent meanwhile are read from the API.
                    self.missed_events = True
                    log.warning("the webhook endpoint is not registered yet: %s: %s", type(error).__name__, error)
                    return
            if self.unconfirmed_since_ms is not None:
                self.confirm_endpoint(payments, self.unconfirmed_since_ms)
            if self.endpoint_ready and self.missed_events:
                self.recover_missed_events(payments)

    def register(self, payments, url):
        """Registers this worker's endpoint at `url`, or moves the one it kept there. Raises on
        any failure (the caller then counts events as possibly missed)."""
        kept = self.log.endpoint(self.worker_id)
        registered = kept is not None and bool(kept[0]) and bool(kept[1])
        if registered and kept[2] == url:
            return
        if not (registered and self.move(payments, kept, url)):
            if kept is not None:
                # An earlier life's registration whose answer never came (it was killed
                # sending it), or an endpoint the service no longer has: what was sent to
                # them, its events are read from the API instead.
                self.missed_events = True
            # Kept before it leaves, as an intent is `submitted`: a crash that follows leaves
            # the next life knowing that a registration may have made an endpoint whose secret
            # it never learnt.
            self.log.keep_endpoint(self.worker_id, "", "", url)
            endpoint_id, secret = payments.register_endpoint(url, EVENT_TYPES, self.registration_key(url))
            self.log.keep_endpoint(self.worker_id, endpoint_id, secret, url)
        if payments.success_may_be_hollow():
            # Where acks may lie, the 200 is read back before it is trusted (confirm_endpoint).
            self.unconfirmed_since_ms = now_ms()

    def move(self, payments, kept, url):
        """Moves the endpoint `kept` (id, secret, url) to `url`: True, or False if the service
        no longer has it. Raises on any other failure."""
        stripe = light_imports.import_stripe()
        try:
            payments.move_endpoint(kept[0], url)
        except stripe.InvalidRequestError as error:
            if error.http_status == 404:
                return False
            raise
        self.log.keep_endpoint(self.worker_id, kept[0], kept[1], url)
        return True

    def confirm_endpoint(self, payments, since_ms):
        """Reads back a registration (or a move) answered where acks may lie: once the endpoint
        shows at this life's URL it is trusted. While it does not (404, or another URL), once
        no read can lag and nothing sent can still land since the answer came, the 200 did
        nothing: a create is made again (the row back to in flight), a move sent again, at the
        next pass, and the events of the meantime are read from the API. Neither yet: read
        again at the next pass."""
        kept = self.log.endpoint(self.worker_id)
        if kept is None or not kept[0] or not kept[1]:
            return
        looked_at = now_ms()
        try:
            shown = payments.endpoint_url(kept[0])
        except Exception as error:  # noqa: BLE001  (read again at the next pass)
            log.warning("reading the webhook endpoint back: %s: %s", type(error).__name__, error)
            return
        if shown == kept[2]:
            self.unconfirmed_since_ms = None
            return
        contract = payments.contract
        settled_at = (
            since_ms
            + contract["settle_ms_max"]
            + contract["read_lag_ms_max"]
            + self.executor.limits["request_timeout_ms"]
            + self.executor.margin_ms
        )
        if looked_at < settled_at:
            return
        if shown is None:
            # The create did nothing: made again, under a new key (registration_key).
            self.hollow_creates += 1
            self.log.keep_endpoint(self.worker_id, "", "", kept[2])
        else:
            # The move did nothing: the row says where the endpoint is, so it is moved again.
            self.log.keep_endpoint(self.worker_id, kept[0], kept[1], shown)
        log.warning("the webhook endpoint's 200 did nothing (it shows %s): registering again", shown)
        self.unconfirmed_since_ms = None
        self.endpoint_ready = False
        self.missed_events = True

    def recover_missed_events(self, payments):
        """Keeps as received the events the service made that never reached this worker: each
        `payment_intent.succeeded` the API lists (its own record, so genuine) about a trigger
        kept; the passes then start them as any received event. Until every trigger kept has
        started, at every pass; a failure is tried again at the next."""
        try:
            listed = payments.events(EVENT_TYPES[0])
        except Exception as error:  # noqa: BLE001  (listed again at the next pass)
            log.warning("listing the payments service's events: %s: %s", type(error).__name__, error)
            return
        for event in listed:
            event_id, kind, object_id = _text(event, "id"), _text(event, "type"), _text(event, "data", "object", "id")
            if event_id and kind in EVENT_TYPES and object_id and self.log.triggers_for(kind, object_id):
                if self.log.receive_event(event_id, kind, object_id, now_ms()):
                    log.info("event %s (%s) read from the API: it never reached this worker", event_id, object_id)
        if self.log.all_triggers_started():
            self.missed_events = False

    # -- deliveries ----------------------------------------------------------------------

    def receive(self, signature, body):
        """Takes one delivery: (status, a sentence why)."""
        with self.turn:
            try:
                return self.take(signature, body)
            except sqlite3.Error as error:
                # Not kept, so not answered 2xx: the service sends it again.
                return 500, f"the event could not be kept: {error}"
            except Exception as error:  # noqa: BLE001  (never a 2xx for what was not kept)
                log.warning("a delivery failed: %s: %s", type(error).__name__, error)
                return 500, f"{type(error).__name__}: {error}"

    def take(self, signature, body):
        if bugs.BUG == "webhook-trusts-body":
            # The bug: the body is believed as it comes. No signature check, and its copy of
            # the payment's state is taken for the payment's: a forged "succeeded" starts work.
            return self.take_on_its_word(body)
        kept = self.log.endpoint(self.worker_id)
        if kept is None or not kept[0] or not kept[1]:
            # None, or a registration in flight: no secret to check the signature with. Not a
            # 2xx, so the service sends it again (and the API lists it).
            return 503, "no endpoint registered yet"
        stripe = light_imports.import_stripe()
        try:
            # The SDK's own check: the HMAC of the secret, and a timestamp at most 300 s old by
            # the wall clock (its default tolerance): a forgery or a replay is refused.
            stripe.Webhook.construct_event(body, signature, kept[1])
        except stripe.SignatureVerificationError as error:
            return 400, f"refused: {error}"
        except ValueError as error:
            return 400, f"not an event: {error}"
        event = json.loads(body)
        event_id, kind, object_id = _text(event, "id"), _text(event, "type"), _text(event, "data", "object", "id")
        if not (event_id and kind and object_id):
            return 400, "an event needs an id, a type and data.object.id"
        if kind not in EVENT_TYPES:
            return 200, f"{kind}: not an event this executor acts on"
        if bugs.BUG == "webhook-ack-first":
            # The bug: the 200 goes first; the event is kept in this process only, for the
            # pass to act on. A crash before that loses it, and the service, answered 200,
            # never sends it again.
            self.in_memory.append((event_id, kind, object_id))
            return 200, f"{event_id} taken"
        if bugs.BUG == "webhook-no-dedupe":
            # The bug: every delivery is new work, done now; the event id is never looked for.
            return self.act_now(event_id, kind, object_id)
        # Durable (synchronous=FULL) before the 200: the service's retry is what a crash
        # before this line leaves.
        if self.log.receive_event(event_id, kind, object_id, now_ms()):
            return 200, f"{event_id} received"
        return 200, f"{event_id} was received already"

    # -- the work, in the passes ---------------------------------------------------------

    def start_received(self):
        """Starts what the events received ask for, where the API shows it: each event's payment
        is read now, and once it shows `succeeded` its triggers are proposed and the event noted
        as started. What cannot be read, or does not show yet, waits for the next pass."""
        payments = self.payments()
        if payments is None or not self.armed:
            return
        waiting = [(event, True) for event in self.log.events_waiting()]
        waiting += [(event, False) for event in list(self.in_memory)]
        for (event_id, kind, object_id), durable in waiting:
            try:
                status = payments.payment_status(object_id)
            except Exception as error:  # noqa: BLE001  (read again at the next pass)
                log.warning("event %s: reading %s: %s: %s", event_id, object_id, type(error).__name__, error)
                continue
            if status != "succeeded":
                continue
            triggers = self.log.triggers_for(kind, object_id)
            if not all([self.start(intent_id, proposal) for intent_id, proposal in triggers]):
                continue
            if durable:
                self.log.event_started(event_id, now_ms())
            elif (event_id, kind, object_id) in self.in_memory:
                self.in_memory.remove((event_id, kind, object_id))

    # -- what the bugs do instead --------------------------------------------------------

    def act_now(self, event_id, kind, object_id):
        """`--bug webhook-no-dedupe`: the delivery's work, in the handler: the payment read,
        each trigger of it started afresh (`start_afresh`), the event noted, and a pass run, so
        that every delivery sends again."""
        try:
            status = self.payments().payment_status(object_id)
        except Exception as error:  # noqa: BLE001
            return 503, f"reading {object_id}: {error}"
        if status != "succeeded":
            return 503, f"{object_id} is {status}, not succeeded"
        for intent_id, proposal in self.log.triggers_for(kind, object_id):
            self.start_afresh(intent_id, proposal)
        self.log.receive_event(event_id, kind, object_id, now_ms())
        self.log.event_started(event_id, now_ms())
        self.executor.run_pass()
        return 200, f"{event_id} acted on"

    def start_afresh(self, intent_id, proposal):
        """`--bug webhook-no-dedupe`: the trigger's intent begins again, with a new idempotency
        key and nothing of its earlier sends, even where it exists."""
        existing = self.log.get(intent_id)
        if existing is None:
            self.start(intent_id, proposal)
            return
        new = existing.copy()
        new.key = str(uuid.uuid4())
        new.state = "recorded"
        new.evidence = {"key": new.key, "reason": "started again: a delivery of its event"}
        new.attempts, new.maybe_executed = 0, False
        new.key_first_sent_ms = new.last_sent_ms = None
        new.lease_owner, new.lease_until_ms = None, 0
        new.updated_ms = now_ms()
        self.log.write(new, existing.version, existing.state, "started again: a delivery of its event")

    def take_on_its_word(self, body):
        """`--bug webhook-trusts-body`: the event as its body says, its triggers started at
        once where the body's copy of the payment says `succeeded`."""
        try:
            event = json.loads(body)
        except ValueError as error:
            return 400, f"not an event: {error}"
        event_id, kind, object_id = _text(event, "id"), _text(event, "type"), _text(event, "data", "object", "id")
        if not (event_id and kind and object_id):
            return 400, "an event needs an id, a type and data.object.id"
        if kind not in EVENT_TYPES:
            return 200, f"{kind}: not an event this executor acts on"
        if not self.log.receive_event(event_id, kind, object_id, now_ms()):
            return 200, f"{event_id} was received already"
        if _text(event, "data", "object", "status") == "succeeded":
            triggers = self.log.triggers_for(kind, object_id)
            if all([self.start(intent_id, proposal) for intent_id, proposal in triggers]):
                self.log.event_started(event_id, now_ms())
        return 200, f"{event_id} received"
