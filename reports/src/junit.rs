//! `junit.xml`: one test suite per scenario, one test case per invariant, so that a CI
//! system's test view lists every check. A violated invariant is a `failure` with its
//! evidence; a run that could not be checked (the executor misbehaved) is an `error`; an
//! invariant the run gave nothing to judge is `skipped`, with the reason as its message, so it
//! reads neither as a pass nor as a failure. The XML is written by `quick-junit`, which
//! escapes everything; no wall-clock times are written, so the same results give the same
//! bytes.
//!
//! Hazards are not test cases: nothing broke, so they must never count as a failure or an
//! error in a CI's test view, not even under `--strict` (which fails the run through the exit
//! code instead). Each is a `hazard` property of its scenario's test suite, and the suite's
//! `system-out` describes them in full, with the scenario that would exploit them.

use std::collections::BTreeMap;
use std::fmt::Write;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite, XmlString};

use crate::ReportError;
use results::{RunResults, ScenarioResult, Status, Verdict};

/// The report's name in the XML.
pub const REPORT_NAME: &str = "twice";

/// Characters of a failure's or a skip's message.
const MESSAGE_CHARS_MAX: usize = 500;

/// The file's text.
pub fn render(run: &RunResults) -> Result<String, ReportError> {
    let mut report = Report::new(REPORT_NAME);
    // `XmlString::new` runs an ANSI-escape parser over every string it is given, which made
    // it most of the cost of this report: a text met again (an invariant's name, a skip's
    // message and type) is cloned instead (the same bytes).
    let mut texts = Texts::default();
    for result in &run.results {
        report.add_test_suite(suite(run, result, &mut texts));
    }
    report.to_string().map_err(|e| ReportError::Junit(e.to_string()))
}

/// The texts made into [`XmlString`]s so far, by text; and a skip's message, by its reason.
#[derive(Default)]
struct Texts {
    by_text: BTreeMap<String, XmlString>,
    skipped_by_reason: BTreeMap<String, XmlString>,
}

impl Texts {
    fn get(&mut self, text: &str) -> XmlString {
        if let Some(xml) = self.by_text.get(text) {
            return xml.clone();
        }
        let xml = XmlString::new(text);
        self.by_text.insert(text.to_string(), xml.clone());
        xml
    }

    /// The message of a verdict not judged for `reason`.
    fn skipped(&mut self, reason: &str) -> XmlString {
        if let Some(xml) = self.skipped_by_reason.get(reason) {
            return xml.clone();
        }
        let xml = self.get(&format!("not judged: {}", crate::summary::one_line(reason, MESSAGE_CHARS_MAX)));
        self.skipped_by_reason.insert(reason.to_string(), xml.clone());
        xml
    }
}

fn suite(run: &RunResults, result: &ScenarioResult, texts: &mut Texts) -> TestSuite {
    let mut suite = TestSuite::new(result.name.as_str());
    let classname = XmlString::new(format!("twice.{}", result.name));
    for verdict in &result.verdicts {
        let name = texts.get(&verdict.invariant);
        let mut case = TestCase::new(name, status(result, verdict, texts));
        case.set_classname(classname.clone());
        suite.add_test_case(case);
    }
    if !result.hazards.is_empty() {
        for h in &result.hazards {
            suite.add_property(Property::new("hazard", format!("{}: {}", h.kind, h.detail)));
        }
        suite.set_system_out(hazards_text(run, result));
    }
    suite
}

fn status(result: &ScenarioResult, verdict: &Verdict, texts: &mut Texts) -> TestCaseStatus {
    match verdict.status {
        Status::Held => TestCaseStatus::success(),
        Status::NotJudged => {
            let mut status = TestCaseStatus::skipped();
            let reason = verdict.reason.as_deref().unwrap_or("not judged");
            status.set_message(texts.skipped(reason));
            status.set_type(texts.get("not-judged"));
            status
        }
        Status::Violated => {
            let kind = if verdict.invariant == EXECUTOR_ERROR {
                NonSuccessKind::Error
            } else {
                NonSuccessKind::Failure
            };
            let mut status = TestCaseStatus::non_success(kind);
            let first = verdict.evidence.first().map(String::as_str).unwrap_or("violated");
            status.set_message(crate::summary::one_line(first, MESSAGE_CHARS_MAX));
            status.set_type(verdict.invariant.as_str());
            let mut description = verdict.evidence.join("\n");
            if let Some(shrunk) = &result.shrunk {
                description.push_str(&format!("\nminimal scenario: {shrunk}"));
            }
            if let Some(shrink) = &result.shrink {
                description.push_str(&format!("\n{}", shrink.line()));
            }
            description.push_str(&format!("\nreplay: {}", result.replay));
            status.set_description(description);
            status
        }
    }
}

/// The suite's `system-out`: every hazard of the scenario, what would exploit it and how to
/// run that.
fn hazards_text(run: &RunResults, result: &ScenarioResult) -> String {
    let mut out = String::new();
    let consequence = if run.strict {
        "--strict makes hazards fail the run, but none is a failure of this scenario"
    } else {
        "not failures: nothing in this run exploited them"
    };
    let _ = writeln!(out, "hazards ({consequence}):");
    for h in &result.hazards {
        let intent = h.intent.as_deref().map(|i| format!(" (intent {i})")).unwrap_or_default();
        let _ = writeln!(out, "- {} on {}{intent}: {}", h.kind, h.service, h.detail);
        let _ = writeln!(out, "  would be exploited by: {}", h.exploited_by);
        let _ = writeln!(out, "  run it: {}", h.command);
    }
    out
}

/// The verdict slug of a run that could not be checked.
const EXECUTOR_ERROR: &str = "executor-error";
