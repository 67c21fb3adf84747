"""The shop's webhook handler under twice: each webhook scenario of the catalog loaded into
`twice serve`, the shop's orders taken from the scenario's intents (each waits for its order's
`payment_intent.succeeded`), the shop started as a process (it registers its endpoint, and the
customer pays), the scenario's crashes done to it (SIGKILL, then a new process on the same
database), every webhook the payments fake owes sent, and the shop's record claimed and judged.

The careful handler passes every scenario. The naive one (no signature check, no dedupe, the
event's data believed, no idempotency key) is a strict expected failure where a scenario's
fault can hurt it, with the invariant named in its mark; where none can (a late or
out-of-order event, an endpoint down for a while), it passes too, and so must it. The
defences come in pairs, each of which holds alone: dropping both of a pair is caught, by the
scenario named in `PAIRS`; so is each of the two defences only a crash tests, alone or paired.
"""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from twice import Claim, Scenario, Twice, TwiceViolation
from webhook_handler import NAIVE, Shop

HERE = Path(__file__).parent
#: The longest a shop process may take to listen (it imports stripe and resend).
START_S_MAX = 30.0
#: The longest a crash's point may take to be reached once the shop listens.
STEP_WAIT_S = 30.0

#: (scenario, the invariant the naive handler breaks there, or None where it passes)
SCENARIOS: list[tuple[str, Optional[str]]] = [
    # The same event twice: the naive handler sends the email twice.
    ("fault_duplicate_webhook", "no-duplicate-effect"),
    # Its 200 lost, the event comes again: the same.
    ("fault_lose_webhook_ack", "no-duplicate-effect"),
    # Replayed under a ten-minute-old signature: accepted, and acted on again.
    ("fault_stale_webhook", "no-duplicate-effect"),
    # A forged event for an order nobody paid: believed, and the email sent.
    ("webhook_forged_payment", "no-unauthorised-effect"),
    # Late, or after the endpoint was down: nothing can go twice, both handlers pass.
    ("fault_delay_webhook", None),
    ("fault_webhook_endpoint_down", None),
]

#: Defences dropped, the scenario that then catches the handler, and how: a repeat is harmless
#: while the handler either remembers what it sent or sends under the order's key; a forgery
#: while it either checks signatures or reads the payment's real state; a crash before the
#: work while the handler answers only once the work is done; a crash during the send while
#: the handler keeps what it did durably or sends under the order's key.
PAIRS: list[tuple[tuple[str, ...], str, str]] = [
    (("no-dedupe", "no-key"), "fault_lose_webhook_ack", "no-duplicate-effect"),
    (("no-signature-check", "event-data"), "webhook_forged_payment", "no-unauthorised-effect"),
    (("ack-first",), "webhook_crash_before_acting", "expected-states"),
    (("memory-dedupe", "no-key"), "webhook_crash_while_sending", "no-duplicate-effect"),
]


def naive_fails(invariant: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=TwiceViolation, reason=f"the naive handler breaks {invariant}")


CASES = (
    [
        pytest.param(
            name,
            NAIVE if mode == "naive" else (),
            breaks if mode == "naive" else None,
            id=f"{name}-{mode}",
            marks=[naive_fails(breaks)] if mode == "naive" and breaks else [],
        )
        for name, breaks in SCENARIOS
        for mode in ("careful", "naive")
    ]
    # The crashes, where only the careful handler and the switches they test are run.
    + [
        pytest.param(name, (), None, id=f"{name}-careful")
        for name in ("webhook_crash_before_acting", "webhook_crash_while_sending")
    ]
    + [
        pytest.param(name, bugs, breaks, id=f"{name}-naive-{'+'.join(bugs)}", marks=[naive_fails(breaks)])
        for bugs, name, breaks in PAIRS
    ]
)


class ShopProcess:
    """The shop as a process, one life at a time, on one database."""

    def __init__(self, db: Path, twice: Twice, bugs: tuple[str, ...]) -> None:
        self.command = [sys.executable, str(HERE / "webhook_handler.py"), "run", str(db)]
        self.command += ["--payments", twice.url("payments"), "--messages", twice.url("messages")]
        for bug in bugs:
            self.command += ["--bug", bug]
        self.process: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> None:
        """A new life; returns once it listens."""
        assert self.process is None, "one life at a time"
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], START_S_MAX)
        line = self.process.stdout.readline().decode() if ready else ""
        if not line.startswith("listening"):
            self.kill()
            pytest.fail(f"the shop did not listen within {START_S_MAX:g} s: {line!r}")

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing runs after it but what was already durable."""
        process, self.process = self.process, None
        if process is not None:
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=START_S_MAX)


def claims(shop: Shop, scenario: Scenario) -> list[Claim]:
    """What the shop's record says of each order's welcome email: sent is `confirmed`; an
    order it never sent for was never started, and is not claimed."""
    return [
        Claim(
            id=order.job,
            action=scenario.intent(order.job).action,
            state="confirmed",
            attempts=1,
            evidence={"external_id": order.email_id} if order.email_id else {},
        )
        for order in shop.orders()
        if order.sent
    ]


@pytest.mark.parametrize("name,bugs,naive_breaks", CASES)
def test_webhook_handler(
    twice_serve: Twice, tmp_path: Path, name: str, bugs: tuple[str, ...], naive_breaks: Optional[str]
) -> None:
    scenario = twice_serve.load_scenario(name)
    db = tmp_path / "shop.sqlite"
    record = Shop(str(db), twice_serve.url("payments"), twice_serve.url("messages"))
    for intent in scenario.intents:
        assert intent.triggered and intent.action == "messages.send", f"{scenario.name}: {intent}"
        p = intent.params
        record.add_order(intent.on_event["payment_intent"], intent.id, p["to"], p["subject"], p["body"])
    shop = ShopProcess(db, twice_serve, bugs)
    try:
        shop.start()
        for step in scenario.steps:
            assert step.by == "test" and step.do == "crash", step
            reached = twice_serve.wait_step(step.index, timeout_s=STEP_WAIT_S)
            assert reached.progress == "reached", reached
            # A real SIGKILL while serve holds the request; the next life starts on the same
            # database once the step is done, as a supervisor would restart it.
            shop.kill()
            twice_serve.step_done(step.index)
            shop.start()
        report = twice_serve.wait_webhooks()
    finally:
        shop.kill()

    try:
        verdict = twice_serve.check(claims(record, scenario))
    except TwiceViolation as e:
        if naive_breaks and naive_breaks not in e.verdict.violated:
            pytest.fail(f"the naive handler should break {naive_breaks}, but broke {e.verdict.violated}:\n{e}")
        raise
    assert verdict.exit_code == 0
    # Held: every order that was paid got its one email, and the forged one none.
    assert {o.job for o in record.orders() if o.sent} == set(scenario.expect), record.orders()
    if not bugs:
        refused = [d for d in report["deliveries"] if d["signed"] != "genuine"]
        assert all(d["standing"] == "refused" for d in refused), report
