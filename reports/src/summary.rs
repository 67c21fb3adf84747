//! `summary.md`: a short Markdown summary, fit for a pull-request comment.
//!
//! Everything an executor sent (evidence, ids, error texts) goes into code spans, whose text
//! Markdown renders literally (no emphasis, no links, no HTML), with table pipes escaped and
//! cut to one line, so a hostile or merely chatty executor can neither break the table nor
//! inject markup. The failure table is capped
//! at [`FAILURE_ROWS_MAX`] rows so the comment stays within what code hosts accept.

use std::fmt::Write;

use crate::model::{Outcome, RunResults};

/// Rows of the failure table; the rest are counted and left to `report.html`.
pub const FAILURE_ROWS_MAX: usize = 50;
/// Characters of evidence per row.
pub const EVIDENCE_CHARS_MAX: usize = 160;

/// The summary's text.
pub fn render(run: &RunResults) -> String {
    let t = &run.totals;
    let mut out = String::new();
    let failed = t.violated + t.executor_errors;
    let headline = if failed == 0 {
        format!("all {} scenarios passed", t.scenarios)
    } else {
        format!("{failed} of {} scenarios failed", t.scenarios)
    };
    let _ = writeln!(out, "# twice: {headline}\n");
    let shard = run.shard.map(|s| format!(" · shard {s}")).unwrap_or_default();
    let _ = writeln!(
        out,
        "Executor {} · driver {} · seed {} · twice {}{shard}\n",
        code_span(&run.executor),
        run.driver,
        run.seed,
        run.tool_version
    );
    let _ = writeln!(out, "| passed | violated | executor errors | total |\n|---:|---:|---:|---:|");
    let _ = writeln!(out, "| {} | {} | {} | {} |", t.passed, t.violated, t.executor_errors, t.scenarios);
    if failed == 0 {
        return out;
    }

    let _ = writeln!(out, "\n## Failures\n\n| scenario | invariant | evidence |\n|---|---|---|");
    let failures: Vec<_> = run.results.iter().filter(|r| r.outcome != Outcome::Passed).collect();
    let mut rows = 0;
    let mut rows_left = 0;
    for r in &failures {
        for v in r.violations() {
            if rows == FAILURE_ROWS_MAX {
                rows_left += 1;
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
    if rows_left > 0 {
        let _ = writeln!(out, "\n{rows_left} more violations: see `report.html`.");
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
    let shrunk: Vec<&str> = failures.iter().filter_map(|r| r.shrunk.as_deref()).collect();
    if !shrunk.is_empty() {
        let _ = writeln!(
            out,
            "\nMinimal scenarios: {}",
            shrunk.iter().map(|s| code_span(s)).collect::<Vec<_>>().join(", ")
        );
    }
    out
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
