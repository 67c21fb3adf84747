"""The idiomatic Temporal refund app: a workflow that runs one activity, and the activity calls
the payments API with stripe-python, as Temporal's Python docs and samples write it.

- The activity is a plain synchronous function (`@activity.defn def refund_payment`), run on the
  worker's thread pool, as the docs advise for blocking SDK calls.
- The workflow runs it with `start_to_close_timeout` and a `RetryPolicy`: Temporal retries the
  activity when it raises or times out, and the docs' advice that "activities should be
  idempotent" is left to the activity. This one sends no idempotency key of its own:
  stripe-python then makes one per call (and reuses it for its own network retries inside that
  call), so each *Temporal* attempt is a new key.
- Whatever the workflow's status says is what the app believes: COMPLETED with a refund id is
  a refund made, FAILED is a refund that did not happen.

Nothing here is a planted bug: it is the docs' shape with the SDKs' defaults. The only values
changed are timeouts, so that a test takes seconds (README.md says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    import stripe
    import temporal_twice

#: The activity's start-to-close timeout. The docs' samples use 5-10 s; 2 s keeps a test short
#: (a loopback refund takes milliseconds).
START_TO_CLOSE = timedelta(seconds=2)
RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=4),
    maximum_attempts=5,
    # stripe-python's definite refusals: retrying them cannot help.
    non_retryable_error_types=["InvalidRequestError", "CardError", "AuthenticationError", "PermissionError"],
)

_api_base: Optional[str] = None


def configure(api_base: str, **_ignored: object) -> None:
    """Where the payments API is (the worker sets it from its command line)."""
    global _api_base
    _api_base = api_base


@dataclass
class RefundRequest:
    payment_intent: str
    amount: int


@activity.defn
def refund_payment(req: RefundRequest) -> dict:
    assert _api_base is not None, "temporal_idiomatic.configure(api_base) was not called"
    # The SDK's defaults: a key it makes per call, no network retries, an 80 s timeout.
    client = stripe.StripeClient("sk_test_twice", base_addresses={"api": _api_base})
    info = activity.info()
    refund = client.v1.refunds.create(
        params={
            "payment_intent": req.payment_intent,
            "amount": req.amount,
            "metadata": {"workflow_id": info.workflow_id},
        }
    )
    return {"refund_id": refund.id, "status": refund.status}


@workflow.defn
class RefundWorkflow:
    @workflow.run
    async def run(self, req: RefundRequest) -> dict:
        return await workflow.execute_activity(
            refund_payment,
            req,
            start_to_close_timeout=START_TO_CLOSE,
            retry_policy=RETRY_POLICY,
        )


WORKFLOWS = [RefundWorkflow]
ACTIVITIES = [refund_payment]


# ---- under twice/1 (`python -m twice.engines.temporal --app temporal_idiomatic`) ---------------------

twice_app = temporal_twice.app(configure, RefundWorkflow, RefundRequest, ACTIVITIES, careful=False)
