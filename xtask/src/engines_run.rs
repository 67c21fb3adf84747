//! How `cargo xtask engines` runs the engines' tests: side by side ([`ENGINES_AT_ONCE`] at a
//! time, longest first) and each within a bound, interrupted past it.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::exit_code;

/// After SIGINT, how long pytest has to run its finalizers before it is killed.
const INTERRUPT_GRACE_S: u64 = 30;
/// Engines whose tests run at once; each engine's pytest output goes to
/// `target/engines/<engine>/pytest.log`, shown in full when it fails. Their runs mostly wait,
/// but two at a time (a Temporal and a Restate run, four cases each, on 2 cores: load 12 to 16)
/// made a worker's `init` miss its bound once in each of two full runs, a failure of the
/// machine, not of the engine. One at a time until the servers' starts are lighter.
pub(crate) const ENGINES_AT_ONCE: usize = 1;
/// The engines, longest first (as the last full run took), the order they are started in:
/// the two queues end closer together.
const LONGEST_FIRST: [&str; 5] = ["restate", "temporal", "celery", "langgraph", "dbos"];

/// Runs `run` for every engine, [`ENGINES_AT_ONCE`] at a time, in their order; each outcome
/// with its time in seconds.
pub(crate) fn run_all<E, F>(
    selected: &[&E],
    name_of: impl Fn(&E) -> &str,
    prepared: Vec<Result<PathBuf>>,
    run: F,
) -> Vec<(Result<bool>, f64)>
where
    E: Sync,
    F: Fn(&E, PathBuf) -> Result<bool> + Sync,
{
    let mut jobs: Vec<_> = selected.iter().copied().zip(prepared).enumerate().collect();
    jobs.sort_by_key(|(_, (engine, _))| LONGEST_FIRST.iter().position(|n| *n == name_of(engine)));
    let queue = std::sync::Mutex::new(jobs);
    let done = std::sync::Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..ENGINES_AT_ONCE {
            s.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| if q.is_empty() { None } else { Some(q.remove(0)) });
                    let Ok(Some((i, (engine, python)))) = next else { break };
                    let started = Instant::now();
                    let outcome = python.and_then(|python| run(engine, python));
                    let took_s = started.elapsed().as_secs_f64();
                    if let Ok(mut d) = done.lock() {
                        d.push((i, outcome, took_s));
                    }
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_default();
    done.sort_by_key(|(i, _, _)| *i);
    done.into_iter().map(|(_, outcome, took_s)| (outcome, took_s)).collect()
}

/// Waits for pytest at most `bound`; past it, interrupts it (its fixtures stop the servers they
/// started), gives it [`INTERRUPT_GRACE_S`] to finish, then kills it. Its exit code, or an error
/// saying it ran out of time.
pub(crate) fn wait_bounded(mut child: Child, bound: Duration, name: &str) -> Result<i32> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(exit_code(status));
        }
        if Instant::now() >= deadline {
            break;
        }
        thread::sleep(Duration::from_millis(200));
    }
    eprintln!("xtask: {name}'s tests still ran after {} s: interrupting them", bound.as_secs());
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let grace = Instant::now() + Duration::from_secs(INTERRUPT_GRACE_S);
    while Instant::now() < grace {
        if child.try_wait()?.is_some() {
            bail!("{name}'s tests ran out of their {} s", bound.as_secs());
        }
        thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    bail!("{name}'s tests ran out of their {} s and were killed", bound.as_secs())
}
