"""The kit against a real `twice serve` (`$TWICE_BIN`, else `twice` on the PATH): the client's
every helper over loopback HTTP, serve's start and stop, and the fixtures as pytest users
meet them (in an inner pytest run through `pytester`).

The requests the tests make to the fakes are plain `urllib` calls, so the kit's tests need
nothing but the standard library and pytest.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from twice import (
    Claim,
    ServeProcess,
    ServeStartError,
    Twice,
    TwiceError,
    TwiceHTTPError,
    TwiceTimeout,
    TwiceUnsettled,
    TwiceViolation,
    bundled_twice,
    find_twice,
)

pytest_plugins = ["pytester"]

#: The bound on every request these tests make to a fake.
HTTP_TIMEOUT_S = 10.0

LOST_REPLY_TOML = """
name = "kit_lost_reply"
description = "A refund commits and its reply is lost."

[payment_intents]
pi_77 = 9000

[[intents]]
id = "refund-77"
action = "payments.refund"
params = { payment_intent = "pi_77", amount = 700 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = "drop_after_commit"
"""


#: The first refund commits 3 s after it arrived, inside the 4 s settle bound; its caller has
#: given up after 0.3 s. (A long delay leaves a check asked "at once" seconds of room.)
LATE_COMMIT_TOML = """
name = "kit_late_commit"
description = "The first refund commits 3 s after it arrived; its caller gave up long before."

[limits]
request_timeout_ms = 300

[services.payments]
settle_ms_max = 4000

[payment_intents]
pi_78 = 9000

[[intents]]
id = "refund-78"
action = "payments.refund"
params = { payment_intent = "pi_78", amount = 700 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = { kind = "commit_after_timeout", delay_ms = 3000 }

[expect]
refund-78 = "confirmed"
"""

#: The email API answers at once and the message lands in the inbox 2.5 s later, inside the
#: 4 s settle bound.
LATE_DELIVERY_TOML = """
name = "kit_late_delivery"
description = "The welcome email is accepted at once and delivered 2.5 s later."

[services.messages]
settle_ms_max = 4000

[[intents]]
id = "welcome-ada"
action = "messages.send"
params = { to = "ada@example.com", subject = "Welcome", body = "Your workspace is ready." }

[[faults]]
service = "messages"
method = "POST"
path = "/emails"
nth = 1
fault = { kind = "deliver_late", delay_ms = 2500 }

[expect]
welcome-ada = "confirmed"
"""


def send_email(base: str, to: str, subject: str, body: str) -> tuple[Optional[int], Any]:
    """`POST /emails` as Resend's SDKs send it; (status, body)."""
    data = json.dumps({"from": "Acme <hello@acme.example>", "to": [to], "subject": subject, "text": body}).encode()
    headers = {"Authorization": "Bearer re_test_kit", "Content-Type": "application/json"}
    request = urllib.request.Request(f"{base}/emails", data=data, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        return response.status, json.loads(response.read())


def refund(
    base: str, payment_intent: str, amount: int, key: Optional[str], timeout_s: float = HTTP_TIMEOUT_S
) -> tuple[Optional[int], Any]:
    """`POST /v1/refunds` as Stripe's SDKs send it; (status, body), or (None, the error) when
    no reply came."""
    headers = {"Authorization": "Bearer sk_test_kit", "Content-Type": "application/x-www-form-urlencoded"}
    if key is not None:
        headers["Idempotency-Key"] = key
    data = urllib.parse.urlencode({"payment_intent": payment_intent, "amount": amount}).encode()
    request = urllib.request.Request(f"{base}/v1/refunds", data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        return None, e


def refunds_in(ledger: list[Any]) -> list[Any]:
    return [e for e in ledger if e["kind"] == "refund.created"]


# -- The client ---------------------------------------------------------------------------


def test_a_catalog_scenario_is_described_with_its_intents_contracts_limits_and_steps(
    twice_serve_session: Twice,
) -> None:
    scenario = twice_serve_session.load_scenario("crash_while_refund_in_flight")
    assert scenario.name == "crash_while_refund_in_flight"
    assert [(i.id, i.action, i.params) for i in scenario.intents] == [
        ("refund-2207", "payments.refund", {"payment_intent": "pi_2207", "amount": 800})
    ]
    assert scenario.expect == {"refund-2207": "confirmed"}
    assert scenario.contracts["payments"]["key_retention_ms"] == 2000
    assert scenario.request_timeout_s == scenario.limits["request_timeout_ms"] / 1000
    [step] = scenario.steps
    assert (step.index, step.do, step.by, step.worker, step.progress) == (0, "crash", "test", "w1", "pending")
    assert step.serve_sees_the_point and "SIGKILL" in step.how
    # The same description comes back from GET.
    assert twice_serve_session.scenario().intents == scenario.intents


def test_a_scenario_that_accepts_several_honest_states_lists_them(twice_serve_session: Twice) -> None:
    scenario = twice_serve_session.load_scenario("refund_permission_denied")
    assert scenario.expect == {"refund-3107": ["escalated", "failed"]}
    assert scenario.accepts("refund-3107", "failed") and scenario.accepts("refund-3107", "escalated")
    assert not scenario.accepts("refund-3107", "confirmed")


def test_a_scenario_loads_from_toml_text_and_from_a_file(twice_serve_session: Twice, tmp_path: Path) -> None:
    assert twice_serve_session.load_scenario(LOST_REPLY_TOML).name == "kit_lost_reply"
    path = tmp_path / "kit_lost_reply.toml"
    path.write_text(LOST_REPLY_TOML.replace("kit_lost_reply", "kit_from_file"))
    assert twice_serve_session.load_scenario(path).name == "kit_from_file"
    assert twice_serve_session.load_scenario(str(path)).name == "kit_from_file"


def test_serve_refusals_carry_serves_own_words(twice_serve_session: Twice) -> None:
    with pytest.raises(TwiceHTTPError) as unknown:
        twice_serve_session.load_scenario("lost_refund_replay")
    assert unknown.value.status == 400
    assert 'did you mean "lost_refund_reply"' in unknown.value.message
    twice_serve_session.reset()
    with pytest.raises(TwiceHTTPError) as none:
        twice_serve_session.scenario()
    assert none.value.status == 409 and "no scenario is set up" in none.value.message
    with pytest.raises(TwiceError, match="no service 'ledgers'"):
        twice_serve_session.url("ledgers")


def test_rules_seeds_ledger_and_journal_show_a_lost_reply_and_its_replay(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    twice.reset()
    twice.seed("payments", payment_intents=[{"id": "pi_9", "amount": 5000}])
    [rule_id] = twice.add_rule(
        "payments", {"id": "lost", "method": "POST", "path": "/v1/refunds", "nth": 1, "fault": "drop_after_commit"}
    )
    assert rule_id == "lost"
    payments = twice.url("payments")

    status, error = refund(payments, "pi_9", 1000, "key-9")
    assert status is None, "the first reply is lost"
    status, body = refund(payments, "pi_9", 1000, "key-9")
    assert status == 200 and body["object"] == "refund"

    # One refund: the retry under the same key got the saved one back.
    [effect] = refunds_in(twice.ledger("payments"))
    assert (effect["object_id"], effect["idempotency_key"]) == (body["id"], "key-9")
    outcomes = [(e["outcome"], e["replayed"]) for e in twice.journal("payments") if e["path"] == "/v1/refunds"]
    assert outcomes == [("closed", False), ("answered", True)]
    [armed] = twice.rules("payments")
    assert (armed["id"], armed["fired"]) == ("lost", 1)
    twice.clear_rules("payments")
    assert twice.rules("payments") == []


def test_a_clock_jump_expires_keys_so_the_same_key_refunds_again(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    twice.reset()
    twice.seed("payments", {"payment_intents": [{"id": "pi_8", "amount": 5000}]})
    before = twice.clock("payments")["now_ms"]
    assert refund(twice.url("payments"), "pi_8", 100, "key-8")[0] == 200
    # Past the default contract's 24 h of key retention.
    after = twice.jump_clock("payments", 25 * 3600 * 1000)
    assert after["now_ms"] >= before + 25 * 3600 * 1000
    assert refund(twice.url("payments"), "pi_8", 100, "key-8")[0] == 200
    assert len(refunds_in(twice.ledger("payments"))) == 2
    with pytest.raises(TwiceError, match="negative"):
        twice.jump_clock("payments", -1)


def test_a_step_is_reached_held_and_let_go(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    scenario = twice.load_scenario("crash_while_refund_in_flight")
    intent = scenario.intents[0]
    answered: list[tuple[Optional[int], Any]] = []
    sender = threading.Thread(
        target=lambda: answered.append(
            refund(twice.url("payments"), intent.params["payment_intent"], intent.params["amount"], "key-2207")
        )
    )
    sender.start()
    try:
        step = twice.wait_step(0, timeout_s=10)
        assert step.progress == "reached" and step.request == "POST /v1/refunds at payments"
        # Held: no answer while the step is not done.
        time.sleep(0.2)
        assert answered == []
    finally:
        done = twice.step_done(0)
        sender.join(timeout=HTTP_TIMEOUT_S)
    assert done.progress == "done" and not sender.is_alive()
    assert answered[0][0] == 200
    assert [s.progress for s in twice.steps()] == ["done"]


def test_waiting_for_a_step_that_is_never_reached_is_bounded(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    twice.load_scenario("crash_while_refund_in_flight")
    started = time.monotonic()
    with pytest.raises(TwiceTimeout, match=r"step 0 \(crash\) still pending after 0.3 s"):
        twice.wait_step(0, timeout_s=0.3)
    assert time.monotonic() - started < 5
    with pytest.raises(TwiceHTTPError, match="no step 3"):
        twice.wait_step(3, timeout_s=0.1)


def test_check_returns_the_verdict_when_every_invariant_held(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    scenario = twice.load_scenario(LOST_REPLY_TOML)
    intent = scenario.intents[0]
    assert refund(twice.url("payments"), "pi_77", 700, "k77")[0] is None
    status, body = refund(twice.url("payments"), "pi_77", 700, "k77")
    assert status == 200
    verdict = twice.check(
        [Claim(id=intent.id, action=intent.action, state="confirmed", attempts=2, evidence={"key": "k77"})]
    )
    assert verdict.held and verdict.exit_code == 0 and verdict.violated == []
    assert verdict.line("no-duplicate-effect").status == "held"


def test_check_raises_the_verdicts_summary_when_an_invariant_is_violated(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    twice.load_scenario(LOST_REPLY_TOML)
    # No key: the retry is a second refund.
    assert refund(twice.url("payments"), "pi_77", 700, None)[0] is None
    assert refund(twice.url("payments"), "pi_77", 700, None)[0] == 200
    claim = {"id": "refund-77", "action": "payments.refund", "state": "confirmed", "attempts": 2}
    with pytest.raises(TwiceViolation) as caught:
        twice.check([claim])
    assert isinstance(caught.value, AssertionError)
    verdict = caught.value.verdict
    assert str(caught.value) == verdict.summary
    assert "no-duplicate-effect" in verdict.violated
    [first, second] = refunds_in(twice.ledger("payments"))
    assert "no-duplicate-effect: intent refund-77 has 2 effects" in verdict.summary
    assert first["object_id"] in verdict.summary and second["object_id"] in verdict.summary
    # Asked not to raise, check hands the same verdict back.
    again = twice.check([claim], raise_on_violation=False)
    assert (again.exit_code, again.held, again.violated) == (1, False, verdict.violated)


def test_check_waits_for_a_late_commit_so_a_retry_under_a_new_key_is_a_duplicate(twice_serve: Twice) -> None:
    twice = twice_serve
    twice.load_scenario(LATE_COMMIT_TOML)
    # A naive app: the first refund times out (it commits later), the retry has a new key.
    assert refund(twice.url("payments"), "pi_78", 700, "k78-1", timeout_s=0.3)[0] is None
    assert refund(twice.url("payments"), "pi_78", 700, "k78-2")[0] == 200
    claim = Claim(id="refund-78", action="payments.refund", state="confirmed", attempts=2)

    # Asked at once, the check sees one refund and says the world had not settled: nothing
    # violated yet is no pass (the late refund may still land), so it raises TwiceUnsettled.
    with pytest.raises(TwiceUnsettled) as early:
        twice.check([claim], wait=False)
    assert isinstance(early.value, AssertionError) and str(early.value) == early.value.verdict.summary
    at_once = early.value.verdict
    assert at_once.held and not at_once.settled and at_once.exit_code == 3
    [late] = [p for p in at_once.pending if p["what"] == "late-commit"]
    assert (late["service"], late["request"]) == ("payments", "POST /v1/refunds")
    assert "judged before the world settled (asked not to wait)" in at_once.summary
    assert at_once.ledgers_read_at_ms is not None and late["due_ms"] > at_once.ledgers_read_at_ms

    # By default it waits for the late commit, and the retry is a second refund.
    with pytest.raises(TwiceViolation) as caught:
        twice.check([claim])
    verdict = caught.value.verdict
    assert "no-duplicate-effect" in verdict.violated and verdict.settled
    assert verdict.observed["settle"]["waited"] is True
    assert len(refunds_in(twice.ledger("payments"))) == 2


def test_check_waits_for_a_late_delivery_so_a_confirmed_email_passes(twice_serve: Twice) -> None:
    twice = twice_serve
    scenario = twice.load_scenario(LATE_DELIVERY_TOML)
    intent = scenario.intent("welcome-ada")
    # The app sends once and claims confirmed on the API's 200, before the inbox has it.
    status, sent = send_email(twice.url("messages"), **intent.params)
    assert status == 200
    claim = Claim(id=intent.id, action=intent.action, state="confirmed", attempts=1, evidence={"email_id": sent["id"]})

    at_once = twice.check([claim], wait=False, raise_on_violation=False)
    assert not at_once.settled and [p["what"] for p in at_once.pending] == ["delivery"]
    assert "honest-terminal-states" in at_once.violated, at_once.summary
    assert "judged before the world settled" in at_once.summary

    verdict = twice.check([claim])
    assert verdict.held and verdict.settled, verdict.summary
    assert verdict.observed["settle"]["waited"] is True


def free_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_webhook_scenario_waits_for_a_listener_and_wait_webhooks_is_bounded(twice_serve: Twice) -> None:
    twice = twice_serve
    scenario = twice.load_scenario("fault_duplicate_webhook")
    intent = scenario.intent("welcome-order-1")
    assert intent.triggered
    assert intent.on_event == {"type": "payment_intent.succeeded", "payment_intent": "pi_order_1"}

    # Nobody listens: nothing is owed yet, and the verdict says what the payment waits for.
    report = twice.wait_webhooks(timeout_s=1.0)
    assert report["awaiting_payments"] == [{"payment_intent": "pi_order_1", "forged": False, "due_ms": None}]
    verdict = twice.check([], raise_on_violation=False)
    assert [p["what"] for p in verdict.pending] == ["awaiting-listener"], verdict.pending
    assert "expected-states" in verdict.violated, verdict.summary

    # An endpoint on a port nobody listens at: the payment is made, its event owed, and the
    # wait for it gives up in time, naming what is owed.
    closed = free_port()
    form = urllib.parse.urlencode(
        {"url": f"http://127.0.0.1:{closed}/hooks", "enabled_events[0]": "payment_intent.succeeded"}
    ).encode()
    request = urllib.request.Request(
        twice.url("payments") + "/v1/webhook_endpoints",
        data=form,
        headers={"Authorization": "Bearer sk_test_kit"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        assert json.load(response)["secret"].startswith("whsec_")
    with pytest.raises(TwiceTimeout, match="still owes webhooks"):
        twice.wait_webhooks(timeout_s=0.5)


def test_a_malformed_claim_is_refused_with_the_field_never_judged(twice_serve_session: Twice) -> None:
    twice = twice_serve_session
    twice.load_scenario(LOST_REPLY_TOML)
    with pytest.raises(TwiceHTTPError, match=r'claims\[0\].state: "done" is not a state'):
        twice.check([{"id": "refund-77", "action": "payments.refund", "state": "done"}])
    with pytest.raises(ValueError, match="'done' is not one of recorded"):
        Claim(id="refund-77", action="payments.refund", state="done")


# -- Serve as a child process ----------------------------------------------------------------


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable shell script standing in for the twice binary."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_serve_starts_answers_and_stops_on_sigterm() -> None:
    serve = ServeProcess(seed=7)
    with serve as twice:
        assert twice.health()["ok"] is True
        assert twice.serve is serve and serve.pid is not None
        assert set(twice.urls) >= {"payments", "workspaces", "files", "chain", "control"}
        assert twice.load_scenario("lost_refund_reply").seed == 7
        workdir = serve.workdir
    # SIGTERM is a clean stop for serve; its own directory is gone with it.
    assert serve.pid is None and not workdir.exists()
    with pytest.raises(TwiceError, match="not started"):
        serve.client


def test_a_serve_that_dies_at_start_is_reported_with_its_output(tmp_path: Path) -> None:
    binary = script(tmp_path, "dies", "echo 'error: cannot listen on 127.0.0.1:1' >&2\nexit 2\n")
    with pytest.raises(ServeStartError, match=r"exited with 2 before writing its URLs file:\nerror: cannot listen"):
        ServeProcess(binary=binary).start()


def test_a_serve_that_never_gets_ready_is_killed_after_its_bounds(tmp_path: Path) -> None:
    # Ignores SIGTERM, never writes the URLs file: only SIGKILL ends it.
    binary = script(tmp_path, "stuck", "trap '' TERM\necho starting\nwhile :; do sleep 0.05; done\n")
    serve = ServeProcess(binary=binary, start_timeout_s=0.3, stop_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(ServeStartError, match=r"did not write its URLs file within 0.3 s; it was stopped"):
        serve.start()
    assert time.monotonic() - started < 5
    assert serve.pid is None


def test_the_binary_comes_from_twice_bin_or_the_path_and_its_absence_is_explained(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = find_twice()
    monkeypatch.setenv("TWICE_BIN", real)
    assert find_twice() == real
    monkeypatch.setenv("TWICE_BIN", str(tmp_path / "nothing-here"))
    with pytest.raises(ServeStartError, match="TWICE_BIN names .* which is not an executable file"):
        find_twice()
    monkeypatch.delenv("TWICE_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("twice.serve.bundled_twice", lambda name="twice": None)
    with pytest.raises(ServeStartError) as missing:
        find_twice()
    assert "TWICE_BIN is not set" in str(missing.value) and "not on the PATH" in str(missing.value)
    assert "installed without one" in str(missing.value)
    monkeypatch.setenv("PATH", os.path.dirname(real) + os.pathsep + str(tmp_path))
    assert find_twice() == os.path.join(os.path.dirname(real), "twice")


def test_the_binary_a_wheel_installed_is_found_last(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A wheel installs `twice` into the environment's scripts directory (a venv's bin/).
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    installed = script(scripts, "twice", "exit 0\n")
    monkeypatch.setattr("sysconfig.get_path", lambda name, scheme=None: str(scripts))
    monkeypatch.delenv("TWICE_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert bundled_twice() == installed
    assert find_twice() == installed
    # TWICE_BIN and the PATH still win.
    other = tmp_path / "other"
    other.mkdir()
    on_path = script(other, "twice", "exit 0\n")
    monkeypatch.setenv("PATH", str(other))
    assert find_twice() == on_path
    monkeypatch.setenv("TWICE_BIN", installed)
    assert find_twice() == installed
    assert bundled_twice("twice-executor") is None


def test_the_urls_file_lists_the_funded_dev_accounts_beside_the_urls(twice_serve: Twice) -> None:
    accounts = twice_serve.accounts
    assert [a["address"] for a in accounts][:1] == ["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"]
    assert all(set(a) == {"address", "private_key", "balance_wei"} for a in accounts), accounts
    assert "accounts" not in twice_serve.urls
    assert set(twice_serve.urls) >= {"payments", "workspaces", "files", "chain", "messages", "control"}


# -- The fixtures, as a pytest user meets them ------------------------------------------------


def test_the_fixture_serves_one_test_and_stops_after_it(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pids = tmp_path / "pids.txt"
    pytester.makepyfile(
        f"""
        import json, urllib.request

        def test_serve_is_there(twice_serve):
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{twice_serve.serve.pid}}\\n")
            with urllib.request.urlopen(twice_serve.control + "/__twice/health", timeout=10) as r:
                assert json.load(r)["ok"]

        def test_each_test_has_its_own(twice_serve):
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{twice_serve.serve.pid}}\\n")
            assert twice_serve.load_scenario("lost_refund_reply").seed == 5
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--twice-seed", "5")
    result.assert_outcomes(passed=2)
    first, second = (int(line) for line in pids.read_text().split())
    assert first != second
    for pid in (first, second):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_violation_fails_the_users_test_with_the_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import urllib.request

        def refund(base):
            request = urllib.request.Request(
                base + "/v1/refunds", data=b"payment_intent=pi_1193&amount=1200", method="POST",
                headers={"Authorization": "Bearer sk_test_x"})
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status

        def test_refunds_twice(twice_serve_session):
            twice_serve_session.load_scenario("key_regenerated_per_attempt")
            twice_serve_session.clear_rules("payments")
            assert refund(twice_serve_session.url("payments")) == 200
            assert refund(twice_serve_session.url("payments")) == 200
            twice_serve_session.check([{"id": "refund-1193", "action": "payments.refund", "state": "confirmed"}])
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*TwiceViolation: twice: 1 scenario against*", "*no-duplicate-effect: intent refund-1193 has 2 effects*"]
    )


def test_without_a_binary_the_fixture_says_where_it_looked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TWICE_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    pytester.makepyfile("def test_needs_serve(twice_serve):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*cannot find the twice binary: no --twice-bin option, TWICE_BIN is not set*"])
