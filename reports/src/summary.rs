//! `summary.md`: a short Markdown summary, fit for a pull-request comment.
//!
//! Everything an executor sent (evidence, ids, error texts) goes into code spans, whose text
//! Markdown renders literally (no emphasis, no links, no HTML), with table pipes escaped and
//! cut to one line, so a hostile or merely chatty executor can neither break the table nor
//! inject markup. The failure table is capped at [`FAILURE_ROWS_MAX`] rows so the comment
//! stays within what code hosts accept.
//!
//! A verdict that was not judged is never shown as held: the failure table lists violations
//! only (not-judged rows there would crowd the harm out of a capped table), and a line under the
//! totals counts the verdicts not judged over the whole run and points at `report.html`, which
//! gives each reason.
//! Hazards are grouped by kind, one item each, so that a run with thousands of scenarios
//! still gives a few lines.

use std::collections::BTreeMap;
use std::fmt::Write;

use results::{Hazard, Outcome, RunResults, ScenarioResult};

/// Rows of the failure table; the rest are counted and left to `report.html`.
pub const FAILURE_ROWS_MAX: usize = 50;
/// Characters of evidence per row.
pub const EVIDENCE_CHARS_MAX: usize = 160;

/// The summary's text.
pub fn render(run: &RunResults) -> String {
    let t = &run.totals;
    let mut out = String::new();
    let failed = t.violated + t.executor_errors;
    // One scenario (what `twice check` judges) reads as itself, not as "all 1 scenarios".
    let passed = if t.scenarios == 1 {
        "the scenario passed".to_string()
    } else {
        format!("all {} scenarios passed", t.scenarios)
    };
    let headline = if failed > 0 {
        if t.scenarios == 1 {
            "the scenario failed".to_string()
        } else {
            format!("{failed} of {} scenarios failed", t.scenarios)
        }
    } else if t.hazards > 0 && run.strict {
        let verb = if t.hazards == 1 { "fails" } else { "fail" };
        format!("{passed}, but {} {verb} the run (`--strict`)", hazards(t.hazards))
    } else if t.hazards > 0 {
        format!("{passed}, with {}", hazards(t.hazards))
    } else {
        passed
    };
    let _ = writeln!(out, "# twice: {headline}\n");
    let shard = run.shard.map(|s| format!(" · shard {s}")).unwrap_or_default();
    let strict = if run.strict { " · `--strict`" } else { "" };
    let _ = writeln!(
        out,
        "Executor {} · driver {} · seed {} · twice {}{shard}{strict}\n",
        code_span(&run.executor),
        run.driver,
        run.seed,
        run.tool_version
    );
    let _ = writeln!(
        out,
        "| passed | violated | executor errors | hazards | total |\n|---:|---:|---:|---:|---:|"
    );
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} |",
        t.passed, t.violated, t.executor_errors, t.hazards, t.scenarios
    );
    if run.strict {
        let _ = writeln!(out, "\nWith `--strict`, hazards fail the run as violations do.");
    }
    not_judged(&mut out, run);
    unsettled(&mut out, run);
    if failed > 0 {
        failures(&mut out, run);
    }
    if t.hazards > 0 {
        hazard_kinds(&mut out, run);
    }
    out
}

fn hazards(count: usize) -> String {
    if count == 1 { "1 hazard".to_string() } else { format!("{count} hazards") }
}

/// One line counting the verdicts the run could not judge, so that a passing run does not
/// read as if every invariant had held; the reasons are in `report.html`.
fn not_judged(out: &mut String, run: &RunResults) {
    let mut verdicts = 0;
    let mut scenarios = 0;
    for r in &run.results {
        let n = r.verdicts.iter().filter(|v| !v.judged()).count();
        verdicts += n;
        scenarios += usize::from(n > 0);
    }
    if verdicts > 0 {
        let _ = writeln!(
            out,
            "\n{verdicts} {} not judged (the run gave the checker nothing to judge them on), in {scenarios} {}: `report.html` gives each reason.",
            if verdicts == 1 { "verdict" } else { "verdicts" },
            if scenarios == 1 { "scenario" } else { "scenarios" }
        );
    }
}

/// The scenarios judged while something could still change a ledger, each with what was
/// pending then (capped as the failure table is).
fn unsettled(out: &mut String, run: &RunResults) {
    let judged: Vec<&ScenarioResult> = run.results.iter().filter(|r| r.observed.judged_unsettled()).collect();
    if judged.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "
## Judged before the world settled
"
    );
    for r in judged.iter().take(FAILURE_ROWS_MAX) {
        let lines = r.observed.unsettled_lines();
        if let Some((headline, pending)) = lines.split_first() {
            let _ = writeln!(out, "- {}: {}", code_span(&r.name), one_line(headline, EVIDENCE_CHARS_MAX));
            for line in pending {
                let _ = writeln!(out, "  - {}", code_span(&one_line(line, EVIDENCE_CHARS_MAX)));
            }
        }
    }
    if judged.len() > FAILURE_ROWS_MAX {
        let _ = writeln!(
            out,
            "
{} more: see `report.html`.",
            judged.len() - FAILURE_ROWS_MAX
        );
    }
}

/// The failure table, the replay commands and how far shrinking got.
fn failures(out: &mut String, run: &RunResults) {
    let _ = writeln!(out, "\n## Failures\n\n| scenario | invariant | evidence |\n|---|---|---|");
    let failures: Vec<&ScenarioResult> =
        run.results.iter().filter(|r| r.outcome != Outcome::Passed).collect();
    let mut rows = 0;
    let mut violations_left = 0;
    for r in &failures {
        for v in r.violations() {
            if rows == FAILURE_ROWS_MAX {
                violations_left += 1;
                continue;
            }
            rows += 1;
            let first = v.evidence.first().map(String::as_str).unwrap_or("");
            let more = match v.evidence.len() {
                0 | 1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {}{more} |",
                cell(&r.name),
                cell(&v.invariant),
                cell(&one_line(first, EVIDENCE_CHARS_MAX))
            );
        }
    }
    if violations_left > 0 {
        let _ = writeln!(out, "\n{violations_left} more violations: see `report.html`.");
    }

    let _ = writeln!(out, "\n## Replay\n");
    let replays: Vec<String> = failures.iter().take(FAILURE_ROWS_MAX).map(|r| r.replay.clone()).collect();
    let _ = writeln!(out, "{}", code_block(&replays));
    if failures.len() > FAILURE_ROWS_MAX {
        let _ = writeln!(
            out,
            "\n{} more replay commands: see `results.json`.",
            failures.len() - FAILURE_ROWS_MAX
        );
    }

    let shrunk: Vec<&&ScenarioResult> =
        failures.iter().filter(|r| r.shrunk.is_some() || r.shrink.is_some()).collect();
    if shrunk.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n## Minimal scenarios\n");
    for r in shrunk.iter().take(FAILURE_ROWS_MAX) {
        let mut parts = Vec::new();
        if let Some(path) = &r.shrunk {
            parts.push(code_span(path));
        }
        if let Some(shrink) = &r.shrink {
            // Every part of the line is a number or a word of ours, unless `stopped` is a
            // value this version does not know: that one is data.
            let line = shrink.line();
            parts.push(if shrink.why_stopped().is_some() { line } else { code_span(&line) });
        }
        let _ = writeln!(out, "- {}: {}", code_span(&r.name), parts.join("; "));
    }
    if shrunk.len() > FAILURE_ROWS_MAX {
        let _ = writeln!(out, "\n{} more: see `results.json`.", shrunk.len() - FAILURE_ROWS_MAX);
    }
}

/// The run's hazards, one item per kind: how many scenarios have it, one example, and the
/// catalog scenario that would turn it into a violation, with the command that runs it.
fn hazard_kinds(out: &mut String, run: &RunResults) {
    struct Kind<'a> {
        scenarios: usize,
        example: &'a Hazard,
        /// Distinct (scenario, command) pairs that would exploit it, in run order.
        exploited_by: Vec<(&'a str, &'a str)>,
    }
    let mut kinds: BTreeMap<&str, Kind<'_>> = BTreeMap::new();
    for r in &run.results {
        let mut counted: Vec<&str> = Vec::new();
        for h in &r.hazards {
            let kind = kinds.entry(h.kind.as_str()).or_insert(Kind {
                scenarios: 0,
                example: h,
                exploited_by: vec![],
            });
            if !counted.contains(&h.kind.as_str()) {
                counted.push(h.kind.as_str());
                kind.scenarios += 1;
            }
            let exploit = (h.exploited_by.as_str(), h.command.as_str());
            if !kind.exploited_by.contains(&exploit) {
                kind.exploited_by.push(exploit);
            }
        }
    }
    let consequence = if run.strict {
        "they fail this run because of `--strict`"
    } else {
        "they do not fail the run (`--strict` would make them)"
    };
    let _ = writeln!(
        out,
        "\n## Hazards\n\nSafeguards a service's contract offered that the executor did not use. Nothing in this run exploited them, so no invariant broke; {consequence}.\n"
    );
    for (name, kind) in &kinds {
        let _ = writeln!(
            out,
            "- {} in {} {}, e.g. on {}: {}",
            code_span(name),
            kind.scenarios,
            if kind.scenarios == 1 { "scenario" } else { "scenarios" },
            code_span(&kind.example.service),
            code_span(&one_line(&kind.example.detail, EVIDENCE_CHARS_MAX))
        );
        for (scenario, command) in &kind.exploited_by {
            let _ = writeln!(out, "  - {} would exploit it: {}", code_span(scenario), code_span(command));
        }
    }
}

/// The first line of `text`, at most `chars_max` characters, with an ellipsis when cut.
pub fn one_line(text: &str, chars_max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    let cut = line.lines().count() != text.lines().count() || line.chars().count() > chars_max;
    let mut out: String = line.chars().take(chars_max).collect();
    if cut {
        out.push('…');
    }
    out
}

/// A table cell: a code span, with the pipes that would end the cell escaped (GitHub's
/// tables split on `|` even inside code spans, and drop the backslash there).
pub fn cell(text: &str) -> String {
    code_span(text).replace('|', "\\|")
}

/// An inline code span that no backtick in `text` can close early.
fn code_span(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    let fence = "`".repeat(longest_backtick_run(&text) + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A fenced code block that no line in `lines` can close early.
fn code_block(lines: &[String]) -> String {
    let longest = lines.iter().map(|l| longest_backtick_run(l)).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}sh\n{}\n{fence}", lines.join("\n"))
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_tables_and_markup_inert() {
        assert_eq!(cell("a|b"), "`a\\|b`");
        assert_eq!(cell("<script>alert(1)</script>"), "`<script>alert(1)</script>`");
        assert_eq!(cell("two\nlines"), "`two lines`");
    }

    #[test]
    fn code_spans_and_blocks_outlast_backticks_inside() {
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("`x"), "`` `x ``");
        assert!(code_block(&["echo ```".into()]).starts_with("````sh\n"));
    }

    #[test]
    fn one_line_cuts_long_and_multiline_text() {
        assert_eq!(one_line("short", 10), "short");
        assert_eq!(one_line("first\nsecond", 10), "first…");
        assert_eq!(one_line("abcdefghijkl", 5), "abcde…");
    }
}
