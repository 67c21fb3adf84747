"""A shop's webhook handler: when an order is paid (Stripe's `payment_intent.succeeded`), send
the customer's welcome email (Resend), once.

The shop keeps its orders in SQLite: each paid order's payment intent, the email to send for
it, and whether it was sent. It listens on loopback, registers its endpoint with the payments
service (`webhook_endpoints.create`, keeping the `whsec_` secret) and handles each delivery.

`careful` (the default) does what Stripe's guidance asks:

1. verifies the signature with `stripe.Webhook.construct_event` (which also refuses a
   timestamp more than five minutes old): a forged or replayed delivery is answered 400;
2. records the event id durably before it acts or answers, and answers 200 without acting to
   any delivery for an order whose email is already sent (its record is the intent log: one
   email per order, whichever event, and however often, asks for it);
3. reads the payment intent's current state from the API instead of trusting the event's copy,
   and acts only on a payment that has really succeeded;
4. sends the email under an idempotency key that is the order's own (the same on every try),
   records it sent, and only then answers 200; if the send fails it answers 500, so that the
   service sends the event again and the resend is safe under the same key.

Each `--bug` switch turns one of these off, as handlers are often written:

- `no-signature-check`: parses the body as JSON and believes it;
- `no-dedupe`: acts on every delivery of an event;
- `memory-dedupe`: remembers the events it handled in memory only, so a restarted shop
  handles them again;
- `ack-first`: answers 200 at once and does the work after, so work a crash interrupts is
  never asked for again;
- `event-data`: trusts the event's copy of the payment intent instead of reading it;
- `no-key`: sends the email without an idempotency key.

The naive handler (`NAIVE`) is the first, the second and the last two at once.

Run as a process (`python webhook_handler.py run DB --payments URL --messages URL [--bug B]`),
it prints `listening PORT` once its endpoint is up, and serves until killed; started again on
the same database it listens on the same port and keeps the endpoint it registered.
"""

from __future__ import annotations

import argparse
import http.server
import json
import sqlite3
import sys
import threading
from dataclasses import dataclass
from typing import Optional

import resend
import stripe

BUGS = ("no-signature-check", "no-dedupe", "memory-dedupe", "ack-first", "event-data", "no-key")
NAIVE = ("no-signature-check", "no-dedupe", "event-data", "no-key")
#: Where the handler listens, under its own HTTP server.
PATH = "/stripe/webhooks"
SENDER = "Acme <welcome@acme.test>"

SCHEMA = """
create table if not exists orders (
    payment_intent text primary key,
    job text not null,
    email text not null,
    subject text not null,
    body text not null,
    sent integer not null default 0,
    email_id text
);
create table if not exists events (id text primary key, received_ms integer not null);
create table if not exists endpoint (id text not null, secret text not null, port integer not null);
"""


@dataclass
class Order:
    payment_intent: str
    job: str
    email: str
    subject: str
    body: str
    sent: bool
    email_id: Optional[str]


class Shop:
    """The application: its record, its HTTP endpoint, its clients of the two services."""

    def __init__(self, db: str, payments_url: str, messages_url: str, bugs: tuple[str, ...] = ()) -> None:
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}; the switches are {BUGS}")
        self.db = db
        self.bugs = bugs
        self.stripe = stripe.StripeClient("sk_test_shop", base_addresses={"api": payments_url})
        resend.api_key = "re_test_shop"
        resend.api_url = messages_url
        self.secret: Optional[str] = None
        self.endpoint_id: Optional[str] = None
        self.server: Optional[http.server.ThreadingHTTPServer] = None
        # `memory-dedupe`: the events handled, in this process's memory only.
        self.handled: set[str] = set()
        with self._connect() as conn:
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        # Autocommit off; each `with` is one transaction, durable when it ends.
        conn = sqlite3.connect(self.db, timeout=10, isolation_level="IMMEDIATE")
        conn.execute("pragma journal_mode=wal")
        conn.execute("pragma synchronous=full")
        return conn

    def add_order(self, payment_intent: str, job: str, email: str, subject: str, body: str) -> None:
        with self._connect() as conn:
            conn.execute(
                "insert into orders (payment_intent, job, email, subject, body) values (?, ?, ?, ?, ?)",
                (payment_intent, job, email, subject, body),
            )

    def orders(self) -> list[Order]:
        with self._connect() as conn:
            rows = conn.execute(
                "select payment_intent, job, email, subject, body, sent, email_id from orders order by job"
            ).fetchall()
        return [Order(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6]) for r in rows]

    # -- the endpoint ------------------------------------------------------------------------

    def start(self) -> int:
        """Listens on loopback and registers the endpoint with the payments service; started
        again on the same database, listens on the same port and keeps that endpoint. Returns
        the port."""
        shop = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode("utf-8")
                signature = self.headers.get("Stripe-Signature")
                if "ack-first" in shop.bugs:
                    self.answer(200)
                    shop.receive(body, signature)
                else:
                    self.answer(shop.receive(body, signature))

            def answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.wfile.flush()

            def log_message(self, *args: object) -> None:
                pass

        with self._connect() as conn:
            kept = conn.execute("select id, secret, port from endpoint").fetchone()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", kept[2] if kept else 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = int(self.server.server_address[1])
        if kept:
            self.endpoint_id, self.secret = kept[0], kept[1]
            return port
        endpoint = self.stripe.v1.webhook_endpoints.create(
            params={"url": f"http://127.0.0.1:{port}{PATH}", "enabled_events": ["payment_intent.succeeded"]}
        )
        self.endpoint_id, self.secret = endpoint.id, endpoint.secret
        with self._connect() as conn:
            conn.execute("insert into endpoint (id, secret, port) values (?, ?, ?)", (endpoint.id, endpoint.secret, port))
        return port

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    # -- one delivery ------------------------------------------------------------------------

    def receive(self, body: str, signature: Optional[str]) -> int:
        """Handles one delivery; the status to answer."""
        event = self._event(body, signature)
        if event is None:
            return 400
        if event["type"] != "payment_intent.succeeded":
            return 200
        memory_only = "memory-dedupe" in self.bugs and "no-dedupe" not in self.bugs
        if memory_only:
            if event["id"] in self.handled:
                return 200
            self.handled.add(event["id"])
        elif "no-dedupe" not in self.bugs:
            self._record(event["id"])
        payment_intent = event["data"]["object"]["id"]
        if not self._paid(event):
            return 200
        order = next((o for o in self.orders() if o.payment_intent == payment_intent), None)
        if order is None or (order.sent and "no-dedupe" not in self.bugs and not memory_only):
            return 200
        try:
            key = {} if "no-key" in self.bugs else {"idempotency_key": f"welcome-{order.job}"}
            email = resend.Emails.send(
                {"from": SENDER, "to": order.email, "subject": order.subject, "text": order.body}, key
            )
        except resend.exceptions.ResendError:
            # Maybe sent, maybe not: the service sends the event again, and the resend under
            # the same key cannot send a second email.
            return 500
        with self._connect() as conn:
            conn.execute(
                "update orders set sent = 1, email_id = ? where payment_intent = ?", (email["id"], payment_intent)
            )
        return 200

    def _event(self, body: str, signature: Optional[str]) -> Optional[dict]:
        """The event, once its signature holds (or, with the bug, whatever the body says)."""
        if "no-signature-check" in self.bugs:
            return json.loads(body)
        try:
            return stripe.Webhook.construct_event(body, signature, self.secret).to_dict()
        except (stripe.SignatureVerificationError, ValueError):
            return None

    def _record(self, event_id: str) -> None:
        """Records the event id, durably, before the handler acts on it or answers."""
        with self._connect() as conn:
            conn.execute(
                "insert into events (id, received_ms) values (?, cast(strftime('%s','now') as integer) * 1000) "
                "on conflict (id) do nothing",
                (event_id,),
            )

    def events(self) -> list[str]:
        """The event ids recorded, oldest first."""
        with self._connect() as conn:
            return [r[0] for r in conn.execute("select id from events order by rowid")]

    def _paid(self, event: dict) -> bool:
        """Whether the order's payment has succeeded: the API's word (or, with the bug, the
        event's copy)."""
        if "event-data" in self.bugs:
            return event["data"]["object"].get("status") == "succeeded"
        current = self.stripe.v1.payment_intents.retrieve(event["data"]["object"]["id"])
        return current.status == "succeeded"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="The shop's webhook handler, as a process.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="listen, register the endpoint (once), and serve until killed")
    run.add_argument("db")
    run.add_argument("--payments", required=True)
    run.add_argument("--messages", required=True)
    run.add_argument("--bug", action="append", default=[], choices=BUGS)
    args = parser.parse_args(argv)
    shop = Shop(args.db, args.payments, args.messages, tuple(args.bug))
    port = shop.start()
    print(f"listening {port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
