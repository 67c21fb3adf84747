//! The sim driver with the reference executor.

use results::{Outcome, Source};
use runner::run::{self, Case, Driver, RunContext};
use runner::sim::{self, Reference};
use scenarios::Scenario;

fn scenario(text: &str) -> Scenario {
    scenarios::parse_scenario(text, "test").expect("a valid scenario")
}

fn work_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("twice-sim-test-{}", std::process::id()))
}

const LOST_REPLY: &str = r#"
name = "lost-reply"
[services.payments]
settle_ms_max = 500
key_retention_ms = 2000
[[intents]]
id = "refund"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 1000 }
[[faults]]
service = "payments"
method = "POST"
nth = 1
fault = "drop_after_commit"
[[events]]
at = { service = "payments", method = "POST", nth = 1 }
do = "crash"
"#;

#[test]
fn a_lost_reply_and_a_crash_leave_one_refund_and_an_honest_state() {
    let s = scenario(LOST_REPLY);
    let observed = sim::run_blocking(&s, 7, &Reference, &work_dir()).unwrap();
    println!("{}", serde_json::to_string_pretty(&observed.claims).unwrap());
    for m in &observed.timeline {
        println!("{:>8} {:<10} {:<10} {}", m.at_ms - runner::setup::EPOCH_MS, m.lane, m.kind, m.detail);
    }
    assert_eq!(observed.executor_error, None);
    assert_eq!(observed.ledgers["payments"].len(), 1);
    assert_eq!(observed.claims[0].state, "confirmed");
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let s = scenario(LOST_REPLY);
    let a = serde_json::to_string(&sim::run_blocking(&s, 3, &Reference, &work_dir()).unwrap()).unwrap();
    let b = serde_json::to_string(&sim::run_blocking(&s, 3, &Reference, &work_dir()).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn the_reference_executor_passes_generated_cases() {
    let mut failures = Vec::new();
    let cases = 300;
    for index in 0..cases {
        let s = scenarios::generate::case(42, index).unwrap();
        let observed = sim::run_blocking(&s, index, &Reference, &work_dir()).unwrap();
        let verdicts = checker::check(&s, &observed);
        let broken: Vec<_> = verdicts.iter().filter(|v| !v.held).collect();
        if !broken.is_empty() {
            failures.push(format!("case {index}: {:?}\n{}", broken, toml::to_string(&s).unwrap_or_default()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} failed:\n{}",
        failures.len(),
        failures.iter().take(3).cloned().collect::<Vec<_>>().join("\n\n")
    );
}

struct Quiet;

impl runner::run::Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &results::ScenarioResult) {}
    fn done(&self) {}
}

/// The catalog and a generated search, as `twice run` assembles them.
fn cases(seed: u64, generated: u64) -> Vec<Case> {
    let mut cases: Vec<Case> = scenarios::catalog()
        .unwrap()
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect();
    for index in 0..generated {
        let scenario = scenarios::generate::case(seed, index).unwrap();
        cases.push(Case { scenario, source: Source::Generated { index } });
    }
    cases
}

fn results_json(seed: u64, threads: usize) -> String {
    let driver = Driver::Sim(&Reference);
    let results = run::run_cases(
        &cases(seed, 60),
        &RunContext::new(seed, &driver, &work_dir(), "twice run"),
        threads,
        &Quiet,
    );
    serde_json::to_string_pretty(&run::results(seed, &driver, None, results)).unwrap()
}

#[test]
fn the_same_seed_gives_byte_identical_results_json_whatever_the_threads() {
    let one = results_json(9, 1);
    let same = |other: &str, what: &str| {
        if let Some((line, (a, b))) = one.lines().zip(other.lines()).enumerate().find(|(_, (a, b))| a != b) {
            panic!("{what}: results differ at line {}: {a} vs {b}", line + 1);
        }
        assert_eq!(one.len(), other.len(), "{what}");
    };
    same(&results_json(9, 2), "two threads");
    same(&results_json(9, 1), "again");
    assert_ne!(one, results_json(10, 2), "the seed reaches the results");
    let all = cases(9, 60).len();
    assert!(one.contains(&format!("\"passed\": {all}")), "the catalog and the search pass");
}

/// The digests in `data/sim-digests.txt`: `(seed, sha256)`.
fn recorded_digests() -> Vec<(u64, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/data/sim-digests.txt");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (seed, digest) = l.split_once(' ').expect("seed and digest");
            (seed.parse().expect("a seed"), digest.trim().to_string())
        })
        .collect()
}

/// Whole sim runs, as `twice run` writes them, are byte-identical to the ones recorded: what
/// the catalog and 1,000 generated cases produce at two seeds does not change when the code
/// under the run does.
#[test]
fn sim_digests_of_whole_runs_are_unchanged() {
    use sha2::Digest;
    let recorded = recorded_digests();
    assert_eq!(recorded.len(), 2, "two seeds are recorded");
    let mut now = Vec::new();
    for (seed, _) in &recorded {
        let dir = work_dir().join(format!("digest-{seed}"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_twice"))
            .args(["run", "--cases", "1000", "--seed", &seed.to_string(), "--report-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let bytes = std::fs::read(dir.join("results.json")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let hex: String = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        now.push((*seed, hex));
    }
    if std::env::var_os("UPDATE_SIM_DIGESTS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/data/sim-digests.txt");
        let text = std::fs::read_to_string(path).unwrap();
        let mut out: Vec<String> = text.lines().filter(|l| l.starts_with('#')).map(String::from).collect();
        out.extend(now.iter().map(|(seed, digest)| format!("{seed} {digest}")));
        std::fs::write(path, out.join("\n") + "\n").unwrap();
        return;
    }
    assert_eq!(
        now, recorded,
        "sim results changed; if that is meant, run `UPDATE_SIM_DIGESTS=1 cargo test -p twice --test it sim_digests` and say why"
    );
}

/// Scenarios the generator found against the reference executor, each a bug since fixed
/// (what it was is the first line of its file), with the run seed it was found at.
const FOUND: &[(&str, u64)] = &[
    ("send_stamped_when_it_leaves", 1),
    ("signed_transfer_never_abandoned", 1),
    ("receipt_read_after_nonce", 2),
    ("lookup_judged_when_sent", 3),
    ("key_judged_when_the_send_leaves", 6),
];

#[test]
fn scenarios_the_generator_found_stay_fixed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/data/found");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the directory of found scenarios")
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".toml").map(str::to_string))
        .collect();
    let mut listed: Vec<&str> = FOUND.iter().map(|(n, _)| *n).collect();
    let mut on_disk: Vec<&str> = files.iter().map(String::as_str).collect();
    listed.sort_unstable();
    on_disk.sort_unstable();
    assert_eq!(listed, on_disk, "FOUND must list every file of {}", dir.display());
    let mut failed = Vec::new();
    for (name, seed) in FOUND {
        let path = dir.join(format!("{name}.toml"));
        let scenario = scenarios::parse_file(&path).expect("a valid scenario");
        let case = Case { scenario, source: Source::File { path: path.display().to_string() } };
        let result = run::run_case(&case, &RunContext::new(*seed, &Driver::Sim(&Reference), &work_dir(), ""));
        if result.outcome != Outcome::Passed {
            let broken: Vec<String> =
                checker::violations(&result.verdicts).map(|v| v.evidence.join(" / ")).collect();
            failed.push(format!("{name} (seed {seed}): {:?} {broken:?}", result.outcome));
        }
    }
    assert!(failed.is_empty(), "the reference executor fails again:\n{}", failed.join("\n"));
}
