"""The same refund task, made correct with Celery's own tools.

What changes from `celery_idiomatic`:

1. **A key per task, not per call.** The test enqueues with `task_id=f"refund-{order id}"`
   and every send carries an `Idempotency-Key` derived from `self.request.id`, so a Celery
   retry or a redelivery of the same task sends the same key: the service replays the first
   answer instead of refunding again. (stripe-python's own retries reuse it too.)
2. **Look before sending again.** Every run first looks the refund up (the refunds of the
   payment intent, matched on the task id the sends put in the metadata). A run that may
   follow an earlier send (a retry: `self.request.retries > 0`; a redelivery:
   `delivery_info["redelivered"]`, set by kombu when it gives back a message a dead or
   stopped worker held) that finds nothing waits until "not there" is final (the contract's
   settle bound + read lag + the request timeout) and looks again, and only then sends; a
   refusal of that send is then a refusal of this run alone. A key can be forgotten
   (`key_retention_ms`), a lookup cannot. stripe-python's own retries are off
   (`max_network_retries = 0`): they resend at once under the same key, which makes a
   second refund where keys are ignored or forgotten.
3. **Read back a success.** A 200 is believed once a read shows the refund; a success the
   read never shows is sent again under a new key (the old key would replay the hollow
   answer).
4. **`task_reject_on_worker_lost = True`**: a pool process killed mid-task puts the message
   back (the worker would otherwise acknowledge it and mark the task failed).
5. **Honest states.** The task returns `{"state": ...}`: `confirmed` only with a refund the
   service showed; `failed` only for a definite refusal of a task that never sent before;
   `unknown` when the retries run out without an answer (never a guess).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import stripe
from celery import Celery
from twice.engines import App

import celery_effects
import celery_settings as settings

app = Celery("celery_careful", broker=settings.BROKER_URL, backend=settings.BROKER_URL)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    broker_transport_options=settings.broker_transport_options(),
    result_backend_transport_options=settings.broker_transport_options(),
)

stripe.api_key = settings.STRIPE_API_KEY
stripe.api_base = settings.PAYMENTS_URL
stripe.default_http_client = stripe.RequestsClient(timeout=settings.REQUEST_TIMEOUT_S)
# The SDK's own retries (two, by default, for a connection error or a 409) resend at once under
# the same key: a second refund where keys are ignored or already forgotten, and a refusal of
# the resend reads as a refusal of the first. The task's lookup-then-send is the only retry.
stripe.max_network_retries = 0

#: Errors after which the refund may or may not exist: no reply, a timeout, a 5xx, the key
#: still in flight (409), "slow down" (429).
UNSURE = (stripe.APIConnectionError, stripe.APIError, stripe.RateLimitError, stripe.IdempotencyError)
#: Celery retries of a run whose outcome was unsure.
MAX_RETRIES = 4
#: Sends per run: the first, and one more after a success no read could find.
SENDS_PER_RUN = 2


def absence_final_s() -> float:
    """How long after a send a lookup that finds nothing is final: the write has had its
    settle bound to land, the read its lag, the request its timeout, plus a margin."""
    return (settings.SETTLE_MS + settings.READ_LAG_MS) / 1000.0 + settings.REQUEST_TIMEOUT_S + 0.1


def look_up(payment_intent: str, task_id: str) -> Optional[str]:
    """The id of this task's refund if the service shows one, else None."""
    try:
        refunds = stripe.Refund.list(payment_intent=payment_intent, limit=100)
    except stripe.StripeError:
        return None
    for found in refunds.data:
        metadata = found.to_dict(recursive=True).get("metadata") or {}
        if metadata.get("task_id") == task_id:
            return str(found.id)
    return None


def _refusal(e: stripe.StripeError) -> bool:
    """A definite "no": a 4xx other than 409 (key in flight) and 429 (slow down)."""
    status = e.http_status
    return status is not None and 400 <= status < 500 and status not in (409, 429)


@app.task(bind=True, max_retries=MAX_RETRIES)
def refund(self: Any, payment_intent: str, amount: int, order_id: Optional[str] = None) -> dict[str, Any]:
    """Refunds `amount` of `payment_intent` for order `order_id` (default: the task id), once."""
    task_id = str(self.request.id)
    order_id = order_id or task_id
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    may_have_sent = self.request.retries > 0 or redelivered
    record: dict[str, Any] = {"task_id": task_id, "retries": self.request.retries, "redelivered": redelivered}

    found = look_up(payment_intent, task_id)
    if found is None and may_have_sent:
        time.sleep(absence_final_s())
        found = look_up(payment_intent, task_id)
        # Nothing an earlier run sent can land any more: a refusal now is of this run alone.
        may_have_sent = found is not None
    if found is not None:
        return {**record, "state": "confirmed", "external_id": found, "how": "looked up"}

    for send in range(SENDS_PER_RUN):
        key = f"{task_id}-r{self.request.retries}-s{send}"
        record["key"] = key
        try:
            created = stripe.Refund.create(
                payment_intent=payment_intent,
                amount=amount,
                metadata={"task_id": task_id, "order_id": order_id},
                idempotency_key=key,
            )
        except stripe.StripeError as e:
            record["last_error"] = f"{type(e).__name__} ({e.http_status}): {e.user_message or e}"
            if _refusal(e) and not may_have_sent and send == 0:
                return {**record, "state": "failed"}
            if isinstance(e, UNSURE) and self.request.retries < MAX_RETRIES:
                raise self.retry(exc=e, countdown=0.2 * 2**self.request.retries)
            found = look_up(payment_intent, task_id)
            if found is not None:
                return {**record, "state": "confirmed", "external_id": found, "how": "looked up"}
            return {**record, "state": "unknown"}
        # A success is believed once a read shows it.
        found = look_up(payment_intent, task_id)
        if found is None:
            time.sleep(absence_final_s())
            found = look_up(payment_intent, task_id)
        if found is not None:
            return {**record, "state": "confirmed", "external_id": found, "how": "sent"}
        record["hollow_success"] = created.id
        may_have_sent = True
    return {**record, "state": "unknown"}


# ---- under twice/1 (`python -m twice.engines.celery --app celery_careful`) ------------------


def twice_configure(init: Any) -> None:
    """The settings (the payments URL, timeouts, the contract's bounds) from twice's `init`."""
    settings.from_twice(init)
    settings.configure_app(app)
    celery_effects.configure(init)


#: The other four actions' tasks (celery_effects.py), careful.
OTHER_TASKS = celery_effects.tasks(app, careful=True)

twice_app = App(
    actions={"payments.refund": refund, **OTHER_TASKS},
    configure=twice_configure,
    raised="unknown",  # a task that raised past its retries may have refunded
)
