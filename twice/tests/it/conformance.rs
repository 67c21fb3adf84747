//! `twice check-executor` as a user runs it: the real binary against the reference executor,
//! against a small Python executor that breaks one protocol rule at a time, and against a
//! proxy that announces only some actions.
//!
//! The interpreter is `TWICE_PYTHON` when set (as `cargo xtask test` sets it), else `python3`
//! from PATH; the reference executor comes from `TWICE_BIN_DIR` (see `live::reference`).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::live::{fresh_dir, reference};

/// The longest one `twice check-executor` may take here before the test fails instead of
/// hanging: a hanging executor costs the rules' 10 s bound and a scenario's.
const CHECK_WAIT: Duration = Duration::from_secs(240);

/// The catalog scenario the broken executors run after the rules: one refund, quick to fail.
const ONE_SCENARIO: &str = "lost_refund_reply";

/// A small executor that keeps the protocol, with every intent in a JSON file in its
/// state_dir (written and fsynced before `propose_ok`). It never sends anything: `drain`
/// fails every recorded intent (with an event each), which is honest but not what scenarios
/// expect, so they fail on `expected-states`, quickly; every protocol rule holds. Each
/// argument breaks one thing:
///
/// - `silent`: never answers `init`;
/// - `chatty`: logs to stdout on `propose`;
/// - `crash_on_garbage`: a line that is not JSON kills it (an uncaught exception);
/// - `half_line`: writes half of its `status_ok`, then exits;
/// - `hang`: answers `init`, then nothing but `shutdown`;
/// - `wrong_reply_to`: answers every request after `init` with the next msg_id;
/// - `memory`: keeps intents in memory only, so a SIGKILL loses them.
const EXECUTOR: &str = r#"
import json, os, sys, time

FLAGS = set(sys.argv[1:])
ACTIONS = ["payments.refund", "workspaces.create"]
TYPES = {"init", "propose", "status", "drain", "reconcile", "shutdown"}
state_file = None
intents = {}

class Refused(Exception):
    def __init__(self, code, text):
        super().__init__(text)
        self.code, self.text = code, text

def emit(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

def save():
    if "memory" in FLAGS:
        return
    tmp = state_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump(intents, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_file)

def handle(msg):
    global state_file, intents
    kind = msg.get("type")
    if kind not in TYPES:
        raise Refused(10, f"unknown request type {kind!r}")
    if kind == "shutdown":
        return {}
    if kind == "init":
        if "silent" in FLAGS:
            time.sleep(600)
        os.makedirs(msg["state_dir"], exist_ok=True)
        state_file = os.path.join(msg["state_dir"], "intents.json")
        if "memory" not in FLAGS and os.path.exists(state_file):
            with open(state_file) as f:
                intents = json.load(f)
        return {"executor": {"name": "broken-on-purpose", "version": "0.0.1"}, "actions": ACTIONS}
    if state_file is None:
        raise Refused(11, "send init first")
    if "hang" in FLAGS:
        time.sleep(600)
    if kind == "propose":
        intent = msg["intent"]
        if intent["action"] not in ACTIONS:
            raise Refused(10, f"action {intent['action']!r} is not supported")
        if "chatty" in FLAGS:
            print("INFO recording", intent["id"])
        view = {"id": intent["id"], "action": intent["action"], "params": intent["params"],
                "state": "recorded", "attempts": 0, "evidence": {}}
        intents.setdefault(intent["id"], view)
        save()
        return {"intent": intents[intent["id"]]}
    if kind == "status":
        ids = msg.get("ids")
        return {"intents": [v for v in intents.values() if ids is None or v["id"] in ids]}
    if kind == "reconcile":
        return {"sent": 0, "looked_up": 0}
    # drain: nothing is ever sent, so failing every recorded intent is an honest claim.
    events = []
    for view in intents.values():
        if view["state"] == "recorded":
            view["state"] = "failed"
            events.append({"type": "event", "intent_id": view["id"], "from": "recorded", "state": "failed"})
    save()
    for event in events:
        emit(event)
    return {}

for line in sys.stdin:
    if not line.strip():
        continue
    try:
        msg = json.loads(line)
    except ValueError:
        if "crash_on_garbage" in FLAGS:
            raise
        emit({"type": "error", "in_reply_to": None, "code": 12, "text": "not JSON"})
        continue
    if not isinstance(msg, dict) or type(msg.get("msg_id")) is not int:
        msg_id = msg.get("msg_id") if isinstance(msg, dict) else None
        emit({"type": "error", "in_reply_to": msg_id, "code": 12, "text": "not a request"})
        continue
    try:
        reply = {**handle(msg), "type": msg["type"] + "_ok", "in_reply_to": msg["msg_id"]}
    except Refused as e:
        reply = {"type": "error", "in_reply_to": msg["msg_id"], "code": e.code, "text": e.text}
    if "wrong_reply_to" in FLAGS and msg["type"] != "init":
        reply["in_reply_to"] = msg["msg_id"] + 1
    if "half_line" in FLAGS and msg["type"] == "status":
        sys.stdout.write(json.dumps(reply)[:20])
        sys.stdout.flush()
        os._exit(3)
    emit(reply)
    if reply["type"] == "shutdown_ok":
        sys.exit(0)
"#;

/// A proxy in front of the reference executor that announces only `workspaces.create` and
/// refuses other actions with code 10, as an executor supporting a subset would.
const PROXY: &str = r#"
import json, subprocess, sys

ANNOUNCED = ["workspaces.create"]
child = subprocess.Popen([sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

def emit(line):
    sys.stdout.write(line)
    sys.stdout.flush()

for line in sys.stdin:
    if not line.strip():
        continue
    try:
        msg = json.loads(line)
    except ValueError:
        msg = None
    if isinstance(msg, dict) and msg.get("type") == "propose":
        action = (msg.get("intent") or {}).get("action")
        if action not in ANNOUNCED:
            emit(json.dumps({"type": "error", "in_reply_to": msg.get("msg_id"), "code": 10,
                             "text": f"action {action!r} is not supported"}) + "\n")
            continue
    child.stdin.write(line if line.endswith("\n") else line + "\n")
    child.stdin.flush()
    while True:
        out = child.stdout.readline()
        if not out:
            sys.exit(child.wait())
        reply = json.loads(out)
        if reply.get("type") == "init_ok":
            reply["actions"] = ANNOUNCED
            out = json.dumps(reply) + "\n"
        emit(out)
        if reply.get("type") != "event":
            break
    if isinstance(msg, dict) and msg.get("type") == "shutdown":
        sys.exit(child.wait())
"#;

fn python() -> String {
    std::env::var("TWICE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Writes `text` as `name` in `dir`; returns the command line that runs it with `args`.
fn script(dir: &Path, name: &str, text: &str, args: &[&str]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the script");
    let mut line = format!("'{}' -u '{}'", python(), path.display());
    for arg in args {
        line.push_str(&format!(" '{arg}'"));
    }
    line
}

/// What one `twice check-executor` run left.
struct Checked {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    report: PathBuf,
}

impl Checked {
    fn conformance(&self) -> Value {
        let text = std::fs::read_to_string(self.report.join("conformance.json")).expect("conformance.json");
        serde_json::from_str(&text).expect("conformance.json is JSON")
    }

    /// The rules whose line says FAIL, in order.
    fn failed_rules(&self) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("FAIL "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }
}

fn wait_bounded(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + CHECK_WAIT;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait for twice") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("twice check-executor did not finish within {CHECK_WAIT:?}");
}

/// Runs `twice check-executor EXECUTOR ARGS...` with its report in `dir/report`.
fn check_executor(dir: &Path, executor: &str, args: &[&str]) -> Checked {
    let report = dir.join("report");
    let stdout_path = dir.join("stdout.txt");
    let stderr_path = dir.join("stderr.txt");
    let mut child = crate::twice()
        .arg("check-executor")
        .arg(executor)
        .args(args)
        .arg("--threads")
        .arg("1")
        .arg("--report-dir")
        .arg(&report)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("run twice");
    let code = wait_bounded(&mut child);
    let checked = Checked {
        code,
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
        report,
    };
    println!("exit: {code:?}\n--- stdout\n{}\n--- stderr\n{}", checked.stdout, checked.stderr);
    checked
}

/// Runs the Python executor with `flag` and checks that `rule` fails, with `detail` in what
/// came, and that the run exits 1.
fn broken(flag: &str, rule: &str, detail: &str) -> Checked {
    let dir = fresh_dir(&format!("conformance-{flag}"));
    let executor = script(&dir, "executor.py", EXECUTOR, &[flag]);
    let checked = check_executor(&dir, &executor, &["--scenario", ONE_SCENARIO]);
    assert_eq!(checked.code, Some(1), "a broken rule exits 1");
    assert!(checked.failed_rules().iter().any(|r| r == rule), "{rule} fails: {}", checked.stdout);
    let line = checked.stdout.lines().skip_while(|l| !l.contains(&format!("FAIL {rule}"))).nth(1);
    let came = line.unwrap_or_default();
    assert!(came.contains("came:") && came.contains(detail), "what came says {detail:?}: {came}");
    let conformance = checked.conformance();
    let verdict = conformance["rules"].as_array().unwrap().iter().find(|v| v["rule"] == rule).unwrap();
    assert_eq!(verdict["status"], "failed");
    checked
}

#[test]
fn the_reference_executor_passes_every_rule_and_its_scenarios() {
    let dir = fresh_dir("conformance-reference");
    let executor = reference().to_string();
    let checked = check_executor(
        &dir,
        &executor,
        &["--scenario", "lost_refund_reply", "--scenario", "fault_drop_after_commit"],
    );
    assert_eq!(checked.code, Some(0));
    assert_eq!(checked.failed_rules(), Vec::<String>::new());
    for rule in conformance::RULES {
        assert!(checked.stdout.contains(&format!("PASS {}", rule.name)), "{} passes", rule.name);
    }
    let header = "| failure mode | `chain.transfer` | `files.put` | `messages.send` | `payments.refund` | `workspaces.create` |";
    assert!(checked.stdout.contains(header), "{}", checked.stdout);
    assert!(checked.stdout.contains("| drop_after_commit | - | - | - | - | passed |"), "{}", checked.stdout);
    assert!(checked.stdout.contains("| lost_reply | - | - | - | passed | - |"), "{}", checked.stdout);
    for file in
        ["conformance.md", "conformance.json", "results.json", "summary.md", "junit.xml", "report.html"]
    {
        assert!(checked.report.join(file).is_file(), "{file} is written");
    }
    let conformance = checked.conformance();
    assert_eq!(conformance["schema"], "twice.conformance/1");
    assert_eq!(conformance["catalog"]["passed"], 2);
    let md = std::fs::read_to_string(checked.report.join("conformance.md")).unwrap();
    assert!(
        md.contains("| `shutdown-clean` | passed |")
            && md.contains("| drop_after_commit | - | - | - | - | passed |"),
        "{md}"
    );
}

#[test]
fn a_script_that_keeps_the_protocol_passes_every_rule_and_fails_its_scenario() {
    let dir = fresh_dir("conformance-well-behaved");
    let executor = script(&dir, "executor.py", EXECUTOR, &[]);
    let checked = check_executor(&dir, &executor, &["--scenario", ONE_SCENARIO]);
    assert_eq!(checked.failed_rules(), Vec::<String>::new(), "the control breaks no rule");
    // It never sends the refund: the scenario, not the protocol, fails.
    assert_eq!(checked.code, Some(1));
    let row = checked.stdout.lines().find(|l| l.starts_with("| lost_reply |")).expect("a lost_reply row");
    assert_eq!(row, "| lost_reply | violated (expected-states) | - |");
}

#[test]
fn an_executor_that_never_answers_init_fails_init_answered_and_skips_the_catalog() {
    let checked = broken("silent", "init-answered", "no reply within 30000 ms");
    assert!(checked.stdout.contains("catalog: not run"), "{}", checked.stdout);
    assert_eq!(checked.failed_rules(), ["init-answered"], "the other rules are skipped, not failed");
    assert!(checked.stdout.contains("SKIP replies-well-formed"));
    assert_eq!(checked.conformance()["catalog"]["ran"], false);
    assert!(!checked.report.join("results.json").exists(), "no run, no results");
}

#[test]
fn an_executor_that_logs_to_stdout_fails_replies_well_formed() {
    broken("chatty", "replies-well-formed", "INFO recording");
}

#[test]
fn an_executor_that_dies_on_a_garbage_line_fails_bad_line_code_12() {
    let checked = broken("crash_on_garbage", "bad-line-code-12", "stdout ended before the reply");
    assert_eq!(checked.failed_rules(), ["bad-line-code-12"], "only this rule sends garbage");
}

#[test]
fn an_executor_that_dies_in_the_middle_of_a_reply_fails_replies_well_formed() {
    broken("half_line", "replies-well-formed", "half a line, then stdout ended");
}

#[test]
fn an_executor_that_hangs_after_init_fails_replies_well_formed_within_the_bound() {
    broken("hang", "replies-well-formed", "no reply within 10000 ms");
}

#[test]
fn an_executor_that_answers_the_wrong_msg_id_fails_replies_well_formed() {
    broken("wrong_reply_to", "replies-well-formed", "in_reply_to 3 where 2 was due");
}

#[test]
fn an_executor_that_keeps_intents_in_memory_fails_propose_survives_sigkill() {
    let checked = broken("memory", "propose-survives-sigkill", "does not list it");
    assert_eq!(checked.failed_rules(), ["propose-survives-sigkill"]);
}

#[test]
fn actions_an_executor_does_not_announce_are_unsupported_not_failures() {
    let dir = fresh_dir("conformance-subset");
    let proxy = format!("{} '{}'", script(&dir, "proxy.py", PROXY, &[]), reference().program.display());
    let checked = check_executor(
        &dir,
        &proxy,
        &[
            "--scenario",
            "fault_drop_after_commit",
            "--scenario",
            "lost_refund_reply",
            "--scenario",
            "only_failed_step_retried",
        ],
    );
    assert_eq!(checked.failed_rules(), Vec::<String>::new());
    assert_eq!(checked.code, Some(0), "unsupported is not a failure");
    let table = "| failure mode | `payments.refund` | `workspaces.create` |";
    assert!(checked.stdout.contains(table), "{}", checked.stdout);
    assert!(checked.stdout.contains("| drop_after_commit | - | passed |"), "{}", checked.stdout);
    assert!(checked.stdout.contains("| lost_reply | unsupported | - |"), "{}", checked.stdout);
    assert!(checked.stdout.contains("| partial_retry | unsupported | passed |"), "{}", checked.stdout);
    let rows = &checked.conformance()["table"]["rows"];
    assert_eq!(rows[0]["action"], "payments.refund");
    assert_eq!(rows[0]["announced"], false);
    assert_eq!(rows[0]["cells"]["lost_reply"]["outcome"], "unsupported");
}
