//! `twice mcp` and `twice serve --mcp-port`: serve's world as MCP tools, so that an agent's
//! tool calls meet the scenario's faults and its claims meet the same verdicts.
//!
//! The server is the official Rust SDK's (`rmcp`), with the tools as data ([`tools`]): one
//! write per action of the action table and the reads an agent checks before it retries.
//! A tool call is an HTTP exchange with a fake on loopback ([`call`]), so a reply lost after
//! the commit reaches the agent as a connection error, a silent no-op as a success and a 429
//! as a refusal with its `Retry-After`; the server never retries. Every call is a moment on
//! the scenario's timeline (lane `mcp`, with the request id and the session), and what the
//! agent finally claims is judged by `twice check` or `POST /__twice/check` as any
//! application's claims are (docs/agents.md).
//!
//! Both transports read every message before the SDK does, so that what the SDK would drop
//! or misname gets JSON-RPC's error rather than silence ([`message`]): over stdio ([`stdio`])
//! the lines are framed here, each at most [`MESSAGE_BYTES_MAX`]; over streamable HTTP
//! ([`http`]) a body is read to the same bound (413 past it) before the SDK's service answers
//! on hyper. A request under an id still in flight in its session is refused, not lost
//! ([`inflight`]; over HTTP the session manager of [`sessions`] holds them).

pub mod call;
pub mod command;
pub mod http;
pub mod inflight;
pub mod message;
pub mod sessions;
pub mod stdio;
pub mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;

use crate::world::World;

/// Largest MCP message read, in bytes, on either transport: past it a message is refused
/// unread (a stdio line with `-32600`, an HTTP body with 413).
pub const MESSAGE_BYTES_MAX: usize = 1024 * 1024;

/// What the server tells a client about itself at `initialize`.
const INSTRUCTIONS: &str = "Tools over twice's fake services (payments, workspaces, files, chain, email). \
Each call is one request to the service; nothing is retried for you. Read before you retry a write whose \
answer you did not get.";

/// The MCP server: the tools over one serve world.
#[derive(Clone)]
pub struct Server {
    world: Arc<World>,
    /// Each exchange's bound; `None`: the scenario's request timeout.
    timeout_ms: Option<u64>,
    transport: Transport,
}

/// How the client reaches the server: over stdio there is one session; over HTTP each call
/// carries the SDK's `Mcp-Session-Id` (or none, stateless).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

impl Server {
    pub fn new(world: Arc<World>, timeout_ms: Option<u64>, transport: Transport) -> Server {
        Server { world, timeout_ms, transport }
    }

    /// The session a call belongs to: stdio has one; over HTTP, the `Mcp-Session-Id` the
    /// SDK handed out (none for a stateless request).
    fn session(&self, context: &RequestContext<RoleServer>) -> String {
        if self.transport == Transport::Stdio {
            return "stdio".into();
        }
        context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|value| value.to_str().ok())
            .map_or_else(|| "stateless".into(), str::to_string)
    }
}

/// A tool of the table as the SDK lists it.
fn listed(tool: &tools::Tool) -> rmcp::model::Tool {
    let annotations = ToolAnnotations::from_raw(
        Some(tool.title.to_string()),
        Some(!tool.writes()),
        Some(false),
        // A write is not idempotent by itself: whether a repeat is safe is the key's to say.
        Some(!tool.writes()),
        Some(false),
    );
    rmcp::model::Tool::new(tool.name, tool.description, tool.input_schema())
        .with_title(tool.title)
        .with_annotations(annotations)
}

/// What a call came to, as the timeline says it: the error's words, or what the answer named.
fn summary(outcome: &call::Outcome) -> String {
    if outcome.error {
        return format!("error: {}", outcome.text);
    }
    let value = outcome.structured.as_ref().unwrap_or(&Value::Null);
    let named = ["id", "hash", "etag"].iter().find_map(|field| value.get(*field).and_then(Value::as_str));
    match (named, value.get("found")) {
        (Some(name), _) => format!("ok: {name}"),
        (None, Some(found)) => format!("ok: found {found}"),
        (None, None) => "ok".into(),
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("twice", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::TOOLS.iter().map(listed).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a protocol error; arguments that fail the schema are the tool's
        // error, which the model can read and correct (the specification's split).
        let Some(tool) = tools::find(&request.name) else {
            return Err(ErrorData::invalid_params(format!("Unknown tool: {}", request.name), None));
        };
        let arguments = request.arguments.unwrap_or_default();
        let session = self.session(&context);
        let id = match &context.id {
            rmcp::model::NumberOrString::Number(n) => n.to_string(),
            rmcp::model::NumberOrString::String(s) => s.to_string(),
        };
        let outcome = match tool.check(&arguments) {
            Err(problems) => call::Outcome {
                error: true,
                text: format!("Invalid arguments for tool {}: {}", tool.name, problems.join("; ")),
                structured: None,
            },
            Ok(()) => {
                let urls = self.world.urls();
                let timeout_ms = self.timeout_ms.unwrap_or_else(|| self.world.request_timeout_ms());
                call::call(tool, &arguments, &call::Target { urls: &urls, timeout_ms }).await
            }
        };
        let detail = format!("{} (request {id}, session {session}): {}", tool.name, summary(&outcome));
        tracing::info!(target: "twice::mcp", tool = tool.name, request = %id, session = %session, error = outcome.error, "{detail}");
        self.world.note("mcp", "tool_call", detail);
        let content = vec![ContentBlock::text(outcome.text)];
        let mut result =
            if outcome.error { CallToolResult::error(content) } else { CallToolResult::success(content) };
        result.structured_content = outcome.structured;
        Ok(result.into())
    }
}
