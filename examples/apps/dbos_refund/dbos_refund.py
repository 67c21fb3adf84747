"""A refund as a DBOS durable workflow: one step that refunds through stripe-python, retried
by DBOS when it raises (a lost reply, a timeout, a 5xx).

DBOS records each workflow and the output of each finished step in its system database
(SQLite here), so a finished step is never run again; but a step that raised is run again,
and whether that second run refunds a second time is up to the step. Two versions of the key
the step sends, chosen by the workflow's `key_mode` argument:

- `per_step`: `{workflow id}-{step id}`, the same on every attempt of the step (and after a
  recovery of the workflow in another process): the service replays the first result.
- `per_attempt`: a fresh UUID per attempt, as a step that builds its request from scratch
  does: after a lost reply the retry is a second refund.

`configure()` points the module's Stripe client at the service before workflows run.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Optional

import stripe
from dbos import DBOS

#: Runs of the refund step per workflow, the first included.
STEP_ATTEMPTS_MAX = 3
#: DBOS's pause before the step's second run, doubled for each further one.
STEP_RETRY_INTERVAL_S = 0.05
KEY_MODES = ("per_step", "per_attempt")

_client: Optional[stripe.StripeClient] = None
#: Runs of the refund step per workflow id, in this process's memory only: evidence for the
#: claims, not something the workflow relies on.
_attempts: dict[str, int] = {}
_attempts_lock = threading.Lock()


def configure(api_base: str, timeout_s: float) -> None:
    """Points the refund step's Stripe client at `api_base` (`stripe.api_base` of the
    client), each request bounded by `timeout_s`. The SDK's own retries are off: DBOS's step
    retries are the ones this example is about."""
    global _client
    _client = stripe.StripeClient(
        "sk_test_twice",
        base_addresses={"api": api_base},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=timeout_s),
    )


def reset_attempts() -> None:
    """Forgets the counts: at each DBOS launch, whose workflow ids may repeat earlier ones."""
    with _attempts_lock:
        _attempts.clear()


def attempts(workflow_id: str) -> int:
    """How many times the refund step of `workflow_id` ran in this process."""
    with _attempts_lock:
        return _attempts.get(workflow_id, 0)


@DBOS.step(retries_allowed=True, max_attempts=STEP_ATTEMPTS_MAX, interval_seconds=STEP_RETRY_INTERVAL_S, backoff_rate=2.0)
def refund_step(payment_intent: str, amount: int, key_mode: str) -> dict[str, Any]:
    if _client is None:
        raise RuntimeError("dbos_refund.configure(api_base, timeout_s) was not called")
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None, "the refund step runs inside a workflow"
    with _attempts_lock:
        _attempts[workflow_id] = _attempts.get(workflow_id, 0) + 1
    if key_mode == "per_step":
        key = f"{workflow_id}-{DBOS.step_id}"
    else:
        key = f"{workflow_id}-{uuid.uuid4().hex}"
    refund = _client.v1.refunds.create(
        params={"payment_intent": payment_intent, "amount": amount, "metadata": {"workflow_id": workflow_id}},
        options={"idempotency_key": key},
    )
    return {"refund_id": refund.id, "key": key}


@DBOS.workflow()
def refund_workflow(payment_intent: str, amount: int, key_mode: str) -> dict[str, Any]:
    """Refunds `amount` of `payment_intent`; the workflow id is the business id of the refund."""
    if key_mode not in KEY_MODES:
        raise ValueError(f"key_mode {key_mode!r}: one of {KEY_MODES}")
    return refund_step(payment_intent, amount, key_mode)
