//! The whole-catalog section of `docs/engines.md`: every engine's apps run through `twice/1`
//! (`python -m twice.engines.<engine>`) over the catalog and 20 generated cases. A full
//! `cargo xtask engines` makes each engine's tests write `examples/engines/<engine>/matrix.json`
//! (`examples/engines/twice1_route.py`), and this module turns those files into a summary across
//! engines by failure family, and per engine a row per scenario an app ran, with the one line
//! of evidence of each violation and its replay command.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

pub(crate) const MATRIX_BEGIN: &str = "<!-- matrix:begin (written by `cargo xtask engines` from examples/engines/*/matrix.json; do not edit by hand) -->";
pub(crate) const MATRIX_END: &str = "<!-- matrix:end -->";
/// The apps, in the tables' order.
const APPS: [&str; 2] = ["idiomatic", "careful"];

/// Per (engine, app): how many of the scenarios it ran it violated, and how many it ran.
type Counts<'a> = BTreeMap<(&'a str, &'a str), (usize, usize)>;

/// Every engine's `matrix.json` that exists, in `engines` order.
pub(crate) fn read_matrices(root: &Path, engines: &[&'static str]) -> Result<Vec<(&'static str, Value)>> {
    let mut out = Vec::new();
    for engine in engines {
        let path = root.join("examples/engines").join(engine).join("matrix.json");
        if !path.exists() {
            continue;
        }
        let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        out.push((*engine, value));
    }
    Ok(out)
}

/// Replaces the section between [`MATRIX_BEGIN`] and [`MATRIX_END`] of `doc` with `section`.
pub(crate) fn write_section(doc: &Path, section: &str) -> Result<()> {
    let text = fs::read_to_string(doc).with_context(|| format!("cannot read {}", doc.display()))?;
    let (Some(b), Some(e)) = (text.find(MATRIX_BEGIN), text.find(MATRIX_END)) else {
        bail!("{} has no `{MATRIX_BEGIN}` ... `{MATRIX_END}` section", doc.display());
    };
    let updated = format!("{}{section}{}", &text[..b], &text[e + MATRIX_END.len()..]);
    fs::write(doc, updated).with_context(|| format!("cannot write {}", doc.display()))
}

fn rows<'a>(matrix: &'a Value, app: &str) -> &'a [Value] {
    matrix["apps"][app]["results"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn ran(row: &Value) -> bool {
    row["outcome"] != "not-run"
}

/// The section: the summary across engines, then each engine's matrix.
pub(crate) fn render_matrix(matrices: &[(&str, Value)]) -> String {
    let mut out = format!("{MATRIX_BEGIN}\n\n");
    if matrices.is_empty() {
        out.push_str("Not run yet: a full `cargo xtask engines` writes it.\n\n");
    } else {
        out.push_str(&render_summary(matrices));
        for (engine, matrix) in matrices {
            out.push_str(&render_engine(engine, matrix));
        }
    }
    out.push_str(MATRIX_END);
    out
}

/// Per failure family (the catalog's `failure_mode`; `generated` for generated cases), how
/// many of the scenarios each app ran it violated.
fn render_summary(matrices: &[(&str, Value)]) -> String {
    let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
    for (engine, matrix) in matrices {
        for app in APPS {
            for row in rows(matrix, app).iter().filter(|r| ran(r)) {
                let family = row["family"].as_str().unwrap_or("other").to_string();
                let cell = counts.entry(family).or_default().entry((*engine, app)).or_default();
                cell.1 += 1;
                if row["outcome"] != "passed" {
                    cell.0 += 1;
                }
            }
        }
    }
    let mut out = String::from(
        "Scenarios violated of those run, per failure family (the catalog's `failure_mode`), idiomatic · careful:\n\n| failure family |",
    );
    for (engine, _) in matrices {
        out.push_str(&format!(" {engine} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(matrices.len()));
    out.push('\n');
    // Generated cases last, the catalog's families in name order before them.
    let mut families: Vec<&String> = counts.keys().collect();
    families.sort_by_key(|f| (f.as_str() == "generated", f.as_str()));
    for family in families {
        out.push_str(&format!("| {family} |"));
        for (engine, _) in matrices {
            let cell = |app| counts[family].get(&(*engine, app)).copied();
            let text = match (cell("idiomatic"), cell("careful")) {
                (None, None) => "not run".to_string(),
                (i, c) => format!("{} · {}", fraction(i), fraction(c)),
            };
            out.push_str(&format!(" {text} |"));
        }
        out.push('\n');
    }
    out.push_str(&not_run_line(matrices));
    out
}

fn fraction(cell: Option<(usize, usize)>) -> String {
    match cell {
        None => "–".to_string(),
        Some((0, n)) => format!("0/{n}"),
        Some((v, n)) => format!("**{v}**/{n}"),
    }
}

/// Per engine, how many scenarios its careful app did not run, and the actions it does not do
/// that left them unrun.
fn not_run_line(matrices: &[(&str, Value)]) -> String {
    let mut lines = Vec::new();
    for (engine, matrix) in matrices {
        let mut by_action: BTreeMap<&str, usize> = BTreeMap::new();
        let mut total = 0;
        for row in rows(matrix, "careful") {
            if !ran(row) {
                total += 1;
            }
            for action in row["unsupported"].as_array().map(Vec::as_slice).unwrap_or_default() {
                *by_action.entry(action.as_str().unwrap_or("?")).or_default() += 1;
            }
        }
        let actions: Vec<String> = by_action.iter().map(|(a, n)| format!("`{a}` ({n})")).collect();
        if total == 0 && actions.is_empty() {
            lines.push(format!("- {engine}: every scenario ran"));
            continue;
        }
        let not_done = if actions.is_empty() { "none".to_string() } else { actions.join(", ") };
        lines.push(format!("- {engine}: {total} not run; actions its apps do not do: {not_done}"));
    }
    format!(
        "\nBy service: a scenario whose intents are all actions an engine's apps do not do is not run \
         there, and one partly so runs in part (scenarios per action in brackets):\n\n{}\n\n",
        lines.join("\n")
    )
}

/// One engine: its runs (date, versions, command, totals), a row per scenario either app ran,
/// and the replay command of every violation.
fn render_engine(engine: &str, matrix: &Value) -> String {
    let mut out = format!("### {engine}, whole catalog\n\n");
    for app in APPS {
        let run = &matrix["apps"][app];
        if run.is_null() {
            out.push_str(&format!("- {app}: not run yet\n"));
            continue;
        }
        let versions: Vec<String> = run["versions"]
            .as_object()
            .map(|v| v.iter().map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?"))).collect())
            .unwrap_or_default();
        let totals = &run["totals"];
        out.push_str(&format!(
            "- {app}: `{}` on {} with {}: {} scenarios, {} passed, {} violated, {} executor errors, {} hazards\n",
            run["command"].as_str().unwrap_or("?"),
            run["date"].as_str().unwrap_or("?"),
            versions.join(", "),
            totals["scenarios"],
            totals["passed"],
            totals["violated"],
            totals["executor_errors"],
            totals["hazards"]
        ));
    }
    out.push_str("\n| scenario | family | idiomatic | careful |\n|---|---|---|---|\n");
    let mut order: Vec<(i64, String)> = Vec::new();
    let mut by_scenario: BTreeMap<String, BTreeMap<&str, &Value>> = BTreeMap::new();
    for app in APPS {
        for (n, row) in rows(matrix, app).iter().enumerate().filter(|(_, r)| ran(r)) {
            let name = row["scenario"].as_str().unwrap_or("?").to_string();
            if !by_scenario.contains_key(&name) {
                order.push((i64::try_from(n).unwrap_or(i64::MAX), name.clone()));
            }
            by_scenario.entry(name).or_default().insert(app, row);
        }
    }
    order.sort();
    let mut replays = Vec::new();
    for (_, name) in &order {
        let apps = &by_scenario[name];
        let family = apps.values().next().and_then(|r| r["family"].as_str()).unwrap_or("?");
        let cell = |app: &str| apps.get(app).map_or_else(|| "not run".to_string(), |r| cell_text(r));
        out.push_str(&format!("| `{name}` | {family} | {} | {} |\n", cell("idiomatic"), cell("careful")));
        for app in APPS {
            if let Some(row) = apps.get(app).filter(|r| r["outcome"] != "passed") {
                replays.push(format!("- {app}, `{name}`: `{}`", row["replay"].as_str().unwrap_or("?")));
            }
        }
    }
    if !replays.is_empty() {
        out.push_str("\nReplay each violation:\n\n");
        out.push_str(&replays.join("\n"));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// A cell: passed, or the invariants violated and the first line of evidence.
fn cell_text(row: &Value) -> String {
    let outcome = row["outcome"].as_str().unwrap_or("?");
    if outcome == "passed" {
        return "passed".to_string();
    }
    let violated: Vec<String> = row["violated"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).map(|s| format!("`{s}`")).collect())
        .unwrap_or_default();
    let head = if violated.is_empty() {
        format!("**{outcome}**")
    } else {
        format!("**violated** {}", violated.join(", "))
    };
    let evidence = row["evidence"].as_str().unwrap_or("").replace('|', "\\|");
    if evidence.is_empty() { head } else { format!("{head}: {evidence}") }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(scenario: &str, family: &str, outcome: &str, violated: &[&str]) -> Value {
        json!({"scenario": scenario, "family": family, "outcome": outcome, "violated": violated,
               "unsupported": if outcome == "not-run" { json!(["files.put"]) } else { json!([]) },
               "evidence": if violated.is_empty() { "" } else { "two | refunds" }, "replay": format!("twice run --scenario {scenario}")})
    }

    fn app(results: Vec<Value>) -> Value {
        json!({"date": "2026-12-05", "command": "twice run --executor x", "versions": {"dbos": "3.4.0"},
               "totals": {"scenarios": 3, "passed": 2, "violated": 1, "executor_errors": 0, "hazards": 0},
               "results": results})
    }

    #[test]
    fn the_section_counts_families_lists_what_ran_and_replays_each_violation() {
        let matrix = json!({"engine": "dbos", "apps": {
            "idiomatic": app(vec![row("lost", "lost_reply", "violated", &["no-duplicate-effect"]),
                                  row("files_x", "lost_reply", "not-run", &[]), row("generated-1", "generated", "passed", &[])]),
            "careful": app(vec![row("lost", "lost_reply", "passed", &[]),
                                row("files_x", "lost_reply", "not-run", &[]), row("generated-1", "generated", "passed", &[])]),
        }});
        let text = render_matrix(&[("dbos", matrix)]);
        assert!(text.contains("| lost_reply | **1**/1 · 0/1 |\n| generated | 0/1 · 0/1 |\n"), "{text}");
        assert!(text.contains("- dbos: 1 not run; actions its apps do not do: `files.put` (1)"), "{text}");
        assert!(
            text.contains(
                "| `lost` | lost_reply | **violated** `no-duplicate-effect`: two \\| refunds | passed |"
            ),
            "{text}"
        );
        assert!(!text.contains("| `files_x`"), "{text}");
        assert!(text.contains("- idiomatic, `lost`: `twice run --scenario lost`"), "{text}");
        assert!(text.starts_with(MATRIX_BEGIN) && text.ends_with(MATRIX_END));
    }

    #[test]
    fn an_engine_whose_apps_ran_every_scenario_says_so() {
        let all = json!({"engine": "dbos", "apps": {"careful": app(vec![row("lost", "lost_reply", "passed", &[])])}});
        assert!(render_matrix(&[("dbos", all)]).contains("- dbos: every scenario ran\n"));
    }
}
