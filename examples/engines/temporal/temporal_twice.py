"""What both Temporal apps say to twice's adapter (`python -m twice.engines.temporal`): their
settings from the worker's `init` instead of the worker's flags, and a workflow's result read as
a claim (its `refund_id` is the effect's id)."""

from __future__ import annotations

from typing import Any, Callable

from twice.engines import App, read_output
from twice.engines.temporal import Workflow


def configure_from(init: Any, configure: Callable[..., None]) -> None:
    """Calls an app's `configure` with the payments API and its contract from `init`."""
    url = init.url("payments")
    if url is None:
        return
    contract = init.contract("payments")
    configure(
        api_base=url,
        request_timeout_s=int(init.limits.get("request_timeout_ms", 2000)) / 1000.0,
        settle_ms=int(contract.get("settle_ms_max", 500)),
        read_lag_ms=int(contract.get("read_lag_ms_max", 0)),
        acks=str(contract.get("acks", "reliable")),
    )


def claim(result: dict) -> dict:
    """A workflow's result as a claim: its `refund_id` is the effect's id."""
    return read_output({**result, "external_id": result.get("refund_id")})


def app(configure: Callable[..., None], workflow: Any, request: Callable[..., Any], activities: list[Any]) -> App:
    """The app as the adapter drives it: `payments.refund` is `workflow`, run with `request(**params)`."""
    return App(
        actions={"payments.refund": Workflow(workflow, input=request, activities=activities)},
        configure=lambda init: configure_from(init, configure),
        read_output=claim,
    )
