//! Workspaces: a SaaS "create" API whose promises are set by its contract.
//!
//! `POST /v1/workspaces` with JSON `{external_id, name, metadata}` (`metadata` optional,
//! Stripe's key-value pairs under Stripe's limits, echoed on every read and kept in the
//! effect), `GET /v1/workspaces/{id}` and `GET /v1/workspaces?external_id=`. Per contract it honours or ignores `Idempotency-Key`,
//! refuses a second workspace for one `external_id` (409 `workspace_exists`) or creates it
//! again, and, with `fencing`, refuses a `Fencing-Token` lower than the highest it has seen
//! for that `external_id` (409 `stale_fencing_token`). A name people could not be shown (see
//! `check_name`) is 422 `name_invalid`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::clock::ServiceClock;
use crate::core::{ApiError, Commit, Inner, Mode, Outcome, RETRY_AFTER_S, ServiceCore, Shape, Stamp};
use crate::wire::{Disposition, FakeRequest, FakeResponse};
use vocabulary::Effect;
use vocabulary::contract::Contract;

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "workspaces";

/// The header that carries a fencing token.
pub const FENCING_HEADER: &str = "fencing-token";

const TEXT_CHARS_MAX: usize = 200;

#[derive(Debug, Clone)]
struct Workspace {
    id: String,
    external_id: String,
    name: String,
    /// The caller's metadata, as given (`{}` when none).
    metadata: Map<String, Value>,
    created_ms: u64,
    fencing_token: Option<u64>,
}

impl Workspace {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "workspace",
            "external_id": self.external_id,
            "name": self.name,
            "metadata": self.metadata,
            "created": self.created_ms / 1000,
            "fencing_token": self.fencing_token,
        })
    }
}

/// The workspaces fake's objects.
#[derive(Debug, Default)]
pub struct WorkspacesState {
    /// In creation order.
    workspaces: Vec<Workspace>,
    /// The highest fencing token accepted per external id.
    fences: BTreeMap<String, u64>,
}

/// The workspaces fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Workspaces {
    core: Arc<ServiceCore<WorkspacesState>>,
}

impl Workspaces {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape =
            Shape { error: error_body, stamp: |r, id| r.headers.push(("X-Request-Id".into(), id.into())) };
        let core = ServiceCore::new(NAME, clock, seed, Contract::workspaces_default(), shape);
        Workspaces { core: Arc::new(core.reading_refusals(refused_params)) }
    }

    pub fn core(&self) -> &Arc<ServiceCore<WorkspacesState>> {
        &self.core
    }

    /// Fields a rule can match: top-level JSON body fields and query parameters.
    pub fn fields(req: &FakeRequest) -> BTreeMap<String, String> {
        let mut fields: BTreeMap<String, String> = req.query_pairs().into_iter().collect();
        if let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) {
            for (k, v) in body {
                match v {
                    Value::String(s) => fields.insert(k, s),
                    Value::Number(n) => fields.insert(k, n.to_string()),
                    Value::Bool(b) => fields.insert(k, b.to_string()),
                    _ => None,
                };
            }
        }
        fields
    }

    pub async fn handle(&self, req: FakeRequest) -> Disposition {
        if req.path.starts_with("/__twice") {
            let response = self.core.control(&req, |_, _| Err("workspaces has nothing to seed".into()));
            return Disposition::Respond(response);
        }
        let is_write = req.method == "POST";
        let ctx = self.core.begin(&req, Self::fields, is_write);
        let _abandoned = self.core.watch(&ctx);
        if let Some(done) = self.core.intercept(&ctx, &req) {
            return done;
        }
        let path = req.path.trim_end_matches('/');
        let outcome = match (req.method.as_str(), path) {
            ("POST", "/v1/workspaces") => match self.prepare_create(&req) {
                Ok((fingerprint, commit)) => self.core.write(&ctx, fingerprint, commit).await,
                Err(e) => Outcome::of(self.core.error(&e)),
            },
            ("GET", "/v1/workspaces") => match parse_list(&req) {
                Ok((external_id, limit)) => {
                    self.core
                        .read(&ctx, |inner, until| list(inner, external_id.as_deref(), limit, until))
                        .await
                }
                Err(e) => Outcome::of(self.core.error(&e)),
            },
            ("GET", p) if p.starts_with("/v1/workspaces/") && !p["/v1/workspaces/".len()..].contains('/') => {
                let id = p["/v1/workspaces/".len()..].to_string();
                self.core.read(&ctx, |inner, until| retrieve(inner, &id, until)).await
            }
            _ => Outcome::of(self.core.error(&ApiError::new(
                404,
                "invalid_request_error",
                format!("Unrecognized request URL ({}: {}).", req.method, req.path),
            ))),
        };
        self.core.conclude(&ctx, &req, outcome).await
    }

    fn prepare_create(&self, req: &FakeRequest) -> Result<(String, Commit<WorkspacesState>), ApiError> {
        let body: Value = serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::invalid(format!("The request body is not valid JSON: {e}")).code("invalid_json")
        })?;
        let Value::Object(body) = body else {
            return Err(ApiError::invalid("The request body must be a JSON object.").code("invalid_json"));
        };
        for name in body.keys() {
            if !FIELDS.contains(&name.as_str()) {
                return Err(
                    ApiError::invalid(format!("Received unknown parameter: {name}")).param(name.clone())
                );
            }
        }
        let external_id = required_text(&body, "external_id")?;
        let name = required_text(&body, "name")?;
        check_name(&name)?;
        let metadata = match body.get("metadata") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(metadata)) => crate::metadata::check(metadata)?,
            Some(_) => {
                return Err(ApiError::invalid(
                    "Invalid metadata: must be an object of string keys and string values.",
                )
                .param("metadata"));
            }
        };
        let token = match req.headers.get(FENCING_HEADER) {
            None => None,
            Some(v) => Some(v.to_str().ok().and_then(|t| t.trim().parse::<u64>().ok()).ok_or_else(|| {
                ApiError::invalid("Fencing-Token must be a non-negative integer.").param("Fencing-Token")
            })?),
        };
        let fingerprint = Value::Object(body).to_string();
        let commit: Commit<WorkspacesState> =
            Box::new(move |inner: &mut Inner<WorkspacesState>, mode: Mode, stamp: &Stamp| {
                create(inner, mode, stamp, Create { external_id, name, metadata, token })
            });
        Ok((fingerprint, commit))
    }
}

/// The fields of a create.
const FIELDS: &[&str] = &["external_id", "name", "metadata"];

/// A create, checked.
struct Create {
    external_id: String,
    name: String,
    metadata: Map<String, Value>,
    token: Option<u64>,
}

/// Longest workspace name, in characters.
const NAME_CHARS_MAX: usize = 64;
/// What a workspace name may hold besides letters, digits and spaces.
const NAME_PUNCTUATION: &str = "-_.,&'()";

/// A workspace's name is what people see in the product: at most 64 characters, letters,
/// digits, spaces and `- _ . , & ' ( )`, starting with a letter or a digit. Anything else is
/// well-formed JSON the service will not take: 422 `name_invalid`, which no resend changes.
fn check_name(name: &str) -> Result<(), ApiError> {
    let allowed = |c: char| c.is_alphanumeric() || c == ' ' || NAME_PUNCTUATION.contains(c);
    let first_ok = name.chars().next().is_some_and(char::is_alphanumeric);
    if first_ok && name.chars().count() <= NAME_CHARS_MAX && name.chars().all(allowed) {
        return Ok(());
    }
    Err(ApiError::new(
        422,
        "invalid_request_error",
        format!(
            "Invalid name \"{name}\": a workspace name is 1 to {NAME_CHARS_MAX} letters, digits, spaces and {NAME_PUNCTUATION}, starting with a letter or a digit."
        ),
    )
    .code("name_invalid")
    .param("name"))
}

/// What a refused create asked for: its `external_id` and `name`, as its effect names them.
fn refused_params(req: &FakeRequest) -> Option<Value> {
    if req.path.trim_end_matches('/') != "/v1/workspaces" {
        return None;
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else { return None };
    let params: Map<String, Value> =
        body.into_iter().filter(|(name, _)| name == "external_id" || name == "name").collect();
    (!params.is_empty()).then_some(Value::Object(params))
}

fn required_text(body: &Map<String, Value>, name: &str) -> Result<String, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => {
            Err(ApiError::invalid(format!("Missing required param: {name}.")).param(name))
        }
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= TEXT_CHARS_MAX => Ok(s.clone()),
        Some(Value::String(_)) => {
            Err(ApiError::invalid(format!("Invalid {name}: must be 1 to {TEXT_CHARS_MAX} characters."))
                .param(name))
        }
        Some(_) => Err(ApiError::invalid(format!("Invalid {name}: must be a string.")).param(name)),
    }
}

fn create(inner: &mut Inner<WorkspacesState>, mode: Mode, stamp: &Stamp, create: Create) -> FakeResponse {
    let Create { external_id, name, metadata, token } = create;
    let fencing = inner.contract.fencing;
    let token = token.filter(|_| fencing);
    if let (Some(token), Some(highest)) = (token, inner.state.fences.get(&external_id))
        && token < *highest
    {
        return error_body(
                &ApiError::new(
                    409,
                    "invalid_request_error",
                    format!("Fencing token {token} is older than {highest}, the newest seen for external_id '{external_id}'."),
                )
                .code("stale_fencing_token")
                .param("Fencing-Token"),
            );
    }
    if inner.contract.unique_business_key
        && mode == Mode::Apply
        && let Some(existing) = inner.state.workspaces.iter().find(|w| w.external_id == external_id)
    {
        return error_body(
            &ApiError::new(
                409,
                "invalid_request_error",
                format!("A workspace with external_id '{external_id}' already exists: {}.", existing.id),
            )
            .code("workspace_exists")
            .param("external_id"),
        );
    }
    let workspace = Workspace {
        id: inner.new_id("ws_", 20),
        external_id: external_id.clone(),
        name,
        metadata,
        created_ms: stamp.now_ms,
        fencing_token: token,
    };
    let body = workspace.to_json();
    if mode == Mode::Pretend {
        return FakeResponse::json(200, &body);
    }
    if let Some(token) = token {
        inner.state.fences.insert(external_id, token);
    }
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: "workspace.created".into(),
        object_id: workspace.id.clone(),
        // The metadata is always there (`{}` when none), as on the workspace itself: a caller
        // that tagged its create finds the tag where the checker reads it.
        params: json!({
            "external_id": workspace.external_id,
            "name": workspace.name,
            "metadata": workspace.metadata,
        }),
        idempotency_key: stamp.key.clone(),
        fencing_token: token,
        request_id: stamp.request_id.clone(),
    });
    inner.state.workspaces.push(workspace);
    FakeResponse::json(200, &body)
}

fn retrieve(inner: &mut Inner<WorkspacesState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    match inner.state.workspaces.iter().find(|w| w.id == id && w.created_ms <= visible_until_ms) {
        Some(w) => FakeResponse::json(200, &w.to_json()),
        None => error_body(
            &ApiError::new(404, "invalid_request_error", format!("No such workspace: '{id}'"))
                .code("resource_missing")
                .param("id"),
        ),
    }
}

fn parse_list(req: &FakeRequest) -> Result<(Option<String>, usize), ApiError> {
    let mut external_id = None;
    let mut limit = 100;
    for (name, value) in req.query_pairs() {
        match name.as_str() {
            "external_id" => external_id = Some(value),
            "limit" => {
                limit = match value.parse::<usize>() {
                    Ok(n) if (1..=100).contains(&n) => n,
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "Invalid limit: must be an integer between 1 and 100, got {value}"
                        ))
                        .param("limit"));
                    }
                }
            }
            _ => return Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name)),
        }
    }
    Ok((external_id, limit))
}

fn list(
    inner: &mut Inner<WorkspacesState>,
    external_id: Option<&str>,
    limit: usize,
    visible_until_ms: u64,
) -> FakeResponse {
    let matching: Vec<&Workspace> = inner
        .state
        .workspaces
        .iter()
        .filter(|w| w.created_ms <= visible_until_ms)
        .filter(|w| external_id.is_none_or(|e| w.external_id == e))
        .collect();
    let data: Vec<Value> = matching.iter().take(limit).map(|w| w.to_json()).collect();
    FakeResponse::json(
        200,
        &json!({"object": "list", "url": "/v1/workspaces", "has_more": matching.len() > limit, "data": data}),
    )
}

/// The workspaces error shape: `{"error": {"type", "code", "message", "param"}}`. A 429 in
/// the pipeline's bare words (a `reject`, an `error_after_commit`) says what a rate limit
/// says: that the caller was rate limited, and when to come back.
pub fn error_body(error: &ApiError) -> FakeResponse {
    if error.status == 429 && error.standard {
        return error_body(&rate_limited());
    }
    let mut body = Map::new();
    body.insert("type".into(), json!(error.kind));
    if let Some(code) = error.code {
        body.insert("code".into(), json!(code));
    }
    body.insert("message".into(), json!(error.message));
    if let Some(param) = &error.param {
        body.insert("param".into(), json!(param));
    }
    FakeResponse::json(error.status, &json!({"error": body}))
}

/// The 429 of a rate limit, in Stripe's envelope as the rest of this API: code `rate_limit`,
/// and the wait the answer's `Retry-After` gives.
fn rate_limited() -> ApiError {
    ApiError::new(
        429,
        "invalid_request_error",
        format!(
            "Too many requests: this request was rate limited. Retry after {RETRY_AFTER_S} s, as the Retry-After header says."
        ),
    )
    .code("rate_limit")
}
