//! Replaying and shrinking: generated case `index` of a run with `seed` comes from a value
//! tree seeded by those two numbers alone, so the same pair gives the same scenario again
//! (a failure replays from them); shrinking walks that tree (proptest's order), then drops
//! the faults and events a failure does not need.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::build::scenario_strategy;
use super::draw::size_for;
use crate::model::Scenario;

/// The value tree of generated case `index` of a run with `seed`: its current value is the
/// scenario, and shrinking it (`simplify` / `complicate`) finds a smaller failing one.
pub fn case_tree(seed: u64, index: u64) -> Result<Box<dyn ValueTree<Value = Scenario>>, String> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&index.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    scenario_strategy(format!("generated-{index}"), size_for(index))
        .new_tree(&mut runner)
        .map_err(|e| e.to_string())
}

/// Generated case `index` of a run with `seed`.
pub fn case(seed: u64, index: u64) -> Result<Scenario, String> {
    case_tree(seed, index).map(|t| t.current())
}

/// Why shrinking stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShrinkStop {
    /// No simpler candidate failed the same way: the scenario is as small as the search gets.
    Minimal,
    /// The limit of candidate runs was reached.
    Runs,
    /// The caller's `fails` gave up (a time budget ran out).
    Budget,
}

/// What shrinking found.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The smallest failing scenario found.
    pub scenario: Scenario,
    /// Candidates run.
    pub runs: usize,
    pub stopped: ShrinkStop,
}

/// Shrinks a failing case: `fails` says whether a candidate still fails, or `None` to stop
/// (its budget is spent). Bounded by `runs_max` candidate runs.
pub fn shrink(
    mut tree: Box<dyn ValueTree<Value = Scenario>>,
    runs_max: usize,
    mut fails: impl FnMut(&Scenario) -> Option<bool>,
) -> Shrunk {
    // proptest's own order: after every simplify and every complicate, test the current value;
    // a failing one is kept and simplified further, a passing one is complicated back.
    let mut smallest = tree.current();
    let mut runs = 0;
    if tree.simplify() {
        loop {
            if runs == runs_max {
                return Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Runs };
            }
            let candidate = tree.current();
            runs += 1;
            let more = match fails(&candidate) {
                None => return Shrunk { scenario: smallest, runs: runs - 1, stopped: ShrinkStop::Budget },
                Some(true) => {
                    smallest = candidate;
                    tree.simplify()
                }
                Some(false) => tree.complicate(),
            };
            if !more {
                break;
            }
        }
    }
    remove_steps(smallest, runs, runs_max, fails)
}

/// The last pass of [`shrink`]: proptest shrinks the draws behind a scenario, and a draw it
/// cannot drop (one the swarm or the contract turned into something else) may leave a fault
/// or an event the failure does not need. Each is removed in turn while the scenario still
/// fails, until none can be.
fn remove_steps(
    mut smallest: Scenario,
    mut runs: usize,
    runs_max: usize,
    mut fails: impl FnMut(&Scenario) -> Option<bool>,
) -> Shrunk {
    let mut removed = true;
    while removed {
        removed = false;
        let candidates = (0..smallest.faults.len())
            .map(|i| (true, i))
            .chain((0..smallest.events.len()).map(|i| (false, i)))
            .rev();
        for (fault, i) in candidates {
            let mut candidate = smallest.clone();
            if fault {
                candidate.faults.remove(i);
            } else {
                candidate.events.remove(i);
            }
            if runs == runs_max {
                return Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Runs };
            }
            runs += 1;
            match fails(&candidate) {
                None => return Shrunk { scenario: smallest, runs: runs - 1, stopped: ShrinkStop::Budget },
                Some(true) => {
                    smallest = candidate;
                    removed = true;
                    break;
                }
                Some(false) => {}
            }
        }
    }
    Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Minimal }
}

/// How many steps a scenario has: intents, faults and events.
pub fn steps(scenario: &Scenario) -> usize {
    scenario.intents.len() + scenario.faults.len() + scenario.events.len()
}

#[cfg(test)]
mod tests {
    use vocabulary::FaultSpec;

    use super::*;

    #[test]
    fn the_same_seed_and_index_give_the_same_scenario() {
        for index in 0..50 {
            assert_eq!(case(7, index).unwrap(), case(7, index).unwrap());
        }
        assert_ne!(case(7, 1).unwrap(), case(8, 1).unwrap());
    }

    #[test]
    fn shrinking_reaches_a_small_case() {
        // A stand-in property: "fails" whenever the scenario has a workspace intent.
        let fails = |s: &Scenario| s.intents.iter().any(|i| i.action == "workspaces.create");
        let (index, tree) = (0..200)
            .map(|i| (i, case_tree(3, i).unwrap()))
            .find(|(_, t)| fails(&t.current()) && steps(&t.current()) > 3)
            .expect("some generated case fails the stand-in property");
        let shrunk = shrink(tree, 500, |s| Some(fails(s)));
        assert_eq!(shrunk.stopped, ShrinkStop::Minimal, "case {index}");
        let small = shrunk.scenario;
        assert!(fails(&small), "case {index}");
        assert_eq!(small.intents.len(), 1, "{small:#?}");
        assert!(steps(&small) <= 2, "{small:#?}");
    }

    #[test]
    fn shrinking_leaves_no_fault_or_event_the_failure_does_not_need() {
        // A stand-in property: "fails" while a drop after commit is armed.
        let needs = |s: &Scenario| s.faults.iter().any(|f| f.rule.fault == FaultSpec::DropAfterCommit);
        let (index, tree) = (0..2_000)
            .map(|i| (i, case_tree(5, i).unwrap()))
            .find(|(_, t)| {
                needs(&t.current()) && t.current().faults.len() >= 3 && !t.current().events.is_empty()
            })
            .expect("a generated case with a drop, other faults and an event");
        let shrunk = shrink(tree, 1_000, |s| Some(needs(s)));
        assert_eq!(shrunk.stopped, ShrinkStop::Minimal, "case {index}");
        let small = shrunk.scenario;
        assert_eq!(small.faults.len(), 1, "case {index}: {small:#?}");
        assert!(small.events.is_empty(), "case {index}: {small:#?}");
        assert!(needs(&small));
    }

    #[test]
    fn shrinking_says_why_it_stopped() {
        let fails = |s: &Scenario| s.intents.iter().any(|i| i.action == "workspaces.create");
        let tree = || {
            (0..200)
                .map(|i| case_tree(3, i).unwrap())
                .find(|t| fails(&t.current()) && steps(&t.current()) > 3)
        };
        let shrunk = shrink(tree().unwrap(), 2, |s| Some(fails(s)));
        assert_eq!((shrunk.stopped, shrunk.runs), (ShrinkStop::Runs, 2));
        let mut left = 3;
        let shrunk = shrink(tree().unwrap(), 500, |s| {
            left -= 1;
            (left > 0).then(|| fails(s))
        });
        assert_eq!((shrunk.stopped, shrunk.runs), (ShrinkStop::Budget, 2));
        assert!(fails(&shrunk.scenario), "what it found so far still fails");
    }
}
