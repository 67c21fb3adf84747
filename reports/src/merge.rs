//! `twice report merge`: the results of sharded runs joined into one run, as if it had not
//! been sharded. Shards must come from the same run (schema, seed, driver, executor, tool
//! version, `--strict`); every scenario keeps the position it had in the unsharded list, so the merged
//! results, and every file rendered from them, equal the unsharded run's.

use crate::ReportError;
use results::{RunResults, Shard, Totals};

/// Joins shard results; refuses shards of different runs and overlapping shards.
pub fn merge(shards: Vec<RunResults>) -> Result<RunResults, ReportError> {
    let mut shards = shards.into_iter();
    let Some(first) = shards.next() else {
        return Err(ReportError::Invalid("nothing to merge: give at least one report directory".into()));
    };
    let mut slices: Vec<Option<Shard>> = vec![first.shard];
    let mut merged = RunResults { shard: None, ..first };
    for shard in shards {
        slices.push(shard.shard);
        let same = |what: &str, a: &str, b: &str| {
            if a == b {
                Ok(())
            } else {
                Err(ReportError::Invalid(format!(
                    "these results come from different runs: {what} \"{a}\" and \"{b}\""
                )))
            }
        };
        same("schema", &merged.schema, &shard.schema)?;
        same("seed", &merged.seed.to_string(), &shard.seed.to_string())?;
        same("driver", &merged.driver, &shard.driver)?;
        same("executor", &merged.executor, &shard.executor)?;
        same("tool version", &merged.tool_version, &shard.tool_version)?;
        // `--strict` decides whether hazards fail the run: shards that disagree would make the
        // merged verdict depend on the order they were given in.
        same("strict", &merged.strict.to_string(), &shard.strict.to_string())?;
        merged.results.extend(shard.results);
    }
    complete(&slices)?;
    merged.results.sort_by_key(|r| r.position);
    for pair in merged.results.windows(2) {
        if pair[0].position == pair[1].position {
            return Err(ReportError::Invalid(format!(
                "scenario position {} (\"{}\") appears in two of the results: the same shard given twice, or shards of overlapping runs",
                pair[0].position, pair[0].name
            )));
        }
    }
    merged.totals = Totals::of(&merged.results);
    Ok(merged)
}

/// Shards of one run must all be there, once each: a merge that silently lacked a slice would
/// pass a CI job that never ran part of the suite.
fn complete(slices: &[Option<Shard>]) -> Result<(), ReportError> {
    let shards: Vec<Shard> = slices.iter().flatten().copied().collect();
    if shards.is_empty() {
        return Ok(());
    }
    if shards.len() != slices.len() {
        return Err(ReportError::Invalid(
            "cannot merge sharded and unsharded results: give the results of every --shard K/N run".into(),
        ));
    }
    let count = shards[0].count;
    if let Some(other) = shards.iter().find(|s| s.count != count) {
        return Err(ReportError::Invalid(format!("shards of different splits: {} and {other}", shards[0])));
    }
    let mut seen = vec![false; count as usize];
    for s in &shards {
        let slot = &mut seen[(s.index - 1) as usize];
        if *slot {
            return Err(ReportError::Invalid(format!("shard {s} given twice")));
        }
        *slot = true;
    }
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| !**s).map(|(i, _)| format!("{}/{count}", i + 1)).collect();
    if !missing.is_empty() {
        return Err(ReportError::Invalid(format!("shard {} missing", missing.join(", "))));
    }
    Ok(())
}
