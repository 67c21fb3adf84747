//! Reports of a run: `results.json`, a Markdown summary, JUnit XML, a self-contained HTML
//! timeline, regression baselines and the merge of sharded runs. Everything here reads
//! [`results::RunResults`] and never runs anything, so every file can be rebuilt from
//! `results.json` alone (`twice report merge` does exactly that).

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod baseline;
pub mod html;
pub mod json;
pub mod junit;
pub mod merge;
pub mod schema;
pub mod summary;

use std::path::{Path, PathBuf};

use results::RunResults;

/// The files of a report directory.
pub const RESULTS_FILE: &str = "results.json";
pub const SUMMARY_FILE: &str = "summary.md";
pub const JUNIT_FILE: &str = "junit.xml";
pub const HTML_FILE: &str = "report.html";
/// Shrunk failures, one TOML scenario each, under the report directory.
pub const FAILURES_DIR: &str = "failures";

/// What can go wrong reading or writing reports.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a results file: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{path}: results schema \"{found}\", this twice reads \"{expected}\"")]
    Schema { path: PathBuf, found: String, expected: &'static str },
    #[error("cannot write JUnit XML: {0}")]
    Junit(String),
    #[error("{0}")]
    Invalid(String),
}

impl ReportError {
    pub fn io(path: &Path, source: std::io::Error) -> ReportError {
        ReportError::Io { path: path.to_path_buf(), source }
    }
}

/// Writes `results.json`, `summary.md`, `junit.xml` and `report.html` into `dir`; returns
/// their paths in that order.
pub fn write_all(dir: &Path, run: &RunResults) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|e| ReportError::io(dir, e))?;
    let files = [
        (RESULTS_FILE, json::render(run)?),
        (SUMMARY_FILE, summary::render(run)),
        (JUNIT_FILE, junit::render(run)?),
        (HTML_FILE, html::render(run)),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| ReportError::io(&path, e))?;
        written.push(path);
    }
    Ok(written)
}
