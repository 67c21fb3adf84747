"""Steps that build on steps (docs/protocol.md §3.2, the `workflows` feature), for every engine's
adapter: an intent that comes `after` others waits for them, is cancelled or escalated with
them, and takes parameter values from their results, resolved once and recorded before its job
starts, so that every run of the job, after any crash, uses the same values.

Pure functions over intent views and table rows; the adapter (`twice.engines.Adapter`) keeps
the state.
"""

from __future__ import annotations

from typing import Any, Optional

from twice.protocol import MALFORMED, ProtocolError

#: The `init_ok` feature that announces steps.
FEATURE = "workflows"
#: The result fields each action has, and where a claim keeps each (the first evidence field
#: present wins): vocabulary/src/action.rs `result_fields`.
RESULT_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "payments.refund": {"id": ("external_id",)},
    "workspaces.create": {"id": ("external_id",)},
    "files.put": {"etag": ("external_id",)},
    "chain.transfer": {"tx_hash": ("tx_hash", "external_id")},
    "messages.send": {"id": ("external_id",)},
}
#: The parameters that may take a reference: text, never the business key.
TAKES_REFERENCE: dict[str, tuple[str, ...]] = {
    "workspaces.create": ("name",),
    "files.put": ("body",),
    "messages.send": ("subject", "body"),
}
FORMAT_CHARS_MAX = 1000


def is_reference(value: Any) -> bool:
    return isinstance(value, dict)


def check(intent_id: str, action: str, params: dict[str, Any], after: Any,
          recorded: dict[str, str]) -> list[str]:  # fmt: skip
    """The intent's `after` list, checked with its references (`recorded`: id -> action of
    every intent this executor recorded); raises ProtocolError 12 naming the problem."""
    if after is None:
        after = []
    if not isinstance(after, list) or not all(isinstance(a, str) and a for a in after):
        raise ProtocolError(MALFORMED, "intent.after must be a list of intent ids")
    if len(set(after)) != len(after):
        raise ProtocolError(MALFORMED, f"intent.after lists an id twice: {after}")
    for before in after:
        if before not in recorded:
            raise ProtocolError(MALFORMED, f"intent {intent_id} comes after {before}, which this executor has never recorded")
    for name, value in params.items():
        if is_reference(value):
            _check_reference(action, name, value, after, recorded)
    return after


def _check_reference(action: str, name: str, ref: dict[str, Any], after: list[str], recorded: dict[str, str]) -> None:
    where = f"params.{name}"
    unknown = sorted(set(ref) - {"from", "field", "format"})
    if unknown:
        raise ProtocolError(MALFORMED, f"{where}: unknown key {unknown[0]!r} in a reference")
    source, field, fmt = ref.get("from"), ref.get("field"), ref.get("format")
    if not isinstance(source, str) or not isinstance(field, str):
        raise ProtocolError(MALFORMED, f"{where}: a reference needs a string `from` and `field`")
    if fmt is not None and (not isinstance(fmt, str) or fmt.count("{}") != 1 or len(fmt) > FORMAT_CHARS_MAX):
        raise ProtocolError(MALFORMED, f"{where}: `format` must hold {{}} exactly once (at most {FORMAT_CHARS_MAX} characters)")
    if source not in after:
        raise ProtocolError(MALFORMED, f"{where}: the reference reads {source}, which is not in `after`")
    if name not in TAKES_REFERENCE.get(action, ()):
        raise ProtocolError(MALFORMED, f"{where}: {action}'s parameter {name!r} cannot take a reference")
    if field not in RESULT_FIELDS.get(recorded[source], {}):
        raise ProtocolError(MALFORMED, f"{where}: {recorded[source]} ({source}) has no result field {field!r}")


def released(intent_id: str, after: list[str], params: dict[str, Any],
             views: dict[str, dict[str, Any]]) -> Optional[tuple[str, dict[str, Any]]]:  # fmt: skip
    """What a step may do now: ("recorded", {"resolved": {...}}) to run with its references
    resolved, ("failed", ...) cancelled, ("escalated", ...), or None (still blocked)."""
    for before in after:
        state = (views.get(before) or {}).get("state")
        if state == "failed":
            return ("failed", {"reason": f"cancelled: the intent it comes after ({before}) failed"})
        if state == "escalated":
            return ("escalated", {"reason": f"waits for {before}, which is escalated", "could_duplicate": False,
                                  "key": intent_id})  # fmt: skip
    if any((views.get(before) or {}).get("state") != "confirmed" for before in after):
        return None
    resolved: dict[str, Any] = {}
    for name, ref in params.items():
        if not is_reference(ref):
            continue
        source = views[ref["from"]]
        value = next((source["evidence"][k] for k in RESULT_FIELDS[source["action"]][ref["field"]]
                      if source.get("evidence", {}).get(k)), None)  # fmt: skip
        if value is None:
            return ("escalated", {"reason": f"{ref['from']} is confirmed but recorded no {ref['field']}",
                                  "could_duplicate": False, "key": intent_id})  # fmt: skip
        fmt = ref.get("format")
        resolved[name] = fmt.replace("{}", str(value), 1) if fmt else value
    return ("recorded", {"resolved": resolved} if resolved else {})


def job_params(row: dict[str, Any]) -> dict[str, Any]:
    """The params a row's job runs with: the authorised ones, references replaced by the values
    resolved (and recorded) when the step was released."""
    return {**row["params"], **(row.get("evidence") or {}).get("resolved", {})}
