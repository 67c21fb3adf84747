//! Tests of the live backend's own helpers: a run can be spawned on a multi-thread runtime,
//! a case directory stays inside the work directory, workflows are what `init_ok` announces.

use super::*;

#[test]
fn the_run_can_be_spawned_on_a_multi_thread_runtime() {
    fn send<T: Send>(_: &T) {}
    let scenario: Scenario = serde_json::from_value(json!({"name": "x", "intents": []})).unwrap();
    let command = ExecutorCommand::parse("true").unwrap();
    send(&run(&scenario, 1, &command, Path::new("/nonexistent")));
}

/// Steps go only to an executor whose `init_ok` lists the feature; anything else (no
/// `features`, another shape, other words) means it has not.
/// A scenario named like a path still runs in a directory of its own under `work_dir`.
#[test]
fn a_scenario_named_like_a_path_runs_inside_the_work_dir() {
    let work = Path::new("/tmp/work");
    for name in ["../../etc/escape", "a/b", "x\u{0}y", "..", &"n".repeat(10_000)] {
        let dir = run_dir(work, name, 7, 3);
        assert_eq!(dir.parent(), Some(work), "{name:.40}");
        let last = dir.file_name().unwrap().to_str().unwrap();
        assert!(!last.starts_with('.') && !last.contains('\0') && last.len() <= 160, "{last:.40}");
    }
    assert_eq!(run_dir(work, "refund_once", 7, 3), work.join("refund_once-7-3"));
}

#[test]
fn workflows_are_what_init_ok_announces() {
    assert!(announces_workflows(&json!({"features": ["workflows"]})));
    assert!(announces_workflows(&json!({"features": ["x", "workflows"]})));
    for without in [
        json!({}),
        json!({"features": []}),
        json!({"features": "workflows"}),
        json!({"features": ["workflow"]}),
    ] {
        assert!(!announces_workflows(&without), "{without}");
    }
}
