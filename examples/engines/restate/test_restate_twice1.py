"""The twice/1 route for Restate: `python -m twice.engines.restate --app twice-APP.json`, where
twice itself starts, SIGKILLs, SIGSTOPs and restarts workers, each the adapter and the app's Node
endpoint, on a restate-server the adapter keeps for the case (the tests:
`twice1_route.route_tests`)."""

from __future__ import annotations

from pathlib import Path

from twice1_route import Route, route_tests

ROUTE = Route(
    engine="restate",
    folder=Path(__file__).resolve().parent,
    careful="twice-careful.json",
    idiomatic="twice-idiomatic.json",
    files=("careful.mjs", "idiomatic.mjs", "common.mjs", "polyfill.mjs", "package.json",
           "twice-careful.json", "twice-idiomatic.json"),  # fmt: skip
    links=("node_modules",),
    packages=("npm:@restatedev/restate-sdk", "npm:@restatedev/restate-server"),
    # A 403 the idiomatic app comes through: a `TerminalError`, claimed failed.
    idiomatic_violates={
        "lost_refund_reply": {"honest-terminal-states"},
        "crash_while_refund_in_flight": {"no-duplicate-effect"},
        "key_regenerated_per_attempt": {"no-duplicate-effect"},
        "payments_forget_keys": {"no-duplicate-effect"},
    },
)

# The route's four tests, as this module's own (pytest collects them here).
globals().update(route_tests(ROUTE))
