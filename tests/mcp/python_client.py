"""`twice mcp` through the official Python MCP SDK's client (`mcp`, pinned in tests/requirements.txt).

usage: python_client.py MODE stdio TWICE_BIN URLS_FILE [late_commit]
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

With `late_commit` (stdio only), the scenario is the catalog's `unknown_state_required` and
the client is a naive agent: refund_payment {payment_intent: pi_6604, amount: 990} times out
(the refund is held and commits 1.5 s after it arrived), and the agent calls it again at once,
with no key; it then claims `confirmed` and runs `TWICE_BIN check --no-wait` right away and
the default `TWICE_BIN check` after it, each on the URLs file (claims and report directories
beside it), and adds their exit codes and report directories to what it saw.

The SDK validates every result against the negotiated version's schema, so a malformed
message from the server fails the run (exit 1, the exception on stderr).

Prints one JSON line of what the client saw, then keeps the session (and so `twice mcp` and
its fakes) up until its own stdin closes, so that the caller can read the payments ledger
through the URLs file; then closes the session as the SDK does (stdio: closes twice's stdin,
waits, terminates; http: DELETE of the session) and exits 0.
"""

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

SCENARIO = "lost_refund_reply"
LATE_COMMIT_SCENARIO = "unknown_state_required"
# How long any one request may take (the SDK's read timeout), and how long the session is
# held for the caller at most.
READ_TIMEOUT_S = 20.0
HOLD_S = 60.0
# How long one `twice check` may take: serve waits for the late commit (1.5 s) first.
CHECK_TIMEOUT_S = 60.0


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


def twice_check(twice, urls_file, claims, report_dir, *flags):
    """`twice check` on the URLs file: its exit code and report directory."""
    done = subprocess.run(
        [twice, "check", "--urls-file", urls_file, "--claims", claims, "--report-dir", report_dir, *flags],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    return {"exit_code": done.returncode, "report_dir": report_dir, "stderr": done.stderr[-2000:]}


async def late_commit(client, seen, twice, urls_file):
    """The naive agent under a late commit, then its claims checked at once and settled."""
    refund = {"payment_intent": "pi_6604", "amount": 990}
    seen["refund"] = await call(client, "refund_payment", refund)
    seen["refund_again"] = await call(client, "refund_payment", refund)
    here = Path(urls_file).parent
    claims = here / "claims.json"
    claim = {"id": "refund-6604", "action": "payments.refund", "state": "confirmed", "attempts": 2}
    claims.write_text(json.dumps({"claims": [claim]}))
    seen["check_no_wait"] = twice_check(twice, urls_file, str(claims), str(here / "report-no-wait"), "--no-wait")
    seen["check"] = twice_check(twice, urls_file, str(claims), str(here / "report"))


async def main(mode, transport, *target):
    plan = "lost_reply"
    if transport == "stdio":
        twice, urls_file, *rest = target
        plan = rest[0] if rest else plan
        scenario = LATE_COMMIT_SCENARIO if plan == "late_commit" else SCENARIO
        server = StdioServerParameters(
            command=twice,
            args=["mcp", "--scenario", scenario, "--urls-file", urls_file],
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
        if plan == "late_commit":
            await late_commit(client, seen, twice, urls_file)
        else:
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
    shapes = {("stdio", 5), ("stdio", 6), ("http", 4)}
    if sys.argv[1:2] not in (["auto"], ["legacy"]) or tuple(sys.argv[2:3] + [len(sys.argv)]) not in shapes:
        sys.exit(__doc__)
    if len(sys.argv) == 6 and sys.argv[5] != "late_commit":
        sys.exit(__doc__)
    anyio.run(main, *sys.argv[1:])
