//! The stdio protocol `twice/1` (normative text: `docs/protocol.md`).
//!
//! One JSON object per line in each direction. Requests carry `msg_id`; replies carry
//! `in_reply_to` and are `<type>_ok` or `error` with a `code` and a `text`. A line that is not
//! a request gets an `error` and the executor keeps serving. State changes are also sent as
//! `event` lines, for the harness's timeline.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use vocabulary::{WEBHOOKS_FEATURE, WORKFLOWS_FEATURE};

use crate::intent_engine::{DrainError, Executor, Proposal, ProposeError, Transition, World};
use crate::log::Durability;
use crate::model::{ACTIONS, ActionError};
use vocabulary::protocol::Config;
use vocabulary::protocol::Limits;
use vocabulary::protocol::Service;

/// The protocol version this executor speaks, its line limit and its error codes: the
/// protocol's own, shared with the harness.
pub use vocabulary::protocol::{LINE_BYTES_MAX, PROTOCOL, code};
/// Most `propose` requests handled as one batch, in one commit: the one read, and those
/// already read in behind it.
pub const PROPOSE_BATCH_MAX: usize = 64;
/// Longest drain a caller may ask for.
pub const DRAIN_MS_MAX: u64 = 600_000;

/// Options from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--state-dir`; when given, `init` must name the same directory or none.
    pub state_dir: Option<PathBuf>,
    pub durability: Durability,
}

// Unknown fields are ignored rather than refused: the protocol may add fields (design §6),
// and an executor must keep working when the harness sends one it does not know.
#[derive(Debug, Deserialize)]
struct Init {
    protocol: String,
    worker_id: String,
    #[serde(default)]
    state_dir: Option<PathBuf>,
    #[serde(default)]
    services: BTreeMap<String, Service>,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    #[serde(default)]
    limits: Limits,
}

#[derive(Debug, Deserialize)]
struct IntentMsg {
    id: String,
    action: String,
    #[serde(default)]
    params: Value,
    #[serde(default)]
    replaces: Option<String>,
    /// `null` is the same as absent: no intent to come after.
    #[serde(default)]
    after: Option<Vec<String>>,
    /// The event that starts it (`webhooks`); `null` is the same as absent.
    #[serde(default)]
    on_event: Option<vocabulary::OnEvent>,
}

struct Failure {
    code: u16,
    text: String,
}

fn fail(code: u16, text: impl Into<String>) -> Failure {
    Failure { code, text: text.into() }
}

/// Serves requests from `input` until `shutdown` or end of input.
pub async fn serve<R, W>(mut input: R, mut output: W, options: Options, world: World) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut executor: Option<Arc<Executor>> = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut input).take(LINE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line).await?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > LINE_BYTES_MAX && !line.ends_with(b"\n") {
            // Skip the rest of the oversized line, in bounded chunks.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                let m = (&mut input).take(64 * 1024).read_until(b'\n', &mut rest).await?;
                if m == 0 || rest.ends_with(b"\n") {
                    break;
                }
            }
            let reply = error_reply(
                None,
                &fail(code::MALFORMED_REQUEST, format!("a line longer than {LINE_BYTES_MAX} bytes")),
            );
            write_line(&mut output, &reply).await?;
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let request: Value = match serde_json::from_str(text.trim()) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                write_line(
                    &mut output,
                    &error_reply(None, &fail(code::MALFORMED_REQUEST, "a request is a JSON object")),
                )
                .await?;
                continue;
            }
            Err(e) => {
                write_line(
                    &mut output,
                    &error_reply(None, &fail(code::MALFORMED_REQUEST, format!("not JSON: {e}"))),
                )
                .await?;
                continue;
            }
        };
        let msg_id = request.get("msg_id").cloned();
        let kind = request.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        if let (Some(ex), "propose") = (executor.as_ref(), kind.as_str()) {
            // Proposals that arrived together are committed together: the further complete
            // `propose` lines already read in are taken without waiting for more bytes, and
            // each gets its reply, in order, once the batch's commit is done.
            let mut batch = vec![request];
            while batch.len() < PROPOSE_BATCH_MAX {
                match buffered_propose(&mut input) {
                    Some(next) => batch.push(next),
                    None => break,
                }
            }
            for reply in propose_all(ex, &batch) {
                let mut text = reply.to_string();
                text.push('\n');
                output.write_all(text.as_bytes()).await?;
            }
            output.flush().await?;
            continue;
        }
        let mut events = Vec::new();
        let result = handle(&kind, &request, &mut executor, &options, &world, &mut events).await;
        for t in &events {
            let event = json!({"type": "event", "intent_id": t.intent_id, "from": t.from, "state": t.to, "note": t.note});
            write_line(&mut output, &event).await?;
        }
        let reply = match result {
            Ok(mut body) => {
                body.insert("type".into(), json!(format!("{kind}_ok")));
                body.insert("in_reply_to".into(), msg_id.unwrap_or(Value::Null));
                Value::Object(body)
            }
            Err(f) => error_reply(msg_id, &f),
        };
        write_line(&mut output, &reply).await?;
        if kind == "shutdown" && reply["type"] == "shutdown_ok" {
            return Ok(());
        }
    }
}

/// Answers one request other than a `propose` batch: the body of its `<type>_ok` reply, or
/// the failure its `error` reply says; the transitions a pass or a drain made go to `events`.
async fn handle(
    kind: &str,
    request: &Value,
    executor: &mut Option<Arc<Executor>>,
    options: &Options,
    world: &World,
    events: &mut Vec<Transition>,
) -> Result<serde_json::Map<String, Value>, Failure> {
    if request.get("msg_id").is_none_or(|m| !m.is_u64()) {
        return Err(fail(code::MALFORMED_REQUEST, "a request needs a numeric msg_id"));
    }
    if kind == "init" {
        return init(request, executor, options, world);
    }
    let mut body = serde_json::Map::new();
    let known = ["propose", "status", "reconcile", "drain", "shutdown"];
    if !known.contains(&kind) {
        return Err(fail(code::NOT_SUPPORTED, format!("unknown request type \"{kind}\"")));
    }
    if kind == "shutdown" {
        return Ok(body);
    }
    let Some(ex) = executor.as_ref() else {
        return Err(fail(code::TEMPORARILY_UNAVAILABLE, "send init first"));
    };
    match kind {
        "propose" => {
            let recorded = ex.propose(proposal(request)?).map_err(propose_failure)?;
            body.insert("intent".into(), recorded.view());
        }
        "status" => {
            let ids: Option<Vec<String>> = match request.get("ids") {
                None | Some(Value::Null) => None,
                Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                    fail(code::MALFORMED_REQUEST, format!("ids must be a list of strings: {e}"))
                })?),
            };
            let intents = ex.status(ids.as_deref()).map_err(|e| fail(code::CRASH, e.to_string()))?;
            body.insert("intents".into(), Value::Array(intents.iter().map(|i| i.view()).collect()));
        }
        "reconcile" => {
            let report = ex.pass().await.map_err(|e| fail(code::CRASH, e.to_string()))?;
            body.insert("sent".into(), json!(report.sent));
            body.insert("looked_up".into(), json!(report.looked_up));
            events.extend(report.transitions);
        }
        "drain" => drain(ex, request, events).await?,
        _ => {}
    }
    Ok(body)
}

/// `init`: the executor opened on the state directory the command line or the request names
/// (not both, unless they agree), once; the reply names it, its actions and its features.
fn init(
    request: &Value,
    executor: &mut Option<Arc<Executor>>,
    options: &Options,
    world: &World,
) -> Result<serde_json::Map<String, Value>, Failure> {
    let mut fields = request.clone();
    if let Some(map) = fields.as_object_mut() {
        map.remove("type");
        map.remove("msg_id");
    }
    let init: Init =
        serde_json::from_value(fields).map_err(|e| fail(code::MALFORMED_REQUEST, format!("init: {e}")))?;
    if init.protocol != PROTOCOL {
        return Err(fail(
            code::NOT_SUPPORTED,
            format!("protocol {} is not supported; this executor speaks {PROTOCOL}", init.protocol),
        ));
    }
    let state_dir = match (&options.state_dir, &init.state_dir) {
        (Some(a), Some(b)) if a != b => {
            return Err(fail(
                code::MALFORMED_REQUEST,
                format!("init names state_dir {}, but --state-dir is {}", b.display(), a.display()),
            ));
        }
        (Some(a), _) => a.clone(),
        (None, Some(b)) => b.clone(),
        (None, None) => {
            return Err(fail(code::MALFORMED_REQUEST, "no state_dir: give --state-dir or init.state_dir"));
        }
    };
    if executor.is_some() {
        return Err(fail(code::MALFORMED_REQUEST, "init was already received"));
    }
    let config = Config {
        worker_id: init.worker_id,
        services: init.services,
        secrets: init.secrets,
        limits: init.limits,
    };
    let opened = Executor::open(config, &state_dir, options.durability, world.clone())
        .map_err(|e| fail(code::CRASH, e.to_string()))?;
    let opened = Arc::new(opened);
    // Deliveries reach it on a loopback port of its own (`webhooks`).
    let url = crate::webhook_listener::listen(Arc::clone(&opened))
        .map_err(|e| fail(code::CRASH, format!("cannot listen for webhooks: {e}")))?;
    opened.listen_at(url);
    *executor = Some(opened);
    let mut body = serde_json::Map::new();
    body.insert("executor".into(), json!({"name": "twice-executor", "version": env!("CARGO_PKG_VERSION")}));
    body.insert("actions".into(), json!(ACTIONS));
    // Steps that build on steps: `after` and parameter references; intents an event starts
    // (both §3.2).
    body.insert("features".into(), json!([WORKFLOWS_FEATURE, WEBHOOKS_FEATURE]));
    Ok(body)
}

/// `drain`: passes until nothing is recorded or submitted, within the request's `timeout_ms`
/// (at most [`DRAIN_MS_MAX`]); the transitions made go to `events`, a timeout's too.
async fn drain(ex: &Executor, request: &Value, events: &mut Vec<Transition>) -> Result<(), Failure> {
    let timeout_ms = match request.get("timeout_ms") {
        None => DRAIN_MS_MAX,
        Some(v) => v.as_u64().filter(|t| *t <= DRAIN_MS_MAX).ok_or_else(|| {
            fail(code::MALFORMED_REQUEST, format!("timeout_ms must be an integer up to {DRAIN_MS_MAX}"))
        })?,
    };
    match ex.drain(timeout_ms).await {
        Ok(transitions) => events.extend(transitions),
        Err(DrainError::Timeout { busy, timeout_ms, transitions }) => {
            events.extend(transitions);
            return Err(fail(
                code::TIMEOUT,
                format!("{busy} intents still recorded or submitted after {timeout_ms} ms"),
            ));
        }
        Err(DrainError::Log(e)) => return Err(fail(code::CRASH, e.to_string())),
    }
    Ok(())
}

/// The next line already read in, taken from `input` if it is a complete `propose` request;
/// never waits for bytes that have not arrived.
fn buffered_propose<R: AsyncBufRead + Unpin>(input: &mut R) -> Option<Value> {
    // Ready at once when bytes are buffered (or can be read without waiting); otherwise
    // nothing is taken, and the main loop waits for the next line as it always does.
    let buffered = match input.fill_buf().now_or_never() {
        Some(Ok(buffered)) => buffered,
        _ => return None,
    };
    let end = buffered.iter().position(|b| *b == b'\n')?;
    if end > LINE_BYTES_MAX {
        return None;
    }
    let request: Value = serde_json::from_slice(&buffered[..end]).ok()?;
    if request.get("type").and_then(Value::as_str) != Some("propose") {
        return None;
    }
    input.consume(end + 1);
    Some(request)
}

/// The replies to a batch of `propose` requests, in order: the valid proposals among them
/// are recorded in one commit, each refused one gets its error.
fn propose_all(ex: &Executor, requests: &[Value]) -> Vec<Value> {
    let mut proposals = Vec::new();
    let parsed: Vec<Result<(), Failure>> = requests
        .iter()
        .map(|request| {
            if request.get("msg_id").is_none_or(|m| !m.is_u64()) {
                return Err(fail(code::MALFORMED_REQUEST, "a request needs a numeric msg_id"));
            }
            proposals.push(proposal(request)?);
            Ok(())
        })
        .collect();
    let mut recorded = ex.propose_batch(proposals).into_iter();
    requests
        .iter()
        .zip(parsed)
        .map(|(request, parsed)| {
            let msg_id = request.get("msg_id").cloned();
            let result = parsed.and_then(|()| match recorded.next() {
                Some(r) => r.map_err(propose_failure),
                None => Err(fail(code::CRASH, "the batch gave no result for this proposal")),
            });
            match result {
                Ok(intent) => json!({"type": "propose_ok", "in_reply_to": msg_id, "intent": intent.view()}),
                Err(f) => error_reply(msg_id, &f),
            }
        })
        .collect()
}

/// The proposal a `propose` request carries.
fn proposal(request: &Value) -> Result<Proposal, Failure> {
    let intent = request
        .get("intent")
        .cloned()
        .ok_or_else(|| fail(code::MALFORMED_REQUEST, "propose needs an intent"))?;
    let intent: IntentMsg =
        serde_json::from_value(intent).map_err(|e| fail(code::MALFORMED_REQUEST, format!("intent: {e}")))?;
    Ok(Proposal {
        id: intent.id,
        action: intent.action,
        params: intent.params,
        replaces: intent.replaces,
        after: intent.after.unwrap_or_default(),
        on_event: intent.on_event,
    })
}

fn propose_failure(e: ProposeError) -> Failure {
    match e {
        ProposeError::Action(ActionError::Unsupported(_))
        | ProposeError::NotConfigured { .. }
        | ProposeError::MissingSecret { .. } => fail(code::NOT_SUPPORTED, e.to_string()),
        ProposeError::Conflict(_) => fail(code::KEY_ALREADY_EXISTS, e.to_string()),
        ProposeError::Log(_) | ProposeError::Unrecorded(..) => fail(code::CRASH, e.to_string()),
        _ => fail(code::MALFORMED_REQUEST, e.to_string()),
    }
}

fn error_reply(msg_id: Option<Value>, failure: &Failure) -> Value {
    json!({"type": "error", "in_reply_to": msg_id.unwrap_or(Value::Null), "code": failure.code, "text": failure.text})
}

async fn write_line<W: AsyncWrite + Unpin>(output: &mut W, value: &Value) -> std::io::Result<()> {
    let mut text = value.to_string();
    text.push('\n');
    output.write_all(text.as_bytes()).await?;
    output.flush().await
}
