//! `junit.xml`: one test suite per scenario, one test case per invariant, so that a CI
//! system's test view lists every check. A violated invariant is a `failure` with its
//! evidence; a run that could not be checked (the executor misbehaved) is an `error`. The XML
//! is written by `quick-junit`, which escapes everything; no wall-clock times are written, so
//! the same results give the same bytes.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::ReportError;
use crate::model::{RunResults, ScenarioResult, Verdict};

/// The report's name in the XML.
pub const REPORT_NAME: &str = "twice";

/// The file's text.
pub fn render(run: &RunResults) -> Result<String, ReportError> {
    let mut report = Report::new(REPORT_NAME);
    for result in &run.results {
        report.add_test_suite(suite(result));
    }
    report.to_string().map_err(|e| ReportError::Junit(e.to_string()))
}

fn suite(result: &ScenarioResult) -> TestSuite {
    let mut suite = TestSuite::new(result.name.as_str());
    for verdict in &result.verdicts {
        let mut case = TestCase::new(verdict.invariant.as_str(), status(result, verdict));
        case.set_classname(format!("twice.{}", result.name));
        suite.add_test_case(case);
    }
    suite
}

fn status(result: &ScenarioResult, verdict: &Verdict) -> TestCaseStatus {
    if verdict.held {
        return TestCaseStatus::success();
    }
    let kind =
        if verdict.invariant == EXECUTOR_ERROR { NonSuccessKind::Error } else { NonSuccessKind::Failure };
    let mut status = TestCaseStatus::non_success(kind);
    let first = verdict.evidence.first().map(String::as_str).unwrap_or("violated");
    status.set_message(crate::summary::one_line(first, 500));
    status.set_type(verdict.invariant.as_str());
    let mut description = verdict.evidence.join("\n");
    if let Some(shrunk) = &result.shrunk {
        description.push_str(&format!("\nminimal scenario: {shrunk}"));
    }
    description.push_str(&format!("\nreplay: {}", result.replay));
    status.set_description(description);
    status
}

/// The verdict slug of a run that could not be checked.
const EXECUTOR_ERROR: &str = "executor-error";
