//! `twice serve` as a test suite uses it: a scenario's world on demand, its steps, the
//! verdict on an application's claims, a reset, every port flag, and `twice check` from the
//! shell. Real sockets and a real child process; the "application" is this test, making the
//! requests an app's SDK would.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use executor::world::{HttpRequest, HttpResponse, HttpTransport, Transport};
use serde_json::{Value, json};
use serve::{self, ServeArgs};

use super::{WAIT_MS_MAX, read_urls, twice, wait_bounded};

const REQUEST_MS_MAX: u64 = 30_000;

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

pub(crate) fn args() -> ServeArgs {
    ServeArgs {
        bind: "127.0.0.1".parse().unwrap(),
        allow_remote: false,
        payments_port: 0,
        workspaces_port: 0,
        files_port: 0,
        chain_port: 0,
        messages_port: 0,
        control_port: 0,
        urls_file: None,
        seed: 3,
        scenario: None,
        mcp_port: None,
        tool_timeout_ms: None,
        strict_keys: false,
    }
}

pub(crate) async fn call(method: &'static str, url: String, body: Value) -> HttpResponse {
    let body = if body.is_null() { vec![] } else { serde_json::to_vec(&body).unwrap() };
    HttpTransport
        .send(HttpRequest { method, url, headers: vec![], body, timeout_ms: REQUEST_MS_MAX })
        .await
        .unwrap()
}

pub(crate) async fn json_of(method: &'static str, url: String, body: Value) -> (u16, Value) {
    let answer = call(method, url, body).await;
    (answer.status, serde_json::from_slice(&answer.body).unwrap_or(Value::Null))
}

/// A refund as stripe-python sends it.
pub(crate) fn refund(payments: &str, payment_intent: &str, amount: u64, key: &str) -> HttpRequest {
    HttpRequest {
        method: "POST",
        url: format!("{payments}/v1/refunds"),
        headers: vec![
            ("authorization".into(), "Bearer sk_test_twice".into()),
            ("content-type".into(), "application/x-www-form-urlencoded".into()),
            ("idempotency-key".into(), key.into()),
        ],
        body: format!("payment_intent={payment_intent}&amount={amount}").into_bytes(),
        timeout_ms: REQUEST_MS_MAX,
    }
}

fn claims(id: &str, state: &str) -> Value {
    json!({"claims": [{"id": id, "action": "payments.refund", "state": state, "attempts": 1}]})
}

#[test]
fn a_scenario_is_set_up_by_name_and_describes_its_intents_contracts_and_steps() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let control = served.urls()["control"].clone();
        let (status, body) = json_of("GET", format!("{control}/__twice/scenario"), Value::Null).await;
        assert_eq!(status, 409, "nothing set up yet: {body}");

        let set = json!({"name": "crash_while_refund_in_flight"});
        let (status, body) = json_of("POST", format!("{control}/__twice/scenario"), set).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["intents"][0]["id"], "refund-2207");
        assert_eq!(body["expect"]["refund-2207"], "confirmed");
        assert_eq!(body["contracts"]["payments"]["key_retention_ms"], 2000);
        assert!(body["limits"]["request_timeout_ms"].as_u64().is_some(), "{body}");
        let step = &body["steps"][0];
        assert_eq!((step["do"].as_str(), step["by"].as_str()), (Some("crash"), Some("test")));
        assert_eq!(step["at"]["path"], "/v1/refunds");
        assert_eq!(step["progress"], "pending");
        assert!(step["how"].as_str().unwrap().contains("SIGKILL"), "{step}");

        let (status, body) =
            json_of("POST", format!("{control}/__twice/scenario"), json!({"name": "lost_refund_reply_x"})).await;
        assert_eq!(status, 400);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("did you mean \"lost_refund_reply\""), "{message}");
        let (status, body) =
            json_of("POST", format!("{control}/__twice/scenario"), json!({"name": "a", "toml": "b"})).await;
        assert_eq!(status, 400, "{body}");
        let toml = "name = \"bad\"\n[[intents]]\nid = \"r1\"\naction = \"payments.refund\"\nparams = { amount = 1 }\n";
        let (status, body) = json_of("POST", format!("{control}/__twice/scenario"), json!({"toml": toml})).await;
        assert_eq!(status, 400);
        assert!(body["error"]["message"].as_str().unwrap().contains("payment_intent"), "{body}");
        served.stop().await;
    });
}

/// A crash step: the request that reaches the point is held, the test learns it is reached,
/// does what it must to its app, says it is done, and the request goes on to its answer.
#[test]
fn a_test_step_holds_its_request_until_the_test_says_it_is_done() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        let set = json!({"name": "crash_while_refund_in_flight"});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);

        let (status, step) =
            json_of("GET", format!("{control}/__twice/steps/0?wait_ms=50"), Value::Null).await;
        assert_eq!(
            (status, step["progress"].as_str()),
            (200, Some("pending")),
            "not reached within the wait"
        );
        let sent = tokio::spawn(HttpTransport.send(refund(&payments, "pi_2207", 800, "k-1")));
        let (_, step) = json_of("GET", format!("{control}/__twice/steps/0?wait_ms=20000"), Value::Null).await;
        assert_eq!(step["progress"], "reached", "{step}");
        assert_eq!(step["request"], "POST /v1/refunds at payments");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!sent.is_finished(), "the request is held while the test acts");
        let (status, step) = json_of("POST", format!("{control}/__twice/steps/0/done"), Value::Null).await;
        assert_eq!((status, step["progress"].as_str()), (200, Some("done")));
        let answer =
            tokio::time::timeout(Duration::from_millis(REQUEST_MS_MAX), sent).await.unwrap().unwrap();
        assert_eq!(answer.unwrap().status, 200, "the held request goes on to its answer");

        let (status, body) = json_of("GET", format!("{control}/__twice/steps/7"), Value::Null).await;
        assert_eq!(status, 404, "{body}");
        let (status, body) = json_of("GET", format!("{control}/__twice/steps/0?wait=1"), Value::Null).await;
        assert_eq!(status, 400, "{body}");
        served.stop().await;
    });
}

#[test]
fn check_answers_the_verdict_in_its_own_words_and_refuses_bad_claims_with_the_field() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        assert_eq!(
            json_of("POST", format!("{control}/__twice/check"), claims("refund-4812", "failed")).await.0,
            409
        );
        let set = json!({"name": "lost_refund_reply"});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);

        // The app's first send commits and loses its reply (the scenario's fault); a retry
        // under the same key replays the refund.
        assert!(HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await.is_err());
        assert_eq!(HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await.unwrap().status, 200);

        let (status, verdict) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-4812", "confirmed")).await;
        assert_eq!(status, 200, "{verdict}");
        assert_eq!(
            (verdict["exit_code"].as_i64(), verdict["held"].as_bool()),
            (Some(0), Some(true)),
            "{verdict}"
        );
        let result = &verdict["results"]["results"][0];
        assert_eq!(result["intents"][0]["effects"].as_array().unwrap().len(), 1, "{result}");

        let (_, verdict) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-4812", "failed")).await;
        assert_eq!(verdict["exit_code"], 1);
        let summary = verdict["summary"].as_str().unwrap();
        assert!(
            summary
                .contains("honest-terminal-states: refund-4812 claims failed, but the ledger has payments"),
            "{summary}"
        );
        assert!(summary.contains("replay: twice serve --scenario lost_refund_reply"), "{summary}");

        let (status, body) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-9", "failed")).await;
        assert_eq!(status, 400);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("claims[0].id: \"refund-9\" is not an intent of scenario lost_refund_reply"),
            "{message}"
        );
        served.stop().await;
    });
}

#[test]
fn reset_forgets_the_scenario_and_every_ledger() {
    runtime().block_on(async {
        let served =
            serve::start(&ServeArgs { scenario: Some("lost_refund_reply".into()), ..args() }).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        assert_eq!(json_of("GET", format!("{control}/__twice/scenario"), Value::Null).await.0, 200);
        let _ = HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await;
        let (_, ledger) = json_of("GET", format!("{payments}/__twice/ledger"), Value::Null).await;
        assert_eq!(ledger["effects"].as_array().unwrap().len(), 1);

        let (status, _) = json_of("POST", format!("{control}/__twice/reset"), Value::Null).await;
        assert_eq!(status, 200);
        let (_, ledger) = json_of("GET", format!("{payments}/__twice/ledger"), Value::Null).await;
        assert_eq!(ledger["effects"], json!([]), "every ledger is empty");
        let (_, rules) = json_of("GET", format!("{payments}/__twice/rules"), Value::Null).await;
        assert_eq!(rules["rules"], json!([]), "every rule is gone");
        assert_eq!(json_of("GET", format!("{control}/__twice/scenario"), Value::Null).await.0, 409);
        served.stop().await;
    });
}

/// Each port flag binds its own listener, and only its own.
#[test]
fn each_port_flag_binds_its_service_and_no_other() {
    for service in ["payments", "workspaces", "files", "chain", "messages", "control"] {
        let dir = std::env::temp_dir().join(format!("twice-serve-port-{}-{service}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let urls_file = dir.join("urls.json");
        let (port, mut child, urls) = serve_on_a_free_port(service, &urls_file);
        let urls: BTreeMap<String, String> = serve::check::urls_of(&urls.to_string()).unwrap();
        assert_eq!(urls[service], format!("http://127.0.0.1:{port}"), "{urls:?}");
        let others: Vec<&String> =
            urls.iter().filter(|(name, _)| *name != service).map(|(_, url)| url).collect();
        assert_eq!(others.len(), 5, "{urls:?}");
        assert!(others.iter().all(|url| !url.ends_with(&format!(":{port}"))), "{urls:?}");
        let _ = child.kill();
        let _ = wait_bounded(&mut child);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Starts `twice serve --{service}-port P` on a port that was free a moment ago; the tests
/// running beside this one bind ports of their own, so one of them may take P first: then
/// serve says the address is in use, and another port is tried (a few times at most).
fn serve_on_a_free_port(service: &str, urls_file: &Path) -> (u16, std::process::Child, Value) {
    const TRIES: usize = 5;
    for _ in 0..TRIES {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let _ = std::fs::remove_file(urls_file);
        let mut child = twice()
            .args(["serve", &format!("--{service}-port"), &port.to_string(), "--urls-file"])
            .arg(urls_file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        loop {
            if let Ok(text) = std::fs::read_to_string(urls_file)
                && let Ok(urls) = serde_json::from_str(&text)
            {
                return (port, child, urls);
            }
            if child.try_wait().unwrap().is_some() {
                let mut stderr = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
                assert!(stderr.contains("Address already in use"), "twice serve exited early: {stderr}");
                break;
            }
            assert!(Instant::now() < deadline, "no URLs file within {WAIT_MS_MAX} ms");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("{TRIES} ports in a row were taken before twice serve could bind them");
}

/// `twice check` from the shell: the report files, and `twice run`'s exit codes.
#[test]
fn twice_check_writes_the_report_and_exits_as_run_does() {
    let dir = std::env::temp_dir().join(format!("twice-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let urls_file = dir.join("urls.json");
    let started = Instant::now();
    let mut child = twice()
        .args(["serve", "--scenario", "lost_refund_reply", "--urls-file"])
        .arg(&urls_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let urls = read_urls(&urls_file, &mut child);
    println!("serve ready after {} ms", started.elapsed().as_millis());
    let payments = urls["payments"].as_str().unwrap().to_string();
    runtime().block_on(async {
        let _ = HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await;
    });
    let check = |claims: &Value, name: &str| {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec(claims).unwrap()).unwrap();
        let report = dir.join(name);
        let out = twice()
            .args(["check", "--urls-file"])
            .arg(&urls_file)
            .arg("--claims")
            .arg(&path)
            .arg("--report-dir")
            .arg(&report)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            report,
        )
    };
    let (code, stdout, _, report) = check(&claims("refund-4812", "confirmed"), "honest");
    assert_eq!(code, Some(0), "{stdout}");
    for file in ["results.json", "summary.md", "junit.xml", "report.html"] {
        assert!(report.join(file).is_file(), "{file} written");
    }
    let (code, stdout, _, report) = check(&claims("refund-4812", "failed"), "lying");
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("honest-terminal-states"), "{stdout}");
    let junit = std::fs::read_to_string(report.join("junit.xml")).unwrap();
    assert!(junit.contains("<failure"), "{junit}");
    let (code, _, stderr, _) = check(
        &json!({"claims": [{"id": "refund-4812", "action": "payments.refund", "state": "done"}]}),
        "bad",
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("claims[0].state: \"done\" is not a state"), "{stderr}");

    let _ = child.kill();
    let _ = wait_bounded(&mut child);
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every (method, path) an OpenAPI document of `docs/openapi/` describes, each checked to have
/// a summary and its answers.
fn documented_routes(file: &str) -> std::collections::BTreeSet<(String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi").join(file);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let mut documented = std::collections::BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            assert!(operation["summary"].is_string(), "{method} {path} has a summary");
            assert!(!operation["responses"].as_object().unwrap().is_empty(), "{method} {path} has responses");
            documented.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    documented
}

/// The OpenAPI document of serve's endpoint lists exactly the routes the router serves (the
/// router reads `control::ROUTES` and nothing else), each with its answers described.
#[test]
fn the_openapi_document_lists_exactly_the_routes_serve_answers() {
    use serve::control::{ROUTES, route};
    let documented = documented_routes("serve.json");
    let served: std::collections::BTreeSet<(String, String)> =
        ROUTES.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, served, "docs/openapi/serve.json and control::ROUTES differ");
    // And the router answers each of them, with a step number where the path takes one.
    for (method, pattern, expected) in ROUTES {
        let concrete = pattern.replace("{n}", "3");
        assert_eq!(route(method, &concrete).map(|(r, _)| r), Some(*expected), "{method} {concrete}");
    }
    assert_eq!(route("GET", "/__twice/steps/3/done"), None, "done is a POST");
    assert_eq!(route("GET", "/__twice/steps/x"), None);
}

/// Every fault fired is a line in serve's log, with the rule, the point, the request id and
/// the service; RUST_LOG filters the lines as it does for any tracing program.
#[test]
fn each_fault_fired_is_a_log_line_and_rust_log_filters_them() {
    for (filter, logged) in [("twice::fault=info", true), ("info,twice::fault=off", false)] {
        let dir = std::env::temp_dir().join(format!("twice-serve-log-{}-{logged}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let urls_file = dir.join("urls.json");
        let _ = std::fs::remove_file(&urls_file);
        let mut child = twice()
            .args(["serve", "--scenario", "lost_refund_reply", "--urls-file"])
            .arg(&urls_file)
            .env("RUST_LOG", filter)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let urls = read_urls(&urls_file, &mut child);
        let payments = urls["payments"].as_str().unwrap().to_string();
        runtime().block_on(async {
            assert!(
                HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await.is_err(),
                "the reply is lost"
            );
        });
        super::signal(&child, "TERM");
        assert_eq!(wait_bounded(&mut child), Some(0));
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        let line = stderr.lines().find(|l| l.contains("fault fired"));
        if logged {
            let line = line.unwrap_or_else(|| panic!("no fault line in: {stderr}"));
            for part in [
                "service=\"payments\"",
                "rule=rule-1",
                "fault=drop_after_commit",
                "point=\"after_commit\"",
                "request_id=req_",
                "path=/v1/refunds",
            ] {
                assert!(line.contains(part), "{part} in {line}");
            }
        } else {
            assert_eq!(line, None, "filtered out: {stderr}");
            assert!(stderr.contains("scenario set up"), "the rest still logs: {stderr}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The fakes' control API, likewise: `docs/openapi/fakes.json` lists exactly
/// `core::CONTROL_ROUTES`, which is all a fake's control router reads; and every fake answers
/// every route (none says "no control route").
#[test]
fn the_openapi_document_of_the_fakes_lists_exactly_their_control_routes() {
    use fake_services::core::{CONTROL_ROUTES, control_route};
    let documented = documented_routes("fakes.json");
    let served: std::collections::BTreeSet<(String, String)> =
        CONTROL_ROUTES.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, served, "docs/openapi/fakes.json and core::CONTROL_ROUTES differ");
    assert_eq!(control_route("DELETE", "/rules/rule-1").map(|(_, id)| id), Some("rule-1"));
    assert_eq!(control_route("DELETE", "/rules/a/b"), None);

    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        for (service, url) in served.urls().into_iter().filter(|(name, _)| name != "control") {
            for (method, pattern, _) in CONTROL_ROUTES {
                let method: &'static str = method;
                let answer =
                    call(method, format!("{url}{}", pattern.replace("{id}", "rule-9")), Value::Null).await;
                let body = String::from_utf8_lossy(&answer.body);
                assert!(!body.contains("no control route"), "{service} {method} {pattern}: {body}");
            }
        }
        served.stop().await;
    });
}

/// What `docs/openapi/serve.json` says a `POST /__twice/scenario` body may be (its
/// `SetScenario` schema: exactly one of `name`, `file`, `toml`, and `origin` only with `toml`)
/// is what serve takes: each body the document admits sets the scenario up, each it does not
/// is refused with 400. The document once allowed any subset, which serve refused (found by
/// `cargo xtask fuzz-api`: schemathesis's bodies were nearly all refused).
#[test]
fn the_openapi_set_scenario_body_is_exactly_what_serve_takes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/serve.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let branches = doc["components"]["schemas"]["SetScenario"]["oneOf"].as_array().unwrap().clone();
    // The document's reading of a body: the branches (each closed, with its required field)
    // it matches; oneOf admits it when exactly one does.
    let admits = |body: &Value| {
        let fields = body.as_object().unwrap();
        let matching = branches.iter().filter(|branch| {
            assert_eq!(branch["additionalProperties"], false);
            let properties = branch["properties"].as_object().unwrap();
            fields.keys().all(|k| properties.contains_key(k))
                && branch["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| fields.contains_key(r.as_str().unwrap()))
        });
        matching.count() == 1
    };
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/catalog/lost_refund_reply.toml");
    let file = file.canonicalize().unwrap().to_string_lossy().into_owned();
    let toml = std::fs::read_to_string(&file).unwrap();
    let bodies = [
        json!({"name": "lost_refund_reply"}),
        json!({"file": file}),
        json!({"toml": toml}),
        json!({"toml": toml, "origin": "mine.toml"}),
        json!({}),
        json!({"origin": "mine.toml"}),
        json!({"name": "lost_refund_reply", "origin": "mine.toml"}),
        json!({"name": "lost_refund_reply", "file": file}),
        json!({"name": "lost_refund_reply", "toml": toml}),
        json!({"file": file, "toml": toml, "origin": "mine.toml"}),
        json!({"name": "lost_refund_reply", "other": 1}),
    ];
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let control = served.urls()["control"].clone();
        for body in bodies {
            let (status, answer) = json_of("POST", format!("{control}/__twice/scenario"), body.clone()).await;
            let expected = if admits(&body) { 200 } else { 400 };
            assert_eq!(status, expected, "{body}: {answer}");
        }
        served.stop().await;
    });
}

/// The fault names `docs/openapi/fakes.json` lists (`FaultKind`) are exactly
/// `rule::FAULT_KINDS`, and a fake arms a rule of each, in the table form with the parameter
/// the document names (a document that took any string made nearly every rule schemathesis
/// generated a 400, so `cargo xtask fuzz-api` never reached the rules' bookkeeping).
#[test]
fn the_openapi_fault_names_are_the_faults_a_fake_arms() {
    use vocabulary::rule::FAULT_KINDS;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/fakes.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let documented: Vec<&str> = doc["components"]["schemas"]["FaultKind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(documented, FAULT_KINDS, "docs/openapi/fakes.json's FaultKind and rule::FAULT_KINDS differ");
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        // messages takes every fault but the webhook ones, the delivery ones included;
        // payments takes those.
        let messages = served.urls()["messages"].clone();
        let payments = served.urls()["payments"].clone();
        for kind in FAULT_KINDS {
            let fault = match *kind {
                "reject" => json!({"kind": kind, "status": 503}),
                "stale_read" => json!({"kind": kind, "lag_ms": 500}),
                "latency" => json!({"kind": kind, "before_ms": 200}),
                "deliver_late" | "delay_webhook" => json!({"kind": kind, "delay_ms": 800}),
                "webhook_endpoint_down" => json!({"kind": kind, "for_ms": 800}),
                _ => json!(kind),
            };
            let webhook = vocabulary::rule::WEBHOOK_FAULT_KINDS.contains(kind);
            let fake = if webhook { &payments } else { &messages };
            let (status, body) =
                json_of("POST", format!("{fake}/__twice/rules"), json!({"fault": fault, "path": "/nobody"}))
                    .await;
            assert_eq!(status, 201, "{kind}: {body}");
        }
        served.stop().await;
    });
}

/// What `docs/openapi/fakes.json` says a `POST /__twice/seed` body is, per fake
/// (`PaymentsSeed`, `FilesSeed`, `ChainSeed`), is what each fake takes: its example seeds
/// (201); the fields it lists, at the top and in each array's items, are exactly those the fake
/// reads (a body with one more field is refused, and the refusal names the fields it knows);
/// another fake's example is refused; the permissions it lists are the payments fake's; and
/// workspaces and messages refuse every seed. The document once said "any object", and
/// schemathesis's seeds were nearly all refused.
#[test]
fn the_openapi_seed_bodies_are_what_each_fake_takes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/fakes.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let seeds = [("payments", "PaymentsSeed"), ("files", "FilesSeed"), ("chain", "ChainSeed")];
    let documented = doc["paths"]["/__twice/seed"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        ["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|branch| branch["$ref"].as_str().unwrap().trim_start_matches("#/components/schemas/").to_string())
        .collect::<Vec<_>>();
    assert_eq!(documented, seeds.map(|(_, schema)| schema.to_string()));
    let names = |properties: &Value| -> std::collections::BTreeSet<String> {
        properties.as_object().unwrap().keys().cloned().collect()
    };
    // The field names a refusal of an unknown field lists after "expected".
    let known = |error: &Value| -> std::collections::BTreeSet<String> {
        let message = error["error"]["message"].as_str().unwrap();
        let after = &message[message.find(", expected").unwrap_or_else(|| panic!("{message}"))..];
        after.split('`').skip(1).step_by(2).map(str::to_string).collect()
    };
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let seed =
            |service: &str, body: Value| json_of("POST", format!("{}/__twice/seed", urls[service]), body);
        let reset = |service: &str| json_of("POST", format!("{}/__twice/reset", urls[service]), Value::Null);
        for (service, schema_name) in seeds {
            let schema = &schemas[schema_name];
            let example = schema["example"].clone();
            assert_eq!(
                names(&example),
                names(&schema["properties"]),
                "{schema_name}'s example sets every field"
            );
            let (status, body) = seed(service, example.clone()).await;
            assert_eq!(status, 201, "{service} refused {schema_name}'s example: {body}");
            reset(service).await;

            let mut extra = example.clone();
            extra["unexpected"] = json!(1);
            let (status, body) = seed(service, extra).await;
            assert_eq!(status, 400, "{service}: {body}");
            assert_eq!(known(&body), names(&schema["properties"]), "{service}: the fields of {schema_name}");
            // Each array of objects: its items' fields.
            for (field, property) in schema["properties"].as_object().unwrap() {
                let Some(items) = property["items"]["properties"].as_object() else { continue };
                let mut extra = example.clone();
                extra[field][0]["unexpected"] = json!(1);
                let (status, body) = seed(service, extra).await;
                assert_eq!(status, 400, "{service} {field}: {body}");
                assert_eq!(
                    known(&body),
                    items.keys().cloned().collect(),
                    "{service}: the fields of an item of {schema_name}.{field}"
                );
            }
            for (other, other_schema) in seeds.iter().filter(|(other, _)| *other != service) {
                let (status, body) = seed(service, schemas[*other_schema]["example"].clone()).await;
                assert_eq!(status, 400, "{service} took {other}'s seed: {body}");
            }
            reset(service).await;
        }
        for service in ["workspaces", "messages"] {
            for (_, schema_name) in seeds {
                let (status, body) = seed(service, schemas[schema_name]["example"].clone()).await;
                assert_eq!(status, 400, "{service} took a seed: {body}");
            }
        }
        let permissions: Vec<&str> =
            schemas["Permission"]["enum"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
        let (status, body) = seed(
            "payments",
            json!({"restricted_keys": [{"key": "rk_test_all", "permissions": permissions}]}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let (status, body) = seed(
            "payments",
            json!({"restricted_keys": [{"key": "rk_test_none", "permissions": ["rak_nothing"]}]}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        let listed = message.rsplit("known: ").next().unwrap();
        assert_eq!(listed.split(", ").collect::<Vec<_>>(), permissions, "{message}");
        served.stop().await;
    });
}

/// Serve's endpoint answers a path it has, asked with a method it does not take, 405 with
/// `Allow`; a path it does not have stays 404. Found by `cargo xtask fuzz-api`
/// (schemathesis's `unsupported_method` check), when both answered 404.
#[test]
fn a_control_path_with_another_method_is_405_with_allow() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let control = served.urls()["control"].clone();
        for (method, path, allow) in [
            ("DELETE", "/__twice", "GET"),
            ("PUT", "/__twice/scenario", "GET, POST"),
            ("GET", "/__twice/check", "POST"),
            ("POST", "/__twice/steps/2", "GET"),
            ("GET", "/__twice/steps/2/done", "POST"),
        ] {
            let answer = call(method, format!("{control}{path}"), Value::Null).await;
            assert_eq!(answer.status, 405, "{method} {path}");
            let allowed =
                answer.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("allow")).map(|(_, v)| v.as_str());
            assert_eq!(allowed, Some(allow), "{method} {path}");
        }
        for path in ["/__twice/nothing", "/__twice/steps/x"] {
            assert_eq!(call("GET", format!("{control}{path}"), Value::Null).await.status, 404, "{path}");
        }
        served.stop().await;
    });
}

/// `{"name": ...}` is a catalog scenario and `{"file": ...}` a file on serve's disk, each
/// never read as the other (a name that was a path to a file loaded the file, and a file that
/// was a catalog name loaded the catalog's); found by `cargo xtask fuzz-api`, whose
/// `{"file": ""}` was refused as "no catalog scenario".
#[test]
fn a_scenario_name_is_never_a_file_and_a_file_never_a_name() {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/catalog/lost_refund_reply.toml");
    let file = file.canonicalize().unwrap().to_string_lossy().into_owned();
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let control = served.urls()["control"].clone();
        let set = |body: Value| json_of("POST", format!("{control}/__twice/scenario"), body);
        let (status, body) = set(json!({"name": file})).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("no catalog scenario"), "{body}");
        let (status, body) = set(json!({"file": "lost_refund_reply"})).await;
        assert_eq!(status, 400, "{body}");
        assert!(!body["error"]["message"].as_str().unwrap().contains("catalog"), "{body}");
        let (status, body) = set(json!({"file": ""})).await;
        assert_eq!(status, 400, "{body}");
        assert!(!body["error"]["message"].as_str().unwrap().contains("catalog"), "{body}");
        assert_eq!(set(json!({"name": "lost_refund_reply"})).await.0, 200);
        assert_eq!(set(json!({"file": file})).await.0, 200);
        served.stop().await;
    });
}

/// `GET /__twice/steps/{n}?wait_ms=` takes at most 60 000 ms, as the document says: more is
/// refused with 400 naming the value, not cut short without a word. Found by `cargo xtask
/// fuzz-api` (`wait_ms=60001` answered 200).
#[test]
fn a_step_wait_past_the_bound_is_refused() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let control = served.urls()["control"].clone();
        let set = json!({"name": "crash_while_refund_in_flight"});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);
        for wait_ms in ["60001", "18446744073709551615"] {
            let (status, body) =
                json_of("GET", format!("{control}/__twice/steps/0?wait_ms={wait_ms}"), Value::Null).await;
            assert_eq!(status, 400, "{wait_ms}: {body}");
            assert!(body["error"]["message"].as_str().unwrap().contains(wait_ms), "{body}");
        }
        let (status, body) =
            json_of("GET", format!("{control}/__twice/steps/0?wait_ms=0"), Value::Null).await;
        assert_eq!(status, 200, "{body}");
        served.stop().await;
    });
}
