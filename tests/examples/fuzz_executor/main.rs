//! `cargo run -p twice-tests --example fuzz_executor -- --executor PATH [--inputs N]
//! [--seed S] [--only INDEX]` (what `cargo xtask fuzz-http --target executor` runs): N
//! sessions of fuzzed stdin against an executor binary. Exit status 1 on any failure, printed
//! with the seed and session index that reproduce it. The test
//! `protocol_fuzzed_stdin_gets_a_reply_per_line_and_a_clean_exit` runs a short version.

#[path = "driver.rs"]
mod driver;

use std::path::PathBuf;

fn main() {
    let mut executor = None;
    let (mut inputs, mut seed, mut only) = (2_000u64, 1u64, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number = || value.parse::<u64>().unwrap_or_else(|e| usage(&format!("{flag} {value}: {e}")));
        match flag.as_str() {
            "--executor" => executor = Some(PathBuf::from(&value)),
            "--inputs" => inputs = number(),
            "--seed" => seed = number(),
            "--only" => only = Some(number()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let Some(executor) = executor else { usage("--executor PATH is required") };
    // Session state directories, removed after each session and at the end.
    let scratch = std::env::temp_dir().join(format!("twice-fuzz-executor-{}", std::process::id()));
    let report = match only {
        Some(index) => {
            let input = driver::session(seed, index);
            println!(
                "session {index}: {}",
                String::from_utf8_lossy(&input[..input.len().min(4000)]).escape_debug()
            );
            driver::run(&executor, &scratch, seed, index..index + 1)
        }
        None => driver::run(&executor, &scratch, seed, 0..inputs),
    };
    let _ = std::fs::remove_dir_all(&scratch);
    report.print();
    if !report.failures.is_empty() {
        std::process::exit(1);
    }
}

fn usage(message: &str) -> ! {
    eprintln!(
        "fuzz_executor: {message}\nusage: fuzz_executor --executor PATH [--inputs N] [--seed S] [--only INDEX]"
    );
    std::process::exit(2);
}
