"""A small refund worker on stripe-python with a durable record in SQLite, in two versions.

Jobs ("refund AMOUNT of PAYMENT_INTENT") are recorded in a SQLite table; a worker process
takes every job that is not finished and refunds it. The table is the worker's only memory:
a worker that is killed and started again knows what it was doing only from there.

**correct** (`--mode correct`):

1. When a job is recorded, its idempotency key is minted and stored with it, once.
2. Before every send the row says `submitted` and the attempt is counted, committed before
   the request leaves: after a crash, the next life knows a send may have happened.
3. The send carries the stored key and the job id in the refund's metadata.
4. A success is recorded as `confirmed` with the refund's id; a definite refusal (a 4xx other
   than 409 and 429) as `failed`.
5. An unsure outcome (no reply, a timeout, a 5xx, a 409 or 429) is not a "no": the worker
   looks the refund up (refunds of the payment intent carrying the job id) and, if it is
   not there, sends again under the same key, a bounded number of times, then says
   `unknown` rather than guess.
6. A job found `submitted` at start (its worker died mid-send) is looked up first.

**naive** (`--mode naive`): what a retry loop written in a hurry does. It retries on any
error, with a new idempotency key per attempt and no lookup, and a restarted worker sends
every unfinished job again, again under a new key. Whenever a refund committed but its reply
was lost, the retry refunds a second time.

Usage (the tests drive it this way, one process per worker life):

    python refund_worker.py enqueue DB JOB_ID PAYMENT_INTENT AMOUNT
    python refund_worker.py run DB --api-base URL --mode correct|naive [--timeout-s S]
"""

from __future__ import annotations

import argparse
import dataclasses
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import stripe

#: Sends per job and worker life, first one included.
ATTEMPTS_MAX = 4
#: Pause between a send whose outcome is unsure and the next one; doubles each time.
RETRY_PAUSE_S = 0.1
#: The API key: the fake accepts any, as long as there is one.
API_KEY = "sk_test_twice"
#: States after which a worker leaves a job alone: `unknown` waits for a person (or for a
#: reconciliation this small worker does not have) rather than for another blind send.
FINISHED = ("confirmed", "failed", "unknown")

SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    job_id          TEXT PRIMARY KEY,
    payment_intent  TEXT NOT NULL,
    amount          INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    refund_id       TEXT,
    last_error      TEXT
)
"""


@dataclasses.dataclass(frozen=True)
class Job:
    """One row of the record."""

    job_id: str
    payment_intent: str
    amount: int
    idempotency_key: str
    state: str
    attempts: int
    refund_id: Optional[str]
    last_error: Optional[str]


@contextmanager
def connect(db_path: str) -> Iterator[sqlite3.Connection]:
    """The record, with every commit durable (`synchronous=FULL`): a row a worker committed
    before it was killed is there for the next life."""
    db = sqlite3.connect(db_path, timeout=10.0, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(SCHEMA)
        yield db
    finally:
        db.close()


def enqueue(db_path: str, job_id: str, payment_intent: str, amount: int) -> None:
    """Records a job, with the idempotency key every send of it will carry (correct mode)."""
    with connect(db_path) as db:
        db.execute(
            "INSERT INTO refunds (job_id, payment_intent, amount, idempotency_key, state) "
            "VALUES (?, ?, ?, ?, 'recorded')",
            (job_id, payment_intent, amount, f"refund-{job_id}-{uuid.uuid4().hex}"),
        )


def jobs(db_path: str) -> list[Job]:
    """Every job as the record has it, in the order they were recorded."""
    with connect(db_path) as db:
        rows = db.execute(
            "SELECT job_id, payment_intent, amount, idempotency_key, state, attempts, refund_id, last_error "
            "FROM refunds ORDER BY rowid"
        ).fetchall()
    return [Job(*row) for row in rows]


class Worker:
    """One worker life: refunds every unfinished job of the record, then returns."""

    def __init__(self, db_path: str, api_base: str, mode: str, timeout_s: float) -> None:
        if mode not in ("correct", "naive"):
            raise ValueError(f"mode {mode!r}: correct or naive")
        self.db_path = db_path
        self.mode = mode
        # The SDK's own retries are off: this worker decides what a retry is (and the naive
        # one is the point of the example). `base_addresses` is the client's `stripe.api_base`.
        self.client = stripe.StripeClient(
            API_KEY,
            base_addresses={"api": api_base},
            max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=timeout_s),
        )

    def run(self) -> None:
        for job in jobs(self.db_path):
            if job.state in FINISHED:
                continue
            if self.mode == "correct":
                self._refund_correctly(job)
            else:
                self._refund_naively(job)

    # -- correct ----------------------------------------------------------------------------

    def _refund_correctly(self, job: Job) -> None:
        if job.state == "submitted":
            # A previous life may have sent it: whatever it got, it did not record.
            found = self._look_up(job)
            if found is not None:
                self._set(job, state="confirmed", refund_id=found)
                return
        pause_s = RETRY_PAUSE_S
        for _ in range(ATTEMPTS_MAX):
            # Committed before the send: a crash from here on leaves a trace.
            self._count_attempt(job, state="submitted")
            try:
                refund = self._send(job, job.idempotency_key)
            except stripe.StripeError as e:
                if _definite_refusal(e):
                    self._set(job, state="failed", last_error=_describe(e))
                    return
                self._set(job, last_error=_describe(e))
                found = self._look_up(job)
                if found is not None:
                    self._set(job, state="confirmed", refund_id=found)
                    return
                time.sleep(pause_s)
                pause_s *= 2
                continue
            self._set(job, state="confirmed", refund_id=refund.id)
            return
        # Every send's outcome was unsure and no lookup found the refund: say so.
        self._set(job, state="unknown")

    def _look_up(self, job: Job) -> Optional[str]:
        """The id of this job's refund if the service has one: the refunds of the payment
        intent, matched on the job id the sends put in the metadata."""
        try:
            refunds = self.client.v1.refunds.list(params={"payment_intent": job.payment_intent, "limit": 100})
        except stripe.StripeError:
            return None
        for refund in refunds.data:
            # A StripeObject is not a dict; its data is.
            metadata = refund.to_dict(recursive=True).get("metadata") or {}
            if metadata.get("job_id") == job.job_id:
                return str(refund.id)
        return None

    # -- naive ------------------------------------------------------------------------------

    def _refund_naively(self, job: Job) -> None:
        last_error = None
        for _ in range(ATTEMPTS_MAX):
            self._count_attempt(job, state="submitted")
            try:
                # The bug: a fresh key per attempt, so the service cannot tell a retry from a
                # second refund.
                refund = self._send(job, f"attempt-{uuid.uuid4().hex}")
            except stripe.StripeError as e:
                last_error = _describe(e)
                self._set(job, last_error=last_error)
                time.sleep(RETRY_PAUSE_S)
                continue
            self._set(job, state="confirmed", refund_id=refund.id)
            return
        self._set(job, state="failed", last_error=last_error)

    # -- both -------------------------------------------------------------------------------

    def _send(self, job: Job, key: str) -> Any:
        return self.client.v1.refunds.create(
            params={"payment_intent": job.payment_intent, "amount": job.amount, "metadata": {"job_id": job.job_id}},
            options={"idempotency_key": key},
        )

    def _count_attempt(self, job: Job, state: str) -> None:
        with connect(self.db_path) as db:
            db.execute("UPDATE refunds SET attempts = attempts + 1, state = ? WHERE job_id = ?", (state, job.job_id))

    def _set(self, job: Job, **fields: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with connect(self.db_path) as db:
            db.execute(f"UPDATE refunds SET {assignments} WHERE job_id = ?", (*fields.values(), job.job_id))


def _definite_refusal(e: stripe.StripeError) -> bool:
    """Whether the service said no for sure: a 4xx other than 409 (the key is busy) and 429
    (slow down). No status at all (no reply, a timeout) and 5xx say nothing of the outcome."""
    status = e.http_status
    return status is not None and 400 <= status < 500 and status not in (409, 429)


def _describe(e: stripe.StripeError) -> str:
    return f"{type(e).__name__} ({e.http_status}): {e.user_message or e}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("enqueue", help="record a job")
    add.add_argument("db")
    add.add_argument("job_id")
    add.add_argument("payment_intent")
    add.add_argument("amount", type=int)
    run = commands.add_parser("run", help="refund every unfinished job, then exit")
    run.add_argument("db")
    run.add_argument("--api-base", required=True)
    run.add_argument("--mode", choices=("correct", "naive"), required=True)
    run.add_argument("--timeout-s", type=float, default=2.0, help="per request")
    args = parser.parse_args(argv)
    if args.command == "enqueue":
        enqueue(args.db, args.job_id, args.payment_intent, args.amount)
    else:
        Worker(args.db, args.api_base, args.mode, args.timeout_s).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
