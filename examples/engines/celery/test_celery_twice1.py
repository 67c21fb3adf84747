"""The twice/1 route for Celery: `python -m twice.engines.celery --app APP`, where twice itself
starts, SIGKILLs, SIGSTOPs and restarts real `celery worker` processes on a Redis the adapter
keeps for the case (the tests: `twice1_route.route_tests`)."""

from __future__ import annotations

from pathlib import Path

from twice1_route import SHARED_FILES, Route, route_tests

ROUTE = Route(
    engine="celery",
    folder=Path(__file__).resolve().parent,
    careful="celery_careful",
    idiomatic="celery_idiomatic",
    files=("celery_careful.py", "celery_idiomatic.py", "celery_settings.py", "celery_effects.py", *SHARED_FILES),
    packages=("celery", "kombu", "redis", "stripe"),
    # A lost reply and a 403 the idiomatic app comes through: stripe-python's own retry replays
    # the first under the SDK's key, and a 403 is not among the errors it retries.
    idiomatic_violates={
        "crash_while_refund_in_flight": {"no-duplicate-effect"},
        "key_regenerated_per_attempt": {"no-duplicate-effect"},
        "payments_forget_keys": {"no-duplicate-effect"},
    },
)

# The route's four tests, as this module's own (pytest collects them here).
globals().update(route_tests(ROUTE))
