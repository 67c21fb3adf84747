//! Drives generated and mutated requests at the fakes over real HTTP on loopback and checks
//! what comes back: no panic, no 5xx that no fault rule explains, no hang, memory flat.
//!
//! Each service's requests run in phases. Before each phase the fake is reset through its
//! control API (`POST /__twice/reset`) and seeded again; odd phases also arm fault rules that
//! fire with small probabilities. In a clean phase every answer is the fake's own: a 5xx, or a
//! connection closed on a well-formed request, is a failure. In a faulty phase the fake's
//! journal says which requests a rule hit: a journal entry answered 5xx without a fault and
//! not replaying a saved fault is a failure. Control-API requests never pass the fault
//! engine, so any 5xx or lost answer to one is a failure in every phase.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use fake_services::{Fakes, Server};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use vocabulary::TokioClock;

use super::traffic::{self, Pool, WireRequest};

/// The longest a request may wait for its whole answer: the armed faults hold answers for
/// milliseconds, so anything near this is a hang.
pub const ANSWER_MS_MAX: u64 = 10_000;
/// How long a mutated request waits for its answer before its connection's write side closes.
const MUTATED_WAIT_MS: u64 = 10;
/// Largest answer head read before giving up on it.
const HEAD_BYTES_MAX: usize = 64 * 1024;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub requests_per_service: u64,
    pub seed: u64,
    pub services: Vec<&'static str>,
    pub concurrency: usize,
    /// Phases per service: resets between them keep ledgers and journals bounded.
    pub phases: u64,
    /// Replay one request (with its phase's setup) and print it and its answer.
    pub only: Option<u64>,
}

impl Config {
    pub fn new(requests_per_service: u64, seed: u64) -> Config {
        Config {
            requests_per_service,
            seed,
            services: traffic::SERVICES.to_vec(),
            concurrency: 16,
            phases: (requests_per_service / 50_000).clamp(4, 40),
            only: None,
        }
    }
}

/// One problem, with what reproduces it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub service: &'static str,
    pub phase: u64,
    /// The request's index (with the seed, it reproduces the request), when one is known.
    pub index: Option<u64>,
    pub what: String,
    pub request: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct ServiceReport {
    pub service: &'static str,
    pub requests: u64,
    pub mutated: u64,
    pub elapsed_ms: u64,
    /// Status code, or how the connection ended without one.
    pub statuses: BTreeMap<String, u64>,
    /// 5xx answers a fault rule explains (the journal says so).
    pub injected_5xx: u64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub services: Vec<ServiceReport>,
    /// Resident set size after each phase, labelled `service/phase`.
    pub rss_kib: Vec<(String, u64)>,
    pub panics: u64,
    pub unexplained_5xx: u64,
    pub failures: Vec<Failure>,
    pub seed: u64,
}

impl Report {
    /// The RSS after the warm-up (the first phase), in the middle and at the end.
    pub fn rss_samples(&self) -> Option<(u64, u64, u64)> {
        let first = self.rss_kib.first()?.1;
        let middle = self.rss_kib[self.rss_kib.len() / 2].1;
        let last = self.rss_kib.last()?.1;
        Some((first, middle, last))
    }

    /// Memory is flat when the second half grew by at most a quarter of the middle, or 32 MiB
    /// (allocator slack and the last phase's journal): a leak grows with the requests.
    pub fn memory_flat(&self) -> bool {
        match self.rss_samples() {
            Some((_, middle, last)) => last <= middle + (middle / 4).max(32 * 1024),
            None => true,
        }
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.panics == 0 && self.unexplained_5xx == 0 && self.memory_flat()
    }

    pub fn print(&self) {
        println!("fuzz-http: seed {}", self.seed);
        for s in &self.services {
            let rate = (s.requests * 1000).checked_div(s.elapsed_ms).unwrap_or(0);
            println!(
                "  {:<10} {:>9} requests ({} mutated) in {:.1} s: {} requests/s; 5xx injected by rules: {}",
                s.service,
                s.requests,
                s.mutated,
                s.elapsed_ms as f64 / 1000.0,
                rate,
                s.injected_5xx
            );
            let histogram: Vec<String> = s.statuses.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            println!("             statuses: {}", histogram.join(", "));
        }
        if let Some((first, middle, last)) = self.rss_samples() {
            println!(
                "  RSS: {} MiB after the warm-up, {} MiB in the middle, {} MiB at the end ({} samples){}",
                first / 1024,
                middle / 1024,
                last / 1024,
                self.rss_kib.len(),
                if self.memory_flat() { "" } else { ": NOT FLAT" }
            );
        }
        println!(
            "  panics: {}; unexplained 5xx: {}; failures: {}",
            self.panics,
            self.unexplained_5xx,
            self.failures.len()
        );
        for f in self.failures.iter().take(20) {
            let index = f.index.map(|i| format!(" index {i}")).unwrap_or_default();
            println!("  FAILURE {} phase {}{index}: {}", f.service, f.phase, f.what);
            if !f.request.is_empty() {
                let shown = &f.request[..f.request.len().min(600)];
                println!("    request: {}", String::from_utf8_lossy(shown).escape_debug());
            }
            if let Some(i) = f.index {
                println!(
                    "    reproduce: cargo xtask fuzz-http --seed {} --service {} --only {i}",
                    self.seed, f.service
                );
            }
        }
    }
}

static PANICS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();
/// The runtime's threads carry this name, so the panic hook counts only the fakes' (and the
/// driver's) panics, not those of other tests sharing the process.
const THREAD_NAME: &str = "fuzz-http";

fn install_panic_counter() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name().is_some_and(|n| n.starts_with(THREAD_NAME)) {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// Runs the fuzz on a runtime of its own (two workers, as the fakes run under `twice`).
pub fn run(config: &Config) -> Result<Report, String> {
    install_panic_counter();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let panics_before = PANICS.load(Ordering::SeqCst);
    let mut report = runtime.block_on(drive(config))?;
    report.panics = PANICS.load(Ordering::SeqCst) - panics_before;
    Ok(report)
}

async fn drive(config: &Config) -> Result<Report, String> {
    let pool = Arc::new(Pool::new()?);
    let clock = Arc::new(TokioClock::starting_at(1_767_225_600_000));
    let fakes = Fakes::new(clock, config.seed);
    let mut report = Report { seed: config.seed, ..Report::default() };
    for &service in &config.services {
        let fake = fakes.get(service).ok_or_else(|| format!("no fake named {service}"))?;
        let server = Server::start(fake, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(|e| format!("{service}: bind: {e}"))?;
        let addr = server.addr();
        let phases = config.phases.max(1);
        let per_phase = config.requests_per_service.div_ceil(phases).max(1);
        let mut service_report = ServiceReport { service, ..ServiceReport::default() };
        let started = Instant::now();
        for phase in 0..phases {
            let start = phase * per_phase;
            let end = ((phase + 1) * per_phase).min(config.requests_per_service);
            if start >= end {
                break;
            }
            if let Some(only) = config.only {
                if !(start..end).contains(&only) {
                    continue;
                }
                setup(addr, service, phase).await?;
                let req = traffic::request(config.seed, service, only, &pool, phase % 2 == 1);
                println!(
                    "request {only} (phase {phase}, {}):",
                    if phase % 2 == 1 { "faults armed" } else { "clean" }
                );
                println!("{}", String::from_utf8_lossy(&req.bytes).escape_debug());
                let mut conn = None;
                println!("answer: {:?}", exchange(&mut conn, addr, &req).await);
                return Ok(report);
            }
            setup(addr, service, phase).await?;
            let outcome = run_phase(config, service, addr, phase, start..end, &pool).await;
            let injected_5xx = check_journal(addr, service, phase, &outcome, &mut report).await?;
            service_report.requests += end - start;
            service_report.mutated += outcome.mutated;
            service_report.injected_5xx += injected_5xx;
            for (k, v) in outcome.statuses {
                *service_report.statuses.entry(k).or_default() += v;
            }
            report.failures.extend(outcome.failures);
            report.rss_kib.push((format!("{service}/{phase}"), rss_kib()));
        }
        service_report.elapsed_ms = started.elapsed().as_millis() as u64;
        // Progress on stderr: a long run says where it is.
        eprintln!(
            "fuzz-http: {service} done: {} requests in {} ms, {} failures so far, RSS {} KiB",
            service_report.requests,
            service_report.elapsed_ms,
            report.failures.len(),
            rss_kib()
        );
        // Leave nothing behind for the next service's memory samples.
        control(addr, "POST", "/__twice/reset", Value::Null).await?;
        report.services.push(service_report);
        server.stop().await;
    }
    Ok(report)
}

/// Resets the fake, seeds what its requests refer to and, in odd phases, arms fault rules.
async fn setup(addr: SocketAddr, service: &str, phase: u64) -> Result<(), String> {
    control(addr, "POST", "/__twice/reset", Value::Null).await?;
    let seed = match service {
        "payments" => json!({"payment_intents": [
            {"id": "pi_1", "amount": 5_000_000, "currency": "usd"},
            {"id": "pi_2", "amount": 5_000, "currency": "usd"}]}),
        "files" => json!({"buckets": ["fuzz", "audit"],
            "objects": [{"bucket": "fuzz", "key": "obj-1", "body": "0123456789".repeat(30)}],
            "read_only_buckets": ["audit"]}),
        "chain" => json!({"chain_id": 31337, "accounts": [
            {"address": fake_services::chain::address_of(traffic::CHAIN_KEY)?, "balance": "1000000000000000000000"}]}),
        _ => Value::Null,
    };
    if !seed.is_null() {
        control(addr, "POST", "/__twice/seed", seed).await?;
    }
    if phase % 2 == 1 {
        control(addr, "POST", "/__twice/rules", Value::Array(rules(service))).await?;
    }
    Ok(())
}

/// The rules of a faulty phase: every fault the service takes, each on a few percent of the
/// requests, with holds of milliseconds.
fn rules(service: &str) -> Vec<Value> {
    let mut rules = vec![
        json!({"fault": {"kind": "reject", "status": 503}, "probability": 0.01}),
        json!({"fault": {"kind": "reject", "status": 429}, "probability": 0.01}),
        json!({"fault": {"kind": "reject", "status": 400}, "probability": 0.01}),
        json!({"fault": "error_after_commit", "probability": 0.01}),
        json!({"fault": {"kind": "error_after_commit", "status": 502}, "probability": 0.005}),
        json!({"fault": "drop_after_commit", "probability": 0.01}),
        json!({"fault": "refuse", "probability": 0.005}),
        json!({"fault": {"kind": "timeout_after_commit", "hold_ms": 3}, "probability": 0.005}),
        json!({"fault": {"kind": "commit_after_timeout", "delay_ms": 3}, "probability": 0.005}),
        json!({"fault": "silent_noop", "probability": 0.01}),
        json!({"fault": {"kind": "stale_read", "lag_ms": 1_000}, "probability": 0.05}),
        json!({"fault": {"kind": "forget_keys", "older_than_ms": 0}, "probability": 0.02}),
        json!({"fault": "ignore_keys", "probability": 0.02}),
        json!({"fault": {"kind": "latency", "before_ms": 1, "after_ms": 1}, "probability": 0.01}),
    ];
    if service == "messages" {
        rules.push(json!({"fault": {"kind": "deliver_late", "delay_ms": 5}, "probability": 0.02}));
        rules.push(json!({"fault": {"kind": "redeliver", "after_ms": 1}, "probability": 0.02}));
    }
    rules
}

/// A control request whose answer must be a 2xx.
async fn control(addr: SocketAddr, method: &str, path: &str, body: Value) -> Result<Answer, String> {
    let body = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    let mut bytes =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n", body.len())
            .into_bytes();
    bytes.extend_from_slice(&body);
    let req = WireRequest { bytes, head: false, mutated: false, control: true };
    match exchange(&mut None, addr, &req).await {
        Outcome::Answer(a) if (200..300).contains(&a.status) => Ok(a),
        other => Err(format!("{method} {path}: {other:?}")),
    }
}

#[derive(Default)]
struct PhaseOutcome {
    statuses: BTreeMap<String, u64>,
    failures: Vec<Failure>,
    mutated: u64,
    /// 5xx answers from the fake (not the HTTP parser's) to journaled requests.
    observed_5xx: u64,
}

async fn run_phase(
    config: &Config,
    service: &'static str,
    addr: SocketAddr,
    phase: u64,
    range: std::ops::Range<u64>,
    pool: &Arc<Pool>,
) -> PhaseOutcome {
    let next = Arc::new(AtomicU64::new(range.start));
    let shared = Arc::new(Mutex::new(PhaseOutcome::default()));
    let faulty = phase % 2 == 1;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..config.concurrency.max(1) {
        let next = Arc::clone(&next);
        let shared = Arc::clone(&shared);
        let pool = Arc::clone(pool);
        let (seed, end) = (config.seed, range.end);
        workers.spawn(async move {
            let mut conn = None;
            let mut mine = PhaseOutcome::default();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= end {
                    break;
                }
                let req = traffic::request(seed, service, index, &pool, faulty);
                if req.mutated {
                    mine.mutated += 1;
                }
                let outcome = exchange(&mut conn, addr, &req).await;
                judge(service, phase, index, faulty, &req, &outcome, &mut mine);
            }
            let mut all = shared.lock().unwrap_or_else(|p| p.into_inner());
            for (k, v) in mine.statuses {
                *all.statuses.entry(k).or_default() += v;
            }
            all.failures.extend(mine.failures);
            all.mutated += mine.mutated;
            all.observed_5xx += mine.observed_5xx;
        });
    }
    while let Some(joined) = workers.join_next().await {
        if let Err(e) = joined {
            let mut all = shared.lock().unwrap_or_else(|p| p.into_inner());
            all.failures.push(Failure {
                service,
                phase,
                index: None,
                what: format!("a driver task failed: {e}"),
                request: Vec::new(),
            });
        }
    }
    let mut all = shared.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::take(&mut *all)
}

/// Sorts one answer into the histogram and decides whether it is a failure.
fn judge(
    service: &'static str,
    phase: u64,
    index: u64,
    faulty: bool,
    req: &WireRequest,
    outcome: &Outcome,
    mine: &mut PhaseOutcome,
) {
    let fail =
        |what: String| Failure { service, phase, index: Some(index), what, request: req.bytes.clone() };
    match outcome {
        Outcome::Answer(a) => {
            *mine.statuses.entry(a.status.to_string()).or_default() += 1;
            if a.status < 500 {
                return;
            }
            // The HTTP parser refuses a mangled request line (505 for a bad version) before
            // any fake sees it: no body, no content type.
            if req.mutated && a.refused_by_parser() {
                return;
            }
            if req.control {
                mine.failures.push(fail(format!("control API answered {}: {}", a.status, a.body_text())));
            } else if !faulty {
                mine.failures.push(fail(format!("{} with no rule armed: {}", a.status, a.body_text())));
            } else {
                mine.observed_5xx += 1;
            }
        }
        Outcome::NoAnswer(how) => {
            *mine.statuses.entry(format!("no answer ({how})")).or_default() += 1;
            if *how == "hang" {
                mine.failures.push(fail(format!("no complete answer within {ANSWER_MS_MAX} ms")));
            } else if !req.mutated && (req.control || !faulty) {
                mine.failures.push(fail(format!(
                    "the connection ended without an answer ({how}), no drop rule armed"
                )));
            }
        }
    }
}

/// Reads the journal after a phase: every 5xx the fake answered must carry a fault that fired
/// on it, or be the replay of a saved one; and no more 5xx may have come back than the journal
/// holds (a 5xx from outside the pipeline would not be journaled). Returns the explained ones.
async fn check_journal(
    addr: SocketAddr,
    service: &'static str,
    phase: u64,
    outcome: &PhaseOutcome,
    report: &mut Report,
) -> Result<u64, String> {
    let answer = control(addr, "GET", "/__twice/journal", Value::Null).await?;
    let journal: Value =
        serde_json::from_slice(&answer.body).map_err(|e| format!("{service}: journal: {e}"))?;
    let entries = journal["entries"].as_array().cloned().unwrap_or_default();
    if journal["dropped"].as_u64().unwrap_or(0) > 0 {
        return Err(format!("{service}: the journal dropped entries: make the phases shorter"));
    }
    let mut journal_5xx = 0;
    for e in &entries {
        let Some(status) = e["status"].as_u64() else { continue };
        if status < 500 {
            continue;
        }
        let faulted = e["faults"].as_array().is_some_and(|f| !f.is_empty());
        let replayed = e["replayed"].as_bool().unwrap_or(false);
        if faulted || replayed {
            journal_5xx += 1;
        } else {
            report.unexplained_5xx += 1;
            report.failures.push(Failure {
                service,
                phase,
                index: None,
                what: format!("the journal holds a {status} no fault explains: {e}"),
                request: Vec::new(),
            });
        }
    }
    if outcome.observed_5xx > journal_5xx {
        report.unexplained_5xx += outcome.observed_5xx - journal_5xx;
        report.failures.push(Failure {
            service,
            phase,
            index: None,
            what: format!(
                "{} 5xx answers, but the journal explains only {journal_5xx}",
                outcome.observed_5xx
            ),
            request: Vec::new(),
        });
    }
    Ok(journal_5xx)
}

/// The resident set size of this process, from `/proc/self/status` (0 where there is none).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// An answer as read off the wire.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// hyper's own refusal of an unparsable request: no content type, no body.
    fn refused_by_parser(&self) -> bool {
        self.header("content-type").is_none() && self.body.is_empty()
    }

    fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned()
    }
}

#[derive(Debug)]
pub enum Outcome {
    Answer(Answer),
    /// `closed`, `reset` or `hang`.
    NoAnswer(&'static str),
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// Sends one request and reads its answer. Well-formed requests reuse a kept-alive
/// connection; a mutated one goes alone on a fresh connection whose write side is then
/// closed, so that a request cut short ends instead of waiting for bytes that never come.
async fn exchange(conn: &mut Option<Conn>, addr: SocketAddr, req: &WireRequest) -> Outcome {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ANSWER_MS_MAX);
    match tokio::time::timeout_at(deadline, exchange_inner(conn, addr, req)).await {
        Ok(outcome) => outcome,
        Err(_) => {
            *conn = None;
            Outcome::NoAnswer("hang")
        }
    }
}

async fn exchange_inner(conn: &mut Option<Conn>, addr: SocketAddr, req: &WireRequest) -> Outcome {
    if req.mutated {
        *conn = None;
    }
    let reused = conn.is_some();
    let mut c = match conn.take() {
        Some(c) => c,
        None => match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                Conn { stream, buf: Vec::new() }
            }
            Err(_) => return Outcome::NoAnswer("connect failed"),
        },
    };
    if c.stream.write_all(&req.bytes).await.is_err() {
        if reused {
            // The server closed the kept-alive connection in between: send on a fresh one.
            return Box::pin(exchange_inner(conn, addr, req)).await;
        }
        return Outcome::NoAnswer("reset");
    }
    if req.mutated {
        // Most mutated requests are complete and answered at once; one cut short (or with a
        // Content-Length grown past its body) waits for bytes that never come, so after a
        // moment the write side closes and the server sees the end of the request.
        let waited = Duration::from_millis(MUTATED_WAIT_MS);
        if let Ok(read) = tokio::time::timeout(waited, read_answer(&mut c, req.head)).await {
            return match read {
                Ok((answer, _)) => Outcome::Answer(answer),
                Err(how) => Outcome::NoAnswer(how),
            };
        }
        let _ = c.stream.shutdown().await;
    }
    match read_answer(&mut c, req.head).await {
        Ok((answer, keep)) => {
            if keep && !req.mutated {
                *conn = Some(c);
            }
            Outcome::Answer(answer)
        }
        Err(how) => Outcome::NoAnswer(how),
    }
}

/// Reads one answer (skipping 1xx); also says whether the connection may carry another.
async fn read_answer(c: &mut Conn, head_only: bool) -> Result<(Answer, bool), &'static str> {
    loop {
        let head_end = loop {
            if let Some(at) = c.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            if c.buf.len() > HEAD_BYTES_MAX {
                return Err("head too large");
            }
            fill(c).await?;
        };
        let head = String::from_utf8_lossy(&c.buf[..head_end]).into_owned();
        c.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or("bad status line")?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':').map(|(n, v)| (n.trim().to_string(), v.trim().to_string())))
            .collect();
        if (100..200).contains(&status) {
            continue;
        }
        let get =
            |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        let close = get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let chunked = get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let length: Option<usize> = get("content-length").and_then(|v| v.parse().ok());
        let body = if head_only || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            read_chunked(c).await?
        } else if let Some(n) = length {
            while c.buf.len() < n {
                fill(c).await?;
            }
            c.buf.drain(..n).collect()
        } else {
            while fill(c).await.is_ok() {}
            std::mem::take(&mut c.buf)
        };
        // After a refusal of the body (413) or of the request itself, the server may close.
        let keep = !close && !chunked && length.is_some() && status != 413 && status != 408 && status != 400;
        return Ok((Answer { status, headers, body }, keep));
    }
}

async fn read_chunked(c: &mut Conn) -> Result<Vec<u8>, &'static str> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(at) = c.buf.windows(2).position(|w| w == b"\r\n") {
                break at;
            }
            fill(c).await?;
        };
        let size_text = String::from_utf8_lossy(&c.buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "bad chunk size")?;
        c.buf.drain(..line_end + 2);
        while c.buf.len() < size + 2 {
            fill(c).await?;
        }
        body.extend(c.buf.drain(..size));
        c.buf.drain(..2);
        if size == 0 {
            return Ok(body);
        }
    }
}

async fn fill(c: &mut Conn) -> Result<(), &'static str> {
    let mut chunk = [0u8; 16 * 1024];
    match c.stream.read(&mut chunk).await {
        Ok(0) => Err("closed"),
        Ok(n) => {
            c.buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Err("reset"),
        Err(_) => Err("read error"),
    }
}
