//! `twice run --timeline FILE`: where a live run's time went, beside results that are the
//! same with or without it.

use std::path::Path;

use serde_json::Value;

use super::twice;

fn run(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut command = twice();
    command
        .args([
            "run",
            "--live",
            "--scenario",
            "files_stale_worker_overwrite",
            "--scenario",
            "lost_refund_reply",
        ])
        .arg("--report-dir")
        .arg(dir.join("report"))
        .args(extra);
    command.output().unwrap()
}

/// The document names every scenario with its start, end, process starts and waits, and the
/// run's CPU; what the run reports is unchanged (same outcomes as without the option).
#[test]
fn a_live_run_writes_where_its_time_went() {
    let dir = std::env::temp_dir().join(format!("twice-timeline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("timeline.json");
    let out = run(&dir, &["--timeline", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let timeline: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(timeline["schema"], "twice-timeline/1");
    assert_eq!(timeline["scenarios_run"], 2);
    let scenarios = timeline["scenarios"].as_array().unwrap();
    for s in scenarios {
        let name = s["name"].as_str().unwrap();
        assert!(s["end_ms"].as_f64().unwrap() >= s["start_ms"].as_f64().unwrap(), "{name}");
        let processes = s["processes"].as_array().unwrap();
        assert!(!processes.is_empty(), "{name}: {s}");
        assert!(processes.iter().all(|p| p["init_ms"].as_f64().unwrap() > 0.0), "{name}: {s}");
        for kind in
            ["setup", "listen", "init", "reply.propose", "reply.drain", "reply.status", "shutdown_kill"]
        {
            assert!(s["waits"][kind]["count"].as_u64().unwrap() > 0, "{name} has no {kind} wait: {s}");
        }
        let waited: f64 = s["waits"].as_object().unwrap().values().map(|w| w["ms"].as_f64().unwrap()).sum();
        assert!(waited <= s["wall_ms"].as_f64().unwrap() + 1.0, "{name}: waits overlap nothing: {s}");
    }
    // The stale-worker scenario pauses a worker: the quiet before the stop is there.
    let stale = scenarios.iter().find(|s| s["name"] == "files_stale_worker_overwrite").unwrap();
    assert!(stale["waits"]["pause_quiet"]["count"].as_u64().unwrap() > 0, "{stale}");
    assert_eq!(timeline["slowest"].as_array().unwrap().len(), 2);
    assert!(timeline["processes_started"].as_u64().unwrap() >= 3, "{timeline}");
    let cpu =
        |who: &str| timeline[who]["user_s"].as_f64().unwrap() + timeline[who]["sys_s"].as_f64().unwrap();
    assert!(cpu("cpu_harness") > 0.0 && cpu("cpu_children") > 0.0, "{timeline}");

    // Without the option: no file, and the same outcomes.
    let plain = dir.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let out = run(&plain, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let outcomes = |dir: &Path| -> Vec<(String, String)> {
        let results: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("report/results.json")).unwrap()).unwrap();
        let results = results["results"].as_array().unwrap();
        results.iter().map(|r| (r["name"].to_string(), r["outcome"].to_string())).collect()
    };
    assert_eq!(outcomes(&dir), outcomes(&plain));
    let _ = std::fs::remove_dir_all(&dir);
}
