//! pytest as the suite runs it: a child process of the venv's interpreter (`TWICE_PYTHON`, set
//! by `cargo xtask test`) with `TWICE_BIN` pointing at the `twice` binary, bounded, each test's
//! outcome read from its JUnit XML. Used by `byo_python.rs` (the kit and the example apps) and
//! `agents.rs` (the example agents).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::process::bin;

/// How often a running pytest is looked at.
const POLL: Duration = Duration::from_millis(50);
/// How much of a pytest run's output a failure shows.
const OUTPUT_TAIL_BYTES: usize = 16 * 1024;

pub const PASSED: &str = "passed";
pub const FAILED: &str = "failed";
pub const XFAILED: &str = "xfailed";

/// One test's outcome and what JUnit XML says of it (the failure's message and traceback).
pub struct Case {
    pub outcome: &'static str,
    pub text: String,
}

/// A finished pytest run.
pub struct Run {
    pub code: Option<i32>,
    pub output: String,
    pub cases: BTreeMap<String, Case>,
}

impl Run {
    pub fn outcomes(&self) -> BTreeMap<&str, &str> {
        self.cases.iter().map(|(name, case)| (name.as_str(), case.outcome)).collect()
    }

    pub fn output_tail(&self) -> &str {
        let start = self.output.len().saturating_sub(OUTPUT_TAIL_BYTES);
        let start = (start..self.output.len()).find(|i| self.output.is_char_boundary(*i)).unwrap_or(0);
        &self.output[start..]
    }
}

/// What a suite of Python tests needs of its runs.
pub struct Suite {
    /// Names the directory its runs' files go to.
    pub name: &'static str,
    /// The longest one run may take.
    pub wait: Duration,
    /// Modules the venv must import (a missing one is a set-up error, said as one).
    pub imports: &'static str,
    /// Arguments every run gets before its own.
    pub args: &'static [&'static str],
}

/// `$TWICE_PYTHON -m pytest ARGS` from the repository's root, with `TWICE_BIN` set; killed
/// and failed after the suite's wait.
pub fn pytest(suite: &Suite, label: &str, args: &[&str]) -> Run {
    let python = python(suite.imports);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{}", suite.name, std::process::id()));
    std::fs::create_dir_all(&dir).expect("the run directory can be created");
    let junit = dir.join(format!("{label}.xml"));
    let output_path = dir.join(format!("{label}.out"));
    let _ = std::fs::remove_file(&junit);
    let output = File::create(&output_path).expect("the output file can be created");
    let mut command = Command::new(&python);
    command
        // No cache directory and no bytecode written into the source tree.
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEx"])
        .args(suite.args)
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
        if started.elapsed() > suite.wait {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&output_path).unwrap_or_default();
            panic!("`{shown}` did not finish within {:?} and was killed:\n{output}", suite.wait);
        }
        std::thread::sleep(POLL);
    };
    println!("`{shown}`: {status} in {:.1} s", started.elapsed().as_secs_f64());
    let output = std::fs::read_to_string(&output_path).unwrap_or_default();
    let xml = std::fs::read_to_string(&junit)
        .unwrap_or_else(|e| panic!("`{shown}` wrote no {} ({e}):\n{output}", junit.display()));
    Run { code: status.code(), cases: junit_cases(&xml), output }
}

/// The venv's interpreter, which must import `imports`.
fn python(imports: &str) -> OsString {
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| {
        panic!(
            "TWICE_PYTHON is not set: the Python tests run on the venv built from \
             tests/requirements.txt with the kit installed. Run the tests with `cargo xtask \
             test`, or set TWICE_PYTHON=target/twice-venv/bin/python after `pip install -r \
             tests/requirements.txt` and `pip install -e clients/python` into it."
        )
    });
    let probe = Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run TWICE_PYTHON={}: {e}", python.to_string_lossy()));
    assert!(
        probe.status.success(),
        "TWICE_PYTHON={} cannot import {imports} (run `cargo xtask test`, which installs \
         tests/requirements.txt and clients/python): {}",
        python.to_string_lossy(),
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

/// Each `<testcase>` of a JUnit XML file by name, with its outcome: a `<failure>` or `<error>`
/// child, a `<skipped type="pytest.xfail">` (an expected failure), another `<skipped>`, or
/// none (passed).
pub fn junit_cases(xml: &str) -> BTreeMap<String, Case> {
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
