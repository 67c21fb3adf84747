"""What both Temporal apps say to twice's adapter (`python -m twice.engines.temporal`): their
settings from the worker's `init` instead of the worker's flags, and a workflow's result read as
a claim (its `refund_id` is the effect's id)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from twice.engines import App, read_output
from twice.engines.temporal import Workflow

# effects.py (examples/engines) and the example executor's services.py, which it builds on,
# where this folder does not hold copies of them; temporal_effects' workflows import it.
_HERE = Path(__file__).resolve().parent
sys.path += [str(_HERE.parent), str(_HERE.parents[1] / "executors" / "python")]

import effects  # noqa: E402,F401
import temporal_effects  # noqa: E402


def configure_from(init: Any, configure: Callable[..., None]) -> None:
    """Calls an app's `configure` with the payments API and its contract from `init`; the other
    actions' activities (temporal_effects.py) take theirs from effects.configure."""
    temporal_effects.effects.configure(init)
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
    """A workflow's result as a claim: a refund's `refund_id` is the effect's id; the other
    actions' workflows say `external_id` (or, idiomatic, `id`) themselves."""
    if result.get("refund_id"):
        result = {**result, "external_id": result["refund_id"]}
    return read_output(result)


def app(configure: Callable[..., None], workflow: Any, request: Callable[..., Any], activities: list[Any],
        careful: bool) -> App:  # fmt: skip
    """The app as the adapter drives it: `payments.refund` is `workflow`, run with `request(**params)`;
    the other four actions are temporal_effects.py's workflows, careful or idiomatic."""
    if careful:
        others, other_activities = temporal_effects.CarefulEffectWorkflow, temporal_effects.CAREFUL_ACTIVITIES
    else:
        others, other_activities = temporal_effects.IdiomaticEffectWorkflow, temporal_effects.IDIOMATIC_ACTIVITIES
    actions = {"payments.refund": Workflow(workflow, input=request, activities=activities)}
    for action, effect_request in temporal_effects.REQUESTS.items():
        actions[action] = Workflow(others, input=effect_request, activities=other_activities)
    return App(
        actions=actions,
        configure=lambda init: configure_from(init, configure),
        read_output=claim,
    )
