//! `results.json`: the run's record, from which every other file is rendered: everything of
//! the cases that failed, and a compact form of those that passed (`docs/reports.md`). Every
//! case's row carries its verdicts, whatever its outcome.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ReportError;
use results::{Outcome, RESULTS_SCHEMA, RunResults, ScenarioResult, Shard, Totals, Verdict};

/// The file's text: compact JSON with a final newline, fields in declaration order and maps
/// sorted, so the same run gives the same bytes. Every row has its `verdicts`. A passed
/// case also names its list's entry in the run's table of distinct verdict lists
/// (`verdict_sets`, `verdict_set`): that was once the only place of a passed case's verdicts,
/// and stays, deprecated, until the next schema version, so that readers of it keep working.
pub fn render(run: &RunResults) -> Result<String, ReportError> {
    let mut sets: Vec<&[Verdict]> = Vec::new();
    let mut index: HashMap<&[Verdict], usize> = HashMap::new();
    let mut results: Vec<Cow<'_, ScenarioResult>> = Vec::with_capacity(run.results.len());
    for r in &run.results {
        if r.outcome != Outcome::Passed || r.verdicts.is_empty() {
            results.push(Cow::Borrowed(r));
            continue;
        }
        let set = *index.entry(r.verdicts.as_slice()).or_insert_with(|| {
            sets.push(&r.verdicts);
            sets.len() - 1
        });
        // As a run keeps it, a passed result is compact: this copy is small.
        results.push(Cow::Owned(ScenarioResult { verdict_set: Some(set), ..r.clone() }));
    }
    let file = RunFile {
        schema: &run.schema,
        tool_version: &run.tool_version,
        seed: run.seed,
        driver: &run.driver,
        executor: &run.executor,
        shard: run.shard,
        strict: run.strict,
        totals: run.totals,
        verdict_sets: sets,
        results,
    };
    let mut json = serde_json::to_string(&file)
        .map_err(|e| ReportError::Invalid(format!("cannot serialize results: {e}")))?;
    json.push('\n');
    Ok(json)
}

/// [`RunResults`] as the file holds it, borrowed. `schemas/results.schema.json` is derived
/// from this type ([`crate::schema::results_schema`]).
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunFile<'a> {
    #[schemars(schema_with = "crate::schema::schema_name")]
    schema: &'a str,
    /// The `twice` version that ran.
    tool_version: &'a str,
    /// The run's seed: every case's seed derives from it.
    seed: u64,
    /// `sim` or `live`.
    driver: &'a str,
    /// What ran: `reference executor (sim)`, or the `--executor` command line.
    executor: &'a str,
    /// `--shard K/N`: the run took every case whose position modulo N is K-1.
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<Shard>,
    /// `--strict`: hazards fail the run as violations do.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    strict: bool,
    /// Counts of outcomes.
    totals: Totals,
    /// Deprecated, goes away with the next schema version (read each case's `verdicts`): the
    /// distinct verdict lists of the passed cases, each naming its entry in `verdict_set`
    /// (from 0).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("deprecated" = true))]
    verdict_sets: Vec<&'a [Verdict]>,
    /// One per case, in the run's order.
    results: Vec<Cow<'a, ScenarioResult>>,
}

/// [`RunResults`] as the file holds it, read.
#[derive(Deserialize)]
struct RunFileIn {
    schema: String,
    tool_version: String,
    seed: u64,
    driver: String,
    executor: String,
    #[serde(default)]
    shard: Option<Shard>,
    #[serde(default)]
    strict: bool,
    totals: Totals,
    #[serde(default)]
    verdict_sets: Vec<Vec<Verdict>>,
    results: Vec<ScenarioResult>,
}

/// Reads a results file (or the `results.json` inside a report directory), refusing another
/// schema version. A passed case of a file written before every row carried its verdicts
/// gets them from the run's table.
pub fn read(path: &Path) -> Result<RunResults, ReportError> {
    let path = if path.is_dir() { path.join(crate::RESULTS_FILE) } else { path.to_path_buf() };
    let text = std::fs::read_to_string(&path).map_err(|e| ReportError::io(&path, e))?;
    // The schema first, so that a future version gets a clear message rather than a field error.
    #[derive(Deserialize)]
    struct Schema {
        #[serde(default)]
        schema: String,
    }
    let schema = serde_json::from_str::<Schema>(&text)
        .map_err(|e| ReportError::Json { path: path.clone(), source: e })?
        .schema;
    if schema != RESULTS_SCHEMA {
        return Err(ReportError::Schema { path, found: schema, expected: RESULTS_SCHEMA });
    }
    let file: RunFileIn =
        serde_json::from_str(&text).map_err(|e| ReportError::Json { path: path.clone(), source: e })?;
    let sets = file.verdict_sets;
    let mut run = RunResults {
        schema: file.schema,
        tool_version: file.tool_version,
        seed: file.seed,
        driver: file.driver,
        executor: file.executor,
        shard: file.shard,
        strict: file.strict,
        totals: file.totals,
        results: file.results,
    };
    for r in &mut run.results {
        // The table is an alias of the rows' own lists; only an earlier file needs it.
        if let Some(set) = r.verdict_set.take()
            && r.verdicts.is_empty()
        {
            let verdicts = sets.get(set).ok_or_else(|| {
                ReportError::Invalid(format!(
                    "{}: {} names verdict set {set}, the file has {}",
                    path.display(),
                    r.name,
                    sets.len()
                ))
            })?;
            r.verdicts = verdicts.clone();
        }
    }
    Ok(run)
}
