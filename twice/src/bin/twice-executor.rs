//! `twice-executor`: the reference executor behind the stdio protocol `twice/1`.
//!
//! `twice-executor [--state-dir DIR] [--durability full|normal]` serves the protocol on
//! stdin and stdout (logs go to stderr); `twice-executor escalations --state-dir DIR` lists
//! the intents that need a person, one JSON object per line.
//!
//! For crash tests, `TWICE_EXECUTOR_KILL_AT=POINT[:N]` makes the process SIGKILL itself the
//! N-th time (default 1) it reaches POINT (`after_record`, `after_resolve`, `before_send`,
//! `after_reply`): a real, unclean death at an exact point of its work.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use executor::Durability;
use executor::log::IntentLog;
use executor::protocol::{Options, serve};
use executor::world::Hooks;

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
    let mut world = executor::World::real();
    match kill_point() {
        Ok(Some(hook)) => world.hooks = Arc::new(hook),
        Ok(None) => {}
        Err(e) => {
            eprintln!("twice-executor: {e}");
            return ExitCode::from(2);
        }
    }
    let served = runtime.block_on(async {
        let input = tokio::io::BufReader::new(tokio::io::stdin());
        serve(input, tokio::io::stdout(), options, world).await
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
    let path = dir.join(executor::intent_engine::LOG_FILE);
    if !path.exists() {
        eprintln!("twice-executor: no intent log at {}", path.display());
        return ExitCode::from(2);
    }
    match IntentLog::open(&path, Durability::Full).and_then(|log| log.in_state(vocabulary::State::Escalated))
    {
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

/// The points of `executor::world::Hooks` a test may kill the process at.
const KILL_POINTS: &[&str] = &["after_record", "after_resolve", "before_send", "after_reply"];

/// Dies by SIGKILL the n-th time the executor reaches a point.
struct KillAt {
    point: String,
    nth: u64,
    seen: AtomicU64,
}

impl Hooks for KillAt {
    fn at(&self, point: &'static str) {
        if point == self.point && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
            eprintln!("twice-executor: TWICE_EXECUTOR_KILL_AT reached: SIGKILL at {point}");
            // SAFETY: kill(2) with our own pid and a valid signal number has no memory effects.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}

fn kill_point() -> Result<Option<KillAt>, String> {
    let Ok(spec) = std::env::var("TWICE_EXECUTOR_KILL_AT") else { return Ok(None) };
    let (point, nth) = match spec.split_once(':') {
        Some((p, n)) => {
            (p, n.parse::<u64>().map_err(|_| format!("TWICE_EXECUTOR_KILL_AT: bad count in \"{spec}\""))?)
        }
        None => (spec.as_str(), 1),
    };
    if !KILL_POINTS.contains(&point) || nth == 0 {
        return Err(format!(
            "TWICE_EXECUTOR_KILL_AT=\"{spec}\": expected one of {}, with an optional :N (N >= 1)",
            KILL_POINTS.join(", ")
        ));
    }
    Ok(Some(KillAt { point: point.to_string(), nth, seen: AtomicU64::new(0) }))
}
