//! Logs: the one tracing subscriber every `twice` command sets up (docs/logs.md).
//!
//! The level comes from `-v`/`-q` (or `RUST_LOG`, which wins when set); lines go to stderr
//! as text or one JSON object each. A progress bar drawn on stderr is cleared while a line is
//! written and drawn again after it ([`draw_logs_above`]), so the two never garble each other.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `TIME LEVEL target: message field=value ...`, for people.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message in
    /// `fields.message`).
    Json,
}

/// The flags every command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// More log lines on stderr: -v info (a line per scenario and per fault fired), -vv debug
    /// (every request to the fakes, every line exchanged with an executor), -vvv trace.
    /// RUST_LOG, when set, wins.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Errors only: no log line below error, and no progress on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// How log lines are written: text, or json (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, value_name = "FORMAT")]
    pub log_format: LogFormat,
}

/// Set by `-q`: progress stays off stderr too.
static QUIET: AtomicBool = AtomicBool::new(false);
/// Set by `--log-format json`: stderr carries JSON lines only.
static JSON: AtomicBool = AtomicBool::new(false);

/// Whether `-q` was given: nothing but errors on stderr.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Whether plain progress lines may go to stderr: not under `-q`, and not with
/// `--log-format json`, where every stderr line is a JSON object (a bar on a terminal is
/// still drawn: it is no line).
pub fn plain_progress() -> bool {
    !quiet() && !JSON.load(Ordering::Relaxed)
}

/// Says a command's error on stderr: `twice: ERROR` as ever, or with `--log-format json` an
/// `error` event of target `twice`, so that stderr stays all JSON.
pub fn say_error(message: &str) {
    if JSON.load(Ordering::Relaxed) {
        tracing::error!(target: "twice", "{message}");
    } else {
        eprintln!("twice: {message}");
    }
}

/// The filter `args` ask for: `RUST_LOG` when set (and valid), else the level of `-v`/`-q`,
/// else `default` (warn for runs, so a plain run looks as it did before logs; info for
/// `twice serve`, whose log is its faults). The `String` is a warning to print, if any.
fn filter(args: &LogArgs, default: LevelFilter) -> (EnvFilter, Option<String>) {
    let level = match (args.quiet, args.verbose) {
        (true, _) => LevelFilter::ERROR,
        (false, 0) => default,
        (false, 1) => LevelFilter::INFO,
        (false, 2) => LevelFilter::DEBUG,
        (false, _) => LevelFilter::TRACE,
    };
    let by_level = || EnvFilter::default().add_directive(level.into());
    match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => match EnvFilter::try_new(&text) {
            Ok(filter) => (filter, None),
            Err(e) => (by_level(), Some(format!("RUST_LOG={text:?} is not a filter ({e}); using {level}"))),
        },
        _ => (by_level(), None),
    }
}

/// Sets up logging for the whole process, once, before a command runs.
pub fn init(args: &LogArgs, default: LevelFilter) {
    QUIET.store(args.quiet, Ordering::Relaxed);
    JSON.store(args.log_format == LogFormat::Json, Ordering::Relaxed);
    let (filter, warning) = filter(args, default);
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(AboveBar);
    let set = match args.log_format {
        LogFormat::Text => {
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(ansi).try_init()
        }
        // No span lists: twice logs events, and a line stays one flat object.
        LogFormat::Json => {
            builder.json().with_ansi(false).with_current_span(false).with_span_list(false).try_init()
        }
    };
    if let Err(e) = set {
        // Only a second call gets here (tests); the first subscriber stays.
        eprintln!("twice: warning: logs not set up again: {e}");
    }
    if let Some(warning) = warning {
        // Even under -q: the filter asked for is not the one in force.
        if args.log_format == LogFormat::Json {
            tracing::error!(target: "twice", "{warning}");
        } else {
            eprintln!("twice: warning: {warning}");
        }
    }
}

/// The progress bar drawn now, if any: log lines are written while it is cleared.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Log lines from now on go above `bar` (`None`: straight to stderr, the bar is gone).
pub fn draw_logs_above(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock().unwrap_or_else(|p| p.into_inner()) = bar;
}

/// Stderr, through the progress bar's `suspend` while one is drawn. The formatter writes
/// each event whole in one `write_all`, so a line is never split around a redraw.
struct AboveBar;

impl Write for AboveBar {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = BAR.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().lock().write_all(buf))?,
            None => std::io::stderr().lock().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for AboveBar {
    type Writer = AboveBar;

    fn make_writer(&'a self) -> AboveBar {
        AboveBar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(verbose: u8, quiet: bool) -> LogArgs {
        LogArgs { verbose, quiet, log_format: LogFormat::Text }
    }

    #[test]
    fn v_and_q_pick_the_level_and_the_command_its_default() {
        // RUST_LOG is left alone by the test runner's environment only if unset; the level
        // rule is what is checked here, so read the filter's maximum.
        if std::env::var_os("RUST_LOG").is_some() {
            return;
        }
        let max = |verbose, quiet, default| filter(&args(verbose, quiet), default).0.max_level_hint();
        assert_eq!(max(0, false, LevelFilter::WARN), Some(LevelFilter::WARN));
        assert_eq!(max(0, false, LevelFilter::INFO), Some(LevelFilter::INFO));
        assert_eq!(max(1, false, LevelFilter::WARN), Some(LevelFilter::INFO));
        assert_eq!(max(2, false, LevelFilter::WARN), Some(LevelFilter::DEBUG));
        assert_eq!(max(3, false, LevelFilter::WARN), Some(LevelFilter::TRACE));
        assert_eq!(max(7, false, LevelFilter::WARN), Some(LevelFilter::TRACE));
        assert_eq!(max(0, true, LevelFilter::INFO), Some(LevelFilter::ERROR));
    }
}
