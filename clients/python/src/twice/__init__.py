"""twice-kit: twice's fake services, faults and verdicts in a Python test suite.

`twice serve` runs fakes of Stripe, a SaaS create API, S3 and an Ethereum node, sets up a
scenario's world on them (contracts, seeds, faults) and judges what an application claims
against their ledgers. This package is its client:

- `Twice`: the client of one serve (`load_scenario`, `wait_step`, `step_done`, `check`, fault
  rules, seeds, clocks, ledgers and journals);
- `ServeProcess`: `twice serve` as a child process;
- `Claim`, `Scenario`, `Step`, `Verdict`: what goes in and comes out;
- a pytest plugin with the fixtures `twice_serve` and `twice_serve_session`;
- `twice.protocol`: the `twice/1` stdio plumbing for an executor written in Python.

A test sets a scenario up, makes the application carry out its intents (its SDK pointed at
`twice.url("payments")`), performs its steps, and checks the application's claims::

    def test_refund_survives_a_lost_reply(twice_serve):
        scenario = twice_serve.load_scenario("lost_refund_reply")
        app = RefundApp(api_base=twice_serve.url("payments"))
        for intent in scenario.intents:
            app.refund(intent.id, **intent.params)
        twice_serve.check(app.claims())   # raises TwiceViolation with the verdict's summary

The documentation is `docs/byo.md` of the twice repository.
"""

from twice.client import Twice, TwiceError, TwiceHTTPError, TwiceTimeout, TwiceViolation
from twice.model import STATES, Claim, Intent, Scenario, Step, Verdict, VerdictLine
from twice.serve import ServeProcess, ServeStartError, bundled_twice, find_twice

__all__ = [
    "STATES",
    "Claim",
    "Intent",
    "Scenario",
    "ServeProcess",
    "ServeStartError",
    "Step",
    "Twice",
    "TwiceError",
    "TwiceHTTPError",
    "TwiceTimeout",
    "TwiceViolation",
    "Verdict",
    "VerdictLine",
    "bundled_twice",
    "find_twice",
]
__version__ = "0.1.0"
