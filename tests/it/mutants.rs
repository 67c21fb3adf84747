//! Mutants (work in progress).

use std::path::{Path, PathBuf};

use harness::check::{self, Verdict};
use harness::sim::{self, SimFactory};
use scenarios::Scenario;

use crate::mutant_naive::{Bug, Naive, Style};

fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mutants").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn verdicts(scenario: &Scenario, seed: u64, factory: &dyn SimFactory, dir: &Path) -> Vec<Verdict> {
    let observed = sim::run_blocking(scenario, seed, factory, dir).expect("the sim runs");
    check::check(scenario, &observed)
}

fn violated(v: &[Verdict]) -> Vec<String> {
    check::violations(v).map(|v| v.invariant.clone()).collect()
}

const ALL: [(Style, Option<Bug>); 16] = [
    (Style::KeyRetry, None),
    (Style::LookupFirst, None),
    (Style::LookupFirst, Some(Bug::NaiveRetry)),
    (Style::LookupFirst, Some(Bug::TimeoutAsNo)),
    (Style::KeyRetry, Some(Bug::KeyPerAttempt)),
    (Style::KeyRetry, Some(Bug::MemoryOnly)),
    (Style::LookupFirst, Some(Bug::NoUnknownState)),
    (Style::KeyRetry, Some(Bug::NoReconciliation)),
    (Style::KeyRetry, Some(Bug::TrustsAck)),
    (Style::LookupFirst, Some(Bug::TrustsStaleRead)),
    (Style::KeyRetry, Some(Bug::KeyOutlivesRetention)),
    (Style::KeyRetry, Some(Bug::KeysAssumedHonored)),
    (Style::KeyRetry, Some(Bug::ReplacementWhileUnknown)),
    (Style::KeyRetry, Some(Bug::NoLease)),
    (Style::KeyRetry, Some(Bug::UniqueIdsAssumed)),
    (Style::KeyRetry, Some(Bug::RedoEverything)),
];

#[test]
#[ignore = "exploration"]
fn matrix() {
    let catalog = scenarios::catalog().unwrap();
    std::thread::scope(|scope| {
        for (style, bug) in ALL {
            let catalog = &catalog;
            scope.spawn(move || {
                let f = Naive { style, bug };
                let dir = work_dir(&format!("matrix-{style:?}-{bug:?}"));
                let mut out = format!("== {}\n", f.name());
                for s in catalog {
                    let v = violated(&verdicts(s, 1, &f, &dir));
                    if !v.is_empty() {
                        out.push_str(&format!("   {:40} {}\n", s.name, v.join(" ")));
                    }
                }
                let start = std::time::Instant::now();
                let mut found = None;
                for i in 0..300 {
                    let s = scenarios::generate::case(7, i).unwrap();
                    let v = violated(&verdicts(&s, i, &f, &dir));
                    if !v.is_empty() {
                        found = Some((i, v));
                        break;
                    }
                }
                out.push_str(&format!("   generated: {found:?} in {:?}\n", start.elapsed()));
                print!("{out}");
            });
        }
    });
}

#[test]
#[ignore = "exploration"]
fn trace() {
    let which = std::env::var("MUTANT").unwrap_or_default();
    let scenario = std::env::var("SCENARIO").unwrap_or_default();
    let f: Box<dyn SimFactory> = match ALL.iter().copied().find(|(_, b)| format!("{b:?}") == which) {
        Some((style, bug)) => Box::new(Naive { style, bug }),
        None => Box::new(sim::Reference),
    };
    let (s, seed) = match scenario.strip_prefix("gen:") {
        Some(rest) => {
            let (seed, i) = rest.split_once(':').unwrap();
            let i: u64 = i.parse().unwrap();
            (scenarios::generate::case(seed.parse().unwrap(), i).unwrap(), i)
        }
        None => (scenarios::catalog::find(&scenario).unwrap().unwrap(), 1),
    };
    let dir = work_dir("trace");
    let observed = sim::run_blocking(&s, seed, f.as_ref(), &dir).unwrap();
    println!("{}", scenarios::to_toml(&s, "").unwrap_or_default());
    for m in &observed.timeline {
        println!("{:>6} {:8} {:10} {}", m.at_ms - harness::setup::EPOCH_MS, m.lane, m.kind, m.detail);
    }
    for (svc, j) in &observed.journals {
        for e in j {
            println!(
                "J {svc} {:>6} {} {} key={:?} faults={:?} {} {:?} replayed={}",
                e.at_ms - harness::setup::EPOCH_MS,
                e.method,
                e.path,
                e.idempotency_key,
                e.faults,
                e.outcome,
                e.status,
                e.replayed
            );
        }
    }
    for (svc, l) in &observed.ledgers {
        for e in l {
            println!(
                "L {svc} {:>6} {} {} key={:?} token={:?}",
                e.at_ms - harness::setup::EPOCH_MS,
                e.object_id,
                e.params,
                e.idempotency_key,
                e.fencing_token
            );
        }
    }
    for c in &observed.claims {
        println!("C {} {} {} {}", c.id, c.state, c.attempts, c.evidence);
    }
    for v in check::check(&s, &observed) {
        if !v.held {
            println!("V {} {:?}", v.invariant, v.evidence);
        }
    }
}

#[test]
#[ignore = "exploration"]
fn sweep() {
    let n: u64 = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let which = std::env::var("MUTANTS").unwrap_or_default();
    let seeds: Vec<u64> =
        std::env::var("SEEDS").unwrap_or("7".into()).split(',').map(|s| s.parse().unwrap()).collect();
    let mut factories: Vec<(String, Box<dyn SimFactory>)> = Vec::new();
    for (style, bug) in ALL {
        if which.is_empty() || which.split(',').any(|w| format!("{bug:?}") == w) {
            factories.push((format!("{style:?}-{bug:?}"), Box::new(Naive { style, bug })));
        }
    }
    if which.contains("Reference") {
        factories.push(("Reference".into(), Box::new(sim::Reference)));
    }
    std::thread::scope(|scope| {
        for (name, f) in &factories {
            let seeds = &seeds;
            scope.spawn(move || {
                let dir = work_dir(&format!("sweep-{name}"));
                let start = std::time::Instant::now();
                for seed in seeds {
                    let mut hits = Vec::new();
                    for i in 0..n {
                        let s = scenarios::generate::case(*seed, i).unwrap();
                        let v = violated(&verdicts(&s, i, f.as_ref(), &dir));
                        if !v.is_empty() {
                            hits.push((i, v));
                            if hits.len() >= 5 {
                                break;
                            }
                        }
                    }
                    println!("{name} seed {seed}: {hits:?} ({:?})", start.elapsed());
                }
            });
        }
    });
}

#[test]
#[ignore = "exploration"]
fn census() {
    use fake_services::FaultSpec;
    let n: u64 = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(10000);
    let (mut stale_combo, mut cat_late, mut cat, mut pause, mut pause_fenced_ws, mut lineage) = (0, 0, 0, 0, 0, 0);
    for i in 0..n {
        let s = scenarios::generate::case(1, i).unwrap();
        let uses = |svc: &str| s.intents.iter().any(|x| x.action.starts_with(svc));
        let after_commit = |svc: &str| s.faults.iter().any(|f| f.service == svc && f.rule.method.as_deref() != Some("GET") && matches!(f.rule.fault, FaultSpec::DropAfterCommit | FaultSpec::ErrorAfterCommit { .. }));
        let stale = |svc: &str| s.faults.iter().any(|f| f.service == svc && matches!(f.rule.fault, FaultSpec::StaleRead { .. }) && f.rule.method.as_deref() != Some("POST"));
        if ["payments", "workspaces"].iter().any(|svc| uses(svc) && after_commit(svc) && stale(svc)) {
            stale_combo += 1;
        }
        for f in &s.faults {
            if let FaultSpec::CommitAfterTimeout { delay_ms } = f.rule.fault {
                cat += 1;
                if delay_ms.unwrap_or(0) > scenarios::generate::REQUEST_TIMEOUT_MS {
                    cat_late += 1;
                }
            }
        }
        if s.events.iter().any(|e| matches!(e.action, scenarios::EventAction::Pause { .. })) {
            pause += 1;
            if uses("workspaces") && s.contract("workspaces").unwrap().fencing {
                pause_fenced_ws += 1;
            }
        }
        if s.intents.iter().any(|x| x.replaces.is_some()) {
            lineage += 1;
        }
    }
    println!("of {n}: stale-read combos {stale_combo}; commit_after_timeout {cat}, past the timeout {cat_late}; pause {pause} (fenced workspaces {pause_fenced_ws}); replacements {lineage}");
}
