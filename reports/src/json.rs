//! `results.json`: the run's whole record, from which every other file is rendered.

use std::path::Path;

use crate::ReportError;
use crate::model::{RESULTS_SCHEMA, RunResults};

/// The file's text: compact JSON (a run of 10,000 scenarios is tens of megabytes; `jq .`
/// pretty-prints it) with a final newline, fields in declaration order and maps sorted, so the
/// same run gives the same bytes.
pub fn render(run: &RunResults) -> Result<String, ReportError> {
    let mut json = serde_json::to_string(run)
        .map_err(|e| ReportError::Invalid(format!("cannot serialize results: {e}")))?;
    json.push('\n');
    Ok(json)
}

/// Reads a results file (or the `results.json` inside a report directory), refusing another
/// schema version.
pub fn read(path: &Path) -> Result<RunResults, ReportError> {
    let path = if path.is_dir() { path.join(crate::RESULTS_FILE) } else { path.to_path_buf() };
    let text = std::fs::read_to_string(&path).map_err(|e| ReportError::io(&path, e))?;
    // The schema first, so that a future version gets a clear message rather than a field error.
    let schema = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| ReportError::Json { path: path.clone(), source: e })?
        .get("schema")
        .and_then(|s| s.as_str().map(str::to_string))
        .unwrap_or_default();
    if schema != RESULTS_SCHEMA {
        return Err(ReportError::Schema { path, found: schema, expected: RESULTS_SCHEMA });
    }
    // Verdicts written before they had a status read it from `held` (see `model::Verdict`).
    serde_json::from_str(&text).map_err(|e| ReportError::Json { path, source: e })
}
