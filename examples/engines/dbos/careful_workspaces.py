"""The careful DBOS app's second action: creating a workspace on a SaaS API (twice's workspaces
fake: `POST /v1/workspaces` with `external_id` and `name`, `GET /v1/workspaces?external_id=`),
made safe to run again with the tools the refund step uses.

- The workflow is started under the business id (`SetWorkflowID(intent id)`).
- The `Idempotency-Key` is `{DBOS.workflow_id}-{DBOS.step_id}`: the same on every retry of the
  step and after DBOS recovers the workflow in a new process.
- Every run of the step first looks the workspace up by its `external_id` (one per intent): a
  key alone does not cover a service that forgets keys or a commit that lands late. A lookup
  that finds nothing is believed only once nothing sent can still land (the contract's settle
  and read-lag bounds plus the request timeout since the workflow's last send in this process,
  or since the process started for a workflow DBOS recovered).
- A refusal that needs a person (400, 401, 403, 422) is never sent again: `escalated`; a 409
  `workspace_exists` (the service keeps one workspace per external id) is looked up, and is
  this intent's when it carries its name.
- Where acks may lie, a success is read back; a hollow one runs the step again, under a new key.
- A request whose connection was refused (nothing was sent) is tried again at once, bounded,
  without spending DBOS's retries. Where the service offers fencing, each send carries the time
  it leaves as a `Fencing-Token` (DBOS has no leases; a time only grows): a run paused and
  resumed after a later one cannot overwrite what the later one wrote.
- When DBOS gives up on the step, the workflow says `unknown`, never `failed`.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import requests
from dbos import DBOS
from dbos._error import DBOSMaxStepRetriesExceeded

#: Runs of the step per workflow and DBOS's pause before the second, doubled after each.
STEP_ATTEMPTS_MAX = 6
STEP_RETRY_INTERVAL_S = 0.5
#: Rounds of the step where acks may lie (each a new key).
HOLLOW_ROUNDS_MAX = 3
#: Refusals a person must act on: never sent again.
NEEDS_A_DECISION = (400, 401, 403, 422)
#: Sends per run of the step, each after the last one's absence became certain.
SEND_ROUNDS_MAX = 3
#: Tries of one request whose connection was refused (nothing sent), and the pause between.
REFUSED_TRIES_MAX = 20
REFUSED_PAUSE_S = 0.2

_url: Optional[str] = None
_contract: dict[str, Any] = {}
_timeout_s = 2.0
_PROCESS_START_MS = int(time.time() * 1000)
_last_sent_ms: dict[str, int] = {}
_keys: dict[str, str] = {}
#: Workflows this process started itself (the others it recovered after a crash).
started_here: set[str] = set()


class Refused(Exception):
    """A definite refusal: not retried."""

    def __init__(self, status: int, error: str, key: str) -> None:
        super().__init__(status, error, key)
        self.status, self.error, self.key = status, error, key


def configure(url: str, timeout_s: float, contract: dict[str, Any]) -> None:
    global _url, _contract, _timeout_s
    _url, _contract, _timeout_s = url.rstrip("/"), dict(contract), timeout_s


def _now_ms() -> int:
    return int(time.time() * 1000)


def _final_after_ms(workflow_id: str) -> int:
    last = _last_sent_ms.get(workflow_id)
    if last is None:
        last = 0 if workflow_id in started_here else _PROCESS_START_MS
    bound = int(_contract.get("settle_ms_max", 30000)) + int(_contract.get("read_lag_ms_max", 0))
    return last + bound + int(_timeout_s * 1000) + 100


def _request(method: str, path: str, **kwargs: Any) -> requests.Response:
    """One request, tried again while its connection is refused: nothing left this process, so
    trying again is safe and costs none of DBOS's retries (bounded)."""
    for _ in range(REFUSED_TRIES_MAX - 1):
        try:
            return requests.request(method, f"{_url}{path}", timeout=_timeout_s, **kwargs)
        except requests.ConnectionError as e:
            if "refused" not in str(e).lower():
                raise
            time.sleep(REFUSED_PAUSE_S)
    return requests.request(method, f"{_url}{path}", timeout=_timeout_s, **kwargs)


def find(external_id: str) -> Optional[dict[str, Any]]:
    """The workspace with this external id, if the service shows one. A failed lookup raises:
    the step is unsure, and DBOS runs it again."""
    answer = _request("GET", "/v1/workspaces", params={"external_id": external_id, "limit": 100})
    answer.raise_for_status()
    return next((w for w in answer.json().get("data", []) if w.get("external_id") == external_id), None)


def _outcome(found: dict[str, Any], name: str, key: str, how: str) -> dict[str, Any]:
    if found.get("name") == name:
        return {"state": "confirmed", "external_id": found.get("id"), "key": key, "reason": how}
    # Another workspace holds this external id: not ours to claim, a person looks.
    return {"state": "escalated", "external_id": found.get("id"), "key": key, "could_duplicate": False,
            "reason": f"external id taken by a workspace named {found.get('name')!r}"}  # fmt: skip


def _retry_unless_refused(error: BaseException) -> bool:
    return not isinstance(error, Refused)


def _send(workflow_id: str, external_id: str, name: str, key: str) -> Optional[requests.Response]:
    """One create: its answer (an error status raises: a refusal that needs a person as
    `Refused`, 409, 429 or 5xx for DBOS to run the step again), or None when no answer came."""
    headers = {"Idempotency-Key": key}
    if _contract.get("fencing"):
        # DBOS has no leases; the time this run sends is a token that only grows, so that a
        # run paused and resumed later than another cannot overwrite what the later one wrote.
        headers["Fencing-Token"] = str(time.time_ns())
    _last_sent_ms[workflow_id] = _now_ms()
    try:
        answer = _request("POST", "/v1/workspaces", json={"external_id": external_id, "name": name}, headers=headers)
    except (requests.ConnectionError, requests.Timeout):
        return None
    finally:
        _last_sent_ms[workflow_id] = _now_ms()
    if answer.status_code >= 400:
        error = (answer.json().get("error") or {}) if answer.headers.get("content-type", "").startswith("application/json") else {}
        words = f"{error.get('code', answer.status_code)}: {error.get('message', answer.text[:200])}"
        if answer.status_code in NEEDS_A_DECISION:
            raise Refused(answer.status_code, words, key)
        answer.raise_for_status()  # 409 (exists, or the key in flight), 429, 5xx: looked up on the next run
    return answer


@DBOS.step(retries_allowed=True, max_attempts=STEP_ATTEMPTS_MAX, interval_seconds=STEP_RETRY_INTERVAL_S,
           backoff_rate=2.0, should_retry=_retry_unless_refused)  # fmt: skip
def workspace_step(external_id: str, name: str) -> dict[str, Any]:
    assert _url is not None, "careful_workspaces.configure(url, timeout_s, contract) was not called"
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    assert workflow_id is not None and step_id is not None, "the step runs inside a workflow"
    key = _keys[workflow_id] = f"{workflow_id}-{step_id}"
    found = find(external_id)
    if found is None:
        # "Not found" proves nothing while an earlier send may still land.
        wait_ms = _final_after_ms(workflow_id) - _now_ms()
        if wait_ms > 0:
            time.sleep(wait_ms / 1000.0)
            found = find(external_id)
    if found is not None:
        return _outcome(found, name, key, "found by lookup")
    answer = None
    for _ in range(SEND_ROUNDS_MAX):
        answer = _send(workflow_id, external_id, name, key)
        if answer is not None:
            break
        # No answer (a reset, a timeout): wait until nothing sent can still land, then look.
        time.sleep(max(_final_after_ms(workflow_id) - _now_ms(), 0) / 1000.0)
        found = find(external_id)
        if found is not None:
            return _outcome(found, name, key, "found by lookup")
    if answer is None:
        raise RuntimeError(f"no answer to {SEND_ROUNDS_MAX} sends, none of which landed")  # DBOS runs the step again
    workspace = answer.json()
    if _contract.get("acks", "reliable") == "may_lie":
        found = find(external_id)
        if found is None:
            return {"state": "not_landed", "external_id": workspace.get("id"), "key": key}
        return _outcome(found, name, key, "found by read-back")
    return _outcome(workspace, name, key, "answered")


@DBOS.workflow()
def workspace_workflow(external_id: str, name: str) -> dict[str, Any]:
    """Creates workspace `name` under `external_id`; the workflow's output is what it knows."""
    try:
        result: dict[str, Any] = {}
        for _ in range(HOLLOW_ROUNDS_MAX):
            result = workspace_step(external_id, name)
            if result["state"] != "not_landed":
                return result
        return {"state": "unknown", "key": result.get("key"), "last_error": "every success was hollow"}
    except Refused as e:
        return {"state": "escalated", "key": e.key, "decision": {"status": e.status, "error": e.error},
                "could_duplicate": False}  # fmt: skip
    except DBOSMaxStepRetriesExceeded as e:
        return {"state": "unknown", "key": _keys.get(DBOS.workflow_id or "", ""), "last_error": str(e)}


def reconcile(intent: dict[str, Any], ended_ms: int) -> Optional[dict[str, Any]]:
    """An intent the workflow left `unknown`: looked up by its external id; not found once
    nothing sent can still land, escalated (`could_duplicate: false`)."""
    params = intent["params"]
    found = find(params["external_id"])
    if found is not None:
        return _outcome(found, params["name"], intent.get("evidence", {}).get("key", ""), "confirmed by lookup")
    bound_ms = int(_contract.get("settle_ms_max", 30000)) + int(_contract.get("read_lag_ms_max", 0)) + int(_timeout_s * 1000) + 100
    if _now_ms() < ended_ms + bound_ms:
        return None
    return {"state": "escalated", "could_duplicate": False, "key": intent.get("evidence", {}).get("key") or intent["id"],
            "reason": "no workspace found once nothing sent could still land; the workflow is over, a person decides"}  # fmt: skip
