//! Intents per second through the reference executor, next to the raw rate of single-row
//! SQLite commits on the same disk.
//!
//! What is measured, for each [`Durability`] (`Full`, `Normal`):
//!
//! - **raw commits**: one `INSERT` of one small row per transaction (autocommit), in a
//!   SQLite file in WAL mode with `synchronous=FULL` or `NORMAL`, for [`RAW_WINDOW`] per round,
//!   half before and half after the round's intent runs; the floor cost of anything that must
//!   be durable before it answers;
//! - **propose N, then drain**: [`INTENTS`] refunds proposed one by one with
//!   [`Executor::propose`] (each one its own durable commit, as `propose_ok` promises), then
//!   [`Executor::drain`] until every one is confirmed by the payments fake over loopback HTTP;
//! - **propose K, drain, repeat**: the same intents in chunks of [`CHUNK`], each chunk
//!   drained before the next is proposed (an agent that acts a few steps at a time);
//! - **propose a batch of B, drain, repeat**: the same intents in batches of [`BATCHES`] (64,
//!   then 8), each batch one [`Executor::propose_batch`] call (one durable commit for the
//!   batch, what the stdio server does with proposals that arrive together), then drained
//!   before the next.
//!
//! Targets, as ratios of the raw commit rate over the intent rate: within [`TARGET_RATIO`]
//! for the one-by-one modes; at least twice the raw rate (ratio at most 0.5) with batches of
//! 64, and at least the raw rate (ratio at most 1.0) with batches of 8.
//!
//! The executor runs with the library's default [`Limits`], the system clock, UUID v7 keys and
//! real sockets on reused keep-alive connections ([`World::real`]); the payments fake runs in the same process on a two-worker
//! tokio runtime, with no fault rules. Every run starts from a fresh state directory and a
//! reset fake, and ends with a check that the ledger holds exactly one refund per intent, each
//! attributed to its intent and carrying its key, and that the executor calls every intent
//! `confirmed` after one attempt.
//!
//! All files live under `target/bench-tmp` (the disk the project builds on; `/tmp` may be a
//! tmpfs, which would make the fsync-bound figures meaningless). The [`ROUNDS`] repetitions
//! are interleaved (raw, batch, chunked, batches, raw; full then normal; repeat) so that drift on the
//! machine hits every figure alike, and each ratio is the median of the per-round ratios.
//!
//! Output: readable lines, then one `BENCH {json}` line per figure, which `cargo xtask bench`
//! collects into `docs/benchmarks.md` (the record format is described in `xtask/src/main.rs`).
//! Run it alone with `cargo bench -p executor --bench intents`.
//!
//! For profiling and quick A/B runs, `INTENTS_ONLY` names the intent modes to run (`all`,
//! `chunked`, or a batch size such as `8`), `INTENTS_DURABILITY` one durability (`full` or
//! `normal`); either prints the figures and no `BENCH` records.

#[path = "common/payments_config.rs"]
mod payments_config;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_support::summary;
use executor::{Durability, Executor, Proposal, World};
use fake_services::payments::Payments;
use fake_services::{Fake, Fakes, Server};
use rusqlite::Connection;
use serde_json::{Value, json};
use vocabulary::State;
use vocabulary::TokioClock;
use vocabulary::protocol::Limits;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "executor/intents";
const WORKERS: usize = 2;
const ROUNDS: usize = 7;
/// Intents per measured run.
const INTENTS: usize = 2_000;
/// Intents per chunk in the interleaved mode.
const CHUNK: usize = 10;
/// Intents in the unmeasured warm-up run of each mode.
const WARMUP_INTENTS: usize = 200;
/// How long the raw commits run per round and durability (in two halves).
const RAW_WINDOW: Duration = Duration::from_millis(800);
const RAW_WARMUP: Duration = Duration::from_millis(200);
/// A raw row: about the size of an intent's canonical payload.
const RAW_PAYLOAD: &str = r#"{"amount":1,"payment_intent":"pi_bench","twice_intent":"bench-0000"}"#;
/// Intents proposed one by one should flow within this factor of the raw commit rate.
const TARGET_RATIO: f64 = 2.0;
/// Batch sizes of the `propose_batch` modes, each with its target: the most raw commit rate
/// over intent rate (0.5: twice the raw rate).
const BATCHES: [(usize, f64); 2] = [(64, 0.5), (8, 1.0)];
/// Longest drain; far above what any run needs, so a stuck run fails instead of hanging.
const DRAIN_MS: u64 = 120_000;
const SEED: u64 = 7;

const INTENT: &str = "pi_bench";
/// Enough to refund 1 cent per intent for as long as any run lasts.
const INTENT_AMOUNT: u64 = 1 << 60;

fn main() -> Result<()> {
    let workers = std::env::var("INTENTS_WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(WORKERS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()?;
    runtime.block_on(run())
}

/// What one series of measurements is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Raw,
    /// Propose every intent, then drain once.
    Batch,
    /// Propose [`CHUNK`], drain, repeat.
    Chunked,
    /// `propose_batch` of this many, drain, repeat.
    Batches(usize),
}

impl Mode {
    /// The intent modes, in the order each round runs them (those `INTENTS_ONLY` names, if set).
    fn intents() -> Vec<Mode> {
        let mut modes = vec![Mode::Batch, Mode::Chunked];
        modes.extend(BATCHES.iter().map(|(size, _)| Mode::Batches(*size)));
        match std::env::var("INTENTS_ONLY") {
            Ok(only) => modes.into_iter().filter(|m| only.split(',').any(|o| m.short_name() == o)).collect(),
            Err(_) => modes,
        }
    }

    /// The name `INTENTS_ONLY` knows the mode by.
    fn short_name(self) -> String {
        match self {
            Mode::Raw => "raw".into(),
            Mode::Batch => "all".into(),
            Mode::Chunked => "chunked".into(),
            Mode::Batches(size) => size.to_string(),
        }
    }

    /// Intents proposed before each drain, and whether in one `propose_batch` call.
    fn chunk(self) -> (usize, bool) {
        match self {
            Mode::Raw | Mode::Batch => (INTENTS, false),
            Mode::Chunked => (CHUNK, false),
            Mode::Batches(size) => (size, true),
        }
    }

    /// The most raw commit rate over intent rate that meets the target.
    fn target(self) -> f64 {
        match self {
            Mode::Batches(size) => {
                BATCHES.iter().find(|(s, _)| *s == size).map_or(TARGET_RATIO, |(_, target)| *target)
            }
            _ => TARGET_RATIO,
        }
    }

    /// The target in words.
    fn target_text(self) -> String {
        let target = self.target();
        if target < 1.0 {
            format!("at least {:.0}x the raw commit rate (ratio at most {target})", 1.0 / target)
        } else if target == 1.0 {
            "at least the raw commit rate (ratio at most 1.0)".to_string()
        } else {
            format!("within {target}x of the raw commit rate")
        }
    }
}

/// The figures of one mode and durability, one entry per round.
struct Series {
    mode: Mode,
    durability: Durability,
    rates: Vec<f64>,
    /// Intent modes: the rate of the propose calls alone, and the time spent draining.
    propose_rates: Vec<f64>,
    drain_ms: Vec<f64>,
    /// Raw mode: commits made per window.
    commits: Vec<u64>,
}

impl Series {
    fn new(mode: Mode, durability: Durability) -> Series {
        Series {
            mode,
            durability,
            rates: Vec::new(),
            propose_rates: Vec::new(),
            drain_ms: Vec::new(),
            commits: Vec::new(),
        }
    }

    fn name(&self) -> String {
        let sync = sync_name(self.durability);
        match self.mode {
            Mode::Raw => format!("raw SQLite commits, synchronous={sync}"),
            Mode::Batch => format!("intents, propose {INTENTS} then drain, {sync}"),
            Mode::Chunked => format!("intents, propose {CHUNK} then drain (repeated), {sync}"),
            Mode::Batches(size) => {
                format!("intents, propose a batch of {size} then drain (repeated), {sync}")
            }
        }
    }

    fn unit(&self) -> &'static str {
        if self.mode == Mode::Raw { "commits/s" } else { "intents/s" }
    }
}

fn sync_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

async fn run() -> Result<()> {
    let work = WorkDir::create()?;
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    let payments = fakes.payments.clone();
    let server = Server::start(Fake::Payments(fakes.payments), "127.0.0.1:0".parse()?).await?;
    let url = server.url();

    println!(
        "{BENCH}: {INTENTS} refunds per run against the payments fake on loopback ({WORKERS} tokio workers), \
         {ROUNDS} interleaved rounds; raw commits for {} ms per round; files in {}",
        RAW_WINDOW.as_millis(),
        work.path.display()
    );

    let durabilities: Vec<Durability> = match std::env::var("INTENTS_DURABILITY").as_deref() {
        Ok("full") => vec![Durability::Full],
        Ok("normal") => vec![Durability::Normal],
        _ => vec![Durability::Full, Durability::Normal],
    };
    let partial = std::env::var_os("INTENTS_ONLY").is_some() || durabilities.len() == 1;
    let mut modes = vec![Mode::Raw];
    modes.extend(Mode::intents());
    let mut series: Vec<Series> =
        durabilities.iter().flat_map(|d| modes.iter().map(|m| Series::new(*m, *d))).collect();

    // Warm-up: every code path once, caches and the allocator primed; nothing recorded.
    for s in &series {
        let dir = work.fresh("warmup")?;
        match s.mode {
            Mode::Raw => {
                raw_commits(&dir, s.durability, RAW_WARMUP)?;
            }
            mode => {
                let (chunk, batched) = mode.chunk();
                let chunk = chunk.min(WARMUP_INTENTS);
                intents_run(&url, &payments, &dir, s.durability, WARMUP_INTENTS, chunk, batched).await?;
            }
        }
    }

    for round in 1..=ROUNDS {
        for &d in &durabilities {
            // The raw window brackets the intent runs, half before and half after, so that
            // drift within the round weighs on both sides of the ratio alike.
            let before = raw_commits(&work.fresh(&format!("round{round}-raw"))?, d, RAW_WINDOW / 2)?;
            for mode in Mode::intents() {
                let dir = work.fresh(&format!("round{round}"))?;
                let (chunk, batched) = mode.chunk();
                let r = intents_run(&url, &payments, &dir, d, INTENTS, chunk, batched).await?;
                std::fs::remove_dir_all(&dir)?;
                let s = find(&mut series, mode, d);
                s.rates.push(r.rate);
                s.propose_rates.push(r.propose_rate);
                s.drain_ms.push(r.drain_ms);
                println!("  round {round}/{ROUNDS}  {:<58} {:>9.0} {}", s.name(), r.rate, s.unit());
            }
            let after = raw_commits(&work.fresh(&format!("round{round}-raw"))?, d, RAW_WINDOW / 2)?;
            let s = find(&mut series, Mode::Raw, d);
            let commits = before.0 + after.0;
            let rate = commits as f64 / (before.1 + after.1).as_secs_f64();
            s.commits.push(commits);
            s.rates.push(rate);
            println!("  round {round}/{ROUNDS}  {:<58} {rate:>9.0} {}", s.name(), s.unit());
        }
    }

    let mut records = Vec::new();
    println!();
    for &d in &durabilities {
        let of = |mode: Mode| {
            series.iter().find(|s| s.mode == mode && s.durability == d).expect("every series exists")
        };
        let raw = of(Mode::Raw);
        let (raw_median, raw_spread) = summary(&raw.rates);
        println!("{:<60} median {raw_median:>9.0} commits/s, spread {raw_spread:.1} %", raw.name());
        records.push(record(
            &raw.name(),
            raw_median,
            raw.unit(),
            raw_spread,
            &format!(
                "One INSERT of a {}-byte row per transaction (autocommit), rusqlite, WAL, synchronous={}, \
                 {} ms per round in two halves that bracket the round's intent runs ({} to {} commits), a \
                 fresh file in target/bench-tmp each time; median of {ROUNDS} rounds.",
                RAW_PAYLOAD.len(),
                sync_name(d),
                RAW_WINDOW.as_millis(),
                raw.commits.iter().min().unwrap_or(&0),
                raw.commits.iter().max().unwrap_or(&0),
            ),
        ));
        for mode in Mode::intents() {
            let s = of(mode);
            let (median, spread) = summary(&s.rates);
            let (propose_rate, _) = summary(&s.propose_rates);
            let (drain_ms, _) = summary(&s.drain_ms);
            println!(
                "{:<60} median {median:>9.0} intents/s, spread {spread:.1} % \
                 (propose calls alone {propose_rate:.0}/s, drain {drain_ms:.0} ms per run)",
                s.name()
            );
            let workload = match mode {
                Mode::Batch => format!(
                    "Executor::propose {INTENTS} refunds one by one (one durable commit each), then one \
                     drain: the engine handles batch_max = {} intents per pass, each pass two commits and \
                     one concurrent burst of HTTP sends (on reused keep-alive connections), so {} passes; \
                     drain goes straight on while passes make progress.",
                    Limits::default().batch_max,
                    INTENTS.div_ceil(Limits::default().batch_max),
                ),
                Mode::Batches(size) => format!(
                    "{} times: Executor::propose_batch of {size} refunds (one durable commit for the batch), \
                     then drain them (one pass: two commits and {size} concurrent sends), so 3 commits for \
                     {size} intents.",
                    INTENTS.div_ceil(size),
                ),
                _ => format!(
                    "{} times: Executor::propose {CHUNK} refunds one by one, then drain them (one pass: two \
                     commits and {CHUNK} concurrent sends), so {} commits for {CHUNK} intents.",
                    INTENTS / CHUNK,
                    CHUNK + 2
                ),
            };
            records.push(record(
                &s.name(),
                median,
                s.unit(),
                spread,
                &format!(
                    "{workload} Median of {ROUNDS} rounds: the propose calls alone ran at {propose_rate:.0}/s \
                     and draining took {drain_ms:.0} ms per run of {INTENTS}. Default Limits, payments fake \
                     on loopback with no faults; every run is checked to end with exactly {INTENTS} refunds \
                     in the ledger, one per intent with its key, and every intent confirmed after 1 attempt."
                ),
            ));
        }
        for mode in Mode::intents() {
            let s = of(mode);
            // Rounds are interleaved, so each round gives a paired ratio.
            let ratios: Vec<f64> =
                raw.rates.iter().zip(&s.rates).map(|(raw, intents)| raw / intents).collect();
            let (median, spread) = summary(&ratios);
            let target = mode.target_text();
            let met = if median <= mode.target() { "met" } else { "NOT met" };
            let label = match mode {
                Mode::Batch => format!("raw / intents, propose {INTENTS} then drain, {}", sync_name(d)),
                Mode::Batches(size) => {
                    format!("raw / intents, propose a batch of {size} then drain, {}", sync_name(d))
                }
                _ => format!("raw / intents, propose {CHUNK} then drain, {}", sync_name(d)),
            };
            println!("{label:<60} median {median:>9.2}x, spread {spread:.1} %  (target: {target}: {met})");
            let why = breakdown(s, raw_median);
            println!("    {why}");
            records.push(record(
                &label,
                median,
                "x",
                spread,
                &format!(
                    "The raw commit rate over the intent rate, median of the {ROUNDS} per-round ratios. \
                     Target: {target}; {met}. {why}"
                ),
            ));
        }
    }
    println!();
    // A partial run is for a quick look: its figures are not the benchmark's.
    for r in records.iter().filter(|_| !partial) {
        println!("BENCH {r}");
    }

    server.stop().await;
    Ok(())
}

/// Where an intent's time goes, from the medians of one series (so the parts need not add up
/// exactly).
fn breakdown(s: &Series, raw_rate: f64) -> String {
    let limits = Limits::default();
    let (rate, _) = summary(&s.rates);
    let (propose_rate, _) = summary(&s.propose_rates);
    let (drain_ms, _) = summary(&s.drain_ms);
    let us = |per_second: f64| 1e6 / per_second;
    let (total, raw, propose) = (us(rate), us(raw_rate), us(propose_rate));
    let drain = drain_ms * 1000.0 / INTENTS as f64;
    let (passes, per_pass) = match s.mode {
        Mode::Batch => (INTENTS.div_ceil(limits.batch_max), limits.batch_max),
        Mode::Batches(size) => (INTENTS.div_ceil(size), size),
        _ => (INTENTS / CHUNK, CHUNK),
    };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let sends = format!(
        "the sends (over reused keep-alive loopback connections, answered by the fake in this same \
         process on the same {cores} cores), the reads of each pass and its two commits ({passes} passes \
         of {per_pass})"
    );
    // Drain pauses only after a pass that changed nothing, which a fault-free run never has.
    let drain_text = format!("{drain:.0} µs: {sends}");
    let target = s.mode.target();
    let propose_text = match s.mode {
        Mode::Batches(size) => format!(
            "Propose: {propose:.0} µs, one commit per batch of {size} ({:.0} µs of raw commit each) plus the \
             executor's own work per record (a lookup by id, the 18-column insert and a history row with \
             their indexes, SHA-256, a UUID, JSON)",
            raw / size as f64
        ),
        _ => format!(
            "Propose: {propose:.0} µs, a raw commit plus {:.0} µs of the executor's own work per record (a \
             lookup by id, the 18-column insert and a history row with their indexes, SHA-256, a UUID, JSON)",
            (propose - raw).max(0.0)
        ),
    };
    format!(
        "Per intent (medians): {total:.0} µs in all, against a budget of {:.0} µs ({target} raw commits \
         of {raw:.0} µs). {propose_text}. Drain: {drain_text}.",
        target * raw,
    )
}

/// A figure of this benchmark, every one with a spread.
fn record(name: &str, value: f64, unit: &str, spread_pct: f64, notes: &str) -> Value {
    bench_support::record(BENCH, name, value, unit, Some(spread_pct), notes)
}

/// Single-row commits for `length` in a new file in `dir`; returns their number and the time
/// they took. Removes `dir`.
fn raw_commits(dir: &Path, durability: Durability, length: Duration) -> Result<(u64, Duration)> {
    let conn = Connection::open(dir.join("raw.sqlite"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", sync_name(durability))?;
    conn.execute_batch("CREATE TABLE rows (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);")?;
    let mut insert = conn.prepare("INSERT INTO rows (payload) VALUES (?1)")?;
    let start = Instant::now();
    let mut commits = 0u64;
    while start.elapsed() < length {
        // Outside an explicit transaction, every statement is a transaction of its own.
        insert.execute([RAW_PAYLOAD])?;
        commits += 1;
    }
    let elapsed = start.elapsed();
    drop(insert);
    let rows: i64 = conn.query_row("SELECT count(*) FROM rows", [], |r| r.get(0))?;
    if rows as u64 != commits {
        return Err(format!("{commits} commits made but {rows} rows in the table").into());
    }
    std::fs::remove_dir_all(dir)?;
    Ok((commits, elapsed))
}

/// The series of `mode` and `durability`.
fn find(series: &mut [Series], mode: Mode, durability: Durability) -> &mut Series {
    series.iter_mut().find(|s| s.mode == mode && s.durability == durability).expect("every series exists")
}

/// What one run of intents measured.
struct IntentsRun {
    /// Intents per second, first propose to last drain.
    rate: f64,
    /// Intents per second over the propose calls only.
    propose_rate: f64,
    drain_ms: f64,
}

/// Proposes `n` refunds in chunks of `chunk` (each chunk one `propose_batch` call when
/// `batched`, else one `propose` per refund), draining after each chunk, against a reset fake
/// and a fresh log in `dir`; checks the ledger and the executor's claims afterwards.
async fn intents_run(
    url: &str,
    payments: &Payments,
    dir: &Path,
    durability: Durability,
    n: usize,
    chunk: usize,
    batched: bool,
) -> Result<IntentsRun> {
    let fake = Fake::Payments(payments.clone());
    fake.reset();
    payments.seed_payment_intent(Some(INTENT), INTENT_AMOUNT, "usd")?;
    let executor =
        Executor::open(payments_config::config(url, "bench"), &dir.join("state"), durability, World::real())?;

    let mut proposing = Duration::ZERO;
    let mut draining = Duration::ZERO;
    let start = Instant::now();
    let mut next = 0;
    while next < n {
        let end = (next + chunk).min(n);
        let t = Instant::now();
        let proposal = |i: usize| Proposal {
            id: format!("bench-{i:04}"),
            action: "payments.refund".into(),
            params: json!({"payment_intent": INTENT, "amount": 1}),
            replaces: None,
            after: Vec::new(),
            on_event: None,
        };
        let recorded = if batched {
            executor.propose_batch((next..end).map(proposal).collect())
        } else {
            (next..end).map(|i| executor.propose(proposal(i))).collect()
        };
        for intent in recorded {
            let intent = intent?;
            if intent.state != State::Recorded {
                return Err(format!("intent {} was recorded as {}", intent.id, intent.state).into());
            }
        }
        let t2 = Instant::now();
        proposing += t2 - t;
        executor.drain(DRAIN_MS).await?;
        draining += t2.elapsed();
        next = end;
    }
    let elapsed = start.elapsed();

    check(&executor, &fake, n)?;
    drop(executor);
    Ok(IntentsRun {
        rate: n as f64 / elapsed.as_secs_f64(),
        propose_rate: n as f64 / proposing.as_secs_f64(),
        drain_ms: draining.as_secs_f64() * 1000.0,
    })
}

/// Exactly one refund per intent, attributed to it and sent with its key, and every intent
/// confirmed after one attempt with the refund's id as evidence.
fn check(executor: &Executor, fake: &Fake, n: usize) -> Result<()> {
    let intents = executor.status(None)?;
    let ledger = fake.ledger();
    if intents.len() != n || ledger.len() != n {
        return Err(format!(
            "{n} intents proposed, {} in the log, {} refunds in the ledger",
            intents.len(),
            ledger.len()
        )
        .into());
    }
    let mut by_intent: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
    for effect in &ledger {
        let owner =
            effect.params.pointer("/metadata/twice_intent").and_then(Value::as_str).unwrap_or_default();
        if effect.kind != "refund.created"
            || by_intent
                .insert(owner.to_string(), (effect.object_id.clone(), effect.idempotency_key.clone()))
                .is_some()
        {
            return Err(format!("unexpected or duplicate effect in the ledger: {effect:?}").into());
        }
    }
    let mut keys = BTreeSet::new();
    for intent in &intents {
        let Some((refund, key)) = by_intent.get(&intent.id) else {
            return Err(format!("intent {} has no refund in the ledger", intent.id).into());
        };
        let claimed = intent.evidence.external_id.as_deref() == Some(refund.as_str());
        if intent.state != State::Confirmed || intent.attempts != 1 || !claimed {
            return Err(format!(
                "intent {}: {} after {} attempts, evidence {:?}, refund {refund}",
                intent.id, intent.state, intent.attempts, intent.evidence
            )
            .into());
        }
        if key.as_deref() != Some(intent.key.as_str()) || !keys.insert(intent.key.clone()) {
            return Err(format!(
                "intent {}: refund sent with key {key:?}, intent key {}",
                intent.id, intent.key
            )
            .into());
        }
    }
    Ok(())
}

/// `target/bench-tmp/executor-intents-PID`: on the disk the project builds on, removed at
/// the end.
struct WorkDir {
    path: PathBuf,
    next: std::cell::Cell<u32>,
}

impl WorkDir {
    fn create() -> Result<WorkDir> {
        // The bench binary is `TARGET/release/deps/intents-HASH`, whatever CARGO_TARGET_DIR is.
        let exe = std::env::current_exe()?;
        let target = exe
            .ancestors()
            .nth(3)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let path = target.join("bench-tmp").join(format!("executor-intents-{}", std::process::id()));
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        std::fs::create_dir_all(&path)?;
        Ok(WorkDir { path, next: std::cell::Cell::new(0) })
    }

    /// A new, empty directory inside.
    fn fresh(&self, label: &str) -> Result<PathBuf> {
        let n = self.next.get() + 1;
        self.next.set(n);
        let dir = self.path.join(format!("{label}-{n}"));
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
