//! `twice-executor`: the reference executor behind the stdio protocol `twice/1`.
//!
//! `twice-executor [--state-dir DIR] [--durability full|normal]` serves the protocol on
//! stdin and stdout (logs go to stderr); `twice-executor escalations --state-dir DIR` lists
//! the intents that need a person, one JSON object per line.

use std::path::PathBuf;
use std::process::ExitCode;

use executor::Durability;
use executor::log::IntentLog;
use executor::protocol::{Options, serve};

const USAGE: &str = "usage: twice-executor [--state-dir DIR] [--durability full|normal]
       twice-executor escalations --state-dir DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut state_dir: Option<PathBuf> = None;
    let mut durability = Durability::Full;
    let mut escalations = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "escalations" if i == 0 => escalations = true,
            "--state-dir" if i + 1 < args.len() => {
                i += 1;
                state_dir = Some(PathBuf::from(&args[i]));
            }
            "--durability" if i + 1 < args.len() => {
                i += 1;
                durability = match args[i].as_str() {
                    "full" => Durability::Full,
                    "normal" => Durability::Normal,
                    other => {
                        eprintln!("twice-executor: unknown durability \"{other}\"\n{USAGE}");
                        return ExitCode::from(2);
                    }
                };
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("twice-executor: unexpected argument \"{other}\"\n{USAGE}");
                return ExitCode::from(2);
            }
        }
        i += 1;
    }
    if escalations {
        let Some(dir) = state_dir else {
            eprintln!("twice-executor: escalations needs --state-dir\n{USAGE}");
            return ExitCode::from(2);
        };
        return list_escalations(&dir);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("twice-executor: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let options = Options { state_dir, durability };
    let served = runtime.block_on(async {
        let input = tokio::io::BufReader::new(tokio::io::stdin());
        serve(input, tokio::io::stdout(), options, executor::World::real()).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("twice-executor: {e}");
            ExitCode::from(2)
        }
    }
}

fn list_escalations(dir: &std::path::Path) -> ExitCode {
    let path = dir.join(executor::engine::LOG_FILE);
    if !path.exists() {
        eprintln!("twice-executor: no intent log at {}", path.display());
        return ExitCode::from(2);
    }
    match IntentLog::open(&path, Durability::Full).and_then(|log| log.in_state(executor::State::Escalated)) {
        Ok(intents) => {
            for intent in intents {
                println!("{}", intent.view());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("twice-executor: {e}");
            ExitCode::from(2)
        }
    }
}
