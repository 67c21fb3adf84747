"""The careful DBOS refund app: the idiomatic one made correct with DBOS's own tools.

- The workflow is started under the business id (`SetWorkflowID(intent id)`), as in the
  idiomatic app: starting it twice runs it once.
- The refund's `Idempotency-Key` is derived from DBOS's record, `{DBOS.workflow_id}-{DBOS.step_id}`:
  the same on every retry of the step and after DBOS recovers the workflow in a new process
  (the step id is the step's position in the workflow, which recovery replays), so the
  service replays a refund it already made instead of making a second one.
- The request carries the workflow id in the refund's metadata, and every run of the step
  first looks the refund up (refunds of the payment intent with that metadata): DBOS runs a
  step again after any exception or crash without knowing whether its request landed, and a
  key alone is not enough when the service forgets keys (`payments_forget_keys`) or a commit
  lands late.
- `should_retry` (DBOS's step option) retries only what is unsure or "not now" (no reply, a
  timeout, a 5xx, 408, 409, 429). A refusal that needs a person (400, 401, 403, 422) is never
  sent again: the workflow ends with `escalated`. Another definite refusal (402, 404) ends
  `failed`.
- When DBOS gives up on the step (`DBOSMaxStepRetriesExceeded`), the workflow ends with
  `unknown` rather than a guess: a request that got no answer may have landed.
- Given the service's contract (`configure(..., contract=...)`, as `twice_configure` does
  under twice/1), a lookup that finds nothing is believed only once nothing sent can still
  land (`settle_ms_max + read_lag_ms_max` + the request timeout since the workflow's last send
  in this process, or since the process started for a workflow DBOS recovered); before that,
  the step resends only under its own key while the service keeps it, else it waits. Where
  acks `may_lie`, a success is read back; a hollow one ends the step `not_landed`, and the
  workflow runs the step again: a new step id, so a new key (the old one may hold the hollow
  answer), and that run's lookup comes first. Without a contract (test_dbos.py's worker) the
  lookup is believed at once, as before.

The workflow's output (DBOS's record) says which of these it came to.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Optional

import stripe
from dbos import DBOS
from dbos._error import DBOSMaxStepRetriesExceeded
from twice.engines import App

# effects.py (examples/engines) and the example executor's services.py, which it builds on,
# where this folder does not hold copies of them.
_HERE = Path(__file__).resolve().parent
sys.path += [str(_HERE.parent), str(_HERE.parents[1] / "executors" / "python")]

import careful_workspaces
import effects
import sends

#: Runs of the refund step per workflow (the first included), and DBOS's pause before the
#: second, doubled for each further one: 0.5 + 1 + 2 + 4 + 8 s, longer than any settle bound
#: or late commit of the scenarios, so a lookup at the last run sees what landed.
STEP_ATTEMPTS_MAX = 6
STEP_RETRY_INTERVAL_S = 0.5
#: The metadata field carrying the workflow id, by which a run of the step finds the refund.
METADATA_KEY = "dbos_workflow_id"
#: Statuses that say nothing of whether the refund happened, or ask to be sent again later.
UNSURE_STATUSES = (408, 409, 429)
#: Refusals a person must act on: never sent again (docs/protocol.md §7).
NEEDS_A_DECISION = (400, 401, 403, 422)

_client: Optional[stripe.StripeClient] = None
#: The service's contract (docs/protocol.md §3.1), when the caller knows it; None: lookups
#: are believed at once.
_contract: Optional[dict[str, Any]] = None
_timeout_ms = 2000
#: Rounds of the refund step per workflow where acks may lie (each a new key).
HOLLOW_ROUNDS_MAX = 3
#: When this process started: any send of a workflow recovered from an earlier life left before.
_PROCESS_START_MS = int(time.time() * 1000)
#: Last send per workflow, and first send per key, in this process (ms).
_last_sent_ms: dict[str, int] = {}
_key_first_sent_ms: dict[str, int] = {}
#: Sends per workflow in this process (a crash forgets them: then an earlier send may have
#: landed, and a refusal says nothing of it).
_sent_here: dict[str, int] = {}
#: The key of each workflow's refund step, for the workflow's output when DBOS gives up.
_keys: dict[str, str] = {}
#: Workflows this process started itself (the others it recovered after a crash).
started_here: set[str] = set()


class Refused(Exception):
    """A definite refusal of the refund: not retried."""

    def __init__(self, status: int, code: str, message: str, could_duplicate: bool, key: str) -> None:
        super().__init__(status, code, message, could_duplicate, key)
        self.status, self.code, self.message = status, code, message
        self.could_duplicate, self.key = could_duplicate, key


def configure(api_base: str, timeout_s: float, contract: Optional[dict[str, Any]] = None) -> None:
    """Points the step's Stripe client at `api_base`; the SDK's own retries stay off (its
    default), DBOS's step retries are the only ones. `contract`: what the service promises
    (settle and read-lag bounds, key retention, acks), used to tell when "not found" is final."""
    global _client, _contract, _timeout_ms
    _contract = dict(contract) if contract is not None else None
    _timeout_ms = int(timeout_s * 1000)
    _client = stripe.StripeClient(
        "sk_test_twice",
        base_addresses={"api": api_base},
        http_client=stripe.RequestsClient(timeout=timeout_s),
    )


def _retry_unless_refused(error: BaseException) -> bool:
    return not isinstance(error, Refused)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _final_after_ms(workflow_id: str) -> int:
    """When a lookup that finds nothing becomes final for this workflow: nothing it sent (in
    this process, or, if DBOS recovered it, in an earlier life, which ended before this process
    started) can land after that."""
    if _contract is None:
        return 0
    last = _last_sent_ms.get(workflow_id)
    if last is None:
        last = 0 if workflow_id in started_here else _PROCESS_START_MS
    bound = int(_contract.get("settle_ms_max", 30000)) + int(_contract.get("read_lag_ms_max", 0))
    return last + bound + _timeout_ms + 100


def _key_safe(key: str) -> bool:
    """A resend under `key` cannot execute twice: the service honours keys, acks tell the truth,
    and the key (sent before by this process) is still retained when the resend arrives."""
    if _contract is None or key not in _key_first_sent_ms:
        return False
    if _contract.get("idempotency_keys", "ignored") != "honored" or _contract.get("acks", "reliable") != "reliable":
        return False
    return _now_ms() + _timeout_ms + 100 < _key_first_sent_ms[key] + int(_contract.get("key_retention_ms", 0))


def _find(payment_intent: str, workflow_id: str) -> Optional[tuple[str, int]]:
    """The id and amount of this workflow's refund if the service has it. A failed lookup
    raises: the step is unsure, and DBOS runs it again."""
    assert _client is not None
    refunds = _client.v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
    for refund in refunds.data:
        found = refund.to_dict(recursive=True)
        if (found.get("metadata") or {}).get(METADATA_KEY) == workflow_id:
            return str(refund.id), int(found.get("amount") or 0)
    return None


def _look_up(payment_intent: str, workflow_id: str) -> Optional[str]:
    found = _find(payment_intent, workflow_id)
    return found[0] if found is not None else None


@DBOS.step(
    retries_allowed=True,
    max_attempts=STEP_ATTEMPTS_MAX,
    interval_seconds=STEP_RETRY_INTERVAL_S,
    backoff_rate=2.0,
    should_retry=_retry_unless_refused,
)
def refund_step(payment_intent: str, amount: int) -> dict[str, Any]:
    assert _client is not None, "careful.configure(api_base, timeout_s) was not called"
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    assert workflow_id is not None and step_id is not None, "the refund step runs inside a workflow"
    key = _keys[workflow_id] = f"{workflow_id}-{step_id}"
    found = _look_up(payment_intent, workflow_id)
    if found is not None:
        return {"state": "confirmed", "external_id": found, "key": key, "reason": "found by lookup"}
    if not _key_safe(key):
        # "Not found" proves nothing while an earlier send may still land: wait until it
        # cannot (bounded by the contract's settle and read-lag bounds), then look again.
        wait_ms = _final_after_ms(workflow_id) - _now_ms()
        if wait_ms > 0:
            time.sleep(wait_ms / 1000.0)
            found = _look_up(payment_intent, workflow_id)
            if found is not None:
                return {"state": "confirmed", "external_id": found, "key": key, "reason": "found by lookup"}
    _sent_here[workflow_id] = _sent_here.get(workflow_id, 0) + 1
    _last_sent_ms[workflow_id] = _now_ms()
    _key_first_sent_ms.setdefault(key, _now_ms())
    sends.count(workflow_id)
    try:
        refund = _client.v1.refunds.create(
            params={"payment_intent": payment_intent, "amount": amount, "metadata": {METADATA_KEY: workflow_id}},
            options={"idempotency_key": key},
        )
    except stripe.StripeError as e:
        status = e.http_status
        if status is not None and 400 <= status < 500 and status not in UNSURE_STATUSES:
            code = str(getattr(e, "code", "") or "")
            if code == "idempotency_error":
                raise  # the key's earlier request had other parameters: unsure, looked up again
            # The lookup just found nothing; an earlier send of this process that got no
            # answer, or one of a life before a crash, may still have landed.
            earlier = _sent_here[workflow_id] > 1 or workflow_id not in started_here
            raise Refused(status, code, str(e.user_message or e), could_duplicate=earlier, key=key) from None
        raise
    finally:
        _last_sent_ms[workflow_id] = _now_ms()  # the send may land up to settle after its end
    if _contract is not None and _contract.get("acks", "reliable") == "may_lie":
        # A success may be hollow: only a read-back proves the refund.
        found = _look_up(payment_intent, workflow_id)
        if found is None:
            return {"state": "not_landed", "external_id": refund.id, "key": key}
        return {"state": "confirmed", "external_id": found, "key": key, "reason": "found by read-back"}
    return {"state": "confirmed", "external_id": refund.id, "key": key}


@DBOS.workflow()
def refund_workflow(payment_intent: str, amount: int) -> dict[str, Any]:
    """Refunds `amount` of `payment_intent`; the workflow id is the refund's business id. The
    output's `state` is what the workflow knows: confirmed, failed, escalated or unknown."""
    try:
        for _ in range(HOLLOW_ROUNDS_MAX):
            result = refund_step(payment_intent, amount)
            if result["state"] != "not_landed":
                return result
            # A hollow success: the next run of the step (a new step id, so a new key) looks
            # the refund up first and sends only once absence is final.
        return {"state": "unknown", "key": result["key"], "last_error": "every success was hollow"}
    except Refused as e:
        decision = {"status": e.status, "error": f"{e.code}: {e.message}"}
        if e.status in NEEDS_A_DECISION:
            return {"state": "escalated", "key": e.key, "decision": decision, "could_duplicate": e.could_duplicate}
        if e.could_duplicate:
            return {"state": "unknown", "key": e.key, "decision": decision}
        return {"state": "failed", "key": e.key, "decision": decision}
    except DBOSMaxStepRetriesExceeded as e:
        workflow_id = DBOS.workflow_id or ""
        return {"state": "unknown", "key": _keys.get(workflow_id, ""), "last_error": str(e)}


# ---- files, transfers and messages: effects.py's careful step, in DBOS's steps ---------------


@DBOS.step(retries_allowed=True, max_attempts=STEP_ATTEMPTS_MAX, interval_seconds=STEP_RETRY_INTERVAL_S,
           backoff_rate=2.0)  # fmt: skip
def prepare_step(action: str, params: dict[str, Any]) -> dict[str, Any]:
    """What every send must carry (a put's precondition, a transfer's signed bytes): made
    once per round and recorded by DBOS as the step's output, so a recovered workflow sends
    exactly these again."""
    return effects.prepare(action, params, DBOS.workflow_id or "")


@DBOS.step(retries_allowed=True, max_attempts=STEP_ATTEMPTS_MAX, interval_seconds=STEP_RETRY_INTERVAL_S,
           backoff_rate=2.0)  # fmt: skip
def effect_step(action: str, params: dict[str, Any], prepared: dict[str, Any]) -> dict[str, Any]:
    """One run of the careful step, keyed `{workflow_id}-{step_id}`: effects.step looks up
    first, sends, reads back, and raises `Unsure` (DBOS runs the step again) when it cannot tell."""
    workflow_id, step_id = DBOS.workflow_id or "", DBOS.step_id
    key = _keys[workflow_id] = f"{workflow_id}-{step_id}"
    sends.count(workflow_id)
    return effects.step(action, params, workflow_id, key, prepared)


def _careful(action: str, params: dict[str, Any]) -> dict[str, Any]:
    """Rounds of (prepare, step) until the step knows; a hollow success starts a new round
    (new step ids: a new key, and for a transfer new signed bytes)."""
    try:
        result: dict[str, Any] = {}
        for _ in range(HOLLOW_ROUNDS_MAX):
            result = effect_step(action, params, prepare_step(action, params))
            if result["state"] != "not_landed":
                return result
        return {"state": "unknown", "key": result.get("key"), "last_error": "every success was hollow"}
    except DBOSMaxStepRetriesExceeded as e:
        return {"state": "unknown", "key": _keys.get(DBOS.workflow_id or "", ""), "last_error": str(e)}


@DBOS.workflow()
def put_workflow(bucket: str, key: str, body: str) -> dict[str, Any]:
    return _careful("files.put", {"bucket": bucket, "key": key, "body": body})


@DBOS.workflow()
def transfer_workflow(to: str, value: str) -> dict[str, Any]:
    return _careful("chain.transfer", {"to": to, "value": value})


@DBOS.workflow()
def message_workflow(to: str, subject: str, body: str) -> dict[str, Any]:
    return _careful("messages.send", {"to": to, "subject": subject, "body": body})


# ---- under twice/1 (`python -m twice.engines.dbos --app careful`) ---------------------------


def twice_configure(init: Any) -> None:
    """Points the app at twice's payments and workspaces fakes, with what their contracts promise."""
    timeout_s = int(init.limits.get("request_timeout_ms", 2000)) / 1000.0
    sends.PATH = Path(init.state_dir) / "sends.jsonl"
    if init.url("payments") is not None:
        configure(init.url("payments"), timeout_s, contract=init.contract("payments"))
    if init.url("workspaces") is not None:
        careful_workspaces.configure(init.url("workspaces"), timeout_s, init.contract("workspaces"))
    effects.configure(init)


def twice_started(intent_id: str) -> None:
    """This process starts the workflow (it did not recover it after a crash)."""
    started_here.add(intent_id)
    careful_workspaces.started_here.add(intent_id)
    effects.started_here.add(intent_id)


def twice_reconcile(intent: dict[str, Any], ended_ms: int) -> Optional[dict[str, Any]]:
    """An intent the workflow left `unknown`: looked up by the workflow id in the refund's
    metadata. Found with its amount: confirmed; with another amount: escalated. Not found:
    escalated (`could_duplicate: false`) once nothing sent can still land, else None. A
    workspace is looked up by its external id."""
    if intent["action"] == "workspaces.create":
        return careful_workspaces.reconcile(intent, ended_ms)
    if intent["action"] != "payments.refund":
        return effects.reconcile(intent, ended_ms)
    found = _find(intent["params"]["payment_intent"], intent["id"])
    if found is not None:
        refund_id, amount = found
        if amount == intent["params"]["amount"]:
            return {"state": "confirmed", "external_id": refund_id, "reason": "confirmed by lookup"}
        return {"state": "escalated", "external_id": refund_id, "could_duplicate": True,
                "reason": f"found with amount {amount}, not {intent['params']['amount']}"}  # fmt: skip
    contract = _contract or {}
    bound_ms = int(contract.get("settle_ms_max", 30000)) + int(contract.get("read_lag_ms_max", 0)) + _timeout_ms + 100
    if _now_ms() < ended_ms + bound_ms:
        return None
    return {"state": "escalated", "could_duplicate": False,
            "reason": "no refund found once nothing sent could still land; the workflow is over, a person decides"}  # fmt: skip


twice_app = App(
    actions={
        "payments.refund": refund_workflow,
        "workspaces.create": careful_workspaces.workspace_workflow,
        "files.put": put_workflow,
        "chain.transfer": transfer_workflow,
        "messages.send": message_workflow,
    },
    configure=twice_configure,
    reconcile=twice_reconcile,
    attempts=sends.count_of,
    on_start=twice_started,
    raised="unknown",  # a workflow that raised may have refunded
)
