//! How long the whole catalog takes live against the Python executor of
//! `examples/executors/python` (the conformance kit's example, on the real SDKs): in total and
//! per scenario. Target: under 60 s on this 2-core machine, as for the reference executor.
//!
//! What is measured, as in `run.rs`'s live part: the whole catalog through
//! [`run::run_cases`] with the live driver (a Python process per worker, loopback HTTP fakes,
//! real SIGKILL and SIGSTOP, state on disk under the temp dir), on [`THREADS`] threads as
//! `twice run --executor "... executor.py" --cases 0` does, [`ROUNDS`] rounds; the total wall
//! time, and each scenario's (the time between its thread's previous case and it, taken from
//! the progress callback, which runs on the case's thread).
//!
//! The interpreter is `TWICE_PYTHON` (which `cargo xtask bench` sets, as `cargo xtask test`
//! does), or else `target/twice-venv/bin/python` under the workspace root; the venv holds the
//! SDKs pinned in `tests/requirements.txt`.
//!
//! Output: a readable line per round and per scenario, then one `BENCH {json}` line per figure
//! (the record format is described in `xtask/src/main.rs`). Run it alone with
//! `cargo bench -p harness --bench python`.

mod common;

use std::path::{Path, PathBuf};

use common::{Live, Result, WorkDir, live_figures};
use harness::live::ExecutorCommand;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "harness/python";
const ROUNDS: usize = 3;
/// The venv's interpreter, relative to the workspace root, when `TWICE_PYTHON` is unset.
const DEFAULT_PYTHON: &str = "target/twice-venv/bin/python";
/// The executor, relative to the workspace root.
const EXECUTOR: &str = "examples/executors/python/executor.py";

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("the harness crate has no parent")?;
    let python = match std::env::var_os("TWICE_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => root.join(DEFAULT_PYTHON),
    };
    if !python.is_file() {
        return Err(format!(
            "no Python interpreter at {}: set TWICE_PYTHON, or run `cargo xtask test` once to build the venv",
            python.display()
        )
        .into());
    }
    let command = ExecutorCommand { program: python, args: vec![root.join(EXECUTOR).display().to_string()] };
    let work = WorkDir::create("python")?;
    let mut records = Vec::new();
    let live = Live {
        bench: BENCH,
        who: ", Python executor",
        setup: "examples/executors/python/executor.py on the venv's interpreter (a Python process per \
                worker, stripe-python, requests, boto3 and web3.py against the loopback HTTP fakes, real \
                SIGKILL and SIGSTOP, SQLite state on disk under the temp dir), as `twice run --executor \
                \"python executor.py\" --cases 0`",
        rounds: ROUNDS,
    };
    live_figures(&live, command, &work.path, &mut records)?;
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}
