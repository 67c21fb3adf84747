"""The agent's other four tools: create a workspace, put a file, transfer on a chain, send a
message, each in the two versions of agent_app.py's `refund`.

- **idiomatic**: the tool calls the SDK as its docs show it (requests, boto3, web3.py, resend,
  defaults kept: effects.naive) and returns the effect's id; the tools node's `RetryPolicy()`
  runs it again on any exception, and a resumed thread runs a tool call that had not finished.
- **careful**: the key is `{thread_id}:{tool_call_id}`, the same on every run of that tool call
  in any process (the checkpoint holds the call, written before the tool runs under
  `durability="sync"`); effects.rounds looks the effect up first, believes "not there" only
  once nothing sent can still land, sends, reads back, and writes what must be made once (a
  put's precondition, a transfer's signed bytes) to the worker's state dir before the first
  send, since LangGraph checkpoints between nodes, not inside a tool. What it cannot tell yet
  raises `effects.Unsure`, for the node's `RetryPolicy` to run the tool again; the tool's reply
  is its claim (JSON), as the careful `refund`'s is.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Callable

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, tool

# effects.py (examples/engines) and the example executor's services.py, which it builds on,
# where this folder does not hold copies of them.
_HERE = Path(__file__).resolve().parent
sys.path += [str(_HERE.parent), str(_HERE.parents[1] / "executors" / "python")]

import effects  # noqa: E402

#: The tool that does each action, and the action's parameters, in order.
TOOL_OF = {
    "payments.refund": "refund",
    "workspaces.create": "create_workspace",
    "files.put": "put_file",
    "chain.transfer": "transfer",
    "messages.send": "send_message",
}


def _idiomatic(action: str) -> Callable[..., str]:
    def run(**params: Any) -> str:
        return json.dumps(effects.naive(action, params))

    return run


def _careful(action: str) -> Callable[..., str]:
    def run(tool_call_id: str, config: RunnableConfig, **params: Any) -> str:
        thread_id = str(config["configurable"]["thread_id"])
        return json.dumps(effects.rounds(action, params, thread_id, f"{thread_id}:{tool_call_id}"))

    return run


@tool("create_workspace")
def create_workspace_idiomatic(external_id: str, name: str) -> str:
    """Create the workspace `name` for the customer `external_id`."""
    return _idiomatic("workspaces.create")(external_id=external_id, name=name)


@tool("put_file")
def put_file_idiomatic(bucket: str, key: str, body: str) -> str:
    """Write `body` to the object `key` of `bucket`."""
    return _idiomatic("files.put")(bucket=bucket, key=key, body=body)


@tool("transfer")
def transfer_idiomatic(to: str, value: str) -> str:
    """Transfer `value` wei to the address `to`."""
    return _idiomatic("chain.transfer")(to=to, value=value)


@tool("send_message")
def send_message_idiomatic(to: str, subject: str, body: str) -> str:
    """Email `to` with `subject` and `body`."""
    return _idiomatic("messages.send")(to=to, subject=subject, body=body)


@tool("create_workspace")
def create_workspace_careful(external_id: str, name: str, tool_call_id: Annotated[str, InjectedToolCallId],
                             config: RunnableConfig) -> str:  # fmt: skip
    """Create the workspace `name` for the customer `external_id`."""
    return _careful("workspaces.create")(tool_call_id, config, external_id=external_id, name=name)


@tool("put_file")
def put_file_careful(bucket: str, key: str, body: str, tool_call_id: Annotated[str, InjectedToolCallId],
                     config: RunnableConfig) -> str:  # fmt: skip
    """Write `body` to the object `key` of `bucket`."""
    return _careful("files.put")(tool_call_id, config, bucket=bucket, key=key, body=body)


@tool("transfer")
def transfer_careful(to: str, value: str, tool_call_id: Annotated[str, InjectedToolCallId], config: RunnableConfig) -> str:
    """Transfer `value` wei to the address `to`."""
    return _careful("chain.transfer")(tool_call_id, config, to=to, value=value)


@tool("send_message")
def send_message_careful(to: str, subject: str, body: str, tool_call_id: Annotated[str, InjectedToolCallId],
                         config: RunnableConfig) -> str:  # fmt: skip
    """Email `to` with `subject` and `body`."""
    return _careful("messages.send")(tool_call_id, config, to=to, subject=subject, body=body)


IDIOMATIC: list[BaseTool] = [create_workspace_idiomatic, put_file_idiomatic, transfer_idiomatic, send_message_idiomatic]
CAREFUL: list[BaseTool] = [create_workspace_careful, put_file_careful, transfer_careful, send_message_careful]
