//! Serve's own control endpoint, beside the fakes' (`docs/byo.md`): a scenario's world on
//! demand, its steps, the verdict on an application's claims, and a reset of every fake.
//!
//! Errors answer `{"error": {"message": ...}}` with 400 (a bad body or query), 404 (no such
//! route or step) or 409 (no scenario set up yet, or another set up while a check waited); a
//! verdict, violated or not, answers 200.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::claims;
use super::settle;
use super::world::{STEP_WAIT_MS_MAX, World};
use results::Source;
use runner::run::{self, Case};
use runner::{exit, pipeline};

/// The largest body the endpoint reads: a scenario file or the claims of a large test.
pub const CONTROL_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// A client has this long to send a request's headers, and as long again for its body.
const CONTROL_READ_MS_MAX: u64 = 30_000;
/// What the replay hint of a verdict starts with: the test reruns against this.
pub const REPLAY_PREFIX: &str = "twice serve";

/// The control endpoint, listening.
pub struct ControlServer {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ControlServer {
    pub async fn start(world: Arc<World>, addr: SocketAddr) -> std::io::Result<ControlServer> {
        let socket = TcpListener::bind(addr).await?;
        let addr = socket.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    accepted = socket.accept() => match accepted {
                        Ok((stream, _)) => {
                            let world = Arc::clone(&world);
                            connections.spawn(async move {
                                let service = service_fn(move |req| {
                                    let world = Arc::clone(&world);
                                    async move { Ok::<_, std::convert::Infallible>(handle(&world, req).await) }
                                });
                                let _ = http1::Builder::new()
                                    .timer(TokioTimer::new())
                                    .header_read_timeout(Duration::from_millis(CONTROL_READ_MS_MAX))
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            });
                        }
                        // Out of descriptors: wait for connections to close, then go on.
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
            connections.shutdown().await;
        });
        Ok(ControlServer { addr, stop, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn answer(status: u16, body: &Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec_pretty(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

fn error(status: u16, message: impl Into<String>) -> Response<Full<Bytes>> {
    answer(status, &json!({"error": {"message": message.into()}}))
}

async fn handle(world: &World, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        Duration::from_millis(CONTROL_READ_MS_MAX),
        Limited::new(body, CONTROL_BODY_BYTES_MAX).collect(),
    )
    .await;
    let body = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => return error(413, format!("the body is larger than {CONTROL_BODY_BYTES_MAX} bytes")),
        Err(_) => return error(408, format!("the body did not arrive within {CONTROL_READ_MS_MAX} ms")),
    };
    let path = parts.uri.path().trim_end_matches('/');
    let query = parts.uri.query().unwrap_or("");
    let method = parts.method.as_str();
    let Some((route, index)) = route(method, path) else {
        // A path the endpoint has, asked with another method: 405 and the methods it takes
        // (RFC 9110 §15.5.6), not "no such route".
        let allowed = methods(path);
        if !allowed.is_empty() {
            let allow = allowed.join(", ");
            let mut refused = error(405, format!("{method} {path} is not allowed; it takes {allow}"));
            if let Ok(value) = hyper::header::HeaderValue::from_str(&allow) {
                refused.headers_mut().insert(hyper::header::ALLOW, value);
            }
            return refused;
        }
        return error(404, format!("no control route {method} {path}; see docs/byo.md"));
    };
    let no_scenario = || error(409, "no scenario is set up: POST /__twice/scenario first");
    let step_error = |e: String| error(if e.starts_with("no step") { 404 } else { 409 }, e);
    match route {
        Route::Health => answer(200, &json!({"service": "serve", "ok": true, "urls": world.urls()})),
        Route::Urls => answer(200, &json!(world.urls())),
        Route::GetScenario => describe(world).map_or_else(no_scenario, |d| answer(200, &d)),
        Route::SetScenario => set_scenario(world, &body),
        Route::Reset => {
            world.reset();
            answer(200, &json!({"reset": true}))
        }
        Route::Check => match check_wait(query) {
            Err(e) => error(400, e),
            Ok(wait) => check_claims(world, &body, wait).await,
        },
        Route::Steps => describe(world).map_or_else(no_scenario, |d| answer(200, &d["steps"])),
        Route::WaitStep => match wait_ms(query) {
            Err(e) => error(400, e),
            Ok(wait_ms) => match world.wait(index, wait_ms).await {
                Ok(step) => answer(200, &json!(step)),
                Err(e) => step_error(e),
            },
        },
        Route::StepDone => match world.done(index) {
            Ok(step) => answer(200, &json!(step)),
            Err(e) => step_error(e),
        },
    }
}

/// What a control request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Health,
    Urls,
    GetScenario,
    SetScenario,
    Reset,
    Check,
    Steps,
    WaitStep,
    StepDone,
}

/// Every route of the control endpoint: method, path (`{n}` is a step's number) and what it
/// asks for. The router reads this table and nothing else, so `docs/openapi/serve.json`,
/// which a test compares with it, lists exactly what is served.
pub const ROUTES: &[(&str, &str, Route)] = &[
    ("GET", "/__twice", Route::Health),
    ("GET", "/__twice/health", Route::Health),
    ("GET", "/__twice/urls", Route::Urls),
    ("GET", "/__twice/scenario", Route::GetScenario),
    ("POST", "/__twice/scenario", Route::SetScenario),
    ("POST", "/__twice/reset", Route::Reset),
    ("POST", "/__twice/check", Route::Check),
    ("GET", "/__twice/steps", Route::Steps),
    ("GET", "/__twice/steps/{n}", Route::WaitStep),
    ("POST", "/__twice/steps/{n}/done", Route::StepDone),
];

/// The route `method` and `path` ask for, with the step number where the path has one.
pub fn route(method: &str, path: &str) -> Option<(Route, usize)> {
    ROUTES.iter().find_map(
        |(m, pattern, route)| if *m == method { Some((*route, step_number(pattern, path)?)) } else { None },
    )
}

/// The methods the endpoint takes on `path`, in the order of [`ROUTES`]; empty for a path it
/// does not have.
pub fn methods(path: &str) -> Vec<&'static str> {
    ROUTES.iter().filter(|(_, pattern, _)| step_number(pattern, path).is_some()).map(|(m, _, _)| *m).collect()
}

/// Whether `path` is `pattern` (a [`ROUTES`] path): the step number where the pattern has
/// one, 0 where it has none.
fn step_number(pattern: &str, path: &str) -> Option<usize> {
    match pattern.split_once("{n}") {
        None => (pattern == path).then_some(0),
        Some((before, after)) => {
            let n = path.strip_prefix(before)?.strip_suffix(after)?;
            // Digits only: "1/done" is another route's, "x" no step at all.
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            n.parse().ok()
        }
    }
}

/// `wait_ms=N` from a query; 0 without one. More than [`STEP_WAIT_MS_MAX`] is refused, as
/// the document says, rather than cut short without a word.
fn wait_ms(query: &str) -> Result<u64, String> {
    let mut wait_ms = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("wait_ms", value) => {
                wait_ms = value
                    .parse()
                    .map_err(|_| format!("wait_ms: \"{value}\" is not a number of milliseconds"))?;
                if wait_ms > STEP_WAIT_MS_MAX {
                    return Err(format!(
                        "wait_ms: {wait_ms} is more than {STEP_WAIT_MS_MAX} ms; wait that long and ask again"
                    ));
                }
            }
            (other, _) => return Err(format!("unknown query parameter \"{other}\" (only wait_ms)")),
        }
    }
    Ok(wait_ms)
}

/// The body of `POST /__twice/scenario`: one of a catalog name, a file on serve's machine,
/// or a scenario's TOML text.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetScenario {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    toml: Option<String>,
    /// With `toml`: where the text came from (a path), for the verdict's replay line. Without
    /// it, serve keeps the text in a file of its own (`super::kept`) and the line names that.
    #[serde(default)]
    origin: Option<String>,
}

/// What errors in a scenario's text name it by when the text says not where it came from.
const TEXT_LABEL: &str = "scenario.toml";

fn set_scenario(world: &World, body: &[u8]) -> Response<Full<Bytes>> {
    let asked: SetScenario = match serde_json::from_slice(body) {
        Ok(asked) => asked,
        Err(e) => {
            return error(
                400,
                format!("expected {{\"name\": CATALOG_NAME}}, {{\"file\": PATH}} or {{\"toml\": TEXT}}: {e}"),
            );
        }
    };
    if asked.origin.is_some() && asked.toml.is_none() {
        return error(400, "\"origin\" goes with \"toml\": it names where the text came from");
    }
    let case = match (asked.name, asked.file, asked.toml) {
        // Each field its own kind: a name is never read as a path on serve's disk, a file
        // never looked up in the catalog.
        (Some(name), None, None) => pipeline::load_catalog(&name).map_err(|e| format!("{e:#}")),
        (None, Some(file), None) => pipeline::load_file(&file).map_err(|e| format!("{e:#}")),
        (None, None, Some(text)) => {
            let label = asked.origin.as_deref().unwrap_or(TEXT_LABEL);
            scenarios::parse_scenario(&text, label).map_err(|e| e.to_string()).map(|scenario| {
                let path = asked.origin.clone().unwrap_or_else(|| kept_path(world, &scenario.name, &text));
                Case { scenario, source: Source::File { path } }
            })
        }
        _ => Err("give exactly one of \"name\", \"file\" and \"toml\"".to_string()),
    };
    let case = match case {
        Ok(case) => case,
        Err(e) => return error(400, e),
    };
    if let Err(e) = world.set(case) {
        return error(400, e.to_string());
    }
    match describe(world) {
        Some(described) => answer(200, &described),
        None => error(409, "the scenario was reset meanwhile"),
    }
}

/// The file serve keeps a scenario's text in, for the replay line of its verdicts. The world
/// is set up all the same when the text cannot be written (the line then names
/// [`TEXT_LABEL`]): a replay line is no reason to fail the test, and the log says why.
fn kept_path(world: &World, name: &str, text: &str) -> String {
    match world.kept.keep(name, text) {
        Ok(path) => path.display().to_string(),
        Err(e) => {
            tracing::warn!(
                target: "twice::serve",
                error = %e,
                "cannot keep scenario {name}'s text in a file under the temporary directory (TMPDIR); \
                 its replay line names {TEXT_LABEL}, which does not exist"
            );
            TEXT_LABEL.into()
        }
    }
}

/// The scenario set up, its steps and the URLs: what `GET /__twice/scenario` answers.
pub fn describe(world: &World) -> Option<Value> {
    let guard = world.lock();
    let current = guard.as_ref()?;
    let scenario = &current.case.scenario;
    let test_steps = current.steps.iter().filter(|s| s.by == super::world::By::Test).count();
    Some(json!({
        "name": scenario.name,
        "seed": world.seed,
        "urls": world.urls(),
        // What an executor is told in the protocol's `init`: each used service's contract
        // (its terms decide what is safe) and the limits the scenario's timing assumes.
        "contracts": runner::setup::contracts(scenario, &world.fakes),
        "limits": runner::setup::limits_for(scenario),
        "intents": scenario.intents,
        "expect": scenario.expect,
        "steps": current.steps,
        "test_steps": test_steps,
        // The credentials an application under test is given, as every executor is in
        // `init`: the payments key (the one accepted under strict keys), the messages key,
        // and the scenario's chain account, funded where the scenario uses the chain.
        "secrets": vocabulary::protocol::secrets(),
        "chain_account": runner::setup::chain_account(),
        "dev_accounts": super::accounts::json(),
        "scenario": scenario,
    }))
}

/// `wait=true` (the default) or `wait=false` from the check's query.
fn check_wait(query: &str) -> Result<bool, String> {
    let mut wait = true;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("wait", "true") => wait = true,
            ("wait", "false") => wait = false,
            ("wait", value) => return Err(format!("wait: \"{value}\" is neither true nor false")),
            (other, _) => return Err(format!("unknown query parameter \"{other}\" (only wait)")),
        }
    }
    Ok(wait)
}

/// `POST /__twice/check`: the verdict on the application's claims, judged once the world has
/// settled (`super::settle`), or at once with `wait=false`, as the caller asks.
async fn check_claims(world: &World, body: &[u8], wait: bool) -> Response<Full<Bytes>> {
    let no_scenario = || error(409, "no scenario is set up: POST /__twice/scenario first");
    // The claims are read first: a malformed one is refused at once, never after a wait.
    let case = {
        let guard = world.lock();
        let Some(current) = guard.as_ref() else { return no_scenario() };
        if let Err(e) = claims::parse(body, &current.case.scenario) {
            return error(400, e);
        }
        Case { scenario: current.case.scenario.clone(), source: current.case.source.clone() }
    };
    let Some(bound_ms) = settle::bound_ms(world) else { return no_scenario() };
    let settling = settle::settle(world, bound_ms, wait).await;
    let guard = world.lock();
    let Some(current) = guard.as_ref() else { return no_scenario() };
    if current.case.scenario != case.scenario {
        return error(409, "another scenario was set up while the check waited for the world to settle");
    }
    let parsed = match claims::parse(body, &current.case.scenario) {
        Ok(parsed) => parsed,
        Err(e) => return error(400, e),
    };
    let mut observed = world.observed(current, parsed);
    drop(guard);
    observed.settle = Some(settling.wait);
    observed.unsettled = settling.unsettled;
    let result = run::judge(&case, world.seed, world.seed, observed, REPLAY_PREFIX);
    let results = run::results_of(world.seed, "serve", "an application (claims)".into(), None, vec![result]);
    let code = exit::of(&results);
    let held = checker::all_held(&results.results[0].verdicts);
    answer(
        200,
        &json!({
            "exit_code": code,
            "held": held,
            "summary": run::summary(&results),
            "results": results,
        }),
    )
}

/// The URLs serve writes to `--urls-file`: each service's, and `control` for serve's own.
/// What `--urls-file` holds: each service's base URL, `control` (and `mcp`), as strings, and
/// `accounts`, the funded dev accounts (`super::accounts`), an array: a reader of the URLs
/// takes the string entries.
pub fn urls_json(urls: &BTreeMap<String, String>) -> String {
    let mut file: serde_json::Map<String, Value> =
        urls.iter().map(|(name, url)| (name.clone(), Value::String(url.clone()))).collect();
    file.insert("accounts".into(), super::accounts::json());
    serde_json::to_string_pretty(&file).unwrap_or_default() + "\n"
}
