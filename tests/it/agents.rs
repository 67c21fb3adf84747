//! The example agents of `examples/agents` (pydantic-ai, a scripted `FunctionModel`, twice's
//! tools over MCP) come out as their runs showed: the careful agent and the careful durable
//! agent pass; the naive agent (a blind retry after a lost reply) and the naive durable agent
//! (its refund call run again by DBOS's recovery after a crash mid-call) are strict expected
//! failures in a plain `pytest` run, and with `--runxfail` each fails with twice's verdict
//! naming `no-duplicate-effect` and the ledger's two refunds as evidence. The courteous agent
//! (the careful one, then an email nobody asked for) is an expected failure too, by
//! `no-unauthorised-effect` alone, naming the email.
//!
//! pytest runs as a child process of the venv's interpreter (`TWICE_PYTHON`, set by `cargo
//! xtask test`, which installs pydantic-ai, fastmcp and DBOS there from
//! `tests/requirements.txt`) with `TWICE_BIN` pointing at the `twice` binary; each run's
//! outcomes are read per test from its JUnit XML, as `byo_python.rs` does. Every run is
//! bounded.

use std::collections::BTreeMap;
use std::time::Duration;

use super::pytest::{FAILED, PASSED, Run, Suite, XFAILED};
use super::python_executor::machine;

/// The example agents: the whole module takes about 40 s (each durable agent's two process
/// lives about 14 s). Each test's own output (its transcript and verdict) is kept in the XML.
const SUITE: Suite = Suite {
    name: "agents",
    wait: Duration::from_secs(300),
    imports: "twice.pytest_plugin, fastmcp, pydantic_ai.mcp, pydantic_ai.durable_exec.dbos",
    args: &["-o", "junit_logging=system-out"],
};

fn pytest(label: &str, args: &[&str]) -> Run {
    super::pytest::pytest(&SUITE, label, args)
}

/// The invariant the naive agents break.
const NAIVE_BREAKS: &str = "no-duplicate-effect";

/// The invariant the courteous agent breaks, alone.
const COURTEOUS_BREAKS: &str = "no-unauthorised-effect";

/// Every test of `examples/agents` and whether it is an expected failure (a naive agent's, or
/// the courteous one's).
const AGENT_TESTS: &[(&str, bool)] = &[
    ("test_agent[careful]", false),
    ("test_agent[courteous]", true),
    ("test_agent[naive]", true),
    ("test_durable_agent[careful]", false),
    ("test_durable_agent[naive]", true),
    ("test_the_careful_key_is_the_plan_steps", false),
    ("test_the_careful_agent_knows_its_refund_by_its_tag_not_its_amount", false),
];

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_careful_agents_pass_and_the_naive_ones_are_expected_failures() {
    let _turn = machine();
    let run = pytest("agents", &["examples/agents"]);
    assert_eq!(run.code, Some(0), "the example agents' tests fail:\n{}", run.output_tail());
    let expected: BTreeMap<&str, &str> =
        AGENT_TESTS.iter().map(|(name, naive)| (*name, if *naive { XFAILED } else { PASSED })).collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
    // The careful agents' verdicts held: each test prints its transcript, what the payments
    // fake saw, the claim and the verdict, which the XML keeps as the test's output.
    for (name, naive) in AGENT_TESTS {
        if name.starts_with("test_the_") {
            continue;
        }
        let text = &run.cases[*name].text;
        assert!(text.contains("model: call refund_payment"), "{name}: no transcript:\n{text}");
        assert!(
            text.contains("\"state\": \"confirmed\""),
            "{name}: the agent did not claim confirmed:\n{text}"
        );
        let held = "1 passed, 0 violated";
        assert_eq!(
            text.contains(held),
            !naive,
            "{name}: held verdict {}expected:\n{text}",
            if *naive { "not " } else { "" }
        );
    }
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_naive_agents_are_caught_with_the_invariant_and_the_ledgers_evidence() {
    let _turn = machine();
    // `--runxfail` runs the expected failures as plain tests: each must fail, and by twice's
    // verdict rather than anything else.
    let run = pytest("agents-naive", &["examples/agents", "--runxfail", "-k", "naive"]);
    assert_eq!(run.code, Some(1), "the naive agents must fail:\n{}", run.output_tail());
    let naive: Vec<&str> = AGENT_TESTS
        .iter()
        .filter(|(name, xfail)| *xfail && name.contains("naive"))
        .map(|(name, _)| *name)
        .collect();
    let expected: BTreeMap<&str, &str> = naive.iter().map(|name| (*name, FAILED)).collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
    for name in naive {
        let text = &run.cases[name].text;
        assert!(text.contains("TwiceViolation"), "{name} failed, but not by a verdict:\n{text}");
        assert!(
            text.contains(&format!("{NAIVE_BREAKS}: ")),
            "{name}'s verdict does not name {NAIVE_BREAKS}:\n{text}"
        );
        // The evidence is the ledger's: two refunds where one is allowed.
        assert!(text.contains("has 2 effects, at most one allowed"), "{name}:\n{text}");
        assert!(
            text.contains("payments re_") && text.contains("(seq 2)"),
            "{name}: no ledger evidence:\n{text}"
        );
    }
}

/// The courteous agent refunds right and then emails the customer, which no intent of the
/// scenario authorised (it names no message at all): the check reads the messages ledger all
/// the same, and the verdict names `no-unauthorised-effect` and nothing else.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn an_email_nobody_asked_for_from_an_otherwise_careful_agent_is_an_unauthorised_effect() {
    let _turn = machine();
    let run = pytest("agents-courteous", &["examples/agents", "--runxfail", "-k", "courteous"]);
    assert_eq!(run.code, Some(1), "the courteous agent must fail:\n{}", run.output_tail());
    let expected: BTreeMap<&str, &str> = [("test_agent[courteous]", FAILED)].into_iter().collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
    let text = &run.cases["test_agent[courteous]"].text;
    assert!(text.contains("TwiceViolation"), "failed, but not by a verdict:\n{text}");
    assert!(
        text.contains(&format!("{COURTEOUS_BREAKS}: ")),
        "the verdict does not name {COURTEOUS_BREAKS}:\n{text}"
    );
    assert!(
        text.contains("messages ") && text.contains("customer@example.com"),
        "no ledger evidence:\n{text}"
    );
    assert!(!text.contains(&format!("{NAIVE_BREAKS}: ")), "the refund was right:\n{text}");
}

/// docs/agents.md's `careful-by-tag` block is the part of `examples/agents/refund_agents.py`
/// between its `docs/agents.md: careful-by-tag` markers, word for word: the doc shows the code
/// the careful agents run (`test_agent[careful]` and `test_durable_agent[careful]`).
#[test]
fn the_careful_by_tag_block_of_docs_agents_md_is_the_example_agents_code() {
    const DOC: &str = include_str!("../../docs/agents.md");
    const AGENTS: &str = include_str!("../../examples/agents/refund_agents.py");
    let fence = "```python title=careful-by-tag\n";
    let start = DOC.find(fence).expect("docs/agents.md has a careful-by-tag block") + fence.len();
    let end = DOC[start..].find("```").expect("the block ends") + start;
    let shown = DOC[start..end].trim();
    let begin = "# docs/agents.md: careful-by-tag (begin)\n";
    let from = AGENTS.find(begin).expect("refund_agents.py marks the block's beginning") + begin.len();
    let to = AGENTS[from..].find("# docs/agents.md: careful-by-tag (end)").expect("and its end") + from;
    let code = AGENTS[from..to].trim();
    assert_eq!(shown, code, "docs/agents.md's careful-by-tag block differs from refund_agents.py's");
}
