//! The protocol rules `check-executor` holds an executor to, and their verdicts.

use super::*;

/// One protocol rule: a stable name, what its check sends and what it expects back.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub name: &'static str,
    pub sends: &'static str,
    pub expects: &'static str,
}

pub const INIT_ANSWERED: Rule = Rule {
    name: "init-answered",
    sends: "init, as the live driver sends it (the four services on loopback with their contracts, \
            secrets, limits, a fresh state_dir)",
    expects: "init_ok within 30 s, in_reply_to 1, with executor {name, version} (strings) and \
              actions (a list of strings), and nothing else on stdout before it",
};

pub const REPLIES_WELL_FORMED: Rule = Rule {
    name: "replies-well-formed",
    sends: "init, propose (an intent of the first announced action the catalog uses) twice, \
            status, status with ids, reconcile, drain (timeout_ms 2000)",
    expects: "every stdout line one JSON object with a string type: events with string intent_id \
              and a known state; replies with in_reply_to the request's msg_id and type \
              <request>_ok or error (integer code, string text); propose_ok and status_ok \
              carrying intent views (string id, known state); nothing on stdout for 300 ms after \
              the last reply",
};

pub const BAD_LINE_CODE_12: Rule = Rule {
    name: "bad-line-code-12",
    sends: "init, then three lines that are no request (`this is not json`, `[1, 2, 3]`, \
            `{\"type\": \"status\"}` without msg_id), then status",
    expects: "an error with code 12 and in_reply_to null for each bad line, then status_ok: the \
              executor keeps serving",
};

pub const UNKNOWN_TYPE_CODE_10: Rule = Rule {
    name: "unknown-type-code-10",
    sends: "a request of type teleport before init, init, teleport again, then status",
    expects: "an error with code 10 to both teleports (§3.7), init_ok, then status_ok",
};

pub const UNKNOWN_ACTION_REFUSED: Rule = Rule {
    name: "unknown-action-refused",
    sends: "init, a propose of an action the executor did not announce (mail.send), then status \
            with its id",
    expects: "an error with code 10 (§3.2, §4), and a status_ok that does not list the intent (a \
              definite error did nothing)",
};

pub const PROPOSE_SURVIVES_SIGKILL: Rule = Rule {
    name: "propose-survives-sigkill",
    sends: "init, propose; SIGKILL to the process group; a new process on the same state_dir \
            and worker_id: init, status",
    expects: "propose_ok, then a status_ok after the restart that lists the intent (§8: \
              propose_ok means durable)",
};

pub const SHUTDOWN_CLEAN: Rule = Rule {
    name: "shutdown-clean",
    sends: "init, shutdown",
    expects: "shutdown_ok, then the process exits with status 0 within 5 s",
};

/// Every rule, in the order they are reported.
pub const RULES: [Rule; 7] = [
    INIT_ANSWERED,
    REPLIES_WELL_FORMED,
    BAD_LINE_CODE_12,
    UNKNOWN_TYPE_CODE_10,
    UNKNOWN_ACTION_REFUSED,
    PROPOSE_SURVIVES_SIGKILL,
    SHUTDOWN_CLEAN,
];

/// A rule's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    Failed,
    /// Not judged: what the rule needs is missing (a working `init`, an announced action).
    Skipped,
}

impl Status {
    pub(super) fn label(self) -> &'static str {
        match self {
            Status::Passed => "PASS",
            Status::Failed => "FAIL",
            Status::Skipped => "SKIP",
        }
    }

    pub(super) fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// One rule's verdict: what was expected, and what came (or what passed).
#[derive(Debug, Clone, Serialize)]
pub struct RuleVerdict {
    pub rule: &'static str,
    pub status: Status,
    /// What the check sends, for the reader of `conformance.json`.
    pub sends: &'static str,
    pub expected: &'static str,
    pub detail: String,
}

/// What a check found: `Ok` a pass with a note, `Err` what came instead of what was expected.
pub(super) type Checked = Result<String, String>;

pub(super) fn verdict(rule: &Rule, checked: Checked) -> RuleVerdict {
    let (status, detail) = match checked {
        Ok(detail) => (Status::Passed, detail),
        Err(detail) => (Status::Failed, detail),
    };
    RuleVerdict { rule: rule.name, status, sends: rule.sends, expected: rule.expects, detail }
}

pub(super) fn skipped(rule: &Rule, why: &str) -> RuleVerdict {
    RuleVerdict {
        rule: rule.name,
        status: Status::Skipped,
        sends: rule.sends,
        expected: rule.expects,
        detail: why.to_string(),
    }
}

/// What the executor said in `init_ok`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Init {
    /// It answered `init` with an `init_ok`: the live driver can run it.
    pub works: bool,
    pub name: Option<String>,
    pub version: Option<String>,
    /// The actions it announced, sorted.
    pub actions: Vec<String>,
}

impl Init {
    pub(super) fn of(reply: &Map<String, Value>) -> Init {
        let executor = reply.get("executor");
        let text = |field: &str| executor.and_then(|e| e.get(field)).and_then(Value::as_str).map(plain);
        let mut actions: Vec<String> = reply
            .get("actions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        actions.sort();
        actions.dedup();
        Init { works: true, name: text("name"), version: text("version"), actions }
    }

    pub(super) fn supports(&self, action: &str) -> bool {
        self.actions.iter().any(|a| a == action)
    }
}

/// Why an `init_ok` is not the shape §3.1 gives, if it is not.
pub(super) fn init_ok_problem(reply: &Map<String, Value>) -> Option<&'static str> {
    let executor = reply.get("executor").and_then(Value::as_object);
    let string = |field: &str| executor.and_then(|e| e.get(field)).is_some_and(Value::is_string);
    if executor.is_none() {
        return Some("an init_ok without an executor object");
    }
    if !string("name") || !string("version") {
        return Some("an init_ok whose executor lacks a string name and version");
    }
    match reply.get("actions").and_then(Value::as_array) {
        None => Some("an init_ok without an actions list"),
        Some(actions) if !actions.iter().all(Value::is_string) => {
            Some("an init_ok whose actions are not all strings")
        }
        Some(_) => None,
    }
}

/// Executor text made safe for one terminal line: no control characters, bounded length.
pub(super) fn plain(text: &str) -> String {
    const CHARS_MAX: usize = 120;
    let mut out: String =
        text.chars().take(CHARS_MAX).map(|c| if c.is_control() { '?' } else { c }).collect();
    if text.chars().count() > CHARS_MAX {
        out.push('…');
    }
    out
}

pub(super) fn known_state(state: &str) -> bool {
    State::ALL.iter().any(|s| s.as_str() == state)
}
