"""The Celery apps' other four actions (create a workspace, put a file, transfer on a chain,
send a message), a task each, made on either app by `tasks(app, careful)`.

- **idiomatic**: the task calls the SDK as its docs show it (effects.naive: requests, boto3,
  web3.py, resend with their defaults), with the refund task's `autoretry_for`, widened to any
  exception (the usual way to "retry on failure"), `retry_backoff=True` and `max_retries=3`.
- **careful**: the key is the task id (the intent id; the adapter sends each task once), the
  same on every retry and every redelivery. effects.rounds looks the effect up first, believes
  "not there" only once nothing sent can still land, sends, reads back. A first delivery's
  first run follows nothing; a retry or a redelivery (`delivery_info["redelivered"]`: kombu gave
  back a message a dead or stopped worker held) may follow sends of another process that ended
  at the latest when this run began. What must be made once before the first send (a put's
  precondition, a transfer's signed bytes) is kept in Redis, the broker every worker shares,
  set only if absent: a redelivery to another worker sends the same signed bytes, never new
  ones. What cannot be told yet (`effects.Unsure`) is a `self.retry`, and `unknown` once the
  retries run out; the task's return value is its claim.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

# effects.py (examples/engines) and the example executor's services.py, which it builds on,
# where this folder does not hold copies of them.
_HERE = Path(__file__).resolve().parent
sys.path += [str(_HERE.parent), str(_HERE.parents[1] / "executors" / "python")]

import effects  # noqa: E402

#: Celery retries of a careful run that could not tell, and the first pause (doubled after each).
MAX_RETRIES = 5
RETRY_COUNTDOWN_S = 0.5
#: How long what was prepared stays in Redis (longer than any run of a scenario).
PREPARED_TTL_S = 24 * 3600


class RedisPrepared:
    """effects.prepare's store, in the app's broker: the first writer of a slot wins."""

    def __init__(self, broker_url: str) -> None:
        import redis

        self.redis = redis.Redis.from_url(broker_url)

    def recall(self, job_id: str, slot: Optional[str]) -> Optional[dict[str, Any]]:
        """What was kept for the job's `slot` (None: its latest slot)."""
        found = self.redis.get(f"twice-prepared:{job_id}:{'latest' if slot is None else slot}")
        return json.loads(found) if found is not None else None

    def keep(self, job_id: str, slot: Optional[str], evidence: dict[str, Any]) -> dict[str, Any]:
        name = f"twice-prepared:{job_id}:{slot}"
        self.redis.set(name, json.dumps(evidence), nx=True, ex=PREPARED_TTL_S)
        kept = self.redis.get(name)
        evidence = json.loads(kept) if kept is not None else evidence
        self.redis.set(f"twice-prepared:{job_id}:latest", json.dumps(evidence), ex=PREPARED_TTL_S)
        return evidence


def _careful(app: Any, action: str) -> Callable[..., dict[str, Any]]:
    def run(task: Any, **params: Any) -> dict[str, Any]:
        task_id = str(task.request.id)
        redelivered = bool((task.request.delivery_info or {}).get("redelivered"))
        first = task.request.retries == 0 and not redelivered
        store = RedisPrepared(str(app.conf.broker_url))
        try:
            return effects.rounds(action, params, task_id, task_id, store=store,
                                  quiet_since_ms=0 if first else effects.now_ms())  # fmt: skip
        except effects.Unsure as e:
            if task.request.retries < MAX_RETRIES:
                raise task.retry(exc=e, countdown=RETRY_COUNTDOWN_S * 2**task.request.retries)
            return {"state": "unknown", "key": task_id, "last_error": str(e)}

    return run


def _idiomatic(action: str) -> Callable[..., dict[str, Any]]:
    def run(task: Any, **params: Any) -> dict[str, Any]:
        return {**effects.naive(action, params), "runs": task.request.retries + 1}

    return run


def tasks(app: Any, careful: bool) -> dict[str, Any]:
    """The four tasks on `app`, by action."""
    if careful:
        options: dict[str, Any] = {"bind": True, "max_retries": MAX_RETRIES}
        make: Callable[[str], Callable[..., dict[str, Any]]] = lambda action: _careful(app, action)  # noqa: E731
    else:
        options = {"bind": True, "autoretry_for": (Exception,), "retry_backoff": True, "max_retries": 3}
        make = _idiomatic

    @app.task(name=f"{app.main}.create_workspace", **options)
    def create_workspace(self: Any, external_id: str, name: str) -> dict[str, Any]:
        return make("workspaces.create")(self, external_id=external_id, name=name)

    @app.task(name=f"{app.main}.put_file", **options)
    def put_file(self: Any, bucket: str, key: str, body: str) -> dict[str, Any]:
        return make("files.put")(self, bucket=bucket, key=key, body=body)

    @app.task(name=f"{app.main}.transfer", **options)
    def transfer(self: Any, to: str, value: str) -> dict[str, Any]:
        return make("chain.transfer")(self, to=to, value=value)

    @app.task(name=f"{app.main}.send_message", **options)
    def send_message(self: Any, to: str, subject: str, body: str) -> dict[str, Any]:
        return make("messages.send")(self, to=to, subject=subject, body=body)

    return {
        "workspaces.create": create_workspace,
        "files.put": put_file,
        "chain.transfer": transfer,
        "messages.send": send_message,
    }


def configure(init: Any) -> None:
    """The services' clients from `init` (before the worker forks its pool)."""
    effects.configure(init)

