"""The client of a running `twice serve`: its control endpoint (scenario, steps, check,
reset) and each fake's own control API (rules, seeds, clock, ledger, journal).

Everything is HTTP on loopback with `urllib.request`, so the client needs nothing beyond the
standard library; every request has a timeout, and every wait a bound.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, Union

from twice.model import Claim, Scenario, Step, Verdict

__all__ = [
    "CHECK_SETTLE_WAIT_S_MAX",
    "REQUEST_TIMEOUT_S_DEFAULT",
    "STEP_WAIT_S_DEFAULT",
    "Twice",
    "TwiceError",
    "TwiceHTTPError",
    "TwiceTimeout",
    "TwiceUnsettled",
    "TwiceViolation",
]

#: How long one control request may take before the client gives up on it.
REQUEST_TIMEOUT_S_DEFAULT = 30.0
#: How long `wait_step` waits for a step's point when the caller does not say.
STEP_WAIT_S_DEFAULT = 30.0
#: How long `wait_webhooks` waits by default: past the payments fake's last retry (1 + 2 + 4 s
#: after a first attempt that waited up to 10 s for an answer).
WEBHOOKS_WAIT_S_DEFAULT = 30.0
#: The longest serve holds one long poll of `GET /__twice/steps/N` (its `STEP_WAIT_MS_MAX`);
#: a longer wait asks again.
_STEP_POLL_MS_MAX = 60_000
#: Extra time a long poll's socket gets beyond what serve was asked to wait.
_POLL_SLACK_S = 5.0
#: The longest serve's check waits for the world to settle before it judges (its
#: `SETTLE_WAIT_MS_MAX`: the longest settle bound a scenario may announce, plus a margin); a
#: check's request may take that long beyond the client's own timeout.
CHECK_SETTLE_WAIT_S_MAX = 1_201.0
#: `twice check`'s exit code for a check asked not to wait that found nothing violated in a
#: world still unsettled: no verdict yet.
EXIT_UNSETTLED = 3

JSON = Any

#: Requests go straight to serve, whatever `http_proxy` says: serve and its fakes listen on
#: loopback (or an address the test chose), and a proxy in between would be a fault of its own.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
ClaimLike = Union[Claim, Mapping[str, Any]]


class TwiceError(Exception):
    """The kit could not do what was asked: serve unreachable, a request refused, a wait
    that ran out. Never a verdict: a violated invariant is `TwiceViolation`."""


class TwiceHTTPError(TwiceError):
    """Serve or a fake answered with an error status; `message` is its own words (which name
    the field and the value at fault)."""

    def __init__(self, method: str, url: str, status: int, message: str) -> None:
        super().__init__(f"{method} {url} answered {status}: {message}")
        self.method = method
        self.url = url
        self.status = status
        self.message = message


class TwiceTimeout(TwiceError):
    """A bounded wait ran out (a step's point never reached, serve not answering)."""


class TwiceViolation(AssertionError):
    """The verdict on the claims: at least one invariant was violated.

    An `AssertionError`, so that pytest reports it as a test failure (not an error) and
    `pytest.mark.xfail(raises=TwiceViolation)` can expect it. The message is the verdict's own
    `summary`, which names each violated invariant with the ledger's evidence and the command
    that replays the scenario; the whole verdict is in `verdict`.
    """

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.summary)
        self.verdict = verdict


class TwiceUnsettled(AssertionError):
    """No verdict yet: the check was asked not to wait (`wait=False`), nothing was violated in
    what serve read, but something still pending (a late commit, a delivery due) could change
    a ledger. Harm may still land, so a test that stopped here would pass on a world that is
    not done: check again with `wait=True` (the default). An `AssertionError`, as
    `TwiceViolation` is; the message is the verdict's summary, which lists what was pending, and
    the verdict (`exit_code` 3, `settled` false) is in `verdict`.
    """

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.summary)
        self.verdict = verdict


class Twice:
    """A client of one `twice serve`, given the URLs it wrote to `--urls-file`.

    `urls` holds each service's base URL (`payments`, `workspaces`, `files`, `chain`,
    `messages`) and `control`, serve's own endpoint. Point the application's SDK at `url("payments")` and
    the like; drive the world through the methods below. `accounts` lists the chain accounts
    serve funded (`address`, `private_key`, `balance_wei`): test keys, public.
    """

    def __init__(self, urls: Mapping[str, Any], *, timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT) -> None:
        if "control" not in urls:
            raise TwiceError(
                f"the URLs have no 'control' entry ({sorted(urls)}): they must be what "
                "`twice serve --urls-file` writes"
            )
        # The file's string entries are URLs; `accounts` is the list of funded dev accounts.
        self.urls: dict[str, str] = {name: url.rstrip("/") for name, url in urls.items() if isinstance(url, str)}
        self.accounts: list[dict[str, str]] = [
            {str(k): str(v) for k, v in account.items()}
            for account in (urls.get("accounts") or [])
            if isinstance(account, Mapping)
        ]
        self.timeout_s = timeout_s
        #: The `twice.ServeProcess` this client was started with, when the kit started serve
        #: (its `pid`, `log_tail()`); None for a serve started elsewhere.
        self.serve: Any = None

    @classmethod
    def from_urls_file(cls, path: Union[str, os.PathLike[str]], **kwargs: Any) -> Twice:
        """A client of the serve that wrote `path` (`twice serve --urls-file PATH`)."""
        with open(path, encoding="utf-8") as f:
            urls = json.load(f)
        if not isinstance(urls, dict):
            raise TwiceError(f"{path}: expected a JSON object of URLs, got {type(urls).__name__}")
        return cls(urls, **kwargs)

    # -- URLs ---------------------------------------------------------------------------

    @property
    def control(self) -> str:
        """Serve's own control endpoint."""
        return self.urls["control"]

    def url(self, service: str) -> str:
        """The base URL of `service` (`payments`, `workspaces`, `files`, `chain`, `messages`)."""
        try:
            return self.urls[service]
        except KeyError:
            known = ", ".join(name for name in sorted(self.urls) if name != "control")
            raise TwiceError(f"no service {service!r} (serve has: {known})") from None

    def health(self) -> JSON:
        """`GET /__twice/health` of serve: `{"service": "serve", "ok": true, "urls"}`."""
        return self._request("GET", f"{self.control}/__twice/health")

    # -- Scenario -------------------------------------------------------------------------

    def load_scenario(self, name_or_toml: Union[str, os.PathLike[str]]) -> Scenario:
        """Sets up a scenario's world on every fake (after resetting them) and returns its
        description: intents to carry out, contracts, limits, steps.

        `name_or_toml` is a catalog name (`"lost_refund_reply"`), a path to a scenario file
        (a `Path`, or a string ending in `.toml`), or a scenario's TOML text (a string with a
        newline). When the kit started serve itself (the fixtures do), a file is posted as
        its absolute path; otherwise its text is posted (serve may not see this machine's
        disk) with the path as its origin. Either way the verdict's replay line names it.
        TOML text is kept by serve in a file of its own, which the replay line names.
        """
        if isinstance(name_or_toml, os.PathLike) or (
            isinstance(name_or_toml, str) and "\n" not in name_or_toml and name_or_toml.endswith(".toml")
        ):
            path = Path(name_or_toml).resolve()
            if self.serve is not None:
                if not path.is_file():
                    raise TwiceError(f"no scenario file {path}")
                body: dict[str, str] = {"file": str(path)}
            else:
                body = {"toml": path.read_text(encoding="utf-8"), "origin": str(path)}
        elif "\n" in name_or_toml:
            body = {"toml": name_or_toml}
        else:
            body = {"name": name_or_toml}
        return Scenario.from_json(self._request("POST", f"{self.control}/__twice/scenario", body))

    def scenario(self) -> Scenario:
        """The scenario set up now, with its steps as they are (`GET /__twice/scenario`)."""
        return Scenario.from_json(self._request("GET", f"{self.control}/__twice/scenario"))

    def reset(self) -> None:
        """Resets every fake (state, rules, ledgers, journals, keys, contracts), forgets the
        scenario and lets go of every held request."""
        self._request("POST", f"{self.control}/__twice/reset")

    # -- Steps ----------------------------------------------------------------------------

    def steps(self) -> list[Step]:
        """The scenario's steps as they are now."""
        return [Step.from_json(s) for s in self._request("GET", f"{self.control}/__twice/steps")]

    def wait_step(self, n: int, timeout_s: float = STEP_WAIT_S_DEFAULT) -> Step:
        """Step `n` once its point is reached (or it is done), waiting at most `timeout_s`.

        At a request point the request that reached it is held unanswered until
        `step_done(n)`. Raises `TwiceTimeout`, with the step's own words on what reaches it,
        if the point is not reached in time.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            left_s = max(0.0, deadline - time.monotonic())
            wait_ms = min(_STEP_POLL_MS_MAX, int(left_s * 1000))
            answer = self._request(
                "GET",
                f"{self.control}/__twice/steps/{n}?wait_ms={wait_ms}",
                timeout_s=wait_ms / 1000 + _POLL_SLACK_S,
            )
            step = Step.from_json(answer)
            if step.progress != "pending":
                return step
            if time.monotonic() >= deadline:
                raise TwiceTimeout(
                    f"step {n} ({step.do}) still pending after {timeout_s:g} s: its point "
                    f"{json.dumps(step.at)} was not reached. The step says: {step.how}"
                )

    def step_done(self, n: int) -> Step:
        """Tells serve the test performed step `n`: serve applies it if it is serve's own and
        lets go of the request held at its point."""
        return Step.from_json(self._request("POST", f"{self.control}/__twice/steps/{n}/done"))

    # -- Verdict --------------------------------------------------------------------------

    def check(
        self, claims: Iterable[ClaimLike], *, raise_on_violation: bool = True, wait: bool = True
    ) -> Verdict:
        """Judges what the application claims against the fakes' ledgers and journals.

        Serve judges once the world has settled, as `twice run` does: it first waits until no
        fake has anything left that could change a ledger by itself (a request still being
        worked on, a late commit, a delivery still due, a transaction a block will take), at
        most the scenario's settle bound plus a margin, and `verdict.ledgers_read_at_ms` says
        when it read them. A request held at a step the test never said it performed cannot
        settle without the test: the verdict is then a single `world-unsettled`, violated,
        naming the step and how to release it. `wait=False` judges at once; a verdict judged
        with something still pending says so (`verdict.settled` is false, `verdict.pending`
        lists what, and the summary says "judged before the world settled").

        Returns the verdict when every invariant held on a settled world. When one was
        violated, raises `TwiceViolation` (an `AssertionError`, so a test fails) whose message
        is the verdict's summary; when none was but the world had not settled (`wait=False`
        with something pending: `exit_code` 3), raises `TwiceUnsettled`: no verdict yet.
        Neither is raised when `raise_on_violation` is false. A claim serve refuses (an unknown
        intent, a misspelt state) raises `TwiceHTTPError` naming the field and the value.
        """
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        body = {"claims": [claim_json(c) for c in claims]}
        if wait:
            url, timeout_s = f"{self.control}/__twice/check", self.timeout_s + CHECK_SETTLE_WAIT_S_MAX
        else:
            url, timeout_s = f"{self.control}/__twice/check?wait=false", self.timeout_s
        verdict = Verdict.from_json(self._request("POST", url, body, timeout_s=timeout_s))
        if raise_on_violation and not verdict.held:
            raise TwiceViolation(verdict)
        if raise_on_violation and verdict.exit_code == EXIT_UNSETTLED:
            raise TwiceUnsettled(verdict)
        return verdict

    # -- Each fake's control API ------------------------------------------------------------

    def add_rule(self, service: str, rule: Union[Mapping[str, Any], list[Mapping[str, Any]]]) -> list[str]:
        """Arms one fault rule (or a list) on `service`; returns the rule ids. The rule format
        is `docs/faults.md`'s: `{"method", "path", "where", "nth", "times", "probability",
        "fault"}`."""
        answer = self._request("POST", f"{self.url(service)}/__twice/rules", rule)
        return list(answer["ids"])

    def rules(self, service: str) -> list[JSON]:
        """The rules armed on `service`, each with how often it `matched` and `fired`."""
        return list(self._request("GET", f"{self.url(service)}/__twice/rules")["rules"])

    def clear_rules(self, service: str, rule_id: Optional[str] = None) -> None:
        """Disarms every rule on `service`, or only `rule_id`."""
        suffix = "" if rule_id is None else "/" + urllib.parse.quote(rule_id, safe="")
        self._request("DELETE", f"{self.url(service)}/__twice/rules{suffix}")

    def seed(self, service: str, body: Optional[Mapping[str, Any]] = None, **fields: Any) -> JSON:
        """Seeds `service`: payments `payment_intents=[{"id", "amount", "currency"}]`, files
        `buckets=[...]`, `objects=[...]`, chain `accounts=[...]`, `chain_id`,
        `block_time_ms`; as a mapping or as keyword arguments."""
        merged = {**(body or {}), **fields}
        return self._request("POST", f"{self.url(service)}/__twice/seed", merged)

    def clock(self, service: str) -> JSON:
        """`{"now_ms", "jumped_ms"}` of `service`'s clock."""
        return self._request("GET", f"{self.url(service)}/__twice/clock")

    def jump_clock(self, service: str, ms: int) -> JSON:
        """Moves `service`'s clock `ms` forward (time never moves back); returns the clock."""
        if ms < 0:
            raise TwiceError(f"jump_clock: {ms} ms is negative; a service's time never moves back")
        return self._request("POST", f"{self.url(service)}/__twice/clock/jump", {"by_ms": ms})

    def contract(self, service: str) -> JSON:
        """The contract `service` keeps now."""
        return self._request("GET", f"{self.url(service)}/__twice/contract")

    def ledger(self, service: str) -> list[JSON]:
        """What really happened at `service`: its effects, in order (`seq`, `at_ms`, `kind`,
        `object_id`, `params`, `idempotency_key`, `fencing_token`, `request_id`)."""
        return list(self._request("GET", f"{self.url(service)}/__twice/ledger")["effects"])

    def journal(self, service: str) -> list[JSON]:
        """The newest requests `service` received, with the faults applied to each and how
        each ended (`answered`, `reset`, `closed`, `held`, `abandoned`)."""
        return list(self._request("GET", f"{self.url(service)}/__twice/journal")["entries"])

    def webhooks(self) -> JSON:
        """The payments fake's webhooks: `secrets` (endpoint id to its `whsec_` secret),
        `deliveries` (each event to each endpoint, with its `standing`: `due`, `sending`,
        `delivered`, `gave_up`, `endpoint_gone`, `refused`), `attempts`, and the
        `awaiting_payments` a scenario makes once the application listens."""
        return self._request("GET", f"{self.url('payments')}/__twice/webhooks")

    def wait_webhooks(self, timeout_s: float = WEBHOOKS_WAIT_S_DEFAULT) -> JSON:
        """Waits until the payments fake owes no webhook: every payment the application listens
        for has been made, and every delivery has ended (answered 2xx, given up, or refused).
        Call it before reading the application's record for its claims. Raises `TwiceTimeout`
        after `timeout_s`, naming what is still owed."""
        deadline = time.monotonic() + timeout_s
        while True:
            report = self.webhooks()
            owed = [p for p in report.get("awaiting_payments", []) if p.get("due_ms") is not None]
            owed += [d for d in report.get("deliveries", []) if d.get("standing") in ("due", "sending")]
            if not owed:
                return report
            if time.monotonic() >= deadline:
                raise TwiceTimeout(f"the payments fake still owes webhooks after {timeout_s:g} s: {owed}")
            time.sleep(0.05)

    # -- HTTP -----------------------------------------------------------------------------

    def _request(self, method: str, url: str, body: Any = None, *, timeout_s: Optional[float] = None) -> JSON:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                text = response.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            raise TwiceHTTPError(method, url, e.code, _error_message(e)) from None
        except (urllib.error.URLError, OSError) as e:
            # URLError wraps refused connections; a bare socket timeout is an OSError.
            reason = getattr(e, "reason", e)
            raise TwiceError(
                f"{method} {url}: {reason} (is `twice serve` running, and are these its URLs?)"
            ) from None
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise TwiceError(f"{method} {url}: expected JSON, got {text[:200]!r}") from None


def claim_json(claim: ClaimLike) -> JSON:
    """A claim as serve reads it: a `Claim`'s fields without the unset ones, or a mapping
    as given."""
    if isinstance(claim, Claim):
        return claim.to_json()
    if isinstance(claim, Mapping):
        return dict(claim)
    raise TypeError(f"a claim is a twice.Claim or a mapping, not {type(claim).__name__}")


def _error_message(e: urllib.error.HTTPError) -> str:
    """The `{"error": {"message"}}` of serve and the fakes, or the body as it came."""
    try:
        text = e.read().decode("utf-8", "replace")
    except OSError:
        return e.reason if isinstance(e.reason, str) else str(e.reason)
    try:
        message = json.loads(text)["error"]["message"]
        return str(message)
    except (ValueError, KeyError, TypeError):
        return text[:500] or str(e.reason)
