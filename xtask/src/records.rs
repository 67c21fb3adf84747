//! Benchmark records: what the benchmarks report, and what `bench` keeps of a run.
//!
//! A benchmark reports each figure as one line on its standard output:
//!
//! ```text
//! BENCH {"bench":"fake-services/throughput","name":"payments fake, no rules","value":12345.6,"unit":"req/s","spread_pct":2.1,"notes":"..."}
//! ```
//!
//! - `bench` (string): the benchmark, `PACKAGE/TARGET`; records are grouped into one section
//!   per value, in the order of [`BENCHES`](crate::bench::BENCHES).
//! - `name` (string): the figure, one row of the section's table, in the order printed.
//! - `value` (number) and `unit` (string): the figure itself, e.g. `req/s`, `ms`; a ratio of
//!   two figures is a record of its own with unit `x`.
//! - `display` (string, optional): shown instead of the number, for a figure that is not
//!   one ("not found within 2,000 cases"); `value` still holds a number for comparisons.
//! - `spread_pct` (number, optional): how much repeated measurements varied, as
//!   (max - min) / median in percent.
//! - `notes` (string, optional): how to read the figure (setup, target met or not), printed
//!   under the table.
//!
//! A record with `table` (its title), `columns` (strings) and `rows` (arrays of strings) is a
//! table of its own, printed under the section's figures with its `notes`.
//!
//! Besides `docs/benchmarks.md`, a run writes every figure to `docs/benchmarks.json`; the next
//! run reads it back and prints each figure's change since then, so the document shows how
//! much figures move from one run to the next. The headlines (`headlines.rs`) are written at
//! the top of the document and between the `bench:headlines` markers of README.md.
//!
//! The benchmarks build figure records with `bench_support::record`, and take medians and
//! spreads with `bench_support::summary`. Every other line is only echoed.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// A figure: one `BENCH` line; see the module documentation.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(crate) struct Record {
    pub(crate) bench: String,
    pub(crate) name: String,
    pub(crate) value: f64,
    pub(crate) unit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) display: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spread_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) notes: Option<String>,
}

/// A table: one `BENCH` line with `table`, `columns` and `rows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Table {
    pub(crate) bench: String,
    pub(crate) table: String,
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    #[serde(default)]
    pub(crate) notes: Option<String>,
}

impl Record {
    /// A figure in seconds of section `bench`, read from a saved run's output rather than
    /// measured (no spread, nothing to display but the value).
    pub(crate) fn seconds(bench: &str, name: String, value: f64) -> Self {
        Record {
            bench: bench.into(),
            name,
            value,
            unit: "s".into(),
            display: None,
            spread_pct: None,
            notes: None,
        }
    }
}

/// Everything the benchmarks reported, in the order they printed it.
#[derive(Debug, Default)]
pub(crate) struct Records {
    pub(crate) figures: Vec<Record>,
    pub(crate) tables: Vec<Table>,
}

impl Records {
    /// Parses the JSON after `BENCH `: a table when it names one, a figure otherwise.
    pub(crate) fn add(&mut self, json: &str) -> Result<()> {
        let value: serde_json::Value = serde_json::from_str(json).context("not JSON")?;
        if value.get("table").is_some() {
            let table: Table = serde_json::from_value(value).context("not a table record")?;
            if let Some(row) = table.rows.iter().find(|r| r.len() != table.columns.len()) {
                bail!(
                    "table `{}` has {} columns but a row with {} cells: {row:?}",
                    table.table,
                    table.columns.len(),
                    row.len()
                );
            }
            self.tables.push(table);
        } else {
            self.figures.push(serde_json::from_value(value).context("not a figure record")?);
        }
        Ok(())
    }

    /// The figure called `name`; a `*` in `name` stands for any text (a count in a figure's
    /// name, such as the catalog's size, changes as the catalog grows).
    pub(crate) fn figure(&self, bench: &str, name: &str) -> Option<&Record> {
        let matches = |candidate: &str| match name.split_once('*') {
            Some((head, tail)) => {
                candidate.len() >= head.len() + tail.len()
                    && candidate.starts_with(head)
                    && candidate.ends_with(tail)
            }
            None => candidate == name,
        };
        self.figures.iter().find(|r| r.bench == bench && matches(&r.name))
    }
}

/// The figures of one run, as `docs/benchmarks.json` keeps them for the next.
#[derive(Debug, Deserialize, Serialize)]
pub(crate) struct Saved {
    pub(crate) date: String,
    pub(crate) figures: Vec<Record>,
}
