"""The idiomatic DBOS refund app: a durable workflow with one step that refunds through
stripe-python, written as DBOS's docs show a step that calls an external API.

- The workflow is started under the business id (`SetWorkflowID(intent id)`), DBOS's own
  idempotency for workflows: starting the same id again runs it once.
- The step is `@DBOS.step(retries_allowed=True)` with DBOS's default retry policy (3 attempts,
  1 s apart, doubling): every exception the step raises (a lost reply, a timeout, a 5xx, a 4xx)
  runs it again.
- The step calls `client.v1.refunds.create(...)` with stripe-python's defaults: the SDK puts an
  `Idempotency-Key` of its own on every POST (a fresh UUID per call), and a `StripeClient`
  makes no network retries of its own. So each run of the step is a new key: the service cannot
  tell DBOS's retry (or DBOS's recovery of the workflow after a crash) from a second refund.

The only setting that is not a default is the HTTP timeout of the Stripe client: the
scenario's request timeout, as a user sets a timeout on a call to a payment API.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import requests
import stripe
from dbos import DBOS
from twice.engines import App

# effects.py (examples/engines) and the example executor's services.py, which it builds on,
# where this folder does not hold copies of them.
_HERE = Path(__file__).resolve().parent
sys.path += [str(_HERE.parent), str(_HERE.parents[1] / "executors" / "python")]

import effects
import sends

_client: Optional[stripe.StripeClient] = None


def configure(api_base: str, timeout_s: float) -> None:
    """Points the step's Stripe client at `api_base` (its `stripe.api_base`)."""
    global _client
    _client = stripe.StripeClient(
        "sk_test_twice",
        base_addresses={"api": api_base},
        http_client=stripe.RequestsClient(timeout=timeout_s),
    )


@DBOS.step(retries_allowed=True)
def refund_step(payment_intent: str, amount: int) -> dict[str, Any]:
    assert _client is not None, "idiomatic.configure(api_base, timeout_s) was not called"
    sends.count(DBOS.workflow_id)
    refund = _client.v1.refunds.create(params={"payment_intent": payment_intent, "amount": amount})
    return {"id": refund.id, "status": refund.status}


@DBOS.workflow()
def refund_workflow(payment_intent: str, amount: int) -> dict[str, Any]:
    """Refunds `amount` of `payment_intent`; the workflow id is the refund's business id."""
    return refund_step(payment_intent, amount)


# ---- creating a workspace: the same shape, on a SaaS API with `requests` ----------------------

_workspaces_url: Optional[str] = None
_workspaces_timeout_s = 2.0


@DBOS.step(retries_allowed=True)
def create_workspace_step(external_id: str, name: str) -> dict[str, Any]:
    assert _workspaces_url is not None, "the workspaces API's URL was not set"
    answer = requests.post(f"{_workspaces_url}/v1/workspaces", json={"external_id": external_id, "name": name},
                           timeout=_workspaces_timeout_s)  # fmt: skip
    answer.raise_for_status()
    return {"id": answer.json()["id"]}


@DBOS.workflow()
def workspace_workflow(external_id: str, name: str) -> dict[str, Any]:
    """Creates workspace `name` for customer `external_id`."""
    return create_workspace_step(external_id, name)


# ---- files, transfers and messages: boto3, web3.py and resend, in the same shape -------------


@DBOS.step(retries_allowed=True)
def effect_step(action: str, params: dict[str, Any]) -> dict[str, Any]:
    sends.count(DBOS.workflow_id)
    return effects.naive(action, params)


@DBOS.workflow()
def put_workflow(bucket: str, key: str, body: str) -> dict[str, Any]:
    return effect_step("files.put", {"bucket": bucket, "key": key, "body": body})


@DBOS.workflow()
def transfer_workflow(to: str, value: str) -> dict[str, Any]:
    return effect_step("chain.transfer", {"to": to, "value": value})


@DBOS.workflow()
def message_workflow(to: str, subject: str, body: str) -> dict[str, Any]:
    return effect_step("messages.send", {"to": to, "subject": subject, "body": body})


# ---- under twice/1 (`python -m twice.engines.dbos --app idiomatic`) -------------------------


def twice_configure(init: Any) -> None:
    """Points the app at twice's payments and workspaces fakes; nothing else changes."""
    global _workspaces_url, _workspaces_timeout_s
    timeout_s = int(init.limits.get("request_timeout_ms", 2000)) / 1000.0
    sends.PATH = Path(init.state_dir) / "sends.jsonl"
    if init.url("payments") is not None:
        configure(init.url("payments"), timeout_s)
    _workspaces_url, _workspaces_timeout_s = init.url("workspaces"), timeout_s
    effects.configure(init)


# A workflow that returned is `confirmed`, one that raised `failed`: as the app reads DBOS.
twice_app = App(
    actions={
        "payments.refund": refund_workflow,
        "workspaces.create": workspace_workflow,
        "files.put": put_workflow,
        "chain.transfer": transfer_workflow,
        "messages.send": message_workflow,
    },
    configure=twice_configure,
    attempts=sends.count_of,
)
