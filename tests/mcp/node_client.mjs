// `twice mcp` through the official TypeScript MCP SDK's client (@modelcontextprotocol/sdk,
// pinned in package-lock.json beside this file; `cargo xtask test` runs `npm ci` here).
//
// usage: node node_client.mjs stdio TWICE_BIN URLS_FILE
//        node node_client.mjs http MCP_URL
//
// stdio: starts `TWICE_BIN mcp --scenario lost_refund_reply --urls-file URLS_FILE` with
// StdioClientTransport. http: connects with StreamableHTTPClientTransport to MCP_URL (a
// `twice serve --mcp-port 0 --scenario lost_refund_reply` the caller started). Then, through
// `Client`: initialize (in connect), tools/list with each tool checked (a name, a description,
// an object inputSchema with properties, required and additionalProperties false, and
// annotations), refund_payment {payment_intent: pi_4812, amount: 5000} twice (the first reply
// is lost after the refund commits; the second is refused), list_refunds, a tool nobody has
// (a JSON-RPC error) and refund_payment with an amount that is no integer (a tool error).
//
// The SDK parses every message from the server with the specification's schemas (zod), so a
// malformed one fails the run (exit 1, the error on stderr). The protocol version is read off
// the initialize result as it arrived.
//
// Prints one JSON line of what the client saw, then keeps the session up until its own stdin
// closes (at most 60 s), so that the caller can read the payments ledger; then closes the
// session (http: DELETE of the session first; stdio: the SDK closes twice's stdin and waits),
// prints a second JSON line of how that went, and exits 0.

import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const SCENARIO = 'lost_refund_reply';
// Each request's bound (the SDK's request timeout) and how long the session is held at most.
const REQUEST_TIMEOUT_MS = 20_000;
const HOLD_MS = 60_000;

const sdkVersion = JSON.parse(
  readFileSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url), 'utf8'),
).version;

function usage() {
  process.stderr.write('usage: node node_client.mjs stdio TWICE_BIN URLS_FILE | http MCP_URL\n');
  process.exit(2);
}

/** Every message the server sends passes here first (the SDK's Protocol calls a handler the transport
 * already has before its own): keeps the protocol version of the initialize result as it arrived. */
function tap(transport, seen) {
  transport.onmessage = (message) => {
    seen.messages_received += 1;
    if (message?.result?.protocolVersion !== undefined && seen.protocol_version === null) {
      seen.protocol_version = message.result.protocolVersion;
    }
  };
}

function toolProblems(tool) {
  const problems = [];
  if (!tool.name) problems.push('no name');
  if (!tool.description) problems.push('no description');
  const schema = tool.inputSchema ?? {};
  if (schema.type !== 'object') problems.push(`inputSchema type ${JSON.stringify(schema.type)}`);
  const properties = schema.properties;
  if (properties === null || typeof properties !== 'object' || Array.isArray(properties)) {
    problems.push('inputSchema has no properties object');
  }
  if (!Array.isArray(schema.required)) {
    problems.push('inputSchema has no required list');
  } else if (!schema.required.every((name) => Object.hasOwn(properties ?? {}, name))) {
    problems.push('inputSchema requires a parameter it does not describe');
  }
  if (schema.additionalProperties !== false) problems.push('inputSchema does not set additionalProperties false');
  if (tool.annotations === undefined || tool.annotations === null) problems.push('no annotations');
  return problems;
}

async function call(client, name, args) {
  try {
    const result = await client.callTool({ name, arguments: args }, undefined, { timeout: REQUEST_TIMEOUT_MS });
    const text = (result.content ?? []).filter((block) => block.type === 'text').map((block) => block.text);
    return { isError: result.isError === true, text: text.join('\n'), structuredContent: result.structuredContent ?? null };
  } catch (e) {
    if (e instanceof McpError) return { error: { code: e.code, message: e.message } };
    throw e;
  }
}

/** Resolves when stdin ends, or after `ms`. */
function stdinClosed(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    process.stdin.on('end', () => {
      clearTimeout(timer);
      resolve();
    });
    process.stdin.resume();
  });
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function main() {
  const [mode, ...rest] = process.argv.slice(2);
  let transport;
  if (mode === 'stdio' && rest.length === 2) {
    transport = new StdioClientTransport({
      command: rest[0],
      args: ['mcp', '--scenario', SCENARIO, '--urls-file', rest[1]],
      env: { RUST_LOG: 'warn' },
      stderr: 'inherit',
    });
  } else if (mode === 'http' && rest.length === 1) {
    transport = new StreamableHTTPClientTransport(new URL(rest[0]));
  } else {
    usage();
  }
  const seen = { client: `node @modelcontextprotocol/sdk ${sdkVersion}`, transport: mode, protocol_version: null, messages_received: 0 };
  tap(transport, seen);
  const client = new Client({ name: 'twice-mcp-clients', version: '0.1.0' });
  await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  seen.server_info = client.getServerVersion() ?? null;
  seen.has_instructions = Boolean(client.getInstructions());
  seen.session_id = mode === 'http' ? (transport.sessionId ?? null) : null;
  const listed = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
  seen.tools = listed.tools.map((tool) => tool.name);
  seen.tool_problems = {};
  seen.annotations = {};
  for (const tool of listed.tools) {
    const problems = toolProblems(tool);
    if (problems.length > 0) seen.tool_problems[tool.name] = problems;
    if (tool.annotations) seen.annotations[tool.name] = tool.annotations;
  }
  const refund = { payment_intent: 'pi_4812', amount: 5000 };
  seen.refund = await call(client, 'refund_payment', refund);
  seen.refund_again = await call(client, 'refund_payment', refund);
  seen.list_refunds = await call(client, 'list_refunds', { payment_intent: 'pi_4812' });
  seen.unknown_tool = await call(client, 'no_such_tool', {});
  seen.bad_arguments = await call(client, 'refund_payment', { payment_intent: 'pi_4812', amount: 'lots' });
  process.stdout.write(`${JSON.stringify(seen)}\n`);

  await stdinClosed(HOLD_MS);
  const closed = {};
  if (mode === 'http') {
    // The session ends as the specification says: DELETE with its Mcp-Session-Id.
    try {
      await transport.terminateSession();
      closed.terminated = true;
    } catch (e) {
      closed.terminated = false;
      closed.terminate_error = String(e);
    }
    await client.close();
  } else {
    const pid = transport.pid;
    const started = Date.now();
    await client.close();
    closed.close_ms = Date.now() - started;
    closed.server_alive_after_close = pid !== null && alive(pid);
  }
  process.stdout.write(`${JSON.stringify({ closed })}\n`);
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`node_client: ${e?.stack ?? e}\n`);
    process.exit(1);
  },
);
