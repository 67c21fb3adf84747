"""The twice/1 route for LangGraph: `python -m twice.engines.langgraph --app agent_app:APP`, where
twice itself starts, SIGKILLs, SIGSTOPs and restarts the worker processes that run the graphs on
their SqliteSaver (the tests: `twice1_route.route_tests`)."""

from __future__ import annotations

from pathlib import Path

from twice1_route import SHARED_FILES, Route, route_tests

ROUTE = Route(
    engine="langgraph",
    folder=Path(__file__).resolve().parent,
    careful="agent_app:careful",
    idiomatic="agent_app:idiomatic",
    files=("agent_app.py", "agent_tools.py", *SHARED_FILES),
    packages=("langgraph", "langgraph-checkpoint-sqlite", "langchain-core", "stripe"),
    # A kill races the default ("async") durability: the resumed thread runs the tool again
    # (two refunds) or fails (claimed failed while the refund exists).
    idiomatic_violates={
        "lost_refund_reply": {"honest-terminal-states"},
        "crash_while_refund_in_flight": {"no-duplicate-effect", "honest-terminal-states"},
        "key_regenerated_per_attempt": {"no-duplicate-effect"},
        "payments_forget_keys": {"no-duplicate-effect"},
        "refund_permission_denied": {"refusal-respected"},
    },
)

# The route's four tests, as this module's own (pytest collects them here).
globals().update(route_tests(ROUTE))
