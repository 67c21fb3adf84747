"""The careful Temporal refund app: the same workflow and activity as `temporal_idiomatic`,
made correct with Temporal's own tools.

- **A key from the activity's identity.** `activity.info().workflow_id` + `activity_id` is the
  same on every attempt of the activity (and in whichever worker runs it), so Temporal's retry
  of an activity whose reply was lost or that timed out sends the *same* Idempotency-Key, and
  the payments service replays the first refund instead of making a second one.
- **A read-back before a retry.** Keys are kept for a limited time (the contract's
  `key_retention_ms`) and Temporal's retry may come later than that. So every attempt after
  the first looks the refund up first (refunds of the payment intent carrying the workflow id
  in their metadata). Found: that is the refund. Not found: the attempt waits until absence is
  final (the previous attempt was over by `current_attempt_scheduled_time`; a send of it lands
  within the contract's settle time, read lag and the request timeout) and looks again; only
  then does it send, under a key of this attempt (nothing earlier landed, and a service may
  have saved a hollow answer under the old key).
- **Heartbeats.** The activity heartbeats while it works, with a short `heartbeat_timeout`:
  a killed or stopped worker is noticed in seconds, while `start_to_close_timeout` stays long
  enough for the read-back's wait.
- **A success that may lie is read back** (where the contract says `acks = "may_lie"`).
- **Honest ends.** A definite refusal (a 4xx other than 409 and 429) is non-retryable and is
  `failed` (no earlier send can have landed: attempt 1, or after a final absence). When
  Temporal gives up for any other reason, the workflow says `unknown`, never `failed`: a send
  may have landed.

The workflow returns its state itself: `{"state": "confirmed" | "failed" | "unknown", ...}`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import stripe
    import temporal_twice

START_TO_CLOSE = timedelta(seconds=30)
HEARTBEAT_TIMEOUT = timedelta(seconds=2)
HEARTBEAT_EVERY_S = 0.3
RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=2),
    maximum_attempts=5,
    non_retryable_error_types=["RefundRefused"],
)
#: Margin added to the contract's bounds before a "not there" is believed.
MARGIN_S = 0.2


@dataclass
class Settings:
    api_base: str = ""
    request_timeout_s: float = 2.0
    settle_s: float = 0.5
    read_lag_s: float = 0.0
    acks_may_lie: bool = False


_settings: Optional[Settings] = None


def configure(
    api_base: str,
    request_timeout_s: float = 2.0,
    settle_ms: int = 500,
    read_lag_ms: int = 0,
    acks: str = "reliable",
    **_ignored: object,
) -> None:
    """The payments API and what its contract promises (the worker sets them)."""
    global _settings
    _settings = Settings(api_base, request_timeout_s, settle_ms / 1000, read_lag_ms / 1000, acks == "may_lie")


@dataclass
class RefundRequest:
    payment_intent: str
    amount: int


def _client(s: Settings) -> stripe.StripeClient:
    # Each request bounded by the scenario's request timeout; retries are Temporal's (same key).
    return stripe.StripeClient(
        "sk_test_twice",
        base_addresses={"api": s.api_base},
        http_client=stripe.RequestsClient(timeout=s.request_timeout_s),
    )


def _look_up(client: stripe.StripeClient, req: RefundRequest, workflow_id: str) -> Optional[str]:
    try:
        refunds = client.v1.refunds.list(params={"payment_intent": req.payment_intent, "limit": 100})
    except stripe.StripeError as e:
        # Cannot tell: let Temporal retry the attempt (which looks again).
        raise ApplicationError(f"lookup failed: {e}", type="LookupFailed") from None
    for refund in refunds.data:
        metadata = refund.to_dict(recursive=True).get("metadata") or {}
        if metadata.get("workflow_id") == workflow_id:
            return str(refund.id)
    return None


def _definite_refusal(e: stripe.StripeError) -> bool:
    status = e.http_status
    return status is not None and 400 <= status < 500 and status not in (408, 409, 429)


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY_S)


@activity.defn
async def refund_payment(req: RefundRequest) -> dict:
    s = _settings
    assert s is not None, "temporal_careful.configure(...) was not called"
    info = activity.info()
    client = _client(s)
    key = f"{info.workflow_id}-{info.activity_id}"
    beat = asyncio.create_task(_heartbeat())
    try:
        if info.attempt > 1:
            found = await asyncio.to_thread(_look_up, client, req, info.workflow_id)
            if found is not None:
                return {"refund_id": found, "key": key, "attempt": info.attempt, "how": "found by lookup"}
            # Every earlier attempt was over when this one was scheduled; a send of theirs has
            # landed (and is readable) by then + settle + read lag + request timeout.
            final_at = info.current_attempt_scheduled_time.timestamp() + s.settle_s + s.read_lag_s + s.request_timeout_s + MARGIN_S
            await asyncio.sleep(max(0.0, final_at - time.time()))
            found = await asyncio.to_thread(_look_up, client, req, info.workflow_id)
            if found is not None:
                return {"refund_id": found, "key": key, "attempt": info.attempt, "how": "found by lookup"}
            # Absent for good: nothing earlier landed. A key of this attempt, so that a hollow
            # answer saved under the earlier key is not replayed.
            key = f"{key}-{info.attempt}"
        try:
            refund = await asyncio.to_thread(
                client.v1.refunds.create,
                params={
                    "payment_intent": req.payment_intent,
                    "amount": req.amount,
                    "metadata": {"workflow_id": info.workflow_id},
                },
                options={"idempotency_key": key},
            )
        except stripe.StripeError as e:
            if _definite_refusal(e):
                raise ApplicationError(
                    f"refused: {type(e).__name__} ({e.http_status}): {e.user_message or e}",
                    type="RefundRefused",
                    non_retryable=True,
                ) from None
            raise  # unsure: Temporal retries, and the next attempt looks the refund up first
        if s.acks_may_lie:
            found = await asyncio.to_thread(_look_up, client, req, info.workflow_id)
            if found is None:
                raise ApplicationError(f"{refund.id} answered but not found on read-back", type="HollowSuccess")
        return {"refund_id": refund.id, "key": key, "attempt": info.attempt, "how": "answered"}
    finally:
        beat.cancel()


@workflow.defn
class RefundWorkflow:
    @workflow.run
    async def run(self, req: RefundRequest) -> dict[str, Any]:
        try:
            result = await workflow.execute_activity(
                refund_payment,
                req,
                start_to_close_timeout=START_TO_CLOSE,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY_POLICY,
            )
        except ActivityError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError) and cause.type == "RefundRefused":
                return {"state": "failed", "last_error": str(cause)}
            # Temporal gave up, but a send may have landed: not knowing is the honest answer.
            return {"state": "unknown", "last_error": f"{type(cause).__name__}: {cause}"}
        return {"state": "confirmed", **result}


WORKFLOWS = [RefundWorkflow]
ACTIVITIES = [refund_payment]


# ---- under twice/1 (`python -m twice.engines.temporal --app temporal_careful`) ---------------------

twice_app = temporal_twice.app(configure, RefundWorkflow, RefundRequest, ACTIVITIES, careful=True)
