"""The Temporal apps' other four actions (create a workspace, put a file, transfer on a chain,
send a message), one workflow each way, in the shape of the refund workflows beside them.

- **idiomatic** (`IdiomaticEffectWorkflow`): one synchronous activity that calls the SDK as its
  docs show it (effects.naive: requests, boto3, web3.py, resend with their defaults), run with
  `start_to_close_timeout` and the idiomatic refund's `RetryPolicy`: Temporal retries whatever
  raised or timed out, and "activities should be idempotent" is left to the activity.
- **careful** (`CarefulEffectWorkflow`): rounds of two activities. `prepare_effect` makes what
  every send must carry (a put's precondition, a transfer's signed bytes) and returns it, so it
  is in the workflow's history before anything is sent, and a retry or a replay sends exactly
  that. `do_effect` is one run of the careful step (effects.step) under the key
  `{workflow_id}-{activity_id}`, the same on every attempt in any worker: it looks the effect up
  first, believes "not there" only once nothing sent can still land, sends, reads back; what it
  cannot tell yet is a retryable `ApplicationError` (Temporal runs the attempt again), and it
  heartbeats meanwhile, so that a killed worker is noticed in seconds. A hollow success starts
  a new round (a new activity id: a new key); Temporal giving up is `unknown`, never `failed`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    # On the import path that temporal_twice.py sets up (the sandbox must not resolve paths).
    import effects

#: As the idiomatic refund's: the docs' shape, timeouts short so that a test takes seconds.
IDIOMATIC_START_TO_CLOSE = timedelta(seconds=2)
IDIOMATIC_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=4),
    maximum_attempts=5,
)  # fmt: skip
#: The careful step may wait out a settle bound inside one attempt; heartbeats notice a dead worker.
CAREFUL_START_TO_CLOSE = timedelta(seconds=60)
HEARTBEAT_TIMEOUT = timedelta(seconds=2)
HEARTBEAT_EVERY_S = 0.3
CAREFUL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=2),
    maximum_attempts=6,
)  # fmt: skip
#: Rounds of (prepare, step) per workflow: each after a success the read-back did not show.
ROUNDS_MAX = 3


@dataclass
class EffectRequest:
    action: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class EffectStep:
    request: EffectRequest
    prepared: dict[str, Any] = field(default_factory=dict)


def workspace_request(external_id: str, name: str) -> EffectRequest:
    return EffectRequest("workspaces.create", {"external_id": external_id, "name": name})


def file_request(bucket: str, key: str, body: str) -> EffectRequest:
    return EffectRequest("files.put", {"bucket": bucket, "key": key, "body": body})


def transfer_request(to: str, value: str) -> EffectRequest:
    return EffectRequest("chain.transfer", {"to": to, "value": value})


def message_request(to: str, subject: str, body: str) -> EffectRequest:
    return EffectRequest("messages.send", {"to": to, "subject": subject, "body": body})


#: Each action's workflow input (its signature is the action's params).
REQUESTS = {
    "workspaces.create": workspace_request,
    "files.put": file_request,
    "chain.transfer": transfer_request,
    "messages.send": message_request,
}


# ---- idiomatic --------------------------------------------------------------------------------


@activity.defn
def naive_effect(req: EffectRequest) -> dict[str, Any]:
    return effects.naive(req.action, req.params)


@workflow.defn
class IdiomaticEffectWorkflow:
    @workflow.run
    async def run(self, req: EffectRequest) -> dict[str, Any]:
        return await workflow.execute_activity(
            naive_effect, req, start_to_close_timeout=IDIOMATIC_START_TO_CLOSE, retry_policy=IDIOMATIC_RETRY_POLICY
        )


# ---- careful ----------------------------------------------------------------------------------


async def _beating(work: Any, *args: Any) -> Any:
    """`work(*args)` on a thread, heartbeating until it returns."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)

    beats = asyncio.create_task(beat())
    try:
        return await asyncio.to_thread(work, *args)
    except effects.Unsure as e:
        raise ApplicationError(str(e), type="Unsure") from None
    finally:
        beats.cancel()


@activity.defn
async def prepare_effect(req: EffectRequest) -> dict[str, Any]:
    info = activity.info()
    result: dict[str, Any] = await _beating(effects.prepare, req.action, req.params, info.workflow_id)
    return result


@activity.defn
async def do_effect(step: EffectStep) -> dict[str, Any]:
    info = activity.info()
    key = f"{info.workflow_id}-{info.activity_id}"
    req = step.request
    # Earlier attempts (in any worker) were over when this one was scheduled; the first attempt
    # of a round follows rounds whose sends had settled.
    quiet_since_ms = int(info.current_attempt_scheduled_time.timestamp() * 1000) if info.attempt > 1 else 0
    result: dict[str, Any] = await _beating(effects.step, req.action, req.params, info.workflow_id, key, step.prepared,
                                            quiet_since_ms)  # fmt: skip
    return result


@workflow.defn
class CarefulEffectWorkflow:
    @workflow.run
    async def run(self, req: EffectRequest) -> dict[str, Any]:
        options: dict[str, Any] = {"start_to_close_timeout": CAREFUL_START_TO_CLOSE, "heartbeat_timeout": HEARTBEAT_TIMEOUT,
                                   "retry_policy": CAREFUL_RETRY_POLICY}  # fmt: skip
        claim: dict[str, Any] = {}
        try:
            for _ in range(ROUNDS_MAX):
                prepared = await workflow.execute_activity(prepare_effect, req, **options)
                claim = await workflow.execute_activity(do_effect, EffectStep(req, prepared), **options)
                if claim.get("state") != "not_landed":
                    return claim
        except ActivityError as e:
            # Temporal gave up, but a send may have landed: not knowing is the honest answer.
            return {"state": "unknown", "last_error": f"{type(e.cause).__name__}: {e.cause}"}
        return {"state": "unknown", "key": claim.get("key"), "last_error": "every success was hollow"}


IDIOMATIC_ACTIVITIES = [naive_effect]
CAREFUL_ACTIVITIES = [prepare_effect, do_effect]
