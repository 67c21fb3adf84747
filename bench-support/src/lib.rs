//! What the benchmark targets share, so that every `BENCH` record is built, and every median
//! and spread taken, the same way: `cargo xtask bench` reads the records (their format is
//! described in `xtask/src/main.rs`) and compares figures from one run to the next, which only
//! means something when every benchmark summarises its samples alike.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

use std::path::PathBuf;

use serde_json::{Value, json};

/// One figure as a `BENCH` record. Values are rounded (ratios to 3 places, the rest to 2) so
/// that `docs/benchmarks.json` does not carry noise digits; the spread to one place.
pub fn record(
    bench: &str,
    name: &str,
    value: f64,
    unit: &str,
    spread_pct: Option<f64>,
    notes: &str,
) -> Value {
    let round = |v: f64, places: i32| (v * 10f64.powi(places)).round() / 10f64.powi(places);
    let mut r = json!({
        "bench": bench,
        "name": name,
        "value": round(value, if unit == "x" { 3 } else { 2 }),
        "unit": unit,
        "notes": notes,
    });
    if let Some(spread) = spread_pct {
        r["spread_pct"] = json!(round(spread, 1));
    }
    r
}

/// The median and the spread, (max - min) / median in percent; `(0, 0)` for no samples.
pub fn summary(samples: &[f64]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
    let spread = if median > 0.0 { (sorted[n - 1] - sorted[0]) / median * 100.0 } else { 0.0 };
    (median, spread)
}

/// The 1-minute load average, as /proc/loadavg says (the machine may be shared), or
/// "unknown".
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// A fresh directory under the system's temp dir, removed when dropped.
pub struct WorkDir {
    pub path: PathBuf,
}

impl WorkDir {
    pub fn create(name: &str) -> std::io::Result<WorkDir> {
        let path = std::env::temp_dir().join(format!("twice-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(WorkDir { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spreads() {
        assert_eq!(summary(&[]), (0.0, 0.0));
        assert_eq!(summary(&[3.0, 1.0, 2.0]), (2.0, 100.0));
        assert_eq!(summary(&[4.0, 1.0, 2.0, 3.0]), (2.5, 120.0));
    }

    #[test]
    fn records_round_and_leave_out_a_missing_spread() {
        let r = record("b/t", "n", 1.234_567, "x", None, "notes");
        assert_eq!(r["value"], json!(1.235));
        assert!(r.get("spread_pct").is_none());
        let r = record("b/t", "n", 1_234.567, "req/s", Some(12.34), "");
        assert_eq!(r["value"], json!(1234.57));
        assert_eq!(r["spread_pct"], json!(12.3));
    }
}
