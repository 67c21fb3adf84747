//! `cargo xtask fuzz-api [--examples N] [--seed S]`: schemathesis, driven by the OpenAPI
//! documents of `docs/openapi/`, against a real `twice serve` on loopback: each fake's control
//! API (`fakes.json`, one run per fake at its own URL) and serve's own endpoint (`serve.json`).
//!
//! schemathesis comes from PyPI at the exact versions of `xtask/fuzz-api-requirements.txt`,
//! in its own venv (`target/schemathesis-venv`), reinstalled only when that file changes. Each
//! run has a fixed seed, a bounded number of examples per operation, a bound on each request
//! and one on the whole run; serve is killed at the end whatever happened. It prints, per
//! target, the operations tested, the test cases and requests sent and the failures by check,
//! and exits 1 if any check failed. Not part of CI: it takes minutes. Reports (schemathesis's
//! JSON and HAR, serve's log) are in `target/fuzz-api/`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::venv::Venv;
use crate::{cargo, exit_code, root, target_dir};

pub const USAGE: &str = "\
  fuzz-api [--examples N] [--seed S] [--release] [--target NAME]
                  schemathesis (pinned in xtask/fuzz-api-requirements.txt, venv in
                  target/schemathesis-venv) against a real `twice serve`: each fake's
                  control API (docs/openapi/fakes.json) and serve's (docs/openapi/serve.json),
                  N examples per operation (default 100), seed S (default 1); --target: one
                  fake or serve only; exit 1 on any failed check; reports in target/fuzz-api/";

const REQUIREMENTS: &str = "xtask/fuzz-api-requirements.txt";
const VENV_DIR: &str = "schemathesis-venv";
/// In the venv: the hash of the requirements it was installed from.
const VENV_STAMP: &str = "fuzz-api-requirements.hash";
/// The checks that make sense for these APIs: no answer is a 5xx; every answer is the one the
/// document describes (status, content type, body, headers); a body or parameter the document
/// rules out is refused (4xx); a method a path does not take is 405 with `Allow`. Left out:
/// `positive_data_acceptance` (the document does not say which parameters each fault needs,
/// so a `reject` without its status is valid to it and rightly refused), and the checks of
/// authentication and of resources' life cycles, which these APIs do not have.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,response_headers_conformance,\
                      negative_data_rejection,unsupported_method,allow_header_conformance";
/// How long serve may take to write its URLs file.
const SERVE_START_BOUND: Duration = Duration::from_secs(60);
/// The bound on one request of schemathesis (`--request-timeout`, seconds): past the 60 s a
/// `GET /__twice/steps/{n}?wait_ms=60000` may rightly wait.
const REQUEST_TIMEOUT_S: &str = "75";
/// The bound on one target's whole schemathesis run; past it the run is killed and counted
/// as failed.
const TARGET_BOUND: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Knobs {
    pub(crate) examples: u32,
    pub(crate) seed: u64,
    pub(crate) release: bool,
    /// Only this target (a fake's name, or `serve`).
    pub(crate) only: Option<String>,
}

pub(crate) fn parse_knobs(args: &[String]) -> Result<Knobs> {
    let mut knobs = Knobs { examples: 100, seed: 1, release: false, only: None };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--examples" => {
                let value = it.next().context("--examples needs a value")?;
                knobs.examples =
                    value.replace('_', "").parse().with_context(|| format!("--examples {value}"))?;
                if knobs.examples == 0 {
                    bail!("--examples must be at least 1");
                }
            }
            "--seed" => {
                let value = it.next().context("--seed needs a value")?;
                knobs.seed = value.replace('_', "").parse().with_context(|| format!("--seed {value}"))?;
            }
            "--release" => knobs.release = true,
            "--target" => {
                knobs.only = Some(it.next().context("--target needs a fake's name or serve")?.clone())
            }
            other => bail!("unknown argument `{other}`\n\n{USAGE}"),
        }
    }
    Ok(knobs)
}

/// `twice serve`, killed and reaped when dropped: on success, on error and on panic alike.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one schemathesis run against one URL found, read from its JSON and HAR reports.
#[derive(Debug, Default)]
struct Outcome {
    operations: u64,
    test_cases: u64,
    requests: u64,
    /// Check name (failure title) -> count.
    failures: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    exit: i32,
}

/// `cargo xtask fuzz-api`: schemathesis on each target of a `twice serve` it starts, then a
/// summary; 1 if any check failed.
pub(crate) fn fuzz_api(args: &[String]) -> Result<i32> {
    let knobs = parse_knobs(args)?;
    let root = root();
    let target = target_dir(&root);
    let out = target.join("fuzz-api");
    fs::create_dir_all(&out).with_context(|| format!("could not create {}", out.display()))?;

    let st = prepare_venv(&root, &target)?;
    let profile = if knobs.release { "release" } else { "debug" };
    let mut build = cargo();
    build.current_dir(&root).args(["build", "-p", "twice", "--bin", "twice"]);
    if knobs.release {
        build.arg("--release");
    }
    let status = build.status().context("could not run cargo build")?;
    if !status.success() {
        return Ok(exit_code(status));
    }
    let twice = target.join(profile).join("twice");

    let urls_file = out.join("urls.json");
    let log_path = out.join("serve.log");
    let mut serve = start_serve(&twice, &knobs, &urls_file, &log_path)?;
    let urls = wait_for_urls(&mut serve, &urls_file)?;
    let targets = targets(&urls, &knobs)?;
    let serve_config = out.join("serve.toml");
    fs::write(&serve_config, serve_config_text(&root)?)
        .with_context(|| format!("could not write {}", serve_config.display()))?;

    let mut outcomes = Vec::new();
    for (name, doc, url) in &targets {
        println!("\nxtask: schemathesis on {name} ({url}, {doc})");
        let dir = out.join(name);
        let _ = fs::remove_dir_all(&dir);
        let config = (name == "serve").then_some(serve_config.as_path());
        if name == "serve" {
            // A scenario set up before the run, so that the operations schemathesis tests
            // before `POST /__twice/scenario` (the check, the steps) reach past their 409.
            post_json(url, "/__twice/scenario", r#"{"name": "lost_refund_reply"}"#)?;
        }
        let outcome = run_schemathesis(&st, &root.join(doc), url, config, &dir, &knobs)?;
        if let Ok(Some(status)) = serve.0.try_wait() {
            bail!("twice serve exited ({status}) during the run on {name}; see {}", log_path.display());
        }
        outcomes.push((name.clone(), outcome));
    }
    drop(serve);
    Ok(i32::from(summarise(&outcomes, &knobs, profile)))
}

/// `twice serve` on loopback with the run's seed, writing its URLs to `urls_file` and its
/// log to `log_path`.
fn start_serve(twice: &Path, knobs: &Knobs, urls_file: &Path, log_path: &Path) -> Result<Serve> {
    let _ = fs::remove_file(urls_file);
    let log =
        fs::File::create(log_path).with_context(|| format!("could not create {}", log_path.display()))?;
    println!("xtask: starting {} serve (log in {})", twice.display(), log_path.display());
    let child = Command::new(twice)
        .args(["serve", "--seed"])
        .arg(knobs.seed.to_string())
        .arg("--urls-file")
        .arg(urls_file)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("could not start {}", twice.display()))?;
    Ok(Serve(child))
}

/// What is fuzzed, in order: each fake's control API (`fakes.json`) at its URL, then serve's
/// own endpoint (`serve.json`), as `(name, document, URL)`; only the one `--target` names.
fn targets(urls: &BTreeMap<String, String>, knobs: &Knobs) -> Result<Vec<(String, &'static str, String)>> {
    // The fakes first, then serve's own endpoint: fuzzing it loads scenarios and resets the
    // fakes, which must not happen under a fake's run.
    let mut targets: Vec<(String, &str, String)> = urls
        .iter()
        .filter(|(name, _)| name.as_str() != "control")
        .map(|(name, url)| (name.clone(), "docs/openapi/fakes.json", url.clone()))
        .collect();
    let control = urls.get("control").context("serve's URLs file has no `control` entry")?;
    targets.push(("serve".into(), "docs/openapi/serve.json", control.clone()));
    if let Some(only) = &knobs.only {
        targets.retain(|(name, _, _)| name == only);
        if targets.is_empty() {
            bail!("--target {only}: not a fake of serve's URLs file nor `serve`");
        }
    }
    Ok(targets)
}

/// Prints the table of each target's operations, test cases, requests and failures, each
/// failure and error by check, and the totals; whether any check failed.
fn summarise(outcomes: &[(String, Outcome)], knobs: &Knobs, profile: &str) -> bool {
    println!(
        "\nxtask: fuzz-api summary (seed {}, {} examples per operation, {profile} twice)",
        knobs.seed, knobs.examples
    );
    println!("| target | operations | test cases | requests | failures | exit |");
    println!("|---|---|---|---|---|---|");
    let mut failed = false;
    for (name, o) in outcomes {
        let failures: u64 = o.failures.values().sum::<u64>() + o.errors.values().sum::<u64>();
        failed |= failures > 0 || o.exit != 0;
        println!(
            "| {name} | {} | {} | {} | {failures} | {} |",
            o.operations, o.test_cases, o.requests, o.exit
        );
    }
    for (name, o) in outcomes {
        for (title, count) in &o.failures {
            println!("{name}: failure: {title}: {count}");
        }
        for (title, count) in &o.errors {
            println!("{name}: error: {title}: {count}");
        }
    }
    let total = |f: fn(&Outcome) -> u64| outcomes.iter().map(|(_, o)| f(o)).sum::<u64>();
    println!(
        "total: {} operations, {} test cases, {} requests; {}",
        total(|o| o.operations),
        total(|o| o.test_cases),
        total(|o| o.requests),
        if failed { "FAILED (reports in target/fuzz-api/TARGET/)" } else { "no failure" }
    );
    failed
}

/// Waits (bounded) for serve's URLs file: serve writes it whole (a rename) once every
/// listener is up.
fn wait_for_urls(serve: &mut Serve, path: &Path) -> Result<BTreeMap<String, String>> {
    let start = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(path)
            && let Ok(file) = serde_json::from_str::<BTreeMap<String, Value>>(&text)
        {
            // The string entries are URLs; `accounts` lists the funded dev accounts.
            return Ok(file.into_iter().filter_map(|(k, v)| Some((k, v.as_str()?.to_string()))).collect());
        }
        if let Some(status) = serve.0.try_wait()? {
            bail!("twice serve exited ({status}) before writing {}", path.display());
        }
        if start.elapsed() > SERVE_START_BOUND {
            bail!("twice serve wrote no {} within {} s", path.display(), SERVE_START_BOUND.as_secs());
        }
        sleep(Duration::from_millis(50));
    }
}

/// schemathesis's configuration for serve's endpoint: the catalog's scenario names as a
/// dictionary that `POST /__twice/scenario`'s `name` draws from most of the time (random
/// names would all be refused, and with no scenario set up every step and check answers 409
/// before reaching anything), and `wait_ms` mostly short (a step that is never reached holds
/// each request for `wait_ms`).
fn serve_config_text(root: &Path) -> Result<String> {
    let catalog = root.join("scenarios").join("catalog");
    let mut names = Vec::new();
    for entry in fs::read_dir(&catalog).with_context(|| format!("could not read {}", catalog.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            names.push(format!("{stem:?}"));
        }
    }
    names.sort();
    Ok(format!(
        "# Written by `cargo xtask fuzz-api`.\n\
         [dictionaries.scenarios]\nvalues = [{}]\n\n\
         [dictionaries.wait_ms]\nvalues = [0, 1, 50]\n\n\
         [parameters]\n\
         \"body.name\" = {{ dictionary = \"scenarios\", probability = 0.8 }}\n\
         \"query.wait_ms\" = {{ dictionary = \"wait_ms\", probability = 0.95 }}\n",
        names.join(", ")
    ))
}

fn run_schemathesis(
    st: &Path,
    doc: &Path,
    url: &str,
    config: Option<&Path>,
    dir: &Path,
    knobs: &Knobs,
) -> Result<Outcome> {
    let json = dir.join("report.json");
    let har = dir.join("requests.har");
    let mut command = Command::new(st);
    // Its working directory is where it keeps its cache (`.schemathesis/`): the target's
    // report directory, not the worktree.
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    command.current_dir(dir);
    if let Some(config) = config {
        command.arg("--config-file").arg(config);
    }
    let mut child = command
        .arg("run")
        .arg(doc)
        .args(["--url", url, "--checks", CHECKS])
        .args(["--max-examples", &knobs.examples.to_string(), "--seed", &knobs.seed.to_string()])
        // One worker: the operations share the fake's state (rules, seeds, contract), so a
        // seed reproduces a run only if they take turns.
        .args(["--workers", "1", "--request-timeout", REQUEST_TIMEOUT_S])
        .args(["--generation-database", "none", "--no-color", "--report", "json,har"])
        .arg("--report-json-path")
        .arg(&json)
        .arg("--report-har-path")
        .arg(&har)
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("could not run {}", st.display()))?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > TARGET_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            bail!("schemathesis on {url} ran past {} s; killed", TARGET_BOUND.as_secs());
        }
        sleep(Duration::from_millis(100));
    };
    let report: Value = serde_json::from_str(
        &fs::read_to_string(&json)
            .with_context(|| format!("schemathesis wrote no {} ({status})", json.display()))?,
    )
    .with_context(|| format!("{} is not JSON", json.display()))?;
    let mut outcome = Outcome {
        operations: report["operations"]["tested"].as_u64().unwrap_or(0),
        test_cases: report["test_cases"]["generated"].as_u64().unwrap_or(0),
        requests: count_requests(&har),
        exit: exit_code(status),
        ..Outcome::default()
    };
    for (list, into) in [("failures", &mut outcome.failures), ("errors", &mut outcome.errors)] {
        for group in report[list].as_array().into_iter().flatten() {
            let title = group["title"].as_str().or(group["code"].as_str()).unwrap_or("?").to_string();
            *into.entry(title).or_default() += group["count"].as_u64().unwrap_or(1);
        }
    }
    Ok(outcome)
}

/// One `POST` of a JSON body over plain HTTP/1.1 on loopback, bounded; an answer other than
/// 200 is an error.
fn post_json(base: &str, path: &str, body: &str) -> Result<()> {
    use std::io::{Read as _, Write as _};
    let authority = base.strip_prefix("http://").context("serve's control URL is not http://")?;
    let addr: std::net::SocketAddr =
        authority.parse().with_context(|| format!("{authority}: not an address"))?;
    let bound = Duration::from_secs(30);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, bound)?;
    stream.set_read_timeout(Some(bound))?;
    stream.set_write_timeout(Some(bound))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if !answer.starts_with("HTTP/1.1 200") {
        bail!("POST {base}{path} {body}: {}", answer.lines().next().unwrap_or("no answer"));
    }
    Ok(())
}

/// The requests schemathesis sent: the entries of its HAR file (one per request and its
/// answer); 0 when the file is missing or unreadable.
fn count_requests(path: &Path) -> u64 {
    let Ok(text) = fs::read_to_string(path) else { return 0 };
    serde_json::from_str::<Value>(&text).map_or(0, |har| har_entries(&har))
}

fn har_entries(har: &Value) -> u64 {
    har["log"]["entries"].as_array().map_or(0, |entries| entries.len() as u64)
}

/// Makes `target/schemathesis-venv` hold exactly `xtask/fuzz-api-requirements.txt`; returns
/// the path of its `st`.
fn prepare_venv(root: &Path, target: &Path) -> Result<PathBuf> {
    let venv = Venv {
        dir: target.join(VENV_DIR),
        requirements: REQUIREMENTS,
        also_hashed: &[],
        stamp: VENV_STAMP,
        rerun: "cargo xtask fuzz-api",
    };
    let python = venv.prepare(root, |_, _| Ok(()))?;
    let st = python.with_file_name("st");
    if !st.exists() {
        bail!("{} installed no `st`: is schemathesis in {REQUIREMENTS}?", venv.dir.display());
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn knobs_are_read() {
        let k = parse_knobs(&args(&["--examples", "1_000", "--seed", "7", "--release"])).unwrap();
        assert_eq!(k, Knobs { examples: 1000, seed: 7, release: true, only: None });
        assert_eq!(parse_knobs(&[]).unwrap(), Knobs { examples: 100, seed: 1, release: false, only: None });
        assert_eq!(parse_knobs(&args(&["--target", "serve"])).unwrap().only.as_deref(), Some("serve"));
        assert!(parse_knobs(&args(&["--examples", "0"])).is_err());
        assert!(parse_knobs(&args(&["--seed"])).is_err());
        assert!(parse_knobs(&args(&["--what"])).is_err());
    }

    #[test]
    fn requests_are_counted_from_the_har_entries() {
        let har = serde_json::json!({"log": {"entries": [{}, {}, {}]}});
        assert_eq!(har_entries(&har), 3);
        assert_eq!(har_entries(&serde_json::json!({})), 0);
    }
}
