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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twice.client import (
        Twice,
        TwiceError,
        TwiceHTTPError,
        TwiceTimeout,
        TwiceUnsettled,
        TwiceViolation,
    )
    from twice.model import STATES, Claim, Intent, Scenario, Step, Verdict, VerdictLine
    from twice.serve import ServeProcess, ServeStartError, bundled_twice, find_twice

# Each name is loaded from its module when first asked for, so that `import twice.protocol` (in
# an executor, started once per worker) does not pay for the client's HTTP stack.
_HOMES = {
    "twice.client": (
        "Twice",
        "TwiceError",
        "TwiceHTTPError",
        "TwiceTimeout",
        "TwiceUnsettled",
        "TwiceViolation",
    ),
    "twice.model": ("STATES", "Claim", "Intent", "Scenario", "Step", "Verdict", "VerdictLine"),
    "twice.serve": ("ServeProcess", "ServeStartError", "bundled_twice", "find_twice"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'twice' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_OF])


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
    "TwiceUnsettled",
    "TwiceViolation",
    "Verdict",
    "VerdictLine",
    "bundled_twice",
    "find_twice",
]
__version__ = "0.1.0"
