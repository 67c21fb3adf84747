"""What serve answers, as typed values: a scenario's description, its steps, the verdict; and
what a test sends: claims.

Each type keeps the JSON it was read from in `raw`, so a field serve adds later is never out
of reach; the typed fields are those a test needs to drive an application.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["STATES", "Claim", "Intent", "Scenario", "Step", "Verdict", "VerdictLine"]

#: The states a claim may name (`docs/protocol.md` §7 says what each promises).
STATES = ("recorded", "blocked", "submitted", "confirmed", "failed", "unknown", "escalated")


@dataclass(frozen=True)
class Intent:
    """One thing the scenario asks the application to do: `action` (`payments.refund`, ...)
    with `params`; `replaces` names the intent it replaces, where there is lineage.

    `on_event`, where there is one, is the webhook that authorises the intent
    (`{"type": "payment_intent.succeeded", "payment_intent": "pi_...", "forged": bool}`): the
    application does the work when that event reaches the endpoint it registered with the
    payments fake, once however often it arrives, and never for a forged one
    (docs/webhooks.md)."""

    id: str
    action: str
    params: dict[str, Any]
    replaces: Optional[str] = None
    on_event: Optional[dict[str, Any]] = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Intent:
        on_event = value.get("on_event")
        return cls(
            id=str(value["id"]),
            action=str(value["action"]),
            params=dict(value.get("params") or {}),
            replaces=value.get("replaces"),
            on_event=None if on_event is None else dict(on_event),
        )

    @property
    def triggered(self) -> bool:
        """Whether a webhook, not the test, starts this intent."""
        return self.on_event is not None


@dataclass(frozen=True)
class Step:
    """One of the scenario's process events, as a step.

    `do` is `crash`, `pause`, `start_worker`, `reconcile` (the test's, `by == "test"`) or
    `heal`, `clock_jump` (serve's own). `progress` is `pending`, `reached` or `done`; `how`
    says in words what to do.
    """

    index: int
    do: str
    event: dict[str, Any]
    at: Any
    by: str
    serve_sees_the_point: bool
    progress: str
    how: str
    request: Optional[str] = None
    reached_at_ms: Optional[int] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Step:
        return cls(
            index=int(value["index"]),
            do=str(value["do"]),
            event=dict(value.get("event") or {}),
            at=value.get("at"),
            by=str(value["by"]),
            serve_sees_the_point=bool(value["serve_sees_the_point"]),
            progress=str(value["progress"]),
            how=str(value["how"]),
            request=value.get("request"),
            reached_at_ms=value.get("reached_at_ms"),
            raw=dict(value),
        )

    @property
    def worker(self) -> Optional[str]:
        """The worker the step happens to (`w1`, `w2`), for the test's own steps."""
        worker = self.event.get("worker")
        return None if worker is None else str(worker)


@dataclass(frozen=True)
class Scenario:
    """A scenario set up on the fakes: what the application must carry out (`intents`),
    under which promises (`contracts`, per service) and timing (`limits`, such as
    `request_timeout_ms`), what a correct application ends with (`expect`: intent id to
    state), and the `steps` the test performs on the application."""

    name: str
    seed: int
    urls: dict[str, str]
    contracts: dict[str, Any]
    limits: dict[str, Any]
    intents: list[Intent]
    # Intent id to the state the scenario accepts, or to the list of states each honest there.
    expect: dict[str, str | list[str]]
    steps: list[Step]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Scenario:
        return cls(
            name=str(value["name"]),
            seed=int(value["seed"]),
            urls=dict(value.get("urls") or {}),
            contracts=dict(value.get("contracts") or {}),
            limits=dict(value.get("limits") or {}),
            intents=[Intent.from_json(i) for i in value.get("intents") or []],
            expect={
                str(k): v if isinstance(v, str) else [str(s) for s in v]
                for k, v in (value.get("expect") or {}).items()
            },
            steps=[Step.from_json(s) for s in value.get("steps") or []],
            raw=dict(value),
        )

    def accepts(self, intent_id: str, state: str) -> bool:
        """Whether the scenario accepts `state` for the intent (true where it expects nothing)."""
        want = self.expect.get(intent_id)
        if want is None:
            return True
        return state in ([want] if isinstance(want, str) else want)

    def intent(self, intent_id: str) -> Intent:
        """The intent with this id; a `KeyError` naming the scenario's ids otherwise."""
        for intent in self.intents:
            if intent.id == intent_id:
                return intent
        raise KeyError(f"no intent {intent_id!r} in {self.name} (its intents: {[i.id for i in self.intents]})")

    @property
    def request_timeout_s(self) -> float:
        """The request timeout the scenario's timing assumes, in seconds: an application
        that waits longer for an answer never sees the timeout the scenario is about."""
        return float(self.limits.get("request_timeout_ms", 2000)) / 1000.0


@dataclass(frozen=True)
class Claim:
    """What the application says of one intent at the end of a test.

    `id` and `action` must be a scenario intent's; `state` one of `STATES`; `attempts` the
    sends it made; `evidence` keys, external ids, the last error, as it knows them.
    `params` and `replaces`, if given, must be the intent's.
    """

    id: str
    action: str
    state: str
    attempts: Optional[int] = None
    evidence: Optional[dict[str, Any]] = None
    params: Optional[dict[str, Any]] = None
    replaces: Optional[str] = None

    def __post_init__(self) -> None:
        # Caught here rather than by serve's 400, so the mistake points at the line that
        # made the claim.
        if self.state not in STATES:
            raise ValueError(f"Claim {self.id!r}: state {self.state!r} is not one of {', '.join(STATES)}")

    def to_json(self) -> dict[str, Any]:
        """The claim as serve reads it; unset fields are left out."""
        out: dict[str, Any] = {"id": self.id, "action": self.action, "state": self.state}
        for name in ("attempts", "evidence", "params", "replaces"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class VerdictLine:
    """How one invariant came out: `status` is `held`, `violated` or `not-judged`;
    `evidence` has one line per problem, `reason` says why it was not judged."""

    invariant: str
    status: str
    evidence: list[str]
    reason: Optional[str] = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> VerdictLine:
        return cls(
            invariant=str(value["invariant"]),
            status=str(value.get("status") or ("held" if value.get("held") else "violated")),
            evidence=[str(e) for e in value.get("evidence") or []],
            reason=value.get("reason"),
        )


@dataclass(frozen=True)
class Verdict:
    """The verdict on a test's claims, as `twice run` gives it for a run.

    `exit_code` is `twice check`'s (0 every invariant held, 1 one was violated, 3 none was but
    the check did not wait and the world had not settled: no verdict yet); `summary`
    the terminal text; `lines` one `VerdictLine` per invariant; `results` the whole of
    `results.json`."""

    exit_code: int
    held: bool
    summary: str
    lines: list[VerdictLine]
    results: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Verdict:
        results = dict(value.get("results") or {})
        scenarios = results.get("results") or []
        lines = [VerdictLine.from_json(v) for v in (scenarios[0].get("verdicts") or [])] if scenarios else []
        return cls(
            exit_code=int(value["exit_code"]),
            held=bool(value["held"]),
            summary=str(value["summary"]),
            lines=lines,
            results=results,
        )

    @property
    def violated(self) -> list[str]:
        """The invariants violated, in the checker's order."""
        return [line.invariant for line in self.lines if line.status == "violated"]

    @property
    def observed(self) -> dict[str, Any]:
        """What serve observed of the scenario's world (`results.json`'s `observed`)."""
        scenarios = self.results.get("results") or [{}]
        return dict(scenarios[0].get("observed") or {})

    @property
    def ledgers_read_at_ms(self) -> Optional[int]:
        """Service time (ms since the Unix epoch) when serve read the ledgers it judged."""
        at = self.observed.get("ledgers_read_at_ms")
        return None if at is None else int(at)

    @property
    def pending(self) -> list[dict[str, Any]]:
        """What could still change a ledger when serve read them (`service`, `what`:
        `request`, `late-commit`, `delivery`, `pooled-tx`, `queued-tx` or `held-at-step`,
        `request`, `request_id`, `due_ms`, `detail`); empty when the world had settled."""
        return [dict(p) for p in self.observed.get("pending") or []]

    @property
    def settled(self) -> bool:
        """Whether the world had settled when serve read the ledgers: nothing pending."""
        return not self.pending

    def line(self, invariant: str) -> VerdictLine:
        """The verdict on one invariant (`no-duplicate-effect`, `honest-terminal-states`,
        ...); a `KeyError` naming those there are otherwise."""
        for line in self.lines:
            if line.invariant == invariant:
                return line
        raise KeyError(f"no verdict on {invariant!r} (there are: {[line.invariant for line in self.lines]})")
