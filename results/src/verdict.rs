//! What was judged: each invariant's [`Verdict`] on one run (with its [`Status`]), and the
//! [`Hazard`]s, safeguards an executor skipped that nothing in the run exploited.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How one invariant came out on one run.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The run gave the checker something to judge, and nothing broke the invariant.
    #[default]
    Held,
    /// Something bad happened in this run; the evidence says what.
    Violated,
    /// The run gave the checker nothing to judge (no replacement to time, no second writer,
    /// ...); the reason says why. Never a failure, never a silent pass.
    NotJudged,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Held => "held",
            Status::Violated => "violated",
            Status::NotJudged => "not judged",
        }
    }
}

/// The outcome of one invariant on one run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(from = "VerdictFields")]
pub struct Verdict {
    /// A stable slug, e.g. `no-duplicate-effect`, `expected-states` or `executor-error`.
    pub invariant: String,
    /// Held, violated or not judged. Verdicts written before the field existed carry only
    /// `held`, which says held or violated; reading fills the status in from it.
    pub status: Status,
    /// False exactly when the invariant was violated (a verdict not judged did not fail).
    pub held: bool,
    /// One concrete line per problem (empty unless the invariant was violated).
    pub evidence: Vec<String>,
    /// Why the invariant was not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A verdict as files hold it, `status` perhaps missing (files older than the field).
#[derive(Deserialize, JsonSchema)]
struct VerdictFields {
    invariant: String,
    #[serde(default)]
    status: Option<Status>,
    held: bool,
    evidence: Vec<String>,
    #[serde(default)]
    reason: Option<String>,
}

impl From<VerdictFields> for Verdict {
    fn from(v: VerdictFields) -> Verdict {
        let status = v.status.unwrap_or(if v.held { Status::Held } else { Status::Violated });
        Verdict { invariant: v.invariant, status, held: v.held, evidence: v.evidence, reason: v.reason }
    }
}

impl Verdict {
    /// Held when there is no evidence against it, violated otherwise.
    pub fn from_evidence(invariant: &str, evidence: Vec<String>) -> Verdict {
        let status = if evidence.is_empty() { Status::Held } else { Status::Violated };
        Verdict {
            invariant: invariant.to_string(),
            status,
            held: evidence.is_empty(),
            evidence,
            reason: None,
        }
    }

    /// Not judged, for `reason`.
    pub fn not_judged(invariant: &str, reason: impl Into<String>) -> Verdict {
        Verdict {
            invariant: invariant.to_string(),
            status: Status::NotJudged,
            held: true,
            evidence: vec![],
            reason: Some(reason.into()),
        }
    }

    pub fn violated(&self) -> bool {
        self.status == Status::Violated
    }

    pub fn judged(&self) -> bool {
        self.status != Status::NotJudged
    }
}

/// A safeguard the service's contract offered and the executor did not use, in a run where
/// nothing exploited it: no harm happened, so it is no violation, but the catalog scenario
/// named here would turn it into one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct Hazard {
    /// A stable slug: `no-fencing-token`, `no-precondition` or `key-past-retention`.
    pub kind: String,
    pub service: String,
    /// The intent the unguarded write belongs to, when the checker can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// What was seen, naming the request or effect.
    pub detail: String,
    /// The catalog scenario that would exploit it.
    pub exploited_by: String,
    /// The command that runs that scenario against the same executor.
    pub command: String,
}
