//! The GitHub Action (`action.yml`) as a runner runs it: every shell step of the action calls
//! `action/twice-action.sh`, and these tests run that script as it is, with the environment a
//! runner gives a step (`GITHUB_ACTION_PATH`, `GITHUB_OUTPUT`, `GITHUB_PATH`,
//! `GITHUB_STEP_SUMMARY`, `RUNNER_TOOL_CACHE`) and the action's inputs as `TWICE_INPUT_*`,
//! against the Python example executor and the reference executor. A cached install is the
//! binaries of this build placed where the cache step restores them.
//!
//! The other side of the action, `action.yml`, is read as text: every input reaches the script
//! (or the upload step), every `TWICE_INPUT_*` it sets is one the script reads, and every step
//! that runs a command runs one of the script's subcommands tested here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::bin;
use crate::python_executor::{machine, python_executor};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// One job's runner: a workspace, a tool cache, and the files the runner reads after a step.
struct Runner {
    root: PathBuf,
}

struct Step {
    code: Option<i32>,
    /// Workflow commands (`::error ...`), which the runner reads from stdout.
    stdout: String,
    stderr: String,
}

impl Runner {
    fn new(test: &str) -> Runner {
        let root =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("action-{}", std::process::id())).join(test);
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["workspace", "tool-cache", "files"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        Runner { root }
    }

    fn workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }

    /// Where the cache step restores the binaries to (`root` of `cache-key`).
    fn install_root(&self) -> PathBuf {
        self.root.join("tool-cache/twice-action")
    }

    /// A cache hit: this build's binaries, where a restored cache puts them.
    fn restore_cache(&self) {
        let bin_dir = self.install_root().join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        for name in ["twice", "twice-executor"] {
            std::os::unix::fs::symlink(bin(name), bin_dir.join(name)).unwrap();
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.root.join("files").join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap_or_default()
    }

    /// `GITHUB_OUTPUT` as a map (the script writes single-line `name=value`s).
    fn outputs(&self) -> BTreeMap<String, String> {
        let text = self.read("output");
        text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Runs `twice-action.sh SUBCOMMAND` with the step's inputs, as the action's step does.
    fn step(&self, subcommand: &str, inputs: &[(&str, &str)]) -> Step {
        self.step_on(subcommand, inputs, None)
    }

    /// [`Runner::step`], with `path` as the step's whole `PATH` when given.
    fn step_on(&self, subcommand: &str, inputs: &[(&str, &str)], path: Option<&str>) -> Step {
        let mut command = Command::new("bash");
        if let Some(path) = path {
            command.env("PATH", path);
        }
        command
            .arg(repo().join("action/twice-action.sh"))
            .arg(subcommand)
            .current_dir(self.workspace())
            .stdin(Stdio::null())
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_ACTION_PATH", repo())
            .env("GITHUB_WORKSPACE", self.workspace())
            .env("GITHUB_OUTPUT", self.file("output"))
            .env("GITHUB_PATH", self.file("path"))
            .env("GITHUB_STEP_SUMMARY", self.file("summary"))
            .env("RUNNER_TOOL_CACHE", self.root.join("tool-cache"));
        for (name, value) in inputs {
            command.env(format!("TWICE_INPUT_{name}"), value);
        }
        let out = command.output().unwrap();
        Step {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The action's first two script steps on a cache hit.
    fn install_from_cache(&self) {
        self.restore_cache();
        let key = self.step("cache-key", &[]);
        assert_eq!(key.code, Some(0), "{}", key.stderr);
        let outputs = self.outputs();
        assert!(outputs["key"].starts_with("twice-Linux-"), "{outputs:?}");
        assert_eq!(Path::new(&outputs["root"]), self.install_root());
        let install = self.step("install", &[]);
        assert_eq!(install.code, Some(0), "{}", install.stderr);
        assert!(install.stderr.contains("reusing"), "{}", install.stderr);
        assert_eq!(self.read("path").trim(), self.install_root().join("bin").display().to_string());
    }
}

fn python_command(args: &[&str]) -> String {
    python_executor(args).to_string()
}

/// `check-executor` on the Python example: exit 0, the conformance table and the summary on the
/// job's page, the step's outputs, and the report directory that the upload step keeps.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_action_checks_the_python_executor_and_writes_the_job_summary() {
    let _machine = machine();
    let runner = Runner::new("check");
    runner.install_from_cache();
    let executor = python_command(&[]);
    let run = runner.step(
        "run",
        &[
            ("COMMAND", "check-executor"),
            ("EXECUTOR", &executor),
            ("SCENARIOS", "lost_refund_reply\nworkspace_created_twice files_stale_worker_overwrite"),
            ("REPORT_DIR", "conformance"),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let summary = runner.read("summary");
    assert!(summary.contains("| failure mode |"), "no conformance table in the job summary:\n{summary}");
    assert!(summary.contains("# twice:") && summary.contains("| 3 | 0 | 0 |"), "{summary}");
    let outputs = runner.outputs();
    assert_eq!(outputs["exit-code"], "0");
    assert_eq!(outputs["report-dir"], "conformance");
    for file in
        ["conformance.md", "conformance.json", "results.json", "summary.md", "junit.xml", "report.html"]
    {
        assert!(runner.workspace().join("conformance").join(file).is_file(), "no {file}");
    }
}

/// A violation fails the step with twice's exit code 1, and the summary still reaches the job's
/// page (the upload step runs `if: always()`).
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn a_violation_fails_the_step_and_still_writes_the_job_summary() {
    let _machine = machine();
    let runner = Runner::new("violation");
    runner.install_from_cache();
    let executor = python_command(&["--bug", "constant-fencing-token"]);
    let run = runner.step(
        "run",
        &[("EXECUTOR", &executor), ("SCENARIOS", "stale_worker_overwrite"), ("CASES", "0"), ("SEED", "3")],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("--seed 3"), "the step's log shows the command line: {}", run.stderr);
    let summary = runner.read("summary");
    assert!(summary.contains("stale_worker_overwrite") && summary.contains("no-stale-write"), "{summary}");
    assert_eq!(runner.outputs()["exit-code"], "1");
    assert!(runner.workspace().join("twice-report/results.json").is_file());
}

/// Shards in a matrix, then a merge job, all through the action (the reference executor in the
/// sim driver: no executor input). The merged report counts every shard's scenarios.
#[test]
fn sharded_runs_merge_through_the_action() {
    let runner = Runner::new("shards");
    runner.install_from_cache();
    for shard in ["1/2", "2/2"] {
        let dir = format!("shard-{}", &shard[..1]);
        let run = runner.step("run", &[("CASES", "4"), ("SHARD", shard), ("REPORT_DIR", &dir)]);
        assert_eq!(run.code, Some(0), "shard {shard}: {}", run.stderr);
    }
    let merge =
        runner.step("run", &[("COMMAND", "merge"), ("MERGE", "shard-1 shard-2"), ("REPORT_DIR", "merged")]);
    assert_eq!(merge.code, Some(0), "{}", merge.stderr);
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(runner.workspace().join("merged/results.json")).unwrap(),
    )
    .unwrap();
    let catalog = scenarios::catalog().unwrap().len() as u64;
    assert_eq!(results["totals"]["scenarios"].as_u64(), Some(catalog + 4), "{}", results["totals"]);
    assert!(runner.read("summary").contains("# twice:"));
}

/// Wrong inputs stop the step with exit 2 and a clear message, before anything runs; so does an
/// install with no cached binaries and no cargo.
#[test]
fn wrong_inputs_and_a_missing_toolchain_are_clear_errors() {
    let runner = Runner::new("errors");
    let path_without_cargo = "/usr/bin:/bin";
    let install = {
        let mut command = Command::new("bash");
        command
            .arg(repo().join("action/twice-action.sh"))
            .arg("install")
            .env_clear()
            .env("PATH", path_without_cargo)
            .env("HOME", runner.root.join("home"))
            .env("RUNNER_TOOL_CACHE", runner.root.join("tool-cache"))
            .output()
            .unwrap()
    };
    let stderr = String::from_utf8_lossy(&install.stderr);
    // Where cargo is not in /usr/bin or /bin (rustup puts it in ~/.cargo/bin), the step says so.
    if !Path::new("/usr/bin/cargo").exists() && !Path::new("/bin/cargo").exists() {
        assert_eq!(install.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cargo is not on the PATH"), "{stderr}");
    }

    runner.restore_cache();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("COMMAND", "fuzz")], "unknown command \"fuzz\""),
        (&[("COMMAND", "check-executor")], "needs the executor input"),
        (&[("COMMAND", "check-executor"), ("EXECUTOR", "x"), ("SHARD", "1/2")], "drop the shard input"),
        (&[("COMMAND", "merge")], "needs the merge input"),
    ];
    for (inputs, message) in cases {
        let step = runner.step("run", inputs);
        assert_eq!(step.code, Some(2), "{inputs:?}: {}", step.stderr);
        assert!(step.stderr.contains(message), "{inputs:?}: {}", step.stderr);
        let annotated =
            step.stdout.lines().any(|l| l.starts_with("::error title=twice::") && l.contains(message));
        assert!(annotated, "no annotation for the run's page: {}", step.stdout);
    }
    // twice itself refusing an input (exit 2) still leaves a word on the job's page.
    let bad = runner.step("run", &[("SHARD", "3/2")]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(runner.read("summary").contains("could not run"), "{}", runner.read("summary"));
    assert_eq!(runner.outputs()["exit-code"], "2");
}

/// The `package` input installs twice from a wheel or from the npm platform package's tarball
/// with no cargo on the `PATH`, and the run step then uses that binary; a package that holds no
/// binary (twice-kit's own tarball) is a clear error.
#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_package_input_installs_twice_without_rust() {
    let path_without_cargo = "/usr/bin:/bin";
    assert!(
        !Path::new("/usr/bin/cargo").exists(),
        "cargo in /usr/bin: the test would not prove no Rust is needed"
    );
    for variable in ["TWICE_WHEEL", "TWICE_NPM_PLATFORM"] {
        let package = std::env::var(variable)
            .unwrap_or_else(|_| panic!("{variable} is not set: run `cargo xtask test`"));
        let runner = Runner::new(&format!("package-{variable}"));
        let install = runner.step_on("install", &[("PACKAGE", &package)], Some(path_without_cargo));
        assert_eq!(install.code, Some(0), "{variable}: {}", install.stderr);
        assert!(install.stderr.contains("twice-action: installed twice"), "{}", install.stderr);
        let bin_dir = runner.install_root().join("from-package/bin");
        assert_eq!(runner.read("path").trim(), bin_dir.display().to_string());
        assert_eq!(Path::new(&runner.outputs()["twice"]), bin_dir.join("twice"));

        let inputs = [("PACKAGE", package.as_str()), ("SCENARIOS", "key_regenerated_per_attempt")];
        let run = runner.step_on("run", &inputs, Some(path_without_cargo));
        assert_eq!(run.code, Some(0), "{variable}: {}", run.stderr);
        assert_eq!(runner.outputs()["exit-code"], "0");
        assert!(runner.read("summary").contains("the scenario passed"), "{}", runner.read("summary"));
    }
    let kit = std::env::var("TWICE_NPM_KIT").expect("TWICE_NPM_KIT");
    let runner = Runner::new("package-kit");
    let wrong = runner.step_on("install", &[("PACKAGE", &kit)], Some(path_without_cargo));
    assert_eq!(wrong.code, Some(2), "{}", wrong.stderr);
    assert!(wrong.stderr.contains("give the platform package"), "{}", wrong.stderr);
}

/// `action.yml` and the script agree: each input reaches the script (as `TWICE_INPUT_*`) or the
/// upload step; each variable the action sets is read by the script; each command step runs a
/// subcommand the tests above run.
#[test]
fn the_action_file_and_its_script_agree() {
    let action = std::fs::read_to_string(repo().join("action.yml")).unwrap();
    let script = std::fs::read_to_string(repo().join("action/twice-action.sh")).unwrap();
    let mut inputs = Vec::new();
    let mut in_inputs = false;
    for line in action.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_inputs = line == "inputs:";
            continue;
        }
        if in_inputs
            && let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with(' ')
        {
            inputs.push(name.to_string());
        }
    }
    assert!(inputs.len() >= 10, "{inputs:?}");
    for input in &inputs {
        let variable = format!("TWICE_INPUT_{}", input.to_uppercase().replace('-', "_"));
        let mapped = format!("{variable}: ${{{{ inputs.{input} }}}}");
        let uploaded = input == "artifact-name" && action.contains("inputs.artifact-name");
        assert!(action.contains(&mapped) || uploaded, "input {input} reaches no step (expected `{mapped}`)");
        if !uploaded {
            assert!(script.contains(&variable), "the script never reads {variable}");
        }
    }
    let runs: Vec<&str> = action.lines().filter_map(|l| l.trim().strip_prefix("run: ")).collect();
    assert_eq!(runs.len(), 3, "{runs:?}");
    for (run, subcommand) in runs.iter().zip(["cache-key", "install", "run"]) {
        assert_eq!(*run, format!("'\"$GITHUB_ACTION_PATH/action/twice-action.sh\" {subcommand}'"));
    }
}
