"""The careful engine apps' steps for every action, whatever the engine: one run of a step
that creates a workspace, puts a file, transfers on a chain or sends a message, written so that
the engine may run it again after any error or crash without doing anything twice.

What each service's SDK answers, and what a lookup of it shows, is the example executor's
(`examples/executors/python/services.py`: one place that knows stripe-python, requests, boto3,
web3.py and resend). What the engine adds is where the step's state lives: its key (derived
from the engine's own record of the step, the same on every run of it), what must be made once
before the first send (a put's precondition, a transfer's signed bytes: returned by a step of
its own, so the engine records it), and its retries (a step that raises `Unsure` runs again).

One run of a step (`step`):

- looks the effect up first (the engine cannot tell whether an earlier run's request landed),
  and believes "not there" only once nothing sent can still land (the contract's settle and
  read-lag bounds plus the request timeout since this job's last send here, or since this
  process started for a job an earlier life sent), unless a resend cannot land twice (a key the
  service still keeps, a conditional put, the same signed transaction);
- sends under the step's key, and reads back a success that may be hollow;
- ends `escalated` on a refusal a person must act on (never sent again), `failed` on another
  definite refusal, `not_landed` when a success proved hollow (the engine runs a new round,
  with a new key), and raises `Unsure` for anything it cannot tell yet.

`naive` is the idiomatic apps' call: each SDK as its docs show it, defaults kept.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import services
from actions import SERVICE_OF
from services import (ABSENT, AMBIGUOUS, CONFLICT, DEFAULT_CONTRACT, DONE, FAILED, FOUND, NEEDS_DECISION, NOT_EXECUTED,
                      REJECTED, SUPERSEDED)

#: Added to every bound: the time between a stamp and the socket.
MARGIN_MS = 100
#: Sends per run of a step, each once the last one's absence became certain.
SEND_ROUNDS_MAX = 3

_services: dict[str, services.Service] = {}
_timeout_ms = 2000
_prepared_path: Optional[Path] = None
#: When this process started: any send of a job recovered from an earlier life left before.
_PROCESS_START_MS = int(time.time() * 1000)
#: Per job: the last send, and the sends, in this process; per key: its first send.
_last_sent_ms: dict[str, int] = {}
_sends: dict[str, int] = {}
_key_first_sent_ms: dict[str, int] = {}
#: Nonces this process signed with, per sender (a node that lags cannot make us reuse one).
_nonces: dict[str, set[int]] = {}
#: Jobs this process started itself (the others it recovered after a crash).
started_here: set[str] = set()
#: Per job, when the engine says every earlier run of the step was over (a Temporal attempt's
#: scheduled time): then nothing sent elsewhere can land later than the settle bound after it.
_quiet_since_ms: dict[str, int] = {}


class Unsure(Exception):
    """The step cannot tell yet whether its effect exists: the engine runs it again."""


@dataclass
class _Intent:
    """What services.py reads of an intent: its id (the lookups' marker), key and evidence."""

    id: str
    key: Optional[str]
    evidence: dict[str, Any] = field(default_factory=dict)


class _NonceBook:
    """services.Chain.prepare's view of the nonces already signed with."""

    def claimed_nonces(self, account: str) -> set[int]:
        return _nonces.get(account, set())


def now_ms() -> int:
    return int(time.time() * 1000)


def configure(init: Any) -> None:
    """Makes a client per service `init` names, with its contract (defaults filled in), the
    secrets and the request timeout; each SDK imported now, before anything is timed."""
    global _timeout_ms, _prepared_path
    _timeout_ms = int(init.limits.get("request_timeout_ms", 2000))
    _prepared_path = Path(init.state_dir) / "prepared.jsonl" if init.state_dir else None
    for name, cls in services.SERVICES.items():
        url = init.url(name)
        if url is None:
            continue
        contract = {**DEFAULT_CONTRACT, **init.contract(name)}
        _services[name] = cls(url, contract, dict(init.secrets), _timeout_ms)
        _services[name].warm()


def _service(action: str) -> services.Service:
    name = SERVICE_OF[action]
    if name not in _services:
        raise RuntimeError(f"{action}: init named no {name} service")
    return _services[name]


# ---- what is made once, before the first send ----------------------------------------------


def prepare(action: str, params: dict[str, Any], job_id: str, slot: Optional[str] = None,
            store: Optional[Any] = None) -> dict[str, Any]:  # fmt: skip
    """What every send of the job must carry (a put's precondition, a transfer's signed bytes),
    read and made now; {} where nothing is. Raises `Unsure` when what it must read cannot be
    read (nothing was sent). It is kept (`store`, by default a file in the worker's state dir)
    before it is returned.

    An engine that records a step's output before the next step (DBOS, Temporal) calls it
    without `slot`, in a step of its own. One that does not (a LangGraph tool, a Celery task)
    names a `slot` (the round): a later run of the same slot, after a crash, gets what was made
    the first time back, never new signed bytes. A `store` shared by every worker (Celery's
    Redis) keeps what the first writer of a slot made, for a job another worker may run again."""
    kept = store or _FILE_STORE
    if slot is not None:
        made = kept.recall(job_id, slot)
        if made is not None:
            return dict(made)
    svc = _service(action)
    intent = _Intent(job_id, None)
    if not svc.needs_preparation(intent):
        return {}
    try:
        evidence = svc.prepare(intent, params, _NonceBook())
    except services.NotPrepared as e:
        raise Unsure(str(e)) from None
    evidence = kept.keep(job_id, slot, evidence)
    if "nonce" in evidence:
        _nonces.setdefault(evidence["from"], set()).add(int(evidence["nonce"]))
    return dict(evidence)


class FilePrepared:
    """What was prepared, appended to a file of the worker's state dir (fsynced before the
    first send). A worker restarted with the same state dir finds it again."""

    def keep(self, job_id: str, slot: Optional[str], evidence: dict[str, Any]) -> dict[str, Any]:
        if _prepared_path is not None:
            line = json.dumps({"job": job_id, "slot": slot, "evidence": evidence}) + "\n"
            fd = os.open(_prepared_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return evidence

    def recall(self, job_id: str, slot: Optional[str]) -> Optional[dict[str, Any]]:
        """What was prepared for the job's `slot` (None: its latest), or None."""
        if _prepared_path is None or not _prepared_path.exists():
            return None
        found = None
        for line in _prepared_path.read_text().splitlines():
            entry = json.loads(line) if line.strip() else {}
            if entry.get("job") == job_id and (slot is None or entry.get("slot") == slot):
                found = entry["evidence"]
        return found


_FILE_STORE = FilePrepared()


# ---- one run of a step --------------------------------------------------------------------


def _settled_at_ms(job_id: str, svc: services.Service) -> int:
    """When nothing this job sent can land any more, and no read can lag behind it."""
    floor = _quiet_since_ms.get(job_id, 0 if job_id in started_here else _PROCESS_START_MS)
    last = max(_last_sent_ms.get(job_id, 0), floor)
    contract = svc.contract
    return last + int(contract["settle_ms_max"]) + int(contract["read_lag_ms_max"]) + _timeout_ms + MARGIN_MS


def _resend_is_safe(svc: services.Service, key: str) -> bool:
    """A resend lands at most once: the same signed bytes or a conditional put, or a key the
    service honours, keeps past the resend's arrival, and never holds a hollow success."""
    if svc.resend_is_guarded():
        return True
    contract = svc.contract
    first = _key_first_sent_ms.get(key)
    return (
        first is not None
        and contract["idempotency_keys"] == "honored"
        and not svc.success_may_be_hollow()
        and now_ms() + _timeout_ms + MARGIN_MS < first + int(contract["key_retention_ms"])
    )


def _look(svc: services.Service, intent: _Intent, params: dict[str, Any]) -> services.Lookup:
    found = svc.lookup(intent, params)
    if found.kind == FAILED:
        raise Unsure(f"the lookup cannot tell yet: {found.detail}")
    return found


def _look_once_settled(svc: services.Service, intent: _Intent, params: dict[str, Any]) -> services.Lookup:
    """A lookup whose "not there" is final: made again, once, after the settle bound."""
    found = _look(svc, intent, params)
    if found.kind == FOUND:
        return found
    wait_ms = _settled_at_ms(intent.id, svc) - now_ms()
    if wait_ms > 0:
        time.sleep(wait_ms / 1000.0)
        found = _look(svc, intent, params)
    return found


def _found(found: services.Lookup, key: str, how: str) -> dict[str, Any]:
    if found.params_match:
        return {"state": "confirmed", "external_id": found.external_id, "key": key, "reason": how}
    return {"state": "escalated", "external_id": found.external_id, "key": key, "could_duplicate": True,
            "reason": "an effect exists with parameters other than the authorised ones"}  # fmt: skip


def _gone(intent: _Intent, found: services.Lookup) -> dict[str, Any]:
    """Ours can no longer land: another version took the object's place (failed), or another
    transaction used our transfer's nonce (a new round signs it anew: these bytes never land)."""
    if "raw_tx" in intent.evidence:
        return {"state": "not_landed", "key": intent.key, "reason": f"signed anew: {found.detail}"}
    return {"state": "failed", "key": intent.key, "reason": f"it can no longer take effect: {found.detail}"}


def _release_nonce(intent: _Intent, claim: dict[str, Any]) -> dict[str, Any]:
    """A transfer that ended without landing gives its nonce back to this process's next one
    (else the next would leave a gap no block ever fills)."""
    evidence = intent.evidence
    if "nonce" in evidence and claim["state"] in ("failed", "escalated") and not claim.get("could_duplicate"):
        _nonces.get(evidence["from"], set()).discard(int(evidence["nonce"]))
    return claim


def _send(svc: services.Service, intent: _Intent, params: dict[str, Any]) -> services.Outcome:
    job_id = intent.id
    _sends[job_id] = _sends.get(job_id, 0) + 1
    _last_sent_ms[job_id] = now_ms()
    if intent.key is not None:
        _key_first_sent_ms.setdefault(intent.key, now_ms())
    try:
        # The engines here have no leases; the time a run sends is a token that only grows, so
        # that a run paused and resumed after a later one cannot overwrite what it wrote.
        return svc.write(intent, params, fencing_token=time.time_ns())
    finally:
        _last_sent_ms[job_id] = now_ms()  # the send may land up to the settle bound after its end


def step(action: str, params: dict[str, Any], job_id: str, key: str, prepared: Optional[dict[str, Any]] = None,
         quiet_since_ms: Optional[int] = None) -> dict[str, Any]:  # fmt: skip
    """One run of the job's step under `key` (the same on every run of this step): a claim
    (`confirmed`, `escalated`, `failed`) or `not_landed` (a hollow success: run a new round,
    with a new key and, for a transfer, new signed bytes), or raises `Unsure`.

    `quiet_since_ms`: when the engine knows every earlier run of the job was over (runs may be
    in other processes: a Temporal activity's attempts); without it, a job this process did not
    start may have sent up to the moment this process started."""
    if quiet_since_ms is not None:
        _quiet_since_ms[job_id] = quiet_since_ms
    svc = _service(action)
    intent = _Intent(job_id, key, dict(prepared or {}))
    return _release_nonce(intent, _step(svc, intent, params))


def _step(svc: services.Service, intent: _Intent, params: dict[str, Any]) -> dict[str, Any]:
    job_id, key = intent.id, intent.key or ""
    found = _look(svc, intent, params)
    if found.kind == ABSENT and not _resend_is_safe(svc, key):
        found = _look_once_settled(svc, intent, params)
    if found.kind == FOUND:
        return _found(found, key, "found by lookup")
    if found.kind == SUPERSEDED:
        return _gone(intent, found) if now_ms() >= _settled_at_ms(job_id, svc) else _raise(found.detail)
    for _ in range(SEND_ROUNDS_MAX):
        earlier = _sends.get(job_id, 0) > 0 or job_id not in started_here
        outcome = _send(svc, intent, params)
        claim = _answer(svc, intent, params, outcome, earlier)
        if claim is not None:
            return claim
    raise Unsure(f"no answer to {SEND_ROUNDS_MAX} sends, none of which landed")


def _raise(detail: str) -> dict[str, Any]:
    raise Unsure(detail)


def _answer(svc: services.Service, intent: _Intent, params: dict[str, Any], outcome: services.Outcome,
            earlier: bool) -> Optional[dict[str, Any]]:  # fmt: skip
    """What a send's answer means: a claim, or None to send again (nothing landed, for sure)."""
    key = intent.key or ""
    kind = outcome.kind
    if kind == DONE and not svc.reads_back_success():
        return {"state": "confirmed", "external_id": outcome.external_id, "key": key}
    if kind == NOT_EXECUTED:
        raise Unsure(outcome.error)
    if kind in (NEEDS_DECISION, REJECTED) and not earlier:
        return _refused(outcome, key, could_duplicate=False)
    # A success to read back, a refusal an earlier send may explain, or no answer at all.
    found = _look_once_settled(svc, intent, params)
    if found.kind == FOUND:
        return _found(found, key, "found by read-back")
    if kind in (NEEDS_DECISION, REJECTED):
        return _refused(outcome, key, could_duplicate=False)
    if found.kind == SUPERSEDED:
        return _gone(intent, found)
    if svc.resend_is_guarded():
        return None  # the same signed bytes, or the same precondition, land at most once
    if kind == DONE or svc.success_may_be_hollow():
        # A hollow success: the key may hold it, so the next round sends under a new one.
        return {"state": "not_landed", "key": key, "reason": outcome.error or "a success the read-back did not show"}
    return None  # absent for good: the same key again


def rounds(action: str, params: dict[str, Any], job_id: str, key: str, rounds_max: int = 3,
           store: Optional[Any] = None, quiet_since_ms: Optional[int] = None) -> dict[str, Any]:  # fmt: skip
    """The whole careful job for an engine that keeps no step's output before the next: rounds
    of (prepare, step) until the step knows, round r under key `{key}` (`{key}:r` after the
    first); a hollow success starts the next round. Raises `Unsure` for the engine to retry;
    a job run again after a crash starts at round 0, whose lookup finds any round's effect."""
    claim: dict[str, Any] = {}
    for round_ in range(rounds_max):
        slot = key if round_ == 0 else f"{key}:{round_}"
        claim = step(action, params, job_id, slot, prepare(action, params, job_id, slot=slot, store=store), quiet_since_ms)
        if claim["state"] != "not_landed":
            return claim
    return {"state": "unknown", "key": claim.get("key"), "last_error": "every success was hollow"}


def _refused(outcome: services.Outcome, key: str, could_duplicate: bool) -> dict[str, Any]:
    if outcome.kind == NEEDS_DECISION:
        return {"state": "escalated", "key": key, "could_duplicate": could_duplicate,
                "decision": {"status": outcome.status, "error": outcome.words}}  # fmt: skip
    return {"state": "failed", "key": key, "reason": f"refused: {outcome.error}"}


def reconcile(intent: dict[str, Any], ended_ms: int, store: Optional[Any] = None) -> Optional[dict[str, Any]]:
    """An intent its job left `unknown`: looked up; not found once nothing sent can still land,
    escalated (`could_duplicate: false`); None while that cannot be told."""
    svc = _service(intent["action"])
    evidence = {**((store or _FILE_STORE).recall(intent["id"], None) or {}), **(intent.get("evidence") or {})}
    found = svc.lookup(_Intent(intent["id"], evidence.get("key"), evidence), intent["params"])
    if found.kind == FOUND:
        return _found(found, evidence.get("key", ""), "confirmed by lookup")
    contract = svc.contract
    bound_ms = int(contract["settle_ms_max"]) + int(contract["read_lag_ms_max"]) + _timeout_ms + MARGIN_MS
    if found.kind == FAILED or now_ms() < ended_ms + bound_ms:
        return None
    return {"state": "escalated", "could_duplicate": False, "key": evidence.get("key") or intent["id"],
            "reason": "not found once nothing sent could still land; the job is over, a person decides"}  # fmt: skip


# ---- the idiomatic apps' call -------------------------------------------------------------


def naive(action: str, params: dict[str, Any]) -> dict[str, Any]:
    """The action as each SDK's docs show it, defaults kept (their own retries, their own keys
    or none), the request timeout the one setting changed: what the idiomatic apps' steps call.
    Raises whatever the SDK raises; returns the effect's id."""
    svc = _service(action)
    return {"id": _NAIVE[action](svc, params)}


def _naive_refund(svc: services.Service, params: dict[str, Any]) -> str:
    import stripe

    client = stripe.StripeClient("sk_test_twice", base_addresses={"api": svc.url},
                                 http_client=stripe.RequestsClient(timeout=svc.timeout_s))  # fmt: skip
    return str(client.v1.refunds.create(params={"payment_intent": params["payment_intent"], "amount": params["amount"]}).id)


def _naive_workspace(svc: services.Service, params: dict[str, Any]) -> str:
    import requests

    answer = requests.post(f"{svc.url}/v1/workspaces", json=params, timeout=svc.timeout_s)
    answer.raise_for_status()
    return str(answer.json()["id"])


def _naive_put(svc: services.Service, params: dict[str, Any]) -> str:
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=svc.url, aws_access_key_id="twice", aws_secret_access_key="twice",
                      region_name="us-east-1", config=Config(s3={"addressing_style": "path"},
                      read_timeout=svc.timeout_s))  # fmt: skip
    answer = s3.put_object(Bucket=params["bucket"], Key=params["key"], Body=params["body"].encode("utf-8"))
    return str(answer["ETag"])


def _naive_transfer(svc: services.Service, params: dict[str, Any]) -> str:
    from eth_account import Account
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(svc.url, request_kwargs={"timeout": svc.timeout_s}))
    account = Account.from_key(svc.secrets["chain_private_key"])
    signed = account.sign_transaction({
        "type": 2, "chainId": w3.eth.chain_id, "to": Web3.to_checksum_address(params["to"]),
        "value": int(params["value"]), "gas": services.TRANSFER_GAS,
        "nonce": w3.eth.get_transaction_count(account.address, "pending"),
        "maxFeePerGas": 2 * w3.eth.gas_price + w3.eth.max_priority_fee, "maxPriorityFeePerGas": w3.eth.max_priority_fee,
    })  # fmt: skip
    return "0x" + bytes(w3.eth.send_raw_transaction(signed.raw_transaction)).hex()


def _naive_message(svc: services.Service, params: dict[str, Any]) -> str:
    import resend
    import resend.http_client_requests

    resend.api_key = svc.secrets.get("messages_api_key", "re_test_twice")
    resend.api_url = svc.url
    resend.default_http_client = resend.http_client_requests.RequestsClient(timeout=svc.timeout_s)
    email = {"from": services.SENDER, "to": params["to"], "subject": params["subject"], "text": params["body"]}
    return str(resend.Emails.send(email)["id"])


_NAIVE = {
    "payments.refund": _naive_refund,
    "workspaces.create": _naive_workspace,
    "files.put": _naive_put,
    "chain.transfer": _naive_transfer,
    "messages.send": _naive_message,
}
