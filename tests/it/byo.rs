//! Bring your own test: an application judged through `twice serve` gets the verdicts `twice
//! run` gives. The application here is the Python executor of `examples/executors/python`
//! (correct, and with two of its classic bugs), driven over its stdio protocol by this test
//! against serve's fakes, as a test suite would drive its own app; its final status becomes
//! the claims of `POST /__twice/check`. The same executor run by `twice run` on the same
//! scenario must get the same verdict, invariant by invariant.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use executor::world::{HttpRequest, HttpTransport, Transport};
use runner::run::{self, Driver, RunContext};
use serde_json::{Value, json};
use serve::{self, ServeArgs};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::python_executor::{machine, python_executor, work_dir};

const SEED: u64 = 1;
/// The bound on every answer of the executor and of serve.
const ANSWER_MS_MAX: u64 = 60_000;
/// A scenario without process events, so that the application needs no steps, which the
/// correct executor passes and two bugs break in two ways.
const SCENARIO: &str = "fault_timeout_after_commit";

/// The executor as an application: one worker process, driven line by line.
struct App {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl App {
    async fn ask(&mut self, mut message: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        message["msg_id"] = json!(id);
        let line = serde_json::to_string(&message).unwrap() + "\n";
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        loop {
            let next = tokio::time::timeout(Duration::from_millis(ANSWER_MS_MAX), self.lines.next_line());
            let line =
                next.await.expect("the executor answers in time").unwrap().expect("the executor is alive");
            let reply: Value = serde_json::from_str(&line).unwrap();
            if reply["in_reply_to"] == json!(id) {
                return reply;
            }
        }
    }
}

/// What serve's verdict and `twice run`'s say, invariant by invariant.
fn statuses(verdicts: &[results::Verdict]) -> BTreeMap<String, String> {
    verdicts.iter().map(|v| (v.invariant.clone(), format!("{:?}", v.status))).collect()
}

/// Until no fake has anything in flight for `runner::live::SETTLED_MS`, at most `bound_ms`:
/// the live driver's settle wait.
async fn settle(fakes: &fake_services::Fakes, bound_ms: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(bound_ms);
    let mut quiet_since = None;
    while tokio::time::Instant::now() < deadline {
        let now = tokio::time::Instant::now();
        match (fakes.all().iter().all(fake_services::Fake::settled), quiet_since) {
            (false, _) => quiet_since = None,
            (true, None) => quiet_since = Some(now),
            (true, Some(since)) if now - since >= Duration::from_millis(runner::live::SETTLED_MS) => return,
            (true, Some(_)) => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn through_serve(bug: &[&str], state_dir: &Path) -> Value {
    let served = serve::start(&ServeArgs {
        bind: "127.0.0.1".parse().unwrap(),
        allow_remote: false,
        payments_port: 0,
        workspaces_port: 0,
        files_port: 0,
        chain_port: 0,
        messages_port: 0,
        control_port: 0,
        urls_file: None,
        seed: SEED,
        scenario: Some(SCENARIO.into()),
        mcp_port: None,
        tool_timeout_ms: None,
        strict_keys: false,
    })
    .await
    .unwrap();
    let control = served.urls()["control"].clone();
    let get = |url: String| async move {
        let request =
            HttpRequest { method: "GET", url, headers: vec![], body: vec![], timeout_ms: ANSWER_MS_MAX };
        serde_json::from_slice::<Value>(&HttpTransport.send(request).await.unwrap().body).unwrap()
    };
    let world = get(format!("{control}/__twice/scenario")).await;

    let command = python_executor(bug);
    let mut child = tokio::process::Command::new(&command.program)
        .args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut app = App { child, stdin, lines, next_id: 0 };
    let services: serde_json::Map<String, Value> = world["contracts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, contract)| (name.clone(), json!({"url": world["urls"][name], "contract": contract})))
        .collect();
    let init = json!({"type": "init", "protocol": "twice/1", "worker_id": "w1", "state_dir": state_dir,
        "services": services, "secrets": vocabulary::protocol::secrets(), "limits": world["limits"]});
    assert_eq!(app.ask(init).await["type"], "init_ok");
    for intent in world["intents"].as_array().unwrap() {
        assert_eq!(app.ask(json!({"type": "propose", "intent": intent})).await["type"], "propose_ok");
    }
    app.ask(json!({"type": "drain", "timeout_ms": 20_000})).await;
    // As `twice run` does after the work (`runner::phase_engine`): every fault off, the world
    // settled, then rounds of reconcile and drain until nothing is unresolved, a pause of a
    // request timeout and a settle bound between rounds.
    runner::setup::heal(&served.world.fakes);
    let contracts: BTreeMap<String, vocabulary::Contract> =
        serde_json::from_value(world["contracts"].clone()).unwrap();
    let settle_ms = contracts.values().map(|c| c.settle_ms_max).max().unwrap_or(0);
    settle(&served.world.fakes, settle_ms).await;
    let round_pause_ms = world["limits"]["request_timeout_ms"].as_u64().unwrap()
        + settle_ms
        + executor::intent_engine::SAFETY_MARGIN_MS;
    for _ in 0..runner::setup::RECONCILE_ROUNDS_MAX {
        app.ask(json!({"type": "reconcile"})).await;
        app.ask(json!({"type": "drain", "timeout_ms": 20_000})).await;
        let status = app.ask(json!({"type": "status"})).await;
        let unresolved = status["intents"].as_array().unwrap().iter().any(|i| {
            vocabulary::State::parse(i["state"].as_str().unwrap())
                .is_some_and(vocabulary::State::is_unresolved)
        });
        if !unresolved {
            break;
        }
        tokio::time::sleep(Duration::from_millis(round_pause_ms)).await;
    }
    settle(&served.world.fakes, settle_ms).await;
    let status = app.ask(json!({"type": "status"})).await;
    app.ask(json!({"type": "shutdown"})).await;
    let _ = tokio::time::timeout(Duration::from_millis(ANSWER_MS_MAX), app.child.wait()).await;

    let actions: BTreeMap<&str, &Value> = world["intents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["id"].as_str().unwrap(), &i["action"]))
        .collect();
    let claims: Vec<Value> = status["intents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|view| {
            let id = view["id"].as_str().unwrap();
            json!({"id": id, "action": actions[id], "state": view["state"], "attempts": view["attempts"],
                   "evidence": view["evidence"]})
        })
        .collect();
    let request = HttpRequest {
        method: "POST",
        url: format!("{control}/__twice/check"),
        headers: vec![],
        body: serde_json::to_vec(&json!({"claims": claims})).unwrap(),
        timeout_ms: ANSWER_MS_MAX,
    };
    let verdict: Value = serde_json::from_slice(&HttpTransport.send(request).await.unwrap().body).unwrap();
    served.stop().await;
    verdict
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn post_check_and_twice_run_give_the_same_verdicts_for_the_same_world_and_claims() {
    let _turn = machine();
    let case = runner::pipeline::load(SCENARIO).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (bug, broken) in [
        (&[][..], None),
        (&["--bug", "timeout-as-failure"][..], Some(checker::HONEST_TERMINAL_STATES)),
        (&["--bug", "key-per-attempt"][..], Some(checker::NO_DUPLICATE_EFFECT)),
    ] {
        let dir = work_dir(&format!("byo-{}", bug.last().unwrap_or(&"correct")));
        let ran = run::run_case(
            &case,
            &RunContext::new(SEED, &Driver::Live(python_executor(bug)), &dir, "twice run"),
        );
        let by_run = statuses(&ran.verdicts);
        let served = runtime.block_on(through_serve(bug, &dir.join("serve-state")));
        let results: results::RunResults = serde_json::from_value(served["results"].clone()).unwrap();
        let by_serve = statuses(&results.results[0].verdicts);
        println!("{bug:?}\n  twice run: {by_run:?}\n  serve:     {by_serve:?}\n{}", served["summary"]);
        assert_eq!(by_serve, by_run, "the same verdicts, invariant by invariant ({bug:?})");
        match broken {
            None => assert_eq!(served["exit_code"], 0, "the correct executor passes: {}", served["summary"]),
            Some(invariant) => {
                assert_eq!(served["exit_code"], 1);
                assert_eq!(by_serve[invariant], "Violated", "{bug:?} breaks {invariant}");
            }
        }
    }
}
