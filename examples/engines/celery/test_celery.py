"""Celery 5 on Redis under twice: each scenario's refunds are Celery tasks run by real worker
processes against serve's payments fake; the test kills and stops those processes at the
scenario's request points, reads what Celery's result backend says of each task, turns that
into claims and has twice judge them (conftest.py's `engine_findings.judge`).

Every test owns its Redis (a `redis-server` on a free loopback port, no persistence) and its
workers (`celery -A <app> worker -P prefork -c 1`), and stops them in a fixture's finally.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import celery
import kombu
import pytest
import redis
import stripe
from celery import Celery

from twice import Claim, Scenario, Twice

HERE = Path(__file__).parent
APPS = {"idiomatic": "celery_idiomatic", "careful": "celery_careful"}
VERSIONS = {
    "celery": celery.__version__,
    "kombu": kombu.__version__,
    "redis-py": redis.__version__,
    "stripe": stripe.VERSION,
}
#: The longest a worker (or Redis) may take to be ready: generous, the machine is shared.
READY_S_MAX = 60.0
#: The longest all tasks may take to reach SUCCESS or FAILURE.
TASKS_S_MAX = 90.0
STEP_WAIT_S = 45.0
#: kombu's visibility timeout in the tests that kill or stop a worker (Celery's default: 1 h).
SHORT_VISIBILITY_TIMEOUT_S = 4.0


def _redis_server() -> str:
    binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        pytest.fail(
            "redis-server not found (the Celery example's broker): install it "
            "(Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`) "
            "or set REDIS_SERVER=/path/to/redis-server",
            pytrace=False,
        )
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(what: str, done: Callable[[], bool], timeout_s: float, log: Optional[Path] = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s" + (f"\n{_tail(log)}" if log else ""))
        time.sleep(0.1)


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def signal_all(self, sig: int) -> None:
        """The worker's whole process group (its own session): the main process and its pool
        process, also a pool process that outlived a killed main process."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def pool_children(self) -> list[int]:
        pids: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
            try:
                pids += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                pass
        return pids


@dataclass
class CeleryWorld:
    """One test's Redis and Celery workers; `stop()` ends every process it started."""

    tmp: Path
    redis_proc: Optional[subprocess.Popen[bytes]] = None
    broker_url: str = ""
    workers: list[Worker] = field(default_factory=list)
    client: Optional[Celery] = None
    redis_version: str = "?"

    def start_redis(self) -> None:
        port = _free_port()
        log = self.tmp / "redis.log"
        binary = _redis_server()
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
        self.redis_version = next((w[2:] for w in version.split() if w.startswith("v=")), version.strip() or "?")
        self.redis_proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--logfile", str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.broker_url = f"redis://127.0.0.1:{port}/0"
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)

        def ping() -> bool:
            assert self.redis_proc is not None and self.redis_proc.poll() is None, f"redis-server exited:\n{_tail(log)}"
            try:
                return bool(r.ping())
            except redis.RedisError:
                return False

        _wait("redis-server answering PING", ping, READY_S_MAX, log)
        self.client = Celery("twice-test", broker=self.broker_url, backend=self.broker_url)

    def start_worker(self, name: str, module: str, env: dict[str, str]) -> Worker:
        log = self.tmp / f"worker-{name}-{len(self.workers)}.log"
        command = [
            sys.executable, "-m", "celery", "-A", module, "worker",
            "-P", "prefork", "-c", "1", "-n", f"{name}@twice", "--loglevel=INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command, cwd=HERE, env={**os.environ, **env, "CELERY_BROKER_URL": self.broker_url,
                                        "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        worker = Worker(name, proc, log)
        self.workers.append(worker)

        def ready() -> bool:
            assert proc.poll() is None, f"celery worker {name} exited {proc.returncode}:\n{_tail(log)}"
            return " ready." in worker.log_text()

        _wait(f"celery worker {name} ready", ready, READY_S_MAX, log)
        return worker

    def kill(self, worker: Worker) -> None:
        worker.signal_all(signal.SIGKILL)
        worker.proc.wait(timeout=30)

    def stop(self) -> None:
        for worker in self.workers:
            worker.signal_all(signal.SIGCONT)
            worker.signal_all(signal.SIGKILL)
            try:
                worker.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.redis_proc is not None and self.redis_proc.poll() is None:
            self.redis_proc.terminate()
            try:
                self.redis_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.redis_proc.kill()
                self.redis_proc.wait(timeout=10)


@pytest.fixture
def celery_world(tmp_path: Path):
    world = CeleryWorld(tmp_path)
    try:
        world.start_redis()
        yield world
    finally:
        world.stop()


# -- the cases --------------------------------------------------------------------------------

# (test id, scenario, family, how the test drives the workers, marks)
#   plain: one worker, no process event
#   kill:  SIGKILL the whole worker (main and pool process) at the request point; a new one starts
#   child: SIGKILL only the pool process running the task; the main process lives on
#   pause: SIGSTOP the worker at the request point, start a second one, SIGCONT the first
SHORT = [pytest.mark.short]
CASES = [
    ("lost-reply", "lost_refund_reply", "lost-reply", "plain", []),
    ("lost-replies", HERE / "celery_lost_replies_outlast_the_sdk.toml", "lost-reply", "plain", []),
    ("late-commit", HERE / "celery_late_commit.toml", "late-commit", "plain", []),
    ("worker-killed", "crash_while_refund_in_flight", "worker-killed", "kill", SHORT),
    ("worker-paused", "payments_stale_worker", "worker-paused", "pause", []),
    ("rejected-429", HERE / "celery_rejected_429.toml", "rejected-429", "plain", []),
    ("silent-noop", "silent_noop_refund", "silent-noop", "plain", []),
    ("key-forgotten", "payments_forget_keys", "key-forgotten", "plain", []),
    ("stale-read", "stale_read_back", "stale-read", "plain", []),
    ("pool-process-killed", "crash_while_refund_in_flight", "engine", "child", []),
]
PARAMS = [
    pytest.param(app, scenario, family, drive, id=f"{case}-{app}", marks=marks)
    for case, scenario, family, drive, marks in CASES
    for app in APPS
]


def _worker_env(twice: Twice, scenario: Scenario, drive: str) -> dict[str, str]:
    payments = scenario.contracts.get("payments") or {}
    env = {
        "TWICE_PAYMENTS_URL": twice.url("payments"),
        "TWICE_REQUEST_TIMEOUT_S": str(scenario.request_timeout_s),
        "TWICE_SETTLE_MS": str(int(payments.get("settle_ms_max", 30000))),
        "TWICE_READ_LAG_MS": str(int(payments.get("read_lag_ms_max", 0))),
    }
    if drive in ("kill", "pause"):
        # The message a dead or stopped worker held comes back after this; the pool-process
        # case keeps Celery's hour: there the worker's main process, alive, decides.
        env["TWICE_VISIBILITY_TIMEOUT_S"] = str(SHORT_VISIBILITY_TIMEOUT_S)
    return env


def _finished(world: CeleryWorld, task_ids: dict[str, str]) -> bool:
    assert world.client is not None
    return all(world.client.AsyncResult(t).state in ("SUCCESS", "FAILURE") for t in task_ids.values())


def _runs_finished(worker: Worker) -> bool:
    text = worker.log_text()
    return any(mark in text for mark in ("succeeded in", "raised unexpected", "] retry:"))


def _claims(world: CeleryWorld, app: str, scenario: Scenario, task_ids: dict[str, str]) -> list[Claim]:
    """What Celery's result backend says of each task, as the app reads it."""
    assert world.client is not None
    claims = []
    for intent in scenario.intents:
        result = world.client.AsyncResult(task_ids[intent.id])
        evidence: dict[str, Any] = {"task_id": result.id, "celery_state": result.state}
        attempts = None
        if result.state == "SUCCESS":
            value = dict(result.result)
            if app == "idiomatic":
                state = "confirmed"  # the task returned a refund
                attempts = int(value.get("runs", 1))
            else:
                state = str(value["state"])  # the careful task says what it knows
                attempts = int(value.get("retries", 0)) + 1
            if value.get("external_id"):
                evidence["external_id"] = value["external_id"]
            if value.get("key"):
                evidence["key"] = value["key"]
            if value.get("last_error"):
                evidence["last_error"] = value["last_error"]
        elif result.state == "FAILURE":
            evidence["last_error"] = repr(result.result)[:300]
            # The idiomatic app reads FAILURE as "the refund failed"; the careful one knows a
            # task that raised may still have refunded.
            state = "failed" if app == "idiomatic" else "unknown"
        else:
            state = "submitted"
        claims.append(Claim(id=intent.id, action=intent.action, state=state, attempts=attempts, evidence=evidence))
    return claims


@pytest.mark.parametrize("app,scenario_ref,family,drive", PARAMS)
def test_celery(
    twice_serve: Twice, celery_world: CeleryWorld, engine_findings: Any, app: str, scenario_ref: Any,
    family: str, drive: str,
) -> None:  # fmt: skip
    scenario = twice_serve.load_scenario(scenario_ref)
    module = APPS[app]
    env = _worker_env(twice_serve, scenario, drive)
    world = celery_world
    assert world.client is not None
    w1 = world.start_worker("w1", module, env)

    task_ids: dict[str, str] = {}
    for intent in scenario.intents:
        assert intent.action == "payments.refund", f"{scenario.name}: {intent}"
        args = [intent.params["payment_intent"], int(intent.params["amount"]), intent.id]
        if app == "idiomatic":
            # `refund.delay(...)`: Celery makes up the task id.
            result = world.client.send_task(f"{module}.refund", args=args)
        else:
            # The task id is derived from the order: the key derived from it is too.
            result = world.client.send_task(f"{module}.refund", args=args, task_id=f"refund-{intent.id}")
        task_ids[intent.id] = result.id

    steps = [s for s in scenario.steps if s.by == "test"]
    if drive == "kill":
        (step,) = steps
        assert step.do == "crash", step
        twice_serve.wait_step(step.index, timeout_s=STEP_WAIT_S)
        world.kill(w1)  # SIGKILL to the worker's process group while its refund is held
        twice_serve.step_done(step.index)
        world.start_worker("w1-life2", module, env)  # a supervisor restarts it
    elif drive == "child":
        (step,) = steps
        assert step.do == "crash", step
        twice_serve.wait_step(step.index, timeout_s=STEP_WAIT_S)
        children = w1.pool_children()
        assert len(children) == 1, f"expected one pool process, found {children}"
        os.kill(children[0], signal.SIGKILL)  # the pool process only (an OOM kill, say)
        twice_serve.step_done(step.index)
    elif drive == "pause":
        pause, start = steps
        assert pause.do == "pause" and start.do == "start_worker", steps
        twice_serve.wait_step(pause.index, timeout_s=STEP_WAIT_S)
        w1.signal_all(signal.SIGSTOP)
        stopped_at = time.monotonic()
        twice_serve.step_done(pause.index)  # the reply goes to a stopped process
        twice_serve.wait_step(start.index, timeout_s=STEP_WAIT_S)
        w2 = world.start_worker("w2", module, env)
        twice_serve.step_done(start.index)
        # The pause lasts the scenario's for_ms at least, and until w2 has run the task that
        # kombu gave back to the queue once the visibility timeout was over.
        _wait("the second worker running the task", lambda: _runs_finished(w2), TASKS_S_MAX, w2.log)
        for_s = float(pause.event.get("for_ms", 0)) / 1000.0
        time.sleep(max(0.0, stopped_at + for_s - time.monotonic()))
        w1.signal_all(signal.SIGCONT)
        _wait("the first worker finishing its run", lambda: _runs_finished(w1), TASKS_S_MAX, w1.log)
    else:
        assert not steps, f"{scenario.name} has steps this test does not perform: {steps}"

    _wait("every task SUCCESS or FAILURE", lambda: _finished(world, task_ids), TASKS_S_MAX, world.workers[-1].log)
    # Anything still in flight (a late commit) is the check's to wait for: it judges once the
    # world has settled, within the contract's settle bound.

    claims = _claims(world, app, scenario, task_ids)
    engine_findings.judge(
        twice_serve, claims, app=app, scenario=scenario.name, family=family,
        versions={**VERSIONS, "redis-server": world.redis_version},
        # Two rows share crash_while_refund_in_flight: the whole worker killed, or only its
        # pool process.
        variant="pool process killed" if drive == "child" else "",
    )
