"""Celery as a `twice/1` executor: `python -m twice.engines.celery --app myapp.tasks`.

Each twice worker is a real `celery worker` (prefork, one pool process, as `celery -A app
worker -c 1` runs it) with the team's tasks, beside the adapter process that talks to twice;
both are in one process group, so twice's SIGKILL and SIGSTOP reach the Celery worker and its
pool (`pip install twice-kit[celery]`).

- The broker and result backend is a Redis of the case (`twice.engines.servers`): started by
  the first worker, shared by every worker of the case, outliving their kills, stopped when the
  last is gone. The adapter points the app's `broker_url` and `result_backend` at it (in both
  processes) after `App.configure`, before anything connects.
- A job is a task sent with `apply_async(task_id=intent id, kwargs=params)`. Celery has no
  idempotent send: a second `apply_async` of one id is a second message. So the adapter notes
  each send (`celery-sent.sqlite`) and never sends an id twice; a worker killed between the
  send and the note sends it again on restart, and the task runs twice, as it would in any
  Celery deployment: an app's task keys its effects by `self.request.id`.
- The record is the result backend (`AsyncResult(id).state`): SUCCESS is `succeeded` with the
  task's return value, FAILURE and REVOKED `failed`, anything else `pending`. A queued task
  belongs to no worker in Celery, so every pending task is every worker's to wait for.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from twice.engines import App, Engine, Record, load_app, main
from twice.engines.servers import shared_redis
from twice.protocol import Init, parse_init

#: Where the adapter tells its Celery worker process about `init` (a JSON file's path).
INIT_VARIABLE = "TWICE_ENGINE_INIT"
FINISHED_FAILED = ("FAILURE", "REVOKED")


def celery_app_of(app: App) -> Any:
    """The one Celery app the actions' tasks belong to."""
    apps = {id(getattr(t, "app", None)): getattr(t, "app", None) for t in app.actions.values()}
    if len(apps) != 1 or None in apps.values():
        raise TypeError("every action of a Celery App must be a task of one Celery app (@app.task)")
    return next(iter(apps.values()))


def point_at(celery_app: Any, url: str) -> None:
    celery_app.conf.update(broker_url=url, result_backend=url)


class CeleryEngine(Engine):
    name = "celery"

    def __init__(self) -> None:
        self.celery: Any = None
        self.worker: Optional[subprocess.Popen[bytes]] = None
        self.sent: Optional[sqlite3.Connection] = None

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        self.celery = celery_app_of(app)
        broker = shared_redis(state_dir)
        point_at(self.celery, broker)
        self.sent = sqlite3.connect(state_dir / "celery-sent.sqlite", check_same_thread=False, timeout=30, isolation_level=None)
        self.sent.execute("PRAGMA journal_mode=WAL")
        self.sent.execute("CREATE TABLE IF NOT EXISTS sent (task_id TEXT PRIMARY KEY)")
        init_path = state_dir / f"init-{init.worker_id}.json"
        init_path.write_text(json.dumps({**init.request, "twice_broker_url": broker}))
        # The Celery worker: this interpreter, this app, in this process group (no new
        # session), so that twice's signals to the worker reach it and its pool too.
        command = [sys.executable, "-m", "twice.engines.celery", "--celery-worker", *sys.argv[1:]]
        self.worker = subprocess.Popen(command, env={**os.environ, INIT_VARIABLE: str(init_path)}, stdin=subprocess.DEVNULL)

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        assert self.sent is not None
        if self.sent.execute("SELECT 1 FROM sent WHERE task_id = ?", (intent_id,)).fetchone():
            return  # sent before: a second send would be a second message
        getattr(work, "apply_async")(kwargs=params, task_id=intent_id)
        self.sent.execute("INSERT OR IGNORE INTO sent (task_id) VALUES (?)", (intent_id,))

    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        assert self.sent is not None
        out: dict[str, Record] = {}
        for intent_id in ids:
            if not self.sent.execute("SELECT 1 FROM sent WHERE task_id = ?", (intent_id,)).fetchone():
                continue
            result = self.celery.AsyncResult(intent_id)
            state = str(result.state)
            if state == "SUCCESS":
                out[intent_id] = Record("succeeded", output=result.result, ended_ms=_ended_ms(result), engine_status=state)
            elif state in FINISHED_FAILED:
                out[intent_id] = Record("failed", error=repr(result.result)[:300], ended_ms=_ended_ms(result), engine_status=state)
            else:
                out[intent_id] = Record("pending", engine_status=state)
        return out

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        if self.worker is not None and self.worker.poll() is not None:
            raise RuntimeError(f"the Celery worker process exited with {self.worker.returncode}; its output is on stderr")
        pending = sum(1 for r in self.records(ids).values() if r.status == "pending")
        return pending, pending

    def close(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGKILL)


def _ended_ms(result: Any) -> Optional[int]:
    done = getattr(result, "date_done", None)
    return int(done.timestamp() * 1000) if done is not None else None


def celery_worker(argv: list[str]) -> int:
    """The Celery worker process of an adapter: the app configured as in the adapter, then
    `celery worker` with one prefork pool process."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--app", required=True)
    parser.add_argument("--path", action="append", default=[])
    args = parser.parse_args(argv)
    for path in reversed(args.path):
        sys.path.insert(0, str(Path(path).resolve()))
    app, _ = load_app(args.app)
    request = json.loads(Path(os.environ[INIT_VARIABLE]).read_text())
    broker = request.pop("twice_broker_url")
    init = parse_init(request)
    if app.configure is not None:
        app.configure(init)
    celery = celery_app_of(app)
    point_at(celery, broker)
    celery.worker_main([
        "worker", "-P", "prefork", "-c", "1", "-n", f"{init.worker_id}@twice-{os.getpid()}", "--loglevel=WARNING",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])  # fmt: skip
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--celery-worker"]:
        sys.exit(celery_worker(sys.argv[2:]))
    from twice.engines.celery import CeleryEngine as _Engine

    main(_Engine(), sys.argv[1:], description=__doc__ or "")
