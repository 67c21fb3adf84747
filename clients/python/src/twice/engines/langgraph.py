"""LangGraph as a `twice/1` executor: `python -m twice.engines.langgraph --app myapp.agent`.

Each worker process runs the team's compiled graphs on a `SqliteSaver` checkpointer in its
`state_dir` (`checkpoints.sqlite`; `pip install twice-kit[langgraph]`). An action names a
`Graph`, which says how to build the graph on the adapter's checkpointer and what input an
intent's params make::

    from twice.engines import App
    from twice.engines.langgraph import Graph

    twice_app = App(actions={"payments.refund": Graph(
        build=lambda checkpointer: builder.compile(checkpointer=checkpointer),
        input=lambda payment_intent, amount: {"messages": [HumanMessage(f"Refund {amount} of {payment_intent}")]},
        durability="sync",
    )}, read_output=claim_of_state)

- A job is one thread, whose id is the intent id, run in a thread of the worker
  (`graph.invoke(input, {"configurable": {"thread_id": intent_id, ...}})`).
- The record is the checkpointer's: a thread whose latest checkpoint has no next node is
  `succeeded`, with the graph's final state (`snapshot.values`) as its output for
  `App.read_output`; one whose run raised (the error LangGraph keeps on the pending task, or
  the exception in this process) is `failed`; any other is `pending`.
- LangGraph does not resume anything by itself. A worker restarted after a SIGKILL (same
  `worker_id`) resumes the unfinished threads it started (`invoke(None, config)`, the docs'
  way to continue after a failure); who started a thread is the adapter's own note
  (`langgraph-owners.sqlite`), so a second worker on the same state never takes over the
  first's threads, which LangGraph could not stop it from doing.
"""

from __future__ import annotations

import inspect
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from twice.engines import App, Engine, Record, main
from twice.protocol import Init


@dataclass
class Graph:
    """An action done by a LangGraph graph.

    - `build(checkpointer)`: the compiled graph (or `@entrypoint` workflow) on the adapter's
      checkpointer; called once per worker.
    - `input(**params)`: the graph's input for an intent; its signature is the action's params.
    - `configurable(**params)`: more of the run's `configurable` besides `thread_id` (optional).
    - `durability`: LangGraph's `durability` for every run (`"sync"`, `"async"`, `"exit"`);
      None: LangGraph's default.
    """

    build: Callable[[Any], Any]
    input: Callable[..., Any]
    configurable: Optional[Callable[..., dict[str, Any]]] = None
    durability: Optional[str] = None

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.input)


class LangGraphEngine(Engine):
    name = "langgraph"

    def __init__(self) -> None:
        self.saver: Any = None
        self.compiled: dict[int, Any] = {}
        self.running: dict[str, threading.Thread] = {}
        self.errors: dict[str, str] = {}
        self.ended_ms: dict[str, int] = {}
        self.owners: Optional[sqlite3.Connection] = None
        self.worker_id = ""
        self.lock = threading.Lock()

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.worker_id = init.worker_id
        conn = sqlite3.connect(state_dir / "checkpoints.sqlite", check_same_thread=False, timeout=30)
        self.saver = SqliteSaver(conn)
        self.owners = sqlite3.connect(state_dir / "langgraph-owners.sqlite", check_same_thread=False, timeout=30,
                                      isolation_level=None)  # fmt: skip
        self.owners.execute("PRAGMA journal_mode=WAL")
        self.owners.execute("CREATE TABLE IF NOT EXISTS owners (thread_id TEXT PRIMARY KEY, worker_id TEXT NOT NULL)")
        for work in app.actions.values():
            if not isinstance(work, Graph):
                raise TypeError(f"a LangGraph action is a twice.engines.langgraph.Graph, not {type(work).__name__}")
            self.compiled[id(work)] = work.build(self.saver)

    # ---- runs -------------------------------------------------------------------------
    def config(self, intent_id: str, work: Graph, params: dict[str, Any]) -> dict[str, Any]:
        extra = work.configurable(**params) if work.configurable is not None else {}
        return {"configurable": {**extra, "thread_id": intent_id}}

    def run(self, intent_id: str, work: Graph, params: dict[str, Any], resume: bool) -> None:
        graph = self.compiled[id(work)]
        kwargs = {"durability": work.durability} if work.durability else {}
        try:
            graph.invoke(None if resume else work.input(**params), self.config(intent_id, work, params), **kwargs)
        except BaseException as e:  # noqa: BLE001 - the run failed; LangGraph's record says so too
            self.errors[intent_id] = f"{type(e).__name__}: {e}"
        finally:
            self.ended_ms[intent_id] = int(time.time() * 1000)
            with self.lock:
                self.running.pop(intent_id, None)

    def spawn(self, intent_id: str, work: Graph, params: dict[str, Any], resume: bool) -> None:
        with self.lock:
            if intent_id in self.running:
                return
            thread = threading.Thread(target=self.run, args=(intent_id, work, params, resume), daemon=True,
                                      name=f"langgraph-{intent_id}")  # fmt: skip
            self.running[intent_id] = thread
        thread.start()

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        assert isinstance(work, Graph) and self.owners is not None
        self.owners.execute("INSERT OR IGNORE INTO owners (thread_id, worker_id) VALUES (?, ?)", (intent_id, self.worker_id))
        snapshot = self.compiled[id(work)].get_state(self.config(intent_id, work, params))
        if snapshot.created_at:
            return  # started before: a second start runs nothing new
        self.spawn(intent_id, work, params, resume=False)

    def recover(self, jobs: Sequence[tuple[str, Callable[..., Any], dict[str, Any]]]) -> None:
        assert self.owners is not None
        mine = {row[0] for row in self.owners.execute("SELECT thread_id FROM owners WHERE worker_id = ?", (self.worker_id,))}
        for intent_id, work, params in jobs:
            if intent_id not in mine or not isinstance(work, Graph):
                continue
            snapshot = self.compiled[id(work)].get_state(self.config(intent_id, work, params))
            if snapshot.created_at and _unfinished(snapshot) and not _task_errors(snapshot):
                self.spawn(intent_id, work, params, resume=True)

    # ---- the record -------------------------------------------------------------------
    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        graphs = list(self.compiled.values())
        for intent_id in ids:
            record = self.record_of(intent_id, graphs)
            if record is not None:
                out[intent_id] = record
        return out

    def record_of(self, intent_id: str, graphs: list[Any]) -> Optional[Record]:
        running = intent_id in self.running
        snapshot = None
        for graph in graphs:
            found = graph.get_state({"configurable": {"thread_id": intent_id}})
            if found.created_at:
                snapshot = found
                break
        if snapshot is None:
            return Record("pending", engine_status="starting") if running else None
        if running:
            return Record("pending", engine_status=f"running at {list(snapshot.next)}")
        errors = _task_errors(snapshot)
        if intent_id in self.errors or errors:
            error = self.errors.get(intent_id) or errors[-1]
            return Record("failed", error=error, ended_ms=self.ended_ms.get(intent_id), engine_status=f"error at {list(snapshot.next)}")
        if _unfinished(snapshot):
            return Record("pending", engine_status=f"unfinished at {list(snapshot.next) or [t.name for t in snapshot.tasks]}")
        return Record("succeeded", output=snapshot.values, ended_ms=self.ended_ms.get(intent_id), engine_status="finished")

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        records = self.records(ids)
        pending = [i for i, r in records.items() if r.status == "pending"]
        return sum(1 for i in pending if i in self.running), len(pending)


def _unfinished(snapshot: Any) -> bool:
    """Whether a thread has more to run. A process killed just after the first step's writes
    leaves a checkpoint whose `next` is empty while its `__start__` task is still pending (seen
    with langgraph 1.2 and durability="sync"); `invoke(None)` runs it on from there."""
    return bool(snapshot.next or snapshot.tasks)


def _task_errors(snapshot: Any) -> list[str]:
    return [str(t.error) for t in (snapshot.tasks or ()) if getattr(t, "error", None) is not None]


if __name__ == "__main__":
    # Run as `python -m`, this file is `__main__`; the app imports `twice.engines.langgraph`, a
    # second copy of it. The engine comes from that one, so that its types are the app's.
    from twice.engines.langgraph import LangGraphEngine as _Engine

    main(_Engine(), sys.argv[1:], description=__doc__ or "")
