"""A LangGraph refund agent on stripe-python, with its durable record in a `SqliteSaver` file,
in two versions.

The job: a support ticket asks for a refund of AMOUNT of PAYMENT_INTENT; an agent decides to
refund and calls its `refund` tool, which refunds through stripe-python. One graph thread per
ticket, the thread id being the ticket (the scenario's intent id). The checkpointer is the
app's only memory: a process that is killed and started again knows what it was doing only
from the checkpoints in the SQLite file.

The graph is the tool-calling agent of LangGraph's docs: `StateGraph(MessagesState)`, an
`agent` node that calls the chat model, a prebuilt `ToolNode`, `tools_condition` between them,
compiled with a checkpointer. The chat model is a scripted `GenericFakeChatModel` (no network,
no API key). Fake models have no `bind_tools`, so the agent node turns the model's scripted
text (JSON) into a tool call itself; the model's place in its script is the number of AI
messages already in the thread's STATE, since a new process starts the fake afresh. The tool
call ids are random, as a provider's are, and live in the checkpointed state from then on.

**idiomatic** (`--mode idiomatic`), as the docs show it:

- the default durability (`"async"`), the `ToolNode`'s default error handling (a tool's
  exception is re-raised), a `RetryPolicy()` with its defaults on the tools node (the docs'
  advice for transient errors: network issues, rate limits);
- the tool calls `client.v1.refunds.create(...)` without an idempotency key: stripe-python
  mints a fresh one per call, so every run of the tool is a new refund to Stripe;
- a process that starts on a thread left unfinished resumes it (`invoke(None, config)`, the
  docs' way to resume after a failure).

**careful** (`--mode careful`), the same graph made correct with LangGraph's own tools:

- `durability="sync"`: each step's checkpoint is written before the next step starts, so the
  tool call (and its id) is on disk before the tool runs;
- the key is `{thread_id}:{tool_call_id}` (the tool gets both injected: `RunnableConfig` and
  `InjectedToolCallId`), the same on every run of that tool call, in any process; the send
  carries them in `metadata` too;
- every run of the tool first looks the refund up (refunds of the payment intent whose
  metadata names this tool call): a run after a crash or a retry finds the first one;
- an unsure outcome (no reply, a timeout, a reset, a 5xx, a 409) is not a "no": the tool reads
  back until the service's settle bound has passed; only then, with the refund certainly
  absent, does it send again, under a new key (at most three sends), and it returns `unknown`
  if none landed; only a 429 or a refused connection (certainly not executed) raises, for the
  node's `RetryPolicy` to run the tool again; a definite refusal returns `failed`;
- where the service's acks may lie (`configure(..., acks_may_lie=True)`, from its contract
  under twice/1), a success is read back too, and a hollow one is sent again under a new key;
- the tool's outcome is in its `ToolMessage` (JSON), so the record says confirmed, failed or
  unknown; a thread whose tool never returned is claimed `unknown`.

Usage (the tests drive it this way, one process per life):

    python agent_app.py run DB --api-base URL --mode idiomatic|careful --timeout-s S \
        [--settle-s S] [--api graph|functional] TICKET:PAYMENT_INTENT:AMOUNT ...
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import stripe
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.cache.sqlite import SqliteCache
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.config import get_config
from langgraph.func import entrypoint, task
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import CachePolicy, RetryPolicy

import agent_tools

MODES = ("idiomatic", "careful")
API_KEY = "sk_test_twice"
REFUND_ID = re.compile(r"\bre_[A-Za-z0-9]+\b")


# -- the scripted model ------------------------------------------------------------------------


def script(payment_intent: str, amount: int) -> list[str]:
    """What the model says, in order: a decision to call `refund`, then a closing line."""
    return script_for({"tool": "refund", "args": {"payment_intent": payment_intent, "amount": amount}})


def script_for(ticket: dict[str, Any]) -> list[str]:
    """What the model says for a ticket: a decision to call the ticket's tool (`refund` for
    a ticket that names none), then a closing line."""
    if "tool" not in ticket:
        ticket = {"tool": "refund", "args": {"payment_intent": ticket["payment_intent"], "amount": ticket["amount"]}}
    return [json.dumps({"tool": ticket["tool"], "args": ticket["args"]}), "Done; I have told the customer."]


def agent_node(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    """The docs' `call_model` node, with a scripted model: its place in the script is how many
    AI messages the state already has (a new process starts the fake afresh)."""
    ticket = config["configurable"]["ticket"]
    said = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
    model = GenericFakeChatModel(messages=iter(script_for(ticket)[said:]))
    reply = model.invoke(state["messages"])
    text = str(reply.content)
    try:
        decision = json.loads(text)
    except ValueError:
        return {"messages": [AIMessage(content=text)]}
    # What a provider does for a model with tools bound: a tool call with a fresh id.
    call = {"name": decision["tool"], "args": decision["args"], "id": f"call_{uuid.uuid4().hex[:24]}", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


# -- stripe ------------------------------------------------------------------------------------

_client: Optional[stripe.StripeClient] = None
_settle_s = 1.0
#: The service's acks may lie (a 200 for a refund it did not make): a success is read back.
_acks_may_lie = False


def configure(api_base: str, timeout_s: float, settle_s: float = 1.0, acks_may_lie: bool = False) -> None:
    """The tools' Stripe client, each request bounded by `timeout_s` (the scenario's request
    timeout); stripe-python's own retry count is left at its default."""
    global _client, _settle_s, _acks_may_lie
    _acks_may_lie = acks_may_lie
    _client = stripe.StripeClient(API_KEY, base_addresses={"api": api_base}, http_client=stripe.RequestsClient(timeout=timeout_s))
    _settle_s = settle_s


def client() -> stripe.StripeClient:
    if _client is None:
        raise RuntimeError("agent_app.configure(api_base, timeout_s) was not called")
    return _client


# -- idiomatic ---------------------------------------------------------------------------------


@tool("refund")
def refund_idiomatic(payment_intent: str, amount: int) -> str:
    """Refund `amount` (in cents) of the payment intent `payment_intent`."""
    refund = client().v1.refunds.create(params={"payment_intent": payment_intent, "amount": amount})
    return f"Refunded {refund.amount} of {payment_intent}: {refund.id} ({refund.status})"


# -- careful -----------------------------------------------------------------------------------


class NotExecuted(Exception):
    """The service certainly did not execute the send (429, connection refused): the node's
    `RetryPolicy` may run the tool again."""


def _look_up(payment_intent: str, tool_call_id: str) -> Optional[Any]:
    try:
        refunds = client().v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
    except stripe.StripeError:
        return None
    for refund in refunds.data:
        metadata = refund.to_dict(recursive=True).get("metadata") or {}
        if metadata.get("lg_tool_call") == tool_call_id:
            return refund
    return None


def _outcome(state: str, key: str, **fields: Any) -> str:
    return json.dumps({"state": state, "key": key, **fields})


#: Sends of one tool call, each after the last one's absence became certain (the settle bound
#: passed with nothing found) or its success proved hollow on read-back.
SEND_ROUNDS_MAX = 3


def _read_back(payment_intent: str, tool_call_id: str) -> Optional[Any]:
    """The refund of this tool call if it appears before the settle bound passes, else None:
    then no send of it can still land."""
    deadline = time.monotonic() + _settle_s
    while True:
        found = _look_up(payment_intent, tool_call_id)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@tool("refund")
def refund_careful(
    payment_intent: str, amount: int, tool_call_id: Annotated[str, InjectedToolCallId], config: RunnableConfig
) -> str:
    """Refund `amount` (in cents) of the payment intent `payment_intent`."""
    thread_id = config["configurable"]["thread_id"]
    key = f"{thread_id}:{tool_call_id}"
    found = _look_up(payment_intent, tool_call_id)
    if found is not None:
        # An earlier run of this very tool call (before a crash, or a retry) landed.
        return _outcome("confirmed", key, refund_id=found.id, via="lookup")
    error = ""
    for round_ in range(SEND_ROUNDS_MAX):
        # A new key only once the last send is certainly absent (or its success was hollow).
        key = f"{thread_id}:{tool_call_id}" + (f":{round_}" if round_ else "")
        try:
            refund = client().v1.refunds.create(
                params={
                    "payment_intent": payment_intent,
                    "amount": amount,
                    "metadata": {"lg_thread": thread_id, "lg_tool_call": tool_call_id},
                },
                options={"idempotency_key": key},
            )
            if not _acks_may_lie:
                return _outcome("confirmed", key, refund_id=refund.id)
            error = f"the success ({refund.id}) was not found on read-back"
        except stripe.StripeError as e:
            status = e.http_status
            error = f"{type(e).__name__} ({status}): {e.user_message or e}"
            if status == 429 or (status is None and _refused(e)):
                raise NotExecuted(error) from e
            if status is not None and 400 <= status < 500 and status != 409:
                return _outcome("failed", key, last_error=error)
        # No reply, a timeout, a 5xx, a 409, or a success the service may have made up: the
        # refund may exist or may still appear. Read back until the settle bound has passed.
        found = _read_back(payment_intent, tool_call_id)
        if found is not None:
            return _outcome("confirmed", key, refund_id=found.id, via="lookup", last_error=error)
    return _outcome("unknown", key, last_error=error)


def _refused(e: stripe.StripeError) -> bool:
    """A connection that could not be made: nothing left the process."""
    text = str(e).lower()
    return "connection refused" in text or "failed to establish a new connection" in text


# -- the graph ---------------------------------------------------------------------------------


def build(mode: str, checkpointer: SqliteSaver) -> Any:
    """The docs' tool-calling agent, compiled with the checkpointer."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node)
    if mode == "idiomatic":
        builder.add_node("tools", ToolNode([refund_idiomatic, *agent_tools.IDIOMATIC]), retry_policy=RetryPolicy())
    else:
        builder.add_node(
            "tools",
            ToolNode([refund_careful, *agent_tools.CAREFUL]),
            # Six runs, 0.5 s apart and doubling (15.5 s in all): past the four 429s in a row
            # the catalog sends one create (late_commit_after_retries), as DBOS's careful step.
            retry_policy=RetryPolicy(max_attempts=6, initial_interval=0.5, backoff_factor=2.0, jitter=False,
                                     retry_on=(NotExecuted, agent_tools.effects.Unsure)),  # fmt: skip
        )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


@contextmanager
def saver(db_path: str) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(db_path) as checkpointer:
        yield checkpointer


def thread_config(ticket_id: str, payment_intent: str, amount: int) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": ticket_id,
            "ticket": {"payment_intent": payment_intent, "amount": amount},
        }
    }


def run(db_path: str, mode: str, tickets: list[tuple[str, str, int]]) -> None:
    """One life: every ticket's thread, started or resumed, to its end."""
    durability = "sync" if mode == "careful" else None  # None: LangGraph's default ("async")
    with saver(db_path) as checkpointer:
        graph = build(mode, checkpointer)
        for ticket_id, payment_intent, amount in tickets:
            config = thread_config(ticket_id, payment_intent, amount)
            snapshot = graph.get_state(config)
            if snapshot.values and not snapshot.next:
                continue  # finished in an earlier life
            kwargs = {"durability": durability} if durability else {}
            started = time.monotonic()
            try:
                if snapshot.values:
                    print(f"{ticket_id}: resuming at {snapshot.next}", flush=True)
                    graph.invoke(None, config, **kwargs)
                else:
                    ask = f"Please refund {amount} of {payment_intent} (ticket {ticket_id})."
                    graph.invoke({"messages": [HumanMessage(content=ask)]}, config, **kwargs)
                print(f"{ticket_id}: finished in {time.monotonic() - started:.2f} s", flush=True)
            except Exception as e:  # the run failed: LangGraph's record says so
                print(f"{ticket_id}: the run raised {type(e).__name__}: {e}", flush=True)



# -- the functional API ------------------------------------------------------------------------
#
# The same job with `@entrypoint` and `@task`, as the functional API's docs write it: the refund
# is a task whose result the checkpointer saves once it returns (a resumed entrypoint gets it
# back instead of running the task again) and which a `CachePolicy` caches in a `SqliteCache`
# file, keyed on the task's input. Both only ever record a task that FINISHED: a process killed
# while the task's request is out leaves nothing of it, and the resumed entrypoint runs it
# again. The careful task keys the send on the thread id (one refund per ticket thread) and
# looks the refund up first, as the careful tool does.


@task(cache_policy=CachePolicy(), retry_policy=RetryPolicy())
def refund_task_idiomatic(payment_intent: str, amount: int) -> dict[str, Any]:
    refund = client().v1.refunds.create(params={"payment_intent": payment_intent, "amount": amount})
    return {"state": "confirmed", "refund_id": refund.id}


@task(cache_policy=CachePolicy(), retry_policy=RetryPolicy(max_attempts=4, initial_interval=0.2, jitter=False, retry_on=NotExecuted))
def refund_task_careful(thread_id: str, payment_intent: str, amount: int) -> dict[str, Any]:
    # The task's identity within the thread: this entrypoint runs one refund task per thread.
    return json.loads(refund_careful.func(payment_intent, amount, f"{thread_id}-refund", {"configurable": {"thread_id": thread_id}}))


def build_functional(mode: str, checkpointer: SqliteSaver, cache: SqliteCache) -> Any:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")

    @entrypoint(checkpointer=checkpointer, cache=cache)
    def refund_ticket(ticket: dict[str, Any]) -> dict[str, Any]:
        if mode == "idiomatic":
            return refund_task_idiomatic(ticket["payment_intent"], ticket["amount"]).result()
        thread_id = get_config()["configurable"]["thread_id"]
        return refund_task_careful(thread_id, ticket["payment_intent"], ticket["amount"]).result()

    return refund_ticket


def run_functional(db_path: str, mode: str, tickets: list[tuple[str, str, int]]) -> None:
    """One life of the functional version: every ticket's entrypoint run, started or resumed."""
    durability = "sync" if mode == "careful" else None
    cache = SqliteCache(path=db_path + ".cache")
    with saver(db_path) as checkpointer:
        workflow = build_functional(mode, checkpointer, cache)
        for ticket_id, payment_intent, amount in tickets:
            config = thread_config(ticket_id, payment_intent, amount)
            snapshot = workflow.get_state(config)
            if snapshot.values is not None and snapshot.created_at and not snapshot.next:
                continue
            kwargs = {"durability": durability} if durability else {}
            started = time.monotonic()
            try:
                if snapshot.next:
                    print(f"{ticket_id}: resuming at {snapshot.next}", flush=True)
                    workflow.invoke(None, config, **kwargs)
                else:
                    workflow.invoke({"payment_intent": payment_intent, "amount": amount}, config, **kwargs)
                print(f"{ticket_id}: finished in {time.monotonic() - started:.2f} s", flush=True)
            except Exception as e:
                print(f"{ticket_id}: the run raised {type(e).__name__}: {e}", flush=True)


def record_functional(db_path: str, mode: str, ticket_id: str, payment_intent: str, amount: int) -> dict[str, Any]:
    """What the checkpointer says of a functional thread, in `record`'s shape: the entrypoint's
    return value stands for the tool's result."""
    cache = SqliteCache(path=db_path + ".cache")
    with saver(db_path) as checkpointer:
        workflow = build_functional(mode, checkpointer, cache)
        config = thread_config(ticket_id, payment_intent, amount)
        snapshot = workflow.get_state(config)
        errors = [str(t.error) for t in snapshot.tasks if t.error is not None]
        finished = bool(snapshot.created_at) and not snapshot.next
        value = snapshot.values if finished and isinstance(snapshot.values, dict) else None
        results = []
        if value:
            if mode == "idiomatic":
                results = [(f"Refunded {amount} of {payment_intent}: {value.get('refund_id')}", "success")]
            else:
                results = [(json.dumps(value), "success")]
        return {
            "exists": bool(snapshot.created_at),
            "finished": finished,
            "next": list(snapshot.next),
            "tool_calls": [f"{ticket_id}-refund"],
            "tool_results": results,
            "errors": errors,
            "checkpoints": len(list(workflow.get_state_history(config))),
        }


# -- the record --------------------------------------------------------------------------------


def record(db_path: str, mode: str, ticket_id: str, payment_intent: str, amount: int) -> dict[str, Any]:
    """What the checkpointer says of a ticket's thread: finished or not, the tool's messages,
    the errors of its pending tasks, as one dict."""
    with saver(db_path) as checkpointer:
        graph = build(mode, checkpointer)
        config = thread_config(ticket_id, payment_intent, amount)
        snapshot = graph.get_state(config)
        messages = list(snapshot.values.get("messages", [])) if snapshot.values else []
        tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
        tool_calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
        errors = [str(t.error) for t in snapshot.tasks if t.error is not None]
        history = list(graph.get_state_history(config))
        return {
            "exists": bool(snapshot.values),
            "finished": bool(snapshot.values) and not snapshot.next,
            "next": list(snapshot.next),
            "tool_calls": [c["id"] for c in tool_calls],
            "tool_results": [(str(m.content), m.status) for m in tool_messages],
            "errors": errors,
            "checkpoints": len(history),
        }


# -- under twice/1 (`python -m twice.engines.langgraph --app agent_app:careful`) ---------------


def twice_configure(init: Any) -> None:
    """The tools' Stripe client on twice's payments fake; the careful tool reads back for the
    contract's settle and read-lag bounds after an unsure send."""
    agent_tools.effects.configure(init)
    url = init.url("payments")
    if url is None:
        return
    timeout_ms = int(init.limits.get("request_timeout_ms", 2000))
    contract = init.contract("payments")
    settle_ms = int(contract.get("settle_ms_max", 500)) + int(contract.get("read_lag_ms_max", 0))
    configure(url, timeout_ms / 1000.0, (settle_ms + timeout_ms + 100) / 1000.0, contract.get("acks") == "may_lie")


def ticket(payment_intent: str, amount: int) -> dict[str, Any]:
    """A support ticket asking for the refund: the graph's input."""
    return {"messages": [HumanMessage(content=f"Please refund {amount} of {payment_intent}.")]}


def ticket_config(payment_intent: str, amount: int) -> dict[str, Any]:
    return {"ticket": {"payment_intent": payment_intent, "amount": amount}}


def _tool_results(values: Any) -> list[ToolMessage]:
    messages = values.get("messages", []) if isinstance(values, dict) else []
    return [m for m in messages if isinstance(m, ToolMessage)]


def claim_idiomatic(values: Any) -> dict[str, Any]:
    """As a user of the docs reads a finished thread: the tool's reply naming a refund (or,
    from the other tools, an id) is done."""
    for message in _tool_results(values):
        found = REFUND_ID.search(str(message.content))
        if message.status == "success" and found:
            return {"state": "confirmed", "external_id": found.group(0)}
        try:
            answered = json.loads(str(message.content))
        except ValueError:
            continue
        if message.status == "success" and isinstance(answered, dict) and answered.get("id"):
            return {"state": "confirmed", "external_id": str(answered["id"])}
    return {"state": "failed", "last_error": "the thread finished without a refund"}


#: What a careful tool's reply may say, the claim's state and evidence.
CLAIM_FIELDS = ("state", "key", "external_id", "last_error", "decision", "could_duplicate", "reason")


def claim_careful(values: Any) -> dict[str, Any]:
    """The careful tool's outcome (JSON in its ToolMessage); a finished thread without one
    never called the tool."""
    for message in _tool_results(values):
        try:
            outcome = json.loads(str(message.content))
        except ValueError:
            continue
        if outcome.get("refund_id"):
            outcome["external_id"] = outcome["refund_id"]
        if outcome.get("via"):
            outcome["reason"] = f"found by {outcome['via']}"
        # Past the refund's fields, the other tools' claims (agent_tools: effects.step's).
        return {k: v for k, v in outcome.items() if k in CLAIM_FIELDS}
    return {"state": "failed", "last_error": "the agent never called the tool"}


def refund_ticket(payment_intent: str, amount: int) -> dict[str, Any]:
    return ticket(payment_intent, amount)


def workspace_ticket(external_id: str, name: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"Please set up the workspace {name} for {external_id}.")]}


def file_ticket(bucket: str, key: str, body: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"Please save this as {key} in {bucket}:\n{body}")]}


def transfer_ticket(to: str, value: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"Please pay {value} wei to {to}.")]}


def message_ticket(to: str, subject: str, body: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"Please email {to}: {subject}\n{body}")]}


#: Each action's ticket (its signature is the action's params).
TICKETS = {
    "payments.refund": refund_ticket,
    "workspaces.create": workspace_ticket,
    "files.put": file_ticket,
    "chain.transfer": transfer_ticket,
    "messages.send": message_ticket,
}


def _twice_app(mode: str) -> Any:
    from twice.engines import App
    from twice.engines.langgraph import Graph

    def graph(action: str) -> Graph:
        tool_name = agent_tools.TOOL_OF[action]
        return Graph(
            build=lambda checkpointer: build(mode, checkpointer),
            input=TICKETS[action],
            configurable=lambda **params: {"ticket": {"tool": tool_name, "args": params}},
            durability="sync" if mode == "careful" else None,  # None: LangGraph's default ("async")
        )

    actions = {action: graph(action) for action in TICKETS}
    if mode == "careful":
        # A tool call that raised past its retries may have acted: unknown, not failed.
        return App(actions=actions, configure=twice_configure, read_output=claim_careful, raised="unknown",
                   reconcile=twice_reconcile, on_start=agent_tools.effects.started_here.add)  # fmt: skip
    return App(actions=actions, configure=twice_configure, read_output=claim_idiomatic)


def twice_reconcile(intent: dict[str, Any], ended_ms: int) -> Optional[dict[str, Any]]:
    """An intent a thread left `unknown`, other than a refund: looked up (effects.reconcile)."""
    if intent["action"] == "payments.refund":
        return None
    return agent_tools.effects.reconcile(intent, ended_ms)


#: The two apps as `twice.engines.App`s: `--app agent_app:careful`, `--app agent_app:idiomatic`.
careful = _twice_app("careful")
idiomatic = _twice_app("idiomatic")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    go = commands.add_parser("run", help="start or resume every ticket's thread, then exit")
    go.add_argument("db")
    go.add_argument("tickets", nargs="+", help="TICKET:PAYMENT_INTENT:AMOUNT")
    go.add_argument("--api-base", required=True)
    go.add_argument("--mode", choices=MODES, required=True)
    go.add_argument("--timeout-s", type=float, default=2.0, help="per request")
    go.add_argument("--api", choices=("graph", "functional"), default="graph", help="the Graph API agent or the functional API")
    go.add_argument("--settle-s", type=float, default=1.0, help="careful: how long to read back after an unsure send")
    args = parser.parse_args(argv)
    configure(args.api_base, args.timeout_s, args.settle_s)
    tickets = []
    for spec in args.tickets:
        ticket_id, payment_intent, amount = spec.split(":")
        tickets.append((ticket_id, payment_intent, int(amount)))
    (run_functional if args.api == "functional" else run)(args.db, args.mode, tickets)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
