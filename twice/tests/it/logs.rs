//! Logs as a user sees them on stderr (docs/logs.md): `twice` as a child process, its stderr
//! read whole.

use std::process::Output;

use serde_json::Value;

/// `twice ARGS` in a scratch directory of its own, with `RUST_LOG` as given (unset: `None`)
/// and no terminal features: CI set, no colour.
fn twice_logging(name: &str, args: &[&str], rust_log: Option<&str>) -> Output {
    let dir = std::env::temp_dir().join(format!("twice-logs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = super::twice();
    command.args(args).arg("--report-dir").arg(dir.join("report")).current_dir(&dir);
    command.env("CI", "true").env("NO_COLOR", "1").env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        command.env("RUST_LOG", filter);
    }
    let output = command.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// The lines of `target` in a text log.
fn lines_of<'a>(log: &'a str, target: &str) -> Vec<&'a str> {
    let tag = format!(" {target}: ");
    log.lines().filter(|l| l.contains(&tag)).collect()
}

/// A field's value in a text log line: `key=value` or `key="value"`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next(),
        None => rest.split(' ').next(),
    }
}

/// `RUST_LOG=debug twice replay` of a catalog scenario whose fault fires, live and in sim:
/// the fault-fired line names service, rule, request id and point; that request has its own
/// line with the same id; live, every line exchanged with the executor is logged both ways.
#[test]
fn at_debug_a_replay_logs_the_fault_fired_its_request_and_the_executor_lines() {
    for live in [true, false] {
        let mut args = vec!["replay", "fault_drop_after_commit"];
        if live {
            args.push("--live");
        }
        let output = twice_logging(&format!("debug-{live}"), &args, Some("debug"));
        let log = stderr(&output);
        assert_eq!(output.status.code(), Some(0), "{log}");

        let faults = lines_of(&log, "twice::fault");
        assert_eq!(faults.len(), 1, "one fault fires: {log}");
        let fault = faults[0];
        assert!(fault.contains(" INFO "), "{fault}");
        assert_eq!(field(fault, "service"), Some("workspaces"), "{fault}");
        assert_eq!(field(fault, "rule"), Some("rule-1"), "{fault}");
        assert_eq!(field(fault, "fault"), Some("drop_after_commit"), "{fault}");
        assert_eq!(field(fault, "point"), Some("after_commit"), "{fault}");
        let request_id = field(fault, "request_id").unwrap_or_else(|| panic!("no request id: {fault}"));
        assert!(request_id.starts_with("req_"), "{fault}");

        let requests = lines_of(&log, "twice::request");
        assert!(requests.len() >= 2, "the write and the lookup after it: {log}");
        let faulted = requests
            .iter()
            .find(|l| field(l, "request_id") == Some(request_id))
            .unwrap_or_else(|| panic!("no request line for {request_id}: {log}"));
        assert!(faulted.contains(" DEBUG "), "{faulted}");
        for (key, value) in
            [("service", "workspaces"), ("method", "POST"), ("path", "/v1/workspaces"), ("outcome", "closed")]
        {
            assert_eq!(field(faulted, key), Some(value), "{key} in {faulted}");
        }
        assert!(field(faulted, "duration_ms").is_some_and(|d| d.parse::<u64>().is_ok()), "{faulted}");

        let exchanged = lines_of(&log, "twice::executor");
        if live {
            for direction in ["out", "in"] {
                assert!(
                    exchanged.iter().any(|l| field(l, "direction") == Some(direction)
                        && field(l, "worker") == Some("w1#1")
                        && field(l, "bytes").is_some()),
                    "a line {direction}: {log}"
                );
            }
        } else {
            assert!(exchanged.is_empty(), "the sim's executor runs in process: {log}");
        }
        assert_eq!(lines_of(&log, "twice::scenario").len(), 1, "{log}");
    }
}

/// `--log-format json`: every stderr line is one JSON object with a level, a target and
/// fields, the executor's own JSON lines included (quoted in a field, never spliced).
#[test]
fn with_log_format_json_every_stderr_line_is_an_object_with_level_target_and_fields() {
    let output = twice_logging(
        "json",
        &["run", "--live", "-vv", "--log-format", "json", "--scenario", "fault_drop_after_commit"],
        None,
    );
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{log}");
    let mut targets = std::collections::BTreeSet::new();
    for line in log.lines() {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(value["level"].is_string(), "{line}");
        assert!(value["fields"]["message"].is_string(), "{line}");
        targets.insert(value["target"].as_str().unwrap_or_else(|| panic!("no target: {line}")).to_string());
        if value["target"] == "twice::fault" {
            for key in ["service", "rule", "request_id", "point"] {
                assert!(value["fields"][key].is_string(), "{key} in {line}");
            }
        }
    }
    for target in ["twice::scenario", "twice::fault", "twice::request", "twice::executor"] {
        assert!(targets.contains(target), "{target} in {log}");
    }
}

/// `-q` on a passing run: not one line on stderr (no log, no progress); the summary is still
/// on stdout. A plain run logs nothing either: its stderr is progress, as before logs.
#[test]
fn quiet_passing_run_writes_nothing_on_stderr_and_a_plain_run_no_log_line() {
    let args = ["run", "-q", "--scenario", "fault_drop_after_commit", "--scenario", "fault_refuse"];
    let output = twice_logging("quiet", &args, None);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stderr(&output), "", "stderr under -q");
    assert!(String::from_utf8_lossy(&output.stdout).contains("2 passed"));

    let plain = twice_logging("plain", &["run", "--scenario", "fault_drop_after_commit"], None);
    let log = stderr(&plain);
    assert_eq!(plain.status.code(), Some(0), "{log}");
    assert!(log.lines().all(|l| l.starts_with("twice: ")), "progress only: {log}");
}

/// `-v`: one `twice::scenario` line per scenario run, catalog and generated alike, with its
/// outcome, duration and seed (and a generated case's index).
#[test]
fn verbose_says_one_scenario_line_per_scenario() {
    let output = twice_logging("verbose", &["run", "-v", "--cases", "5"], None);
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{log}");
    let summary = String::from_utf8_lossy(&output.stdout).to_string();
    let ran: usize = summary
        .split(" scenarios against")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {summary}"));
    let lines = lines_of(&log, "twice::scenario");
    assert_eq!(lines.len(), ran, "{log}");
    let names: std::collections::BTreeSet<_> = lines.iter().filter_map(|l| field(l, "name")).collect();
    assert_eq!(names.len(), ran, "each scenario once");
    for line in &lines {
        assert!(line.contains(" INFO "), "{line}");
        assert_eq!(field(line, "outcome"), Some("passed"), "{line}");
        assert!(field(line, "duration_ms").is_some() && field(line, "seed").is_some(), "{line}");
    }
    let generated: Vec<_> = lines.iter().filter(|l| field(l, "source") == Some("generated")).collect();
    assert_eq!(generated.len(), 5, "{log}");
    assert!(generated.iter().all(|l| field(l, "case").is_some()), "{log}");
    // Nothing below info.
    assert!(lines_of(&log, "twice::request").is_empty(), "{log}");
}
