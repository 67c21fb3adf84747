//! `cargo xtask fuzz-http`: the fuzz runs, in release builds.
//!
//! - `--target fakes` (the default) runs `fake-services/examples/fuzz_http` (the fakes in
//!   process on loopback, generated and mutated requests over real HTTP, checked for panics,
//!   unexplained 5xx, hangs and memory growth).
//! - `--target executor` builds the release `twice-executor` and runs
//!   `tests/examples/fuzz_executor` against it (random, truncated, oversized and mistyped
//!   lines on its stdin, checked for an answer to every line, no panic, no hang).
//!
//! Both print their figures and exit 1 with the seed and index that reproduce a failure.

use anyhow::{Result, bail};

use crate::{cargo, exit_code, root, target_dir};

pub const USAGE: &str = "\
  fuzz-http [--target fakes|executor] [--requests N] [--seed S] [--service NAME] [--only INDEX]
                  fakes (default): N generated and mutated requests (default 1000000) per
                  fake over real HTTP; executor: N inputs (default 2000) on the stdin of
                  the release twice-executor; exit 1 on a panic, an unexplained 5xx, a hang
                  or (fakes) memory growth";

pub fn fuzz_http(args: &[String]) -> Result<i32> {
    let mut target = "fakes".to_string();
    let mut passed = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--target" => match it.next() {
                Some(t) if t == "fakes" || t == "executor" => target = t.clone(),
                other => bail!("--target takes fakes or executor, got {other:?}"),
            },
            "--requests" | "--seed" | "--service" | "--only" | "--concurrency" => {
                let Some(value) = it.next() else { bail!("{flag} needs a value") };
                passed.push(flag.clone());
                passed.push(value.clone());
            }
            other => bail!("unknown argument `{other}`\n\n{USAGE}"),
        }
    }
    let root = root();
    if target == "fakes" {
        let status = cargo()
            .current_dir(&root)
            .args(["run", "--release", "-p", "fake-services", "--example", "fuzz_http", "--"])
            .args(&passed)
            .status()?;
        return Ok(exit_code(status));
    }
    // The executor's driver counts inputs, not requests.
    let passed: Vec<String> =
        passed.into_iter().map(|a| if a == "--requests" { "--inputs".into() } else { a }).collect();
    let status = cargo()
        .current_dir(&root)
        .args(["build", "--release", "-p", "twice", "--bin", "twice-executor"])
        .status()?;
    if !status.success() {
        return Ok(exit_code(status));
    }
    let executor = target_dir(&root).join("release").join("twice-executor");
    let status = cargo()
        .current_dir(&root)
        .args(["run", "--release", "-p", "twice-tests", "--example", "fuzz_executor", "--", "--executor"])
        .arg(&executor)
        .args(&passed)
        .status()?;
    Ok(exit_code(status))
}
