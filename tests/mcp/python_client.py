"""`twice mcp` through the official Python MCP SDK's client (`mcp`, pinned in tests/requirements.txt).

usage: python_client.py MODE stdio TWICE_BIN URLS_FILE
       python_client.py MODE http MCP_URL

stdio: starts `TWICE_BIN mcp --scenario lost_refund_reply --urls-file URLS_FILE` with
`mcp.Client(StdioServerParameters(...), mode=MODE)`; http: `mcp.Client(MCP_URL, mode=MODE)`,
streamable HTTP to a `twice serve --mcp-port 0 --scenario lost_refund_reply` the caller
started. MODE is `auto` (the SDK's default: it probes `server/discover` and adopts a 2026-era
protocol version when the server offers one, or falls back to the initialize handshake) or
`legacy` (the initialize handshake only). Then:

  tools/list, each tool checked: a name, a description, an object inputSchema with
  properties, required and additionalProperties false, and annotations;
  refund_payment {payment_intent: pi_4812, amount: 5000}, twice (the first reply is lost
  after the refund commits; the second is refused);
  list_refunds {payment_intent: pi_4812};
  a tool nobody has (a JSON-RPC error: its code and message);
  refund_payment with an amount that is no integer (a tool error).

The SDK validates every result against the negotiated version's schema, so a malformed
message from the server fails the run (exit 1, the exception on stderr).

Prints one JSON line of what the client saw, then keeps the session (and so `twice mcp` and
its fakes) up until its own stdin closes, so that the caller can read the payments ledger
through the URLs file; then closes the session as the SDK does (stdio: closes twice's stdin,
waits, terminates; http: DELETE of the session) and exits 0.
"""

import json
import sys
from importlib.metadata import version

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

SCENARIO = "lost_refund_reply"
# How long any one request may take (the SDK's read timeout), and how long the session is
# held for the caller at most.
READ_TIMEOUT_S = 20.0
HOLD_S = 60.0


def tool_problems(tool):
    """What a listed tool lacks, as words (empty when it has everything)."""
    problems = []
    if not tool.name:
        problems.append("no name")
    if not tool.description:
        problems.append("no description")
    schema = tool.input_schema or {}
    if schema.get("type") != "object":
        problems.append(f"inputSchema type {schema.get('type')!r}")
    if not isinstance(schema.get("properties"), dict):
        problems.append("inputSchema has no properties object")
    if not isinstance(schema.get("required"), list):
        problems.append("inputSchema has no required list")
    elif not set(schema["required"]) <= set(schema.get("properties") or {}):
        problems.append("inputSchema requires a parameter it does not describe")
    if schema.get("additionalProperties") is not False:
        problems.append("inputSchema does not set additionalProperties false")
    if tool.annotations is None:
        problems.append("no annotations")
    return problems


def result_of(result):
    """A CallToolResult as seen: isError, the text of its text blocks, structuredContent."""
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    return {
        "isError": bool(result.is_error),
        "text": "\n".join(texts),
        "structuredContent": result.structured_content,
    }


async def call(client, name, arguments):
    """One tools/call: its result, or the JSON-RPC error it met."""
    try:
        return result_of(await client.call_tool(name, arguments))
    except MCPError as e:
        return {"error": {"code": e.code, "message": e.message}}


async def main(mode, transport, *target):
    if transport == "stdio":
        twice, urls_file = target
        server = StdioServerParameters(
            command=twice,
            args=["mcp", "--scenario", SCENARIO, "--urls-file", urls_file],
            # twice logs to stderr; warnings only, so that the test's output stays readable.
            env={"RUST_LOG": "warn"},
        )
    else:
        (server,) = target
    async with Client(server, mode=mode, read_timeout_seconds=READ_TIMEOUT_S) as client:
        seen = {
            "client": "python mcp " + version("mcp"),
            "mode": mode,
            "transport": transport,
            "protocol_version": client.protocol_version,
            "server_info": client.server_info.model_dump(mode="json") if client.server_info else None,
            "has_instructions": bool(client.instructions),
        }
        listed = await client.list_tools()
        seen["tools"] = [tool.name for tool in listed.tools]
        seen["tool_problems"] = {tool.name: p for tool in listed.tools if (p := tool_problems(tool))}
        seen["annotations"] = {
            tool.name: tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            for tool in listed.tools
            if tool.annotations is not None
        }
        refund = {"payment_intent": "pi_4812", "amount": 5000}
        seen["refund"] = await call(client, "refund_payment", refund)
        seen["refund_again"] = await call(client, "refund_payment", refund)
        seen["list_refunds"] = await call(client, "list_refunds", {"payment_intent": "pi_4812"})
        seen["unknown_tool"] = await call(client, "no_such_tool", {})
        seen["bad_arguments"] = await call(client, "refund_payment", {"payment_intent": "pi_4812", "amount": "lots"})
        print(json.dumps(seen), flush=True)
        # Hold the session until the caller closes our stdin (or HOLD_S passes).
        with anyio.move_on_after(HOLD_S):
            await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


if __name__ == "__main__":
    shapes = {("stdio", 5), ("http", 4)}
    if sys.argv[1:2] not in (["auto"], ["legacy"]) or tuple(sys.argv[2:3] + [len(sys.argv)]) not in shapes:
        sys.exit(__doc__)
    anyio.run(main, *sys.argv[1:])
