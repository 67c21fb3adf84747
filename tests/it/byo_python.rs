//! Bring your own test, from Python: the kit of `clients/python` (a client of `twice serve` and
//! a pytest plugin) passes its own tests, and the example applications of `examples/apps`
//! tested with it come out as they should. The correct refund worker passes every scenario; its
//! naive version is a strict expected failure in a plain `pytest` run, and with `--runxfail`
//! each naive case fails with twice's verdict naming the invariant it breaks and the ledger's
//! effects as evidence. (The DBOS example is in `examples/engines/dbos`, run by `cargo xtask
//! engines`.)
//!
//! pytest runs as a child process of the venv's interpreter (`TWICE_PYTHON`, set by `cargo
//! xtask test`, which installs the kit there) with `TWICE_BIN` pointing at the `twice` binary;
//! each run's outcomes are read per test from its JUnit XML. Every run is bounded.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::executor_process::bin;
use super::python_executor::machine;

/// The longest one pytest run may take; the slowest, the example apps, takes about 15 s.
const PYTEST_WAIT: Duration = Duration::from_secs(240);
/// How often a running pytest is looked at.
const POLL: Duration = Duration::from_millis(50);
/// How much of a pytest run's output a failure shows.
const OUTPUT_TAIL_BYTES: usize = 16 * 1024;

const PASSED: &str = "passed";
const FAILED: &str = "failed";
const XFAILED: &str = "xfailed";

/// What each example test must come to. `None`: the correct version, which passes.
/// `Some(invariant)`: a naive version, an expected failure in a plain run, and under
/// `--runxfail` a failure by `TwiceViolation` whose verdict names `invariant`.
const EXAMPLES: &[(&str, Option<&str>)] = &[
    ("test_refund_worker[lost_refund_reply-correct]", None),
    // The whole amount refunded: the naive retry is refused, and the worker says "failed".
    ("test_refund_worker[lost_refund_reply-naive]", Some("honest-terminal-states")),
    ("test_refund_worker[lost_partial_refund_reply-correct]", None),
    ("test_refund_worker[lost_partial_refund_reply-naive]", Some("no-duplicate-effect")),
    ("test_refund_worker[key_regenerated_per_attempt-correct]", None),
    ("test_refund_worker[key_regenerated_per_attempt-naive]", Some("no-duplicate-effect")),
    ("test_refund_worker[timeout_taken_as_no-correct]", None),
    ("test_refund_worker[timeout_taken_as_no-naive]", Some("no-duplicate-effect")),
    ("test_refund_worker[crash_while_refund_in_flight-correct]", None),
    ("test_refund_worker[crash_while_refund_in_flight-naive]", Some("no-duplicate-effect")),
];

/// The kit's tests that must be there (a sample: a run that lost them would pass vacuously).
const KIT_TESTS_SAMPLE: &[&str] = &[
    "test_check_raises_the_verdicts_summary_when_an_invariant_is_violated",
    "test_a_step_is_reached_held_and_let_go",
    "test_the_fixture_serves_one_test_and_stops_after_it",
    "test_a_serve_that_never_gets_ready_is_killed_after_its_bounds",
];

#[test]
fn the_kits_own_tests_pass() {
    let _turn = machine();
    let run = pytest("kit", &["clients/python/tests"]);
    assert_eq!(run.code, Some(0), "the kit's tests fail:\n{}", run.output_tail());
    assert!(run.cases.len() >= 15, "only {} kit tests ran:\n{}", run.cases.len(), run.output_tail());
    for (name, case) in &run.cases {
        assert_eq!(case.outcome, PASSED, "{name}:\n{}", case.text);
    }
    for name in KIT_TESTS_SAMPLE {
        assert!(run.cases.contains_key(*name), "no kit test {name}; ran {:?}", run.cases.keys());
    }
}

#[test]
fn the_correct_apps_pass_and_the_naive_ones_are_expected_failures() {
    let _turn = machine();
    let run = pytest("examples", &["examples/apps"]);
    assert_eq!(run.code, Some(0), "the example apps' tests fail:\n{}", run.output_tail());
    let expected: BTreeMap<&str, &str> = EXAMPLES
        .iter()
        .map(|(name, naive)| (*name, if naive.is_some() { XFAILED } else { PASSED }))
        .collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
}

#[test]
fn the_naive_apps_are_caught_with_the_invariant_and_the_ledgers_evidence() {
    let _turn = machine();
    // `--runxfail` runs the expected failures as plain tests: each must fail, and by twice's
    // verdict rather than anything else.
    let run = pytest("examples-naive", &["examples/apps", "--runxfail", "-k", "naive"]);
    assert_eq!(run.code, Some(1), "the naive apps must fail:\n{}", run.output_tail());
    let naive: BTreeMap<&str, &str> =
        EXAMPLES.iter().filter_map(|(name, naive)| naive.map(|invariant| (*name, invariant))).collect();
    let expected: BTreeMap<&str, &str> = naive.keys().map(|name| (*name, FAILED)).collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
    for (name, invariant) in naive {
        let text = &run.cases[name].text;
        assert!(text.contains("TwiceViolation"), "{name} failed, but not by a verdict:\n{text}");
        assert!(
            text.contains(&format!("{invariant}: ")),
            "{name}'s verdict does not name {invariant}:\n{text}"
        );
        // The evidence is the ledger's: the effects by service, id and sequence number.
        assert!(
            text.contains("payments re_") && text.contains("(seq 1)"),
            "{name}: no ledger evidence:\n{text}"
        );
        if invariant == "no-duplicate-effect" {
            assert!(text.contains("has 2 effects, at most one allowed"), "{name}:\n{text}");
        }
    }
}

/// One test's outcome and what JUnit XML says of it (the failure's message and traceback).
struct Case {
    outcome: &'static str,
    text: String,
}

/// A finished pytest run.
struct Run {
    code: Option<i32>,
    output: String,
    cases: BTreeMap<String, Case>,
}

impl Run {
    fn outcomes(&self) -> BTreeMap<&str, &str> {
        self.cases.iter().map(|(name, case)| (name.as_str(), case.outcome)).collect()
    }

    fn output_tail(&self) -> &str {
        let start = self.output.len().saturating_sub(OUTPUT_TAIL_BYTES);
        let start = (start..self.output.len()).find(|i| self.output.is_char_boundary(*i)).unwrap_or(0);
        &self.output[start..]
    }
}

/// `$TWICE_PYTHON -m pytest ARGS` from the repository's root, with `TWICE_BIN` set; killed
/// and failed after [`PYTEST_WAIT`].
fn pytest(label: &str, args: &[&str]) -> Run {
    let python = python();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("byo-python-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the run directory can be created");
    let junit = dir.join(format!("{label}.xml"));
    let output_path = dir.join(format!("{label}.out"));
    let _ = std::fs::remove_file(&junit);
    let output = File::create(&output_path).expect("the output file can be created");
    let mut command = Command::new(&python);
    command
        // No cache directory and no bytecode written into the source tree.
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEx"])
        .arg(format!("--junitxml={}", junit.display()))
        .args(args)
        .current_dir(&root)
        .env("TWICE_BIN", bin("twice"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("the output file can be shared"))
        .stderr(output);
    let shown = format!("{} -m pytest {}", python.to_string_lossy(), args.join(" "));
    let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start `{shown}`: {e}"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("pytest's status can be read") {
            break status;
        }
        if started.elapsed() > PYTEST_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&output_path).unwrap_or_default();
            panic!("`{shown}` did not finish within {PYTEST_WAIT:?} and was killed:\n{output}");
        }
        std::thread::sleep(POLL);
    };
    println!("`{shown}`: {status} in {:.1} s", started.elapsed().as_secs_f64());
    let output = std::fs::read_to_string(&output_path).unwrap_or_default();
    let xml = std::fs::read_to_string(&junit)
        .unwrap_or_else(|e| panic!("`{shown}` wrote no {} ({e}):\n{output}", junit.display()));
    Run { code: status.code(), cases: junit_cases(&xml), output }
}

/// The venv's interpreter, with the kit installed in it.
fn python() -> OsString {
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| {
        panic!(
            "TWICE_PYTHON is not set: the kit's tests and the example apps run on the venv built \
             from tests/requirements.txt with the kit installed. Run the tests with `cargo xtask \
             test`, or set TWICE_PYTHON=target/twice-venv/bin/python after `pip install -e \
             clients/python` into it."
        )
    });
    let probe = Command::new(&python)
        .args(["-c", "import twice.pytest_plugin, stripe"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run TWICE_PYTHON={}: {e}", python.to_string_lossy()));
    assert!(
        probe.status.success(),
        "TWICE_PYTHON={} lacks the kit or the example apps' packages (run `cargo xtask test`, \
         which installs tests/requirements.txt and clients/python): {}",
        python.to_string_lossy(),
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

/// Each `<testcase>` of a JUnit XML file by name, with its outcome: a `<failure>` or `<error>`
/// child, a `<skipped type="pytest.xfail">` (an expected failure), another `<skipped>`, or
/// none (passed).
fn junit_cases(xml: &str) -> BTreeMap<String, Case> {
    xml.split("<testcase ")
        .skip(1)
        .map(|chunk| {
            let chunk = chunk.split("</testcase>").next().unwrap_or(chunk);
            let name =
                attribute(chunk, "name").unwrap_or_else(|| panic!("a testcase without a name: {chunk}"));
            let outcome = if chunk.contains("<failure") {
                FAILED
            } else if chunk.contains("<error") {
                "error"
            } else if chunk.contains("<skipped type=\"pytest.xfail\"") {
                XFAILED
            } else if chunk.contains("<skipped") {
                "skipped"
            } else {
                PASSED
            };
            (unescape(&name), Case { outcome, text: unescape(chunk) })
        })
        .collect()
}

/// The value of `name="..."` in the start tag that opens `chunk`.
fn attribute(chunk: &str, name: &str) -> Option<String> {
    let tag = &chunk[..chunk.find('>')?];
    let start = tag
        .find(&format!(" {name}=\""))
        .map(|i| i + name.len() + 3)
        .or_else(|| tag.starts_with(&format!("{name}=\"")).then_some(name.len() + 2))?;
    let end = start + tag[start..].find('"')?;
    Some(tag[start..end].to_string())
}

/// XML's five entities and numeric character references, as pytest's JUnit writer escapes.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let Some(end) = tail.find(';').filter(|end| *end <= 10) else {
            out.push('&');
            rest = &tail[1..];
            continue;
        };
        let entity = &tail[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &tail[end + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn junit_cases_are_read_with_their_outcomes_and_text() {
    let xml = r#"<testsuite><testcase classname="a" name="test_ok[x-correct]" time="0.1" />
<testcase classname="a" name="test_naive" time="0.2"><skipped type="pytest.xfail" message="breaks it" /></testcase>
<testcase classname="a" name="test_caught"><failure message="twice.client.TwiceViolation: no-duplicate-effect: a &amp; b&#10;seq &quot;1&quot;">trace &lt;here&gt;</failure></testcase>
<testcase name="test_broken" classname="a"><error message="boom" /></testcase></testsuite>"#;
    let cases = junit_cases(xml);
    let outcomes: Vec<(&str, &str)> = cases.iter().map(|(n, c)| (n.as_str(), c.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            ("test_broken", "error"),
            ("test_caught", FAILED),
            ("test_naive", XFAILED),
            ("test_ok[x-correct]", PASSED)
        ]
    );
    assert!(cases["test_caught"].text.contains("no-duplicate-effect: a & b\nseq \"1\""));
    assert!(cases["test_caught"].text.contains("trace <here>"));
}
