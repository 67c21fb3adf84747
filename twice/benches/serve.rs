//! `twice serve` as a test suite meets it, per test.
//!
//! What is measured:
//!
//! - **start-up**: the `twice` binary (as the Python kit's fixture starts it: `twice serve
//!   --urls-file F`, every port 0) from the spawn to the moment its URLs file exists, [`STARTS`]
//!   times after one warm-up; each process then stopped with SIGTERM and waited for.
//! - **scenario and check**: on one running serve, `POST /__twice/scenario` (a catalog
//!   scenario by name: every fake reset, then contracts, seeds and fault rules set) followed by
//!   `POST /__twice/check` with one intent's claims (the verdict from the ledgers and journals,
//!   with `results.json`'s whole shape in the answer), over loopback HTTP, [`ROUND_TRIPS`]
//!   times after [`WARMUP`]; and `POST /__twice/reset` alone.
//!
//! Output: readable lines, then `BENCH {json}` records for `cargo xtask bench`. Run it alone
//! with `cargo bench -p twice --bench serve`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bench_support::{WorkDir, load_average, record, summary};
use executor::world::{HttpRequest, HttpTransport, Transport};
use serde_json::{Value, json};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

const BENCH: &str = "twice/serve";
/// Measured start-ups.
const STARTS: usize = 20;
/// Measured scenario-and-check round trips.
const ROUND_TRIPS: usize = 200;
/// Round trips before measuring.
const WARMUP: usize = 20;
/// The scenario of the round trips: one refund whose reply is lost after it committed.
const SCENARIO: &str = "lost_refund_reply";
/// The longest a start-up or an answer may take before the benchmark gives up.
const WAIT_MS_MAX: u64 = 30_000;

fn main() -> Result<()> {
    let work = WorkDir::create("serve")?;
    let load_before = load_average();
    let mut records = Vec::new();

    let mut starts_ms = Vec::new();
    for round in 0..=STARTS {
        let ms = start_up(&work.path.join(format!("urls-{round}.json")))?;
        if round > 0 {
            starts_ms.push(ms);
        }
    }
    let (start_ms, start_spread) = summary(&starts_ms);
    println!("{BENCH}: start-up to ready {start_ms:.1} ms (median of {STARTS}, spread {start_spread:.1} %)");
    records.push(record(
        BENCH,
        "twice serve, start to ready",
        start_ms,
        "ms",
        Some(start_spread),
        &format!(
            "The release `twice serve --urls-file F` (every port 0) from spawn until F exists, i.e. every \
             fake and the control endpoint listening; median of {STARTS} starts after one warm-up, each \
             stopped with SIGTERM. Target: well under a second, so a serve per test is affordable."
        ),
    ));

    let urls_file = work.path.join("urls.json");
    let mut child = spawn(&urls_file)?;
    wait_ready(&urls_file, &mut child)?;
    let urls: Value = serde_json::from_str(&std::fs::read_to_string(&urls_file)?)?;
    let control = urls["control"].as_str().ok_or("no control URL")?.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let claims = json!({"claims": [{"id": "refund-4812", "action": "payments.refund", "state": "failed"}]});
    // Whatever happens, the serve goes: a process left running would hold the output open.
    let measured = round_trips(&runtime, &control, &claims);
    stop(&mut child)?;
    let (trips_ms, resets_ms) = measured?;
    let (trip_ms, trip_spread) = summary(&trips_ms);
    let (reset_ms, reset_spread) = summary(&resets_ms);
    println!("{BENCH}: scenario + check {trip_ms:.2} ms, reset {reset_ms:.2} ms (medians of {ROUND_TRIPS})");
    records.push(record(
        BENCH,
        "one scenario plus check round trip",
        trip_ms,
        "ms",
        Some(trip_spread),
        &format!(
            "On one running release serve, POST /__twice/scenario {{\"name\": \"{SCENARIO}\"}} (every fake reset, \
             the scenario's contract, seed and fault armed) then POST /__twice/check with one claim (the refund failed, \
             while the scenario expects it confirmed: a violation), each on a new loopback connection; median of {ROUND_TRIPS} \
             after {WARMUP}. Spread is (max - min) / median."
        ),
    ));
    records.push(record(
        BENCH,
        "reset round trip",
        reset_ms,
        "ms",
        Some(reset_spread),
        &format!(
            "POST /__twice/reset on the same serve (every fake reset, the scenario forgotten); median of \
             {ROUND_TRIPS}. 1-minute load average {load_before} before, {} after.",
            load_average()
        ),
    ));
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}

/// Scenario-and-check round trips and resets, in milliseconds, after the warm-up.
fn round_trips(
    runtime: &tokio::runtime::Runtime,
    control: &str,
    claims: &Value,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut trips_ms, mut resets_ms) = (Vec::new(), Vec::new());
    for round in 0..WARMUP + ROUND_TRIPS {
        let started = Instant::now();
        let set = runtime.block_on(post(control, "/__twice/scenario", &json!({"name": SCENARIO})))?;
        let verdict = runtime.block_on(post(control, "/__twice/check", claims))?;
        let trip_ms = started.elapsed().as_secs_f64() * 1000.0;
        // Nothing happened, so the claim breaks the scenario's expectation: a verdict all
        // the same, which is what is timed.
        if set["name"] != SCENARIO || verdict["exit_code"] != 1 {
            return Err(format!("unexpected answers: {set} / {verdict}").into());
        }
        let started = Instant::now();
        runtime.block_on(post(control, "/__twice/reset", &Value::Null))?;
        let reset_ms = started.elapsed().as_secs_f64() * 1000.0;
        if round >= WARMUP {
            trips_ms.push(trip_ms);
            resets_ms.push(reset_ms);
        }
    }
    Ok((trips_ms, resets_ms))
}

fn spawn(urls_file: &Path) -> Result<std::process::Child> {
    let _ = std::fs::remove_file(urls_file);
    Ok(Command::new(env!("CARGO_BIN_EXE_twice"))
        .args(["serve", "--urls-file"])
        .arg(urls_file)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?)
}

/// Milliseconds from spawning serve to its URLs file; then stops it.
fn start_up(urls_file: &Path) -> Result<f64> {
    let started = Instant::now();
    let mut child = spawn(urls_file)?;
    wait_ready(urls_file, &mut child)?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    stop(&mut child)?;
    Ok(ms)
}

/// Until serve has written its URLs file (it renames a whole file into place).
fn wait_ready(urls_file: &Path, child: &mut std::process::Child) -> Result<()> {
    let started = Instant::now();
    while !urls_file.exists() {
        if started.elapsed() > Duration::from_millis(WAIT_MS_MAX) || child.try_wait()?.is_some() {
            let _ = child.kill();
            return Err("twice serve did not get ready".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

fn stop(child: &mut std::process::Child) -> Result<()> {
    // SIGTERM, the way a fixture ends serve; bounded, then SIGKILL.
    let pid = i32::try_from(child.id())?;
    // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            return Err("twice serve did not stop on SIGTERM".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

async fn post(control: &str, path: &str, body: &Value) -> Result<Value> {
    let body = if body.is_null() { vec![] } else { serde_json::to_vec(body)? };
    let request = HttpRequest {
        method: "POST",
        url: format!("{control}{path}"),
        headers: vec![("content-type".into(), "application/json".into())],
        body,
        timeout_ms: WAIT_MS_MAX,
    };
    let answer = HttpTransport.send(request).await.map_err(|e| format!("{path}: {e}"))?;
    if answer.status != 200 {
        return Err(format!("{path}: {} {}", answer.status, String::from_utf8_lossy(&answer.body)).into());
    }
    Ok(serde_json::from_slice(&answer.body)?)
}
