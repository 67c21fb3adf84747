"""The refund task written the way Celery's and Stripe's docs show it.

- A Celery app on Redis (broker and result backend), `task_acks_late = True`: the message is
  acknowledged after the task returns, so that a worker that dies mid-task does not lose the
  refund (Celery's docs: "Tasks" → `acks_late`, and the FAQ "Should I use retry or
  acks_late?"). Everything else as shipped: `task_reject_on_worker_lost` off, prefork pool.
- Celery's automatic retry for the errors Stripe's docs call transient: a network error, a
  429 and a 5xx (`autoretry_for`, `retry_backoff=True`, `max_retries=3`).
- stripe-python's module-level API with its defaults: `stripe.max_network_retries` is 2, and
  the SDK puts an idempotency key of its own on each `create` call, the same for the SDK's
  retries of that call and a new one for the next call.
- The task's return value (the refund's id) is the job's record in the result backend.

Nothing here is a planted bug: it is what a competent Celery user writes from the docs.
"""

from __future__ import annotations

from typing import Any, Optional

import stripe
from celery import Celery
from twice.engines import App

import celery_effects
import celery_settings as settings

app = Celery("celery_idiomatic", broker=settings.BROKER_URL, backend=settings.BROKER_URL)
app.conf.update(
    task_acks_late=True,
    broker_transport_options=settings.broker_transport_options(),
    result_backend_transport_options=settings.broker_transport_options(),
)

stripe.api_key = settings.STRIPE_API_KEY
stripe.api_base = settings.PAYMENTS_URL
stripe.default_http_client = stripe.RequestsClient(timeout=settings.REQUEST_TIMEOUT_S)


@app.task(
    bind=True,
    autoretry_for=(stripe.APIConnectionError, stripe.RateLimitError, stripe.APIError),
    retry_backoff=True,
    max_retries=3,
)
def refund(self: Any, payment_intent: str, amount: int, order_id: Optional[str] = None) -> dict[str, Any]:
    """Refunds `amount` of `payment_intent` for order `order_id` (default: the task id)."""
    order_id = order_id or str(self.request.id)
    created = stripe.Refund.create(payment_intent=payment_intent, amount=amount, metadata={"order_id": order_id})
    return {"external_id": created.id, "status": created.status, "runs": self.request.retries + 1}


# ---- under twice/1 (`python -m twice.engines.celery --app celery_idiomatic`) ----------------


def twice_configure(init: Any) -> None:
    """The settings from twice's `init` instead of the environment; nothing else changes."""
    settings.from_twice(init)
    settings.configure_app(app)
    celery_effects.configure(init)


# A task that returned is `confirmed`, one that raised (FAILURE) `failed`: as the app reads it.
#: The other four actions' tasks (celery_effects.py), as the docs write a task.
OTHER_TASKS = celery_effects.tasks(app, careful=False)

twice_app = App(actions={"payments.refund": refund, **OTHER_TASKS}, configure=twice_configure)
