"""DBOS refund workflows under twice: each scenario's intents carried out by real DBOS worker
processes (worker.py, on a SQLite system database of the test's own) against serve's payments
fake, the scenario's crash performed as a SIGKILL of the worker while serve holds its refund
request (then a new worker life on the same system database, where DBOS recovers the
workflow), and what DBOS's own record says of each workflow (its status and output, read with
`DBOSClient`) claimed and judged.

Two apps (idiomatic.py: DBOS's step retries as shipped, stripe-python's fresh key per call;
careful.py: a key from the workflow and step ids, a lookup before each send, `should_retry`
for refusals, `unknown` when DBOS gives up) times the scenarios below.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

try:
    import dbos
    import stripe
    from dbos import DBOSClient
except ImportError as e:  # pragma: no cover - a venv without the engine
    raise ImportError(
        f"{e}: the DBOS example needs dbos and stripe in this venv: "
        "pip install -r examples/engines/dbos/requirements.txt (`cargo xtask engines --only dbos` does it)"
    ) from e

import sends
from twice import Claim, Scenario, Step, Twice, TwiceTimeout

HERE = Path(__file__).parent
WORKER = HERE / "worker.py"
#: The longest one worker life may take: DBOS's import and launch, then every workflow's step
#: runs (the careful app's six, 15.5 s of pauses between them, each request bounded by the
#: scenario's timeout).
WORKER_EXIT_S_MAX = 90.0
#: The longest a step's point may take to be reached once the worker is started.
STEP_WAIT_S = 60.0
#: DBOS's statuses after which a workflow does nothing more by itself.
FINISHED = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
VERSIONS = {"dbos": importlib.metadata.version("dbos"), "stripe": stripe.VERSION}

# (scenario: a catalog name or a file of this folder, family, the headline: in the short run)
SCENARIOS: list[tuple[str, str, bool]] = [
    # Two partial refunds; the first's reply is lost after the commit, DBOS runs the step again.
    ("dbos_lost_step_reply.toml", "lost-reply", True),
    # Catalog: the whole payment refunded, the reply lost; a second refund is refused (nothing
    # left), and DBOS retries that refusal too.
    ("lost_refund_reply", "lost-reply", False),
    # Catalog: SIGKILL while serve holds the refund request; DBOS recovers the workflow in the
    # next life and runs the interrupted step again.
    ("crash_while_refund_in_flight", "worker-killed", False),
    # Held past the client's timeout, committed 1.5 s after it arrived.
    ("dbos_late_refund_commit.toml", "late-commit", False),
    # Two 429s, unexecuted, then a success.
    ("dbos_refund_rate_limited.toml", "rejected-429", False),
    # Catalog: committed and answered 500; keys forgotten after 2 s.
    ("payments_forget_keys", "key-forgotten", False),
    # Catalog: a 403 that needs a person's decision; a step with retries allowed retries every
    # exception unless its `should_retry` says otherwise.
    ("refund_permission_denied", "engine", False),
]
APPS = ("idiomatic", "careful")
CASES = [
    pytest.param(app, ref, family, id=f"{app}-{Path(ref).stem}", marks=[pytest.mark.short] if short else [])
    for ref, family, short in SCENARIOS
    for app in APPS
]


class DbosApp:
    """One app's worker processes, one per life, on one SQLite system database."""

    def __init__(self, app: str, tmp: Path, api_base: str, scenario: Scenario) -> None:
        self.app = app
        self.db = tmp / "dbos.sqlite"
        self.sends = tmp / "sends.jsonl"
        self.log = tmp / "worker.log"
        self.scenario = scenario
        self.base = [
            sys.executable, str(WORKER), app, str(self.db),
            "--api-base", api_base, "--timeout-s", str(scenario.request_timeout_s),
            "--sends", str(self.sends), "--deadline-s", str(WORKER_EXIT_S_MAX - 10),
        ]  # fmt: skip
        for intent in scenario.intents:
            self.base += ["--wait", intent.id]
        self.worker: Optional[subprocess.Popen[bytes]] = None
        self.lives = 0

    def start(self, first: bool) -> None:
        """A worker life: the first starts the scenario's workflows, a later one only launches
        DBOS, which recovers what the killed life left PENDING."""
        assert self.worker is None, "one worker at a time"
        command = list(self.base)
        if first:
            for intent in self.scenario.intents:
                assert intent.action == "payments.refund", intent
                command += ["--start", intent.id, intent.params["payment_intent"], str(intent.params["amount"])]
        self.lives += 1
        with open(self.log, "ab") as log:
            log.write(f"--- life {self.lives}: {' '.join(command)}\n".encode())
            log.flush()
            self.worker = subprocess.Popen(
                command, cwd=HERE, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-8000:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing runs, DBOS's record is what was committed."""
        worker, self.worker = self.worker, None
        assert worker is not None, "no worker to kill"
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)

    def wait(self) -> None:
        """Until the worker saw every workflow finish; it must exit cleanly, in time."""
        worker, self.worker = self.worker, None
        assert worker is not None, "no worker to wait for"
        try:
            code = worker.wait(timeout=WORKER_EXIT_S_MAX)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=30)
            pytest.fail(f"the {self.app} worker did not finish within {WORKER_EXIT_S_MAX:g} s:\n{self.output()}")
        assert code == 0, f"the {self.app} worker exited {code}:\n{self.output()}"

    def alive(self) -> bool:
        return self.worker is not None and self.worker.poll() is None

    def stop(self) -> None:
        if self.worker is not None:
            if self.worker.poll() is None:
                self.worker.kill()
            self.worker.wait(timeout=30)
            self.worker = None

    def record(self) -> dict[str, Any]:
        """What DBOS's system database says of each workflow, read as DBOS's client does."""
        client = DBOSClient(system_database_url=f"sqlite:///{self.db}")
        try:
            statuses = client.list_workflows(workflow_ids=[i.id for i in self.scenario.intents])
        finally:
            client.destroy()
        return {s.workflow_id: s for s in statuses}


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Any]:
    """Builds the test's app; its worker is killed after the test whatever happened."""
    apps: list[DbosApp] = []

    def make(app: str, api_base: str, scenario: Scenario) -> DbosApp:
        made = DbosApp(app, tmp_path, api_base, scenario)
        apps.append(made)
        return made

    try:
        yield make
    finally:
        for app in apps:
            app.stop()


def perform(twice: Twice, app: DbosApp, step: Step) -> None:
    """Does `step` to the worker once its point is reached (checking that the worker is alive
    meanwhile, so a worker that died says why instead of a step timeout)."""
    deadline = time.monotonic() + STEP_WAIT_S
    while True:
        try:
            reached = twice.wait_step(step.index, timeout_s=2.0)
            break
        except TwiceTimeout:
            if not app.alive():
                pytest.fail(f"the worker ended before step {step.index} ({step.how}):\n{app.output()}")
            if time.monotonic() > deadline:
                raise
    assert reached.progress == "reached", reached
    if step.do == "crash":
        app.kill()
        twice.step_done(step.index)
        app.start(first=False)
    else:
        raise AssertionError(f"this example performs crashes only, not {step.do}: {step.how}")


def claim(app: str, intent_id: str, status: Any, attempts: int, params: dict[str, Any]) -> Claim:
    """What DBOS's record says of one workflow, as the app reads it.

    idiomatic: SUCCESS is `confirmed` (the step's output has the refund), ERROR is `failed`,
    as DBOS's docs describe a workflow that raised. careful: the workflow's output says what
    it knows (confirmed, failed, escalated, unknown); an ERROR it did not expect is `unknown`.
    """
    evidence: dict[str, Any] = {"dbos_status": status.status if status else "missing"}
    if status is None or status.status not in FINISHED:
        state = "submitted"
    elif app == "idiomatic":
        if status.status == "SUCCESS":
            state = "confirmed"
            evidence["external_id"] = status.output["id"]
        else:
            state = "failed"
            evidence["last_error"] = repr(status.error)[:300]
    else:
        if status.status == "SUCCESS":
            output = dict(status.output)
            state = output.pop("state")
            evidence.update(output)
        else:
            state = "unknown"
            evidence["last_error"] = repr(status.error)[:300]
    return Claim(id=intent_id, action="payments.refund", state=state, attempts=attempts, params=params, evidence=evidence)


@pytest.mark.parametrize("app_name,scenario_ref,family", CASES)
def test_dbos(
    twice_serve: Twice, engine_findings: Any, make_app: Any, app_name: str, scenario_ref: str, family: str
) -> None:
    path = HERE / scenario_ref
    scenario = twice_serve.load_scenario(path if path.suffix == ".toml" else scenario_ref)
    app = make_app(app_name, twice_serve.url("payments"), scenario)
    app.start(first=True)
    for step in scenario.steps:
        if step.by == "test":
            perform(twice_serve, app, step)
    app.wait()

    record = app.record()
    counted = sends.read(app.sends)
    claims = [
        claim(app_name, intent.id, record.get(intent.id), counted[intent.id], dict(intent.params))
        for intent in scenario.intents
    ]
    for c in claims:  # shown with the failure, or with -rP
        print(f"{app_name} claims {c.id}: {c.state}, {c.attempts} send(s), {c.evidence}")
    engine_findings.judge(
        twice_serve, claims, app=app_name, scenario=scenario.name, family=family, versions=VERSIONS
    )
