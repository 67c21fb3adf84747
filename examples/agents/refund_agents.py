"""Example agents that refund a payment through twice's MCP tools, with a scripted model.

A pydantic-ai `Agent` whose model is a `FunctionModel`: a plain Python function that reads the
conversation so far and answers as a tool-calling model would (a tool call, or the final
text). No API key, no network beyond loopback, and the same run every time, so a test can
assert what the agent did. The tools are the ones `twice mcp` (stdio) or `twice serve
--mcp-port` (streamable HTTP) serve over the scenario's fakes, through pydantic-ai's own MCP
client (`MCPToolset` on a FastMCP transport).

Two scripts, for the same task ("refund AMOUNT of PAYMENT_INTENT"):

- `naive`: calls `refund_payment` without an idempotency key, and on any tool error calls it
  again, the same way, up to `SENDS_MAX` times; then says what it did.
- `careful`: calls `refund_payment` under an idempotency key derived from its plan step (the
  same key for every send of that step) and tags the refund with that step's id
  (`metadata: {"twice_intent": STEP}`, the reference executor's convention), and after any
  error lists the payment's refunds before it retries: a refund carrying its tag means the
  call went through and only its reply was lost (the amount alone cannot say whose refund it
  is); otherwise it sends again under the same key.

A third, `courteous`, is the careful script with one step nobody asked for: once the refund is
done it emails the customer that it was. Every refund is right, and the email is an effect no
intent authorised.

What the agent tells its user is its claim: "Done: ..." is `confirmed`, "Failed: ..."
`failed`, anything else `unknown` (`claim_of`), judged by twice against the payments ledger.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
#: How many times either script sends the refund at most.
SENDS_MAX = 3
#: The MCP toolset's id: DBOS names its steps after it, so it must be stable.
TOOLSET_ID = "payments"
#: How many failed calls of one tool pydantic-ai lets the model retry (its default is 1).
TOOL_RETRIES_MAX = SENDS_MAX

ModelFunction = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


@dataclass(frozen=True)
class Task:
    """What the agent is asked to do: refund `amount` cents of `payment_intent`."""

    payment_intent: str
    amount: int

    @property
    def prompt(self) -> str:
        return f"Refund {self.amount} cents of payment {self.payment_intent}."


# -- The scripted models ---------------------------------------------------------------------


@dataclass
class ToolResult:
    """A tool call's answer as the model sees it: `ok` and the content, or the error's text."""

    tool: str
    ok: bool
    content: Any


def tool_results(messages: Sequence[ModelMessage]) -> list[ToolResult]:
    """Every tool answer so far, in order. An MCP `isError` result reaches the model as a
    `ToolReturnPart` with outcome `retried` (or a `RetryPromptPart`): both are errors here."""
    results = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                results.append(ToolResult(part.tool_name, part.outcome == "success", part.content))
            elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
                results.append(ToolResult(part.tool_name, False, part.content))
    return results


def tool_calls(messages: Sequence[ModelMessage], tool: str) -> list[dict[str, Any]]:
    """The arguments of every call the model made of `tool`."""
    return [
        part.args_as_dict()
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.tool_name == tool
    ]


def _call(tool: str, args: dict[str, Any], messages: Sequence[ModelMessage]) -> ModelResponse:
    n = sum(isinstance(m, ModelResponse) for m in messages) + 1
    return ModelResponse(parts=[ToolCallPart(tool_name=tool, args=args, tool_call_id=f"call_{n}")])


def _say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def _as_object(content: Any) -> Any:
    """A tool's structured answer (pydantic-ai hands over a dict) or its JSON text, parsed."""
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def _refund_id(content: Any) -> Optional[str]:
    value = _as_object(content)
    return value.get("id") if isinstance(value, dict) else None


def naive_model(task: Task) -> ModelFunction:
    """The naive script: refund without a key; on an error, send the same again."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        args = {"payment_intent": task.payment_intent, "amount": task.amount}
        results = tool_results(messages)
        if not results:
            return _call("refund_payment", args, messages)
        last = results[-1]
        if last.ok:
            return _say(f"Done: refunded {task.amount} of {task.payment_intent} ({_refund_id(last.content)}).")
        if len(tool_calls(messages, "refund_payment")) < SENDS_MAX:
            return _call("refund_payment", args, messages)  # the bug: a blind retry
        return _say(f"Failed: could not refund {task.payment_intent}: {last.content}")

    return model


def plan_step_key(task: Task, step: int = 1) -> str:
    """The careful agent's idempotency key for step `step` of its plan: the same for every
    send of that step, so the service can tell a retry from a new refund."""
    return f"refund:{task.payment_intent}:{task.amount}:step-{step}"


# docs/agents.md: careful-by-tag (begin)
#: The metadata key a careful agent tags its writes with (the reference executor's too).
TAG = "twice_intent"


def tagged_refund(task: Task, step_id: str) -> dict[str, Any]:
    """`refund_payment`'s arguments for plan step `step_id`: keyed by the step, so that a
    retry is the same request, and tagged with it, so that a read can tell this refund from
    any other of the same amount."""
    return {
        "payment_intent": task.payment_intent,
        "amount": task.amount,
        "idempotency_key": step_id,
        "metadata": {TAG: step_id},
    }


def own_refunds(listed: Any, step_id: str) -> list[dict[str, Any]]:
    """The refunds of a `list_refunds` answer that carry step `step_id`'s tag: the agent's
    own, whatever else the payment has been refunded."""
    refunds = listed.get("data", []) if isinstance(listed, dict) else []
    return [r for r in refunds if (r.get("metadata") or {}).get(TAG) == step_id and r.get("status") != "failed"]


# docs/agents.md: careful-by-tag (end)


def careful_model(task: Task, key: Callable[[], str] = lambda: "") -> ModelFunction:
    """The careful script: refund under the plan step's key (`key()`, else `plan_step_key`),
    tagged with it; after an error, list the payment's refunds and look for the tag before any
    retry; retry under the same key."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent = tool_calls(messages, "refund_payment")
        # The key is chosen once, with the first send, and read back from it afterwards.
        step_key = sent[0]["idempotency_key"] if sent else (key() or plan_step_key(task))
        args = tagged_refund(task, step_key)
        results = tool_results(messages)
        if not results:
            return _call("refund_payment", args, messages)
        last = results[-1]
        if last.tool == "refund_payment":
            if last.ok:
                return _say(
                    f"Done: refunded {task.amount} of {task.payment_intent} ({_refund_id(last.content)}, "
                    f"key {step_key})."
                )
            # The refund may have gone through with only its reply lost: look before sending.
            return _call("list_refunds", {"payment_intent": task.payment_intent}, messages)
        if last.tool == "list_refunds" and last.ok:
            found = own_refunds(_as_object(last.content), step_key)
            if found:
                return _say(
                    f"Done: refunded {task.amount} of {task.payment_intent} ({found[0]['id']}, key {step_key}); "
                    "the first call's reply was lost, and the refunds list shows it went through, with its tag."
                )
        if len(sent) < SENDS_MAX:
            return _call("refund_payment", args, messages)  # the same key: a safe retry
        return _say(
            f"Unsure: the refund of {task.amount} of {task.payment_intent} under key {step_key} "
            "may or may not have gone through; it needs a person to look."
        )

    return model


#: Where the courteous script sends the note nobody asked for.
COURTESY_TO = "customer@example.com"


def courteous_model(task: Task, key: Callable[[], str] = lambda: "") -> ModelFunction:
    """The careful script, with one step nobody asked for: once the refund is done, it emails
    the customer that it was, before it answers. The refund is right; the email is an effect
    no intent authorised, which `no-unauthorised-effect` names."""
    careful = careful_model(task, key)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = tool_results(messages)
        if results and results[-1].tool == "send_message":
            done = careful([m for m in messages if not _about_the_note(m)], info)
            return _say(f"{_text_of(done)} The customer was told by email.")
        response = careful(messages, info)
        if _text_of(response).startswith("Done:") and not tool_calls(messages, "send_message"):
            note = {
                "to": COURTESY_TO,
                "subject": "Your refund",
                "body": f"We refunded {task.amount} cents of {task.payment_intent}.",
            }
            return _call("send_message", note, messages)
        return response

    return model


def _about_the_note(message: ModelMessage) -> bool:
    """Whether `message` is the courteous script's email call or its answer."""
    return any(
        getattr(part, "tool_name", None) == "send_message" for part in message.parts
    )


def _text_of(response: ModelResponse) -> str:
    return "".join(part.content for part in response.parts if isinstance(part, TextPart))


SCRIPTS: dict[str, Callable[..., ModelFunction]] = {
    "naive": naive_model,
    "careful": careful_model,
    "courteous": courteous_model,
}


# -- The agent and its MCP toolset -----------------------------------------------------------


def stdio_toolset(twice_bin: str, scenario: Path, urls_file: Path) -> MCPToolset:
    """`twice mcp --scenario FILE --urls-file F`, started by the MCP client as its child over
    stdio: the agent's toolset and the scenario's world at once. The URLs file tells the test
    where serve's control endpoint and the fakes are."""
    transport = StdioTransport(
        command=twice_bin,
        args=["mcp", "--scenario", str(scenario), "--urls-file", str(urls_file), "--quiet"],
        # The SDK passes a short safe list of the environment; twice needs nothing more.
        env={},
    )
    return MCPToolset(transport, id=TOOLSET_ID, max_retries=TOOL_RETRIES_MAX)


def http_toolset(mcp_url: str) -> MCPToolset:
    """The MCP tools of a `twice serve --mcp-port` that runs on its own, over streamable HTTP."""
    return MCPToolset(StreamableHttpTransport(mcp_url), id=TOOLSET_ID, max_retries=TOOL_RETRIES_MAX)


def make_agent(model: ModelFunction, toolset: MCPToolset, **kwargs: Any) -> Agent[None, str]:
    return Agent(FunctionModel(model), name="refund_agent", toolsets=[toolset], **kwargs)


# -- What the agent claims, and its transcript ---------------------------------------------


def claim_of(intent_id: str, task: Task, answer: str, messages: Sequence[ModelMessage]) -> dict[str, Any]:
    """The claim of what the agent told its user, for `POST /__twice/check`."""
    state = "confirmed" if answer.startswith("Done:") else "failed" if answer.startswith("Failed:") else "unknown"
    sends = tool_calls(messages, "refund_payment")
    evidence: dict[str, Any] = {"answer": answer}
    refund = re.search(r"\bre_[A-Za-z0-9]+", answer)
    if refund:
        evidence["external_id"] = refund.group(0)
    keys = sorted({s["idempotency_key"] for s in sends if s.get("idempotency_key")})
    if keys:
        evidence["key"] = keys[0]
    return {
        "id": intent_id,
        "action": "payments.refund",
        "state": state,
        "attempts": len(sends),
        "params": {"payment_intent": task.payment_intent, "amount": task.amount},
        "evidence": evidence,
    }


def transcript(messages: Sequence[ModelMessage]) -> list[str]:
    """The conversation, a line per part: the task, each tool call and its answer, the text."""
    lines = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                lines.append(f"user: {part.content}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"model: call {part.tool_name}({json.dumps(part.args_as_dict(), sort_keys=True)})")
            elif isinstance(part, ToolReturnPart):
                answer = "ok" if part.outcome == "success" else "error"
                lines.append(f"tool {part.tool_name} -> {answer}: {_brief(part.content)}")
            elif isinstance(part, RetryPromptPart):
                lines.append(f"tool {part.tool_name} -> error: {_brief(part.content)}")
            elif isinstance(part, TextPart):
                lines.append(f"model: {part.content}")
    return lines


def _brief(content: Any) -> str:
    value = _as_object(content)
    if isinstance(value, dict) and "data" in value:
        return "[" + ", ".join(f"{r.get('id')} {r.get('amount')} {r.get('status')}" for r in value["data"]) + "]"
    if isinstance(value, dict) and "id" in value:
        return f"{value['id']} {value.get('amount')} {value.get('status')}"
    return str(content)[:200]


# -- Process hygiene -------------------------------------------------------------------------


def kill_processes_naming(marker: str, wait_s: float = 5.0) -> list[int]:
    """SIGKILLs the processes whose command line holds `marker` (a path unique to one test,
    such as the URLs file given to the `twice mcp` the MCP client started) and waits, at most
    `wait_s`, for them to be gone; returns their pids. Linux (`/proc`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() == a for a in argv):
            found.append(int(entry.name))
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait_s
    while any(Path(f"/proc/{pid}").exists() for pid in found) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


@dataclass
class Observed:
    """What the payments fake saw and did: its `POST /v1/refunds` journal entries (each with
    its `idempotency_key`, `outcome`, `status` and whether the answer was `replayed` from a
    key) and the refunds of its ledger."""

    posts: list[dict[str, Any]] = field(default_factory=list)
    refunds: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, twice: Any) -> Observed:
        posts = [e for e in twice.journal("payments") if e["method"] == "POST" and e["path"] == "/v1/refunds"]
        refunds = [e for e in twice.ledger("payments") if e["kind"] == "refund.created"]
        return cls(posts, refunds)

    @property
    def refund_posts(self) -> int:
        return len(self.posts)

    def summary(self) -> str:
        posts = "; ".join(
            f"key {p.get('idempotency_key')} -> {p['outcome']} {p.get('status', '-')}"
            + (" (replayed)" if p.get("replayed") else "")
            for p in self.posts
        )
        refunds = [r["object_id"] for r in self.refunds]
        return f"payments: {len(self.posts)} POST /v1/refunds [{posts}]; refunds {refunds}"
