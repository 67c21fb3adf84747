//! `cargo xtask engines`: the real engines of `examples/engines/` (Celery with Redis, DBOS,
//! LangGraph, Restate, Temporal), each app through twice, and the findings they publish.
//!
//! Per engine: its venv (`target/engines/<engine>/venv`, from the folder's pinned
//! `requirements.txt` plus the Python kit), what else it needs (Redis, the folder's npm
//! lockfile), then `pytest examples/engines/<engine>` with a bound on its time. A full run of an
//! engine rewrites its `findings.json` from what its tests recorded (`TWICE_ENGINES_OUT`, one
//! JSON line per app and scenario, written by `examples/engines/conftest.py`), and then the
//! findings table of `docs/engines.md` from every engine's `findings.json`; `--short` runs only
//! the tests marked `short` and changes no file: its tests compare what they see with the
//! committed findings instead.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::engines_run::{ENGINES_AT_ONCE, run_all, wait_bounded};
use crate::matrix::{read_matrices, render_matrix, write_section};
use crate::node::{build_node_kit, install_lockfile};
use crate::test::{apt_install, find_on_path};
use crate::venv::{KIT_PYPROJECT, Venv, install_kit};
use crate::{cargo, output_of, root, target_dir};

pub(crate) const USAGE: &str = "\
  engines [--short] [--only ENGINE]... [-- PYTEST_ARGS...]
                  run the real engines of examples/engines (celery, dbos, langgraph,
                  restate, temporal), each app through twice; a full run rewrites each
                  engine's findings.json and matrix.json and the tables of
                  docs/engines.md; --short runs the tests marked short (CI) and checks
                  them against findings.json
  engines --table rewrite the tables of docs/engines.md from the committed findings.json
                  and matrix.json files, running nothing (after an edit by hand, an
                  `also_seen` say)";

/// One engine's folder under `examples/engines/` and what it needs besides its venv.
struct Engine {
    name: &'static str,
    /// A Redis server on the PATH (`redis-server`), which the tests start on their own ports.
    redis: bool,
    /// An npm lockfile in the folder, installed with `npm ci`.
    npm: bool,
}

const ENGINES: [Engine; 5] = [
    Engine { name: "celery", redis: true, npm: false },
    Engine { name: "dbos", redis: false, npm: false },
    Engine { name: "langgraph", redis: false, npm: false },
    Engine { name: "restate", redis: false, npm: true },
    Engine { name: "temporal", redis: false, npm: false },
];

/// The failure-mode families, in the table's order: slug (as the tests record it) and the
/// words `docs/engines.md` uses. `examples/engines/conftest.py` has the same list.
const FAMILIES: [(&str, &str); 9] = [
    ("lost-reply", "lost reply after commit"),
    ("late-commit", "timeout then late commit"),
    ("worker-killed", "worker killed mid-step"),
    ("worker-paused", "worker paused past its lease or visibility timeout"),
    ("rejected-429", "429 then retry"),
    ("silent-noop", "silent no-op"),
    ("key-forgotten", "key forgotten"),
    ("stale-read", "stale read"),
    ("engine", "the engine's own failure path"),
];

/// The longest one engine's full run may take before it is interrupted (SIGINT, so that the
/// tests' fixtures stop their servers), and its short run.
const FULL_RUN_S_MAX: u64 = 30 * 60;
const SHORT_RUN_S_MAX: u64 = 8 * 60;
/// The line that ends a run: its wall time, read by `bench --engines-log`.
pub(crate) const WALL_PREFIX: &str = "xtask: the engines' tests took, in all, ";

const DOC: &str = "docs/engines.md";
const BEGIN: &str = "<!-- engines:begin (written by `cargo xtask engines` from examples/engines/*/findings.json; do not edit by hand) -->";
const END: &str = "<!-- engines:end -->";

#[derive(Debug, PartialEq)]
struct Args {
    short: bool,
    only: Vec<String>,
    pytest: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut parsed = Args { short: false, only: Vec::new(), pytest: Vec::new() };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--short" => parsed.short = true,
            "--only" => {
                let name = rest.next().context("--only needs an engine's name")?;
                if !ENGINES.iter().any(|e| e.name == name) {
                    bail!("no engine `{name}`; there are: {}", names().join(", "));
                }
                parsed.only.push(name.clone());
            }
            "--" => parsed.pytest.extend(rest.by_ref().cloned()),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    Ok(parsed)
}

fn names() -> Vec<&'static str> {
    ENGINES.iter().map(|e| e.name).collect()
}

pub(crate) fn engines(args: &[String]) -> Result<i32> {
    let root = root();
    if args == ["--table"] {
        write_table(&root)?;
        println!("xtask: wrote the findings table of {DOC}");
        return Ok(0);
    }
    let args = parse(args)?;
    // The commit first, as `.ci/run` prints it: `bench --engines-log` says what was measured.
    if let Some(commit) =
        output_of("git", &["-C", &root.to_string_lossy(), "rev-parse", "--short=12", "HEAD"])
    {
        println!("==> commit {commit}");
    }
    println!("xtask: building twice (cargo build --bin twice)");
    let built = cargo().args(["build", "-p", "twice", "--bin", "twice"]).current_dir(&root).status();
    if !built.context("could not start cargo build")?.success() {
        bail!("cargo build --bin twice failed");
    }
    let twice = target_dir(&root).join("debug").join("twice");
    let begun = Instant::now();
    // A full run of an engine (no pytest arguments that choose tests) refreshes its findings.
    let refresh = !args.short && args.pytest.is_empty();
    let mut failed = Vec::new();
    let mut lines = Vec::new();
    let selected: Vec<&Engine> =
        ENGINES.iter().filter(|e| args.only.is_empty() || args.only.iter().any(|o| o == e.name)).collect();
    // Every engine's venv and packages at once: pip and npm mostly wait on the network.
    let started = Instant::now();
    let prepared: Vec<Result<PathBuf>> = thread::scope(|s| {
        let handles: Vec<_> =
            selected.iter().map(|engine| s.spawn(|| prepare_engine(&root, engine))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("the thread that prepared it panicked"))))
            .collect()
    });
    println!("xtask: the engines' venvs and packages: ready in {:.1} s", started.elapsed().as_secs_f64());
    let outcomes = run_all(
        &selected,
        |engine| engine.name,
        prepared,
        |engine, python| run_engine(&root, engine, &python, &twice, &args, refresh),
    );
    for (engine, (outcome, took_s)) in selected.iter().zip(outcomes) {
        match outcome {
            Ok(true) => lines.push(format!("{:<10} passed in {took_s:.0} s", engine.name)),
            Ok(false) => {
                lines.push(format!("{:<10} FAILED in {took_s:.0} s", engine.name));
                failed.push(engine.name);
            }
            Err(e) => {
                lines.push(format!("{:<10} could not run: {e:#}", engine.name));
                failed.push(engine.name);
            }
        }
    }
    if refresh {
        write_table(&root)?;
        println!("xtask: wrote the findings table of {DOC}");
    }
    println!("\nxtask: engines\n  {}", lines.join("\n  "));
    println!("{WALL_PREFIX}{:.0} s (engines {ENGINES_AT_ONCE} at a time)", begun.elapsed().as_secs_f64());
    if failed.is_empty() { Ok(0) } else { Ok(1) }
}

/// Makes one engine's venv and what else it needs (Redis, its npm lockfile); its venv's Python.
fn prepare_engine(root: &Path, engine: &Engine) -> Result<PathBuf> {
    let name = engine.name;
    let folder = format!("examples/engines/{name}");
    let work = target_dir(root).join("engines").join(name);
    fs::create_dir_all(&work).with_context(|| format!("could not create {}", work.display()))?;
    let rerun = format!("cargo xtask engines --only {name}");
    let requirements = format!("{folder}/requirements.txt");
    let venv = Venv {
        dir: work.join("venv"),
        requirements: &requirements,
        also_hashed: &[KIT_PYPROJECT],
        stamp: "twice-requirements.hash",
        rerun: &rerun,
    };
    let python = venv.prepare(root, |python, retry| install_kit(root, python, &venv.dir, retry))?;
    if engine.redis && find_on_path(&["redis-server"]).is_none() && !apt_install("redis-server", &folder) {
        bail!(
            "{name} needs `redis-server` on the PATH (Debian/Ubuntu: apt-get install redis-server; \
             macOS: brew install redis); its tests start their own on a free loopback port"
        );
    }
    if engine.npm {
        // The folder links the TypeScript kit (`npx twice-engine-restate`): compiled first.
        build_node_kit(root, &rerun)?;
        install_lockfile(root, &folder, &rerun)?;
    }
    Ok(python)
}

/// Runs one engine's tests on its prepared `python`; whether they passed.
fn run_engine(
    root: &Path,
    engine: &Engine,
    python: &Path,
    twice: &Path,
    args: &Args,
    refresh: bool,
) -> Result<bool> {
    let name = engine.name;
    let folder = format!("examples/engines/{name}");
    let work = target_dir(root).join("engines").join(name);
    let results = work.join("results.jsonl");
    let _ = fs::remove_file(&results);
    let log_path = work.join("pytest.log");
    let log =
        fs::File::create(&log_path).with_context(|| format!("could not create {}", log_path.display()))?;
    let mut command = Command::new(python);
    command
        .args(["-m", "pytest", &folder, "-q", "-p", "no:cacheprovider", "--junitxml"])
        .arg(work.join("junit.xml"))
        .current_dir(root)
        .env("TWICE_BIN", twice)
        .env("TWICE_ENGINES_OUT", &results)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if args.short {
        command.args(["-m", "short"]);
    }
    if refresh {
        command.env("TWICE_ENGINES_UPDATE", "1");
    }
    command.args(&args.pytest);
    let bound_s = if args.short { SHORT_RUN_S_MAX } else { FULL_RUN_S_MAX };
    println!(
        "xtask: pytest {folder}{} (at most {} min; output in {})",
        if args.short { " -m short" } else { "" },
        bound_s / 60,
        log_path.display()
    );
    let child = command.spawn().with_context(|| format!("could not start {}", python.display()))?;
    let code = wait_bounded(child, Duration::from_secs(bound_s), name);
    let output = fs::read_to_string(&log_path).unwrap_or_default();
    let summary = output.lines().rev().find(|l| l.contains(" passed") || l.contains(" failed")).unwrap_or("");
    println!("xtask: {name}: {}", summary.trim_matches('=').trim());
    if !matches!(code, Ok(0)) {
        println!("xtask: === {name}'s pytest output ===\n{output}");
        return code.map(|_| false);
    }
    if refresh {
        let recorded = fs::read_to_string(&results).unwrap_or_default();
        let path = root.join(&folder).join("findings.json");
        // Outcomes a maintainer recorded as also seen (an engine's own race) outlive a refresh.
        let previous = fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok());
        let findings = findings_json(name, &recorded, &today(), previous.as_ref())?;
        let text = serde_json::to_string_pretty(&findings)? + "\n";
        fs::write(&path, text).with_context(|| format!("could not write {}", path.display()))?;
        println!("xtask: wrote {}", path.display());
    }
    Ok(true)
}

fn today() -> String {
    output_of("date", &["-u", "+%Y-%m-%d"]).unwrap_or_else(|| "unknown date".to_string())
}

/// An engine's `findings.json` from the JSON lines its tests recorded: one result per test,
/// sorted by test name, and the versions they named; each test's `also_seen` (other outcomes
/// of a racing engine, with their evidence) kept from `previous`.
fn findings_json(engine: &str, recorded: &str, date: &str, previous: Option<&Value>) -> Result<Value> {
    let also_seen = |test: &str| {
        previous?["results"].as_array()?.iter().find(|r| r["test"] == test)?.get("also_seen").cloned()
    };
    let mut results = BTreeMap::new();
    let mut versions = BTreeMap::new();
    for (n, line) in recorded.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let mut finding: Value =
            serde_json::from_str(line).with_context(|| format!("results line {}: not JSON", n + 1))?;
        if let Some(found) = finding.get("versions").and_then(Value::as_object) {
            for (k, v) in found {
                versions.insert(k.clone(), v.clone());
            }
        }
        if let Some(object) = finding.as_object_mut() {
            object.remove("versions");
            object.remove("engine");
        }
        let test =
            finding.get("test").and_then(Value::as_str).context("a result without `test`")?.to_string();
        if let (Some(object), Some(also)) = (finding.as_object_mut(), also_seen(&test)) {
            object.insert("also_seen".into(), also);
        }
        results.insert(test, finding);
    }
    if results.is_empty() {
        bail!("{engine}'s tests recorded no finding (is every test calling engine_findings.judge?)");
    }
    Ok(json!({
        "engine": engine,
        "date": date,
        "command": format!("cargo xtask engines --only {engine}"),
        "versions": versions,
        "results": results.into_values().collect::<Vec<_>>(),
    }))
}

/// Rewrites the findings table of `docs/engines.md` from every engine's `findings.json`.
fn write_table(root: &Path) -> Result<()> {
    let matrix = render_matrix(&read_matrices(root, &names())?);
    write_section(&root.join(DOC), &matrix)?;
    let table = render_table(&read_findings(root)?)?;
    let doc = root.join(DOC);
    let text = fs::read_to_string(&doc).with_context(|| format!("cannot read {}", doc.display()))?;
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        bail!("{DOC} has no `{BEGIN}` ... `{END}` section");
    };
    let updated = format!("{}{table}{}", &text[..b], &text[e + END.len()..]);
    fs::write(&doc, updated).with_context(|| format!("cannot write {}", doc.display()))
}

/// Every engine's `findings.json`, in [`ENGINES`] order; an engine without one is `None`.
fn read_findings(root: &Path) -> Result<Vec<(&'static str, Option<Value>)>> {
    ENGINES
        .iter()
        .map(|engine| {
            let path: PathBuf = root.join("examples/engines").join(engine.name).join("findings.json");
            if !path.exists() {
                return Ok((engine.name, None));
            }
            let text =
                fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
            let value =
                serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
            Ok((engine.name, Some(value)))
        })
        .collect()
}

/// The generated section: per engine, its versions and date, then a row per family and
/// scenario with what each app did, and the replay command of every violation.
fn render_table(findings: &[(&str, Option<Value>)]) -> Result<String> {
    let mut out = format!("{BEGIN}\n");
    for (engine, value) in findings {
        out.push_str(&format!("\n### {engine}\n\n"));
        let Some(value) = value else {
            out.push_str("Not run yet: `cargo xtask engines --only ");
            out.push_str(engine);
            out.push_str("` writes its findings.\n");
            continue;
        };
        let versions = value["versions"]
            .as_object()
            .map(|v| v.iter().map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?"))).collect::<Vec<_>>())
            .unwrap_or_default();
        out.push_str(&format!(
            "Run on {} with {} (`{}`).\n\n",
            value["date"].as_str().unwrap_or("?"),
            versions.join(", "),
            value["command"].as_str().unwrap_or("?")
        ));
        out.push_str("| failure mode | scenario | idiomatic app | careful app |\n|---|---|---|---|\n");
        // Rows: (family's place, scenario) -> app -> result.
        let mut rows: BTreeMap<(usize, String, String), BTreeMap<String, &Value>> = BTreeMap::new();
        let results = value["results"].as_array().map(Vec::as_slice).unwrap_or_default();
        for result in results {
            let family = result["family"].as_str().unwrap_or("");
            let place = FAMILIES
                .iter()
                .position(|(slug, _)| *slug == family)
                .with_context(|| format!("{engine}: unknown family `{family}`"))?;
            let scenario = result["scenario"].as_str().unwrap_or("?").to_string();
            let variant = result["variant"].as_str().unwrap_or("").to_string();
            let app = result["app"].as_str().unwrap_or("?").to_string();
            rows.entry((place, scenario, variant)).or_default().insert(app, result);
        }
        let mut replays = Vec::new();
        for ((place, scenario, variant), apps) in &rows {
            let scenario = if variant.is_empty() {
                format!("`{scenario}`")
            } else {
                format!("`{scenario}` ({variant})")
            };
            let cell = |app: &str| match apps.get(app) {
                None => "not run".to_string(),
                Some(r) => {
                    let mut text = outcome_text(r);
                    for other in r["also_seen"].as_array().map(Vec::as_slice).unwrap_or_default() {
                        text.push_str(&format!("; also seen: {}", outcome_text(other)));
                    }
                    text
                }
            };
            out.push_str(&format!(
                "| {} | {scenario} | {} | {} |\n",
                FAMILIES[*place].1,
                cell("idiomatic"),
                cell("careful")
            ));
            for app in ["idiomatic", "careful"] {
                if let Some(r) = apps.get(app).filter(|r| r["outcome"] == "violated") {
                    let evidence = r["evidence"].as_array().and_then(|e| e.first()).and_then(Value::as_str);
                    replays.push(format!(
                        "- {app}, {scenario}: `{}`{}",
                        r["replay"].as_str().unwrap_or("?"),
                        evidence.map(|e| format!("\n  ({})", e.replace('\n', " "))).unwrap_or_default()
                    ));
                    for other in r["also_seen"].as_array().map(Vec::as_slice).unwrap_or_default() {
                        let evidence =
                            other["evidence"].as_array().and_then(|e| e.first()).and_then(Value::as_str);
                        replays.push(format!(
                            "  also seen{}: {}{}",
                            other["date"].as_str().map(|d| format!(" on {d}")).unwrap_or_default(),
                            evidence.map(|e| e.replace('\n', " ")).unwrap_or_else(|| outcome_text(other)),
                            other["note"].as_str().map(|n| format!(" ({n})")).unwrap_or_default()
                        ));
                    }
                }
            }
        }
        if !replays.is_empty() {
            out.push_str("\nReplay each violation:\n\n");
            out.push_str(&replays.join("\n"));
            out.push('\n');
        }
    }
    out.push('\n');
    out.push_str(END);
    Ok(out)
}

/// A result's outcome as its table cell says it: passed, or the invariants it violated, and
/// its hazards.
fn outcome_text(r: &Value) -> String {
    let names = |key: &str| -> Vec<String> {
        r[key]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).map(|s| format!("`{s}`")).collect())
            .unwrap_or_default()
    };
    let (violated, hazards) = (names("violated"), names("hazards"));
    let mut text = if violated.is_empty() {
        "passed".to_string()
    } else {
        format!("**violated** {}", violated.join(", "))
    };
    if !hazards.is_empty() {
        text.push_str(&format!(" (hazard: {})", hazards.join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_are_read_and_bad_ones_refused() {
        let parsed = parse(&args(&["--short", "--only", "celery", "--", "-k", "lost"])).unwrap();
        assert_eq!(
            parsed,
            Args { short: true, only: vec!["celery".into()], pytest: vec!["-k".into(), "lost".into()] }
        );
        let error = parse(&args(&["--only", "airflow"])).unwrap_err().to_string();
        assert!(error.contains("no engine `airflow`") && error.contains("celery, dbos"), "{error}");
        assert!(parse(&args(&["--only"])).is_err());
        assert!(parse(&args(&["--fast"])).unwrap_err().to_string().contains("unknown argument"));
    }

    #[test]
    fn findings_are_one_per_test_sorted_with_their_versions() {
        let recorded = concat!(
            r#"{"engine":"celery","app":"idiomatic","scenario":"s","family":"lost-reply","outcome":"violated","violated":["no-duplicate-effect"],"hazards":[],"test":"t[b]","replay":"r","versions":{"celery":"5.7.0"},"evidence":["e"]}"#,
            "\n\n",
            r#"{"engine":"celery","app":"careful","scenario":"s","family":"lost-reply","outcome":"passed","violated":[],"hazards":[],"test":"t[a]","replay":"r2","versions":{"redis":"7"},"evidence":[]}"#,
            "\n"
        );
        let other = json!({"outcome": "violated", "violated": ["expected-states"], "evidence": ["e2"], "date": "2026-12-05"});
        let previous =
            json!({"results": [{"test": "t[b]", "also_seen": [other]}, {"test": "gone", "also_seen": []}]});
        let findings = findings_json("celery", recorded, "2026-12-03", Some(&previous)).unwrap();
        assert_eq!(findings["versions"], json!({"celery": "5.7.0", "redis": "7"}));
        let tests: Vec<&str> =
            findings["results"].as_array().unwrap().iter().map(|r| r["test"].as_str().unwrap()).collect();
        assert_eq!(tests, ["t[a]", "t[b]"]);
        assert_eq!(findings["results"][1]["also_seen"], json!([other]), "a refresh keeps what was also seen");
        assert!(findings["results"][0].get("also_seen").is_none());
        assert!(findings_json("celery", "\n", "d", None).is_err(), "no finding is an error");
        let table = render_table(&[("celery", Some(findings)), ("dbos", None)]).unwrap();
        assert!(
            table.contains(
                "| lost reply after commit | `s` | **violated** `no-duplicate-effect`; also seen: **violated** \
                 `expected-states` | passed |"
            ),
            "{table}"
        );
        assert!(table.contains("- idiomatic, `s`: `r`\n  (e)\n  also seen on 2026-12-05: e2"), "{table}");
        assert!(table.contains("### dbos\n\nNot run yet"), "{table}");
    }

    /// docs/engines.md's whole-catalog section is what the committed matrix.json files say.
    #[test]
    fn the_whole_catalog_section_of_docs_engines_is_the_committed_matrices() {
        use crate::matrix::{MATRIX_BEGIN, MATRIX_END};
        let root = root();
        let doc = fs::read_to_string(root.join(DOC)).unwrap();
        let (b, e) = (doc.find(MATRIX_BEGIN).unwrap(), doc.find(MATRIX_END).unwrap());
        let section = render_matrix(&read_matrices(&root, &names()).unwrap());
        assert_eq!(
            doc[b..e + MATRIX_END.len()],
            section,
            "the whole-catalog section of {DOC} differs from examples/engines/*/matrix.json: run `cargo xtask engines`"
        );
    }

    /// docs/engines.md's table is what the committed findings say: a run that changed a finding
    /// and did not rewrite the table (or an edit by hand) fails here.
    #[test]
    fn the_table_of_docs_engines_is_the_committed_findings() {
        let root = root();
        let doc = fs::read_to_string(root.join(DOC)).unwrap();
        let (b, e) = (doc.find(BEGIN).unwrap(), doc.find(END).unwrap());
        let table = render_table(&read_findings(&root).unwrap()).unwrap();
        assert_eq!(
            doc[b..e + END.len()],
            table,
            "the findings table of {DOC} differs from examples/engines/*/findings.json: run `cargo xtask engines`"
        );
    }

    #[test]
    fn every_engine_has_a_folder_with_its_requirements_and_the_families_match_the_conftest() {
        let root = root();
        for engine in &ENGINES {
            let folder = root.join("examples/engines").join(engine.name);
            assert!(
                folder.join("requirements.txt").is_file(),
                "{} has no requirements.txt",
                folder.display()
            );
            assert!(folder.join("README.md").is_file(), "{} has no README.md", folder.display());
            assert_eq!(folder.join("package-lock.json").is_file(), engine.npm, "{}", engine.name);
        }
        let conftest = fs::read_to_string(root.join("examples/engines/conftest.py")).unwrap();
        for (slug, words) in FAMILIES {
            assert!(
                conftest.contains(&format!("\"{slug}\": \"{words}\"")),
                "conftest.py lacks {slug}: {words}"
            );
        }
    }
}
