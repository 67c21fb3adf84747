//! The conformance table: action x failure mode, from the scenarios' verdicts.

use super::*;

/// What a cell says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CellOutcome {
    Unsupported,
    Passed,
    Violated,
}

/// One action × failure mode: the worst outcome of the scenarios that combine them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub outcome: CellOutcome,
    /// The invariants violated (sorted), for `violated`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invariants: Vec<String>,
    /// The kinds of hazard the scenarios behind the cell showed (sorted): safeguards the
    /// executor skipped where nothing exploited them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazards: Vec<String>,
    /// The scenarios behind the cell, sorted.
    pub scenarios: Vec<String>,
}

impl Cell {
    pub fn text(&self) -> String {
        let hazards = if self.hazards.is_empty() {
            String::new()
        } else {
            format!("; hazard: {}", self.hazards.join(", "))
        };
        match self.outcome {
            CellOutcome::Passed if hazards.is_empty() => "passed".into(),
            CellOutcome::Passed => format!("passed ({})", &hazards[2..]),
            CellOutcome::Unsupported => "unsupported".into(),
            CellOutcome::Violated => format!("violated ({}{hazards})", self.invariants.join(", ")),
        }
    }
}

/// One action's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub action: String,
    /// Whether `init_ok` listed it.
    pub announced: bool,
    /// Failure mode → cell; a mode no scenario combines with the action is absent (`-`).
    pub cells: BTreeMap<String, Cell>,
}

/// Actions × failure modes, both sorted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Table {
    pub failure_modes: Vec<String>,
    pub rows: Vec<Row>,
}

/// The column a case goes to.
pub(super) fn column(case: &Case) -> String {
    match (&case.scenario.failure_mode, &case.source) {
        (Some(mode), _) => mode.clone(),
        (None, Source::Generated { .. }) => GENERATED_COLUMN.into(),
        (None, _) => UNCLASSIFIED_COLUMN.into(),
    }
}

/// The table of a run: `results` in the order of `cases`.
pub fn table(init: &Init, cases: &[Case], results: &[ScenarioResult]) -> Table {
    let mut modes = BTreeSet::new();
    let mut cells: BTreeMap<String, BTreeMap<String, Cell>> =
        init.actions.iter().map(|a| (a.clone(), BTreeMap::new())).collect();
    for (case, result) in cases.iter().zip(results) {
        let mode = column(case);
        modes.insert(mode.clone());
        let actions: BTreeSet<&str> = case.scenario.intents.iter().map(|i| i.action.as_str()).collect();
        for action in actions {
            let outcome = if !init.supports(action) || result.observed.unsupported.iter().any(|a| a == action)
            {
                CellOutcome::Unsupported
            } else if result.outcome == Outcome::Passed {
                CellOutcome::Passed
            } else {
                CellOutcome::Violated
            };
            let cell = cells.entry(action.to_string()).or_default().entry(mode.clone()).or_insert(Cell {
                outcome,
                invariants: Vec::new(),
                hazards: Vec::new(),
                scenarios: Vec::new(),
            });
            cell.outcome = cell.outcome.max(outcome);
            cell.scenarios.push(result.name.clone());
            if outcome == CellOutcome::Violated {
                cell.invariants.extend(result.violations().map(|v| v.invariant.clone()));
            }
            if outcome != CellOutcome::Unsupported {
                cell.hazards.extend(result.hazards.iter().map(|h| h.kind.clone()));
            }
        }
    }
    let rows = cells
        .into_iter()
        .map(|(action, mut cells)| {
            for cell in cells.values_mut() {
                for list in [&mut cell.invariants, &mut cell.hazards, &mut cell.scenarios] {
                    list.sort();
                    list.dedup();
                }
            }
            Row { announced: init.supports(&action), action, cells }
        })
        .collect();
    Table { failure_modes: modes.into_iter().collect(), rows }
}

impl Table {
    /// The table in Markdown, one row per failure mode and one column per action (a catalog has
    /// dozens of failure modes and a handful of actions, so this way round fits a terminal);
    /// executor text (action names) in code spans.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| failure mode |");
        for row in &self.rows {
            out.push_str(&format!(" {} |", reports::summary::cell(&row.action)));
        }
        out.push_str("\n|---|");
        out.push_str(&"---|".repeat(self.rows.len()));
        out.push('\n');
        for mode in &self.failure_modes {
            out.push_str(&format!("| {mode} |"));
            for row in &self.rows {
                let text = row.cells.get(mode).map_or("-".to_string(), Cell::text);
                out.push_str(&format!(" {text} |"));
            }
            out.push('\n');
        }
        out
    }
}
