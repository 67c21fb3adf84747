"""DBOS as a `twice/1` executor: `python -m twice.engines.dbos --app myapp.refunds`.

Each worker process is a DBOS application process running the team's workflows
(`pip install twice-kit[dbos]`):

- `init` launches DBOS on a SQLite system database in the worker's `state_dir`
  (`dbos.sqlite`), with a fixed application version (`twice-<app>`) and `executor_id` = the
  `worker_id`: a worker that twice restarts after a SIGKILL (same `worker_id`) recovers its own
  PENDING workflows, which `DBOS.launch()` does in the background;
- a job is a workflow started with `SetWorkflowID(intent id)`: DBOS writes the workflow's row
  before `start_workflow` returns (durable before `propose_ok`), and starting the same id again
  runs nothing new;
- the record is `DBOS.list_workflows`: PENDING, ENQUEUED or DELAYED is `pending`, SUCCESS
  `succeeded` with the workflow's output, anything else `failed` with its error.

DBOS has no leases: a worker never takes over another worker's workflows (another `worker_id`
is another `executor_id`), so a `drain` that finds only another worker's workflows pending ends
with code 0, saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from twice.engines import App, Engine, Record, main
from twice.protocol import Init

PENDING = ("PENDING", "ENQUEUED", "DELAYED")


def _ms(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) else None


class DbosEngine(Engine):
    name = "dbos"

    def __init__(self) -> None:
        self.dbos: Any = None

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        from dbos import DBOS

        DBOS(
            config={
                "name": "twice-dbos",
                "system_database_url": f"sqlite:///{state_dir / 'dbos.sqlite'}",
                "run_admin_server": False,
                "log_level": "WARNING",
                "application_version": f"twice-{_app_version(app)}",
                "executor_id": init.worker_id,
            }
        )
        DBOS.launch()  # recovers this executor's PENDING workflows in the background
        self.dbos = DBOS

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        from dbos import SetWorkflowID

        with SetWorkflowID(intent_id):
            self.dbos.start_workflow(work, **params)

    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        if not ids:
            return {}
        out: dict[str, Record] = {}
        for s in self.dbos.list_workflows(workflow_ids=list(ids)):
            ended = _ms(s.completed_at) or _ms(s.updated_at)
            if s.status in PENDING:
                out[s.workflow_id] = Record("pending", engine_status=s.status, executor=s.executor_id)
            elif s.status == "SUCCESS":
                out[s.workflow_id] = Record("succeeded", output=s.output, ended_ms=ended, engine_status=s.status)
            else:
                out[s.workflow_id] = Record("failed", error=repr(s.error), ended_ms=ended, engine_status=s.status)
        return out

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        wanted = set(ids)
        rows = self.dbos.list_workflows(status=list(PENDING), load_input=False, load_output=False)
        rows = [r for r in rows if r.workflow_id in wanted]
        return sum(1 for r in rows if r.executor_id == worker_id), len(rows)


def _app_version(app: App) -> str:
    """The same for every life of a worker of this app (which is what lets a new life recover
    the workflows of the last), and different between apps."""
    names = sorted(f"{getattr(w, '__module__', '')}.{getattr(w, '__qualname__', '')}" for w in app.actions.values())
    return ",".join(names)[:120]


if __name__ == "__main__":
    # Run as `python -m`, this file is `__main__`; the app imports `twice.engines.dbos`, a
    # second copy of it. The engine comes from that one, so that its types are the app's.
    from twice.engines.dbos import DbosEngine as _Engine

    main(_Engine(), sys.argv[1:], description=__doc__ or "")
