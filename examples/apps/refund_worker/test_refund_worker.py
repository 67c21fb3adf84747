"""The refund worker under twice: each scenario's intents carried out by real worker processes
against serve's payments fake, the scenario's steps performed on them, and the worker's own
record (its SQLite table) claimed and judged.

The correct worker passes every scenario. The naive one is expected to fail each (strictly:
an unexpected pass fails the run), with the invariant named in its mark; a violation of any
other invariant is a real failure, not the expected one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional, Union

import pytest

import refund_worker
from twice import Claim, Scenario, Step, Twice, TwiceViolation

HERE = Path(__file__).parent
WORKER = HERE / "refund_worker.py"
#: The longest one worker life may take to finish its jobs: every request it makes has the
#: scenario's timeout, and it makes at most a handful.
WORKER_EXIT_S_MAX = 60.0
#: The longest a step's point may take to be reached once the worker is started.
STEP_WAIT_S = 30.0


def naive_fails(invariant: str) -> pytest.MarkDecorator:
    """The naive worker's mark: a strict expected failure, by a violation."""
    return pytest.mark.xfail(strict=True, raises=TwiceViolation, reason=f"the naive worker breaks {invariant}")


# (scenario, the invariant the naive worker breaks there)
SCENARIOS: list[tuple[Union[str, Path], str]] = [
    # Catalog: the whole 5000 refunded, the reply lost. The naive retry under a new key is
    # refused (charge_already_refunded: nothing is left to refund), so the naive worker
    # records "failed" while the ledger has its refund.
    ("lost_refund_reply", "honest-terminal-states"),
    # The example's own: the same, for 3000 of 10000, so the naive retry refunds again.
    (HERE / "lost_partial_refund_reply.toml", "no-duplicate-effect"),
    # Catalog: committed, answered 500. The key saves the 500 and replays it; the correct
    # worker finds the refund by looking it up, the naive one sends it again.
    ("key_regenerated_per_attempt", "no-duplicate-effect"),
    # Catalog: committed, the reply held past the client's timeout.
    ("timeout_taken_as_no", "no-duplicate-effect"),
    # Catalog: the worker killed while its refund request is held; a new life goes on.
    ("crash_while_refund_in_flight", "no-duplicate-effect"),
]
CASES = [
    pytest.param(ref, mode, breaks, id=f"{Path(ref).stem}-{mode}", marks=[naive_fails(breaks)] if mode == "naive" else [])
    for ref, breaks in SCENARIOS
    for mode in ("correct", "naive")
]


class RefundApp:
    """The application under test: a SQLite record and worker processes, one per life."""

    def __init__(self, db: Path, api_base: str, mode: str, timeout_s: float) -> None:
        self.db = db
        self.command = [
            sys.executable, str(WORKER), "run", str(db),
            "--api-base", api_base, "--mode", mode, "--timeout-s", str(timeout_s),
        ]  # fmt: skip
        self.worker: Optional[subprocess.Popen[bytes]] = None
        self.lives = 0

    def enqueue(self, job_id: str, payment_intent: str, amount: int) -> None:
        refund_worker.enqueue(str(self.db), job_id, payment_intent, amount)

    def start_worker(self) -> None:
        assert self.worker is None, "one worker at a time"
        self.lives += 1
        self.worker = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )

    def kill_worker(self) -> None:
        """SIGKILL, as a crash: no handler runs, nothing is flushed but what was committed."""
        worker, self.worker = self.worker, None
        assert worker is not None, "no worker to kill"
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=WORKER_EXIT_S_MAX)

    def wait_worker(self) -> None:
        """Until the worker has finished its jobs; it must exit cleanly, in time."""
        worker, self.worker = self.worker, None
        assert worker is not None, "no worker to wait for"
        try:
            output, _ = worker.communicate(timeout=WORKER_EXIT_S_MAX)
        except subprocess.TimeoutExpired:
            worker.kill()
            output, _ = worker.communicate(timeout=WORKER_EXIT_S_MAX)
            pytest.fail(f"the worker did not finish within {WORKER_EXIT_S_MAX:g} s:\n{output.decode()}")
        assert worker.returncode == 0, f"worker exited {worker.returncode}:\n{output.decode()}"

    def stop(self) -> None:
        if self.worker is not None:
            self.kill_worker()

    def claims(self, scenario: Scenario) -> list[Claim]:
        """What the record says of each intent, as claims: the job id is the intent id."""
        return [
            Claim(
                id=job.job_id,
                action=scenario.intent(job.job_id).action,
                state=job.state,
                attempts=job.attempts,
                params={"payment_intent": job.payment_intent, "amount": job.amount},
                evidence={
                    key: value
                    for key, value in (
                        ("key", job.idempotency_key),
                        ("external_id", job.refund_id),
                        ("last_error", job.last_error),
                    )
                    if value is not None
                },
            )
            for job in refund_worker.jobs(str(self.db))
        ]


def perform(twice: Twice, app: RefundApp, step: Step) -> None:
    """Does step `step` to the app once its point is reached."""
    reached = twice.wait_step(step.index, timeout_s=STEP_WAIT_S)
    assert reached.progress == "reached", reached
    if step.do == "crash":
        # A real SIGKILL of the worker process while serve holds its request; the next life
        # starts once the step is done, on the same SQLite file, as a supervisor would
        # restart it.
        app.kill_worker()
        twice.step_done(step.index)
        app.start_worker()
    else:
        raise AssertionError(f"this example performs crashes only, not {step.do}: {step.how}")


@pytest.mark.parametrize("scenario_ref,mode,naive_breaks", CASES)
def test_refund_worker(
    twice_serve: Twice, tmp_path: Path, scenario_ref: Union[str, Path], mode: str, naive_breaks: str
) -> None:
    scenario = twice_serve.load_scenario(scenario_ref)
    app = RefundApp(tmp_path / "refunds.sqlite", twice_serve.url("payments"), mode, scenario.request_timeout_s)
    for intent in scenario.intents:
        assert intent.action == "payments.refund", f"{scenario.name}: {intent}"
        app.enqueue(intent.id, intent.params["payment_intent"], int(intent.params["amount"]))
    try:
        app.start_worker()
        for step in scenario.steps:
            if step.by == "test":
                perform(twice_serve, app, step)
        app.wait_worker()
    finally:
        app.stop()

    claims = app.claims(scenario)
    try:
        verdict = twice_serve.check(claims)
    except TwiceViolation as e:
        # The naive worker's expected failure is a violation of this one invariant; any
        # other verdict is a failure of the test itself, which xfail(raises=) does not excuse.
        if mode == "naive" and naive_breaks not in e.verdict.violated:
            pytest.fail(f"the naive worker should break {naive_breaks}, but broke {e.verdict.violated}:\n{e}")
        raise
    # Held: the correct worker ends as the scenario expects, having refunded once.
    assert {c.id: c.state for c in claims} == scenario.expect
    refunds = [e for e in twice_serve.ledger("payments") if e["kind"] == "refund.created"]
    assert len(refunds) == len(scenario.intents), refunds
    assert verdict.exit_code == 0
