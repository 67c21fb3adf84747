//! Progress on the terminal: a bar where stderr is one, plain lines in CI and pipes, nothing
//! under `-q`; what shrinking found as it goes, and a heartbeat while it is quiet. Log lines
//! are written above the bar ([`super::logs::draw_logs_above`]).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use results::{Outcome, ScenarioResult};
use runner::run::Progress;
use runner::shrink::ShrinkProgress;

/// Plain lines in CI and pipes, a bar on a terminal, nothing under `-q`.
pub struct Reporter {
    bar: Option<indicatif::ProgressBar>,
    /// `-q` or `--log-format json`: no plain progress lines (under `-q`, no bar either).
    quiet: bool,
    done: Mutex<(usize, usize)>,
    total: Mutex<usize>,
    /// While shrinking: its deadline, and when the reporter last said something.
    shrinking: Mutex<Option<(Option<Instant>, Instant)>>,
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter::new()
    }
}

impl Reporter {
    pub fn new() -> Reporter {
        let quiet = !super::logs::plain_progress();
        let terminal = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        let bar = (terminal && !super::logs::quiet()).then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} scenarios  {msg}  [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        super::logs::draw_logs_above(bar.clone());
        Reporter { bar, quiet, done: Mutex::new((0, 0)), total: Mutex::new(0), shrinking: Mutex::new(None) }
    }
}

impl Progress for Reporter {
    fn note(&self, line: &str) {
        if super::logs::plain_progress() {
            eprintln!("twice: {line}");
        }
    }

    fn started(&self, total: usize) {
        *self.total.lock().unwrap_or_else(|p| p.into_inner()) = total;
        match &self.bar {
            Some(bar) => {
                bar.set_length(total as u64);
                // Again: a reporter may run a second list after `done` let go of the bar.
                super::logs::draw_logs_above(Some(bar.clone()));
            }
            None if self.quiet => {}
            None => eprintln!("twice: running {total} scenarios"),
        }
    }

    fn finished(&self, result: &ScenarioResult) {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.0 += 1;
        if result.outcome != Outcome::Passed {
            done.1 += 1;
        }
        let total = *self.total.lock().unwrap_or_else(|p| p.into_inner());
        match &self.bar {
            Some(bar) => {
                bar.inc(1);
                bar.set_message(format!("{} failing", done.1));
                if result.outcome != Outcome::Passed {
                    bar.println(format!("  FAIL {} ({:?})", result.name, result.outcome));
                }
            }
            None if self.quiet => {}
            None => {
                if result.outcome != Outcome::Passed {
                    eprintln!("  FAIL {} ({:?})", result.name, result.outcome);
                }
                let step = (total / 10).max(1);
                if done.0.is_multiple_of(step) || done.0 == total {
                    eprintln!("twice: {}/{} scenarios, {} failing", done.0, total, done.1);
                }
            }
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            super::logs::draw_logs_above(None);
        }
    }
}

/// How often a run that is shrinking says so when nothing else happened.
const SHRINK_HEARTBEAT_S: u64 = 15;

impl ShrinkProgress for Reporter {
    fn started(&self, count: usize, deadline: Option<std::time::Instant>) {
        let budget = deadline
            .map(|d| format!(" (time left: {} s)", d.saturating_duration_since(Instant::now()).as_secs()))
            .unwrap_or_default();
        self.say(format!("twice: shrinking {count} failing generated case{}{budget}", plural(count)));
        *self.shrinking.lock().unwrap_or_else(|p| p.into_inner()) = Some((deadline, Instant::now()));
    }

    fn smaller(&self, name: &str, steps: usize, runs: usize) {
        let left = self.time_left();
        self.say(format!("  {name}: {steps} steps after {runs} runs{left}"));
    }

    fn finished(&self, name: &str, shrink: &results::Shrink) {
        let left = self.time_left();
        self.say(format!("  {name}: {}{left}", shrink.line()));
    }

    /// Says "still shrinking" when nothing was said for a while, until `done` is set.
    fn heartbeat(&self, done: &AtomicBool) {
        while !done.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(250));
            let quiet = self
                .shrinking
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|(_, last)| last.elapsed().as_secs() >= SHRINK_HEARTBEAT_S);
            if quiet && !done.load(Ordering::SeqCst) {
                let left = self.time_left();
                self.say(format!("twice: still shrinking{left}"));
            }
        }
    }
}

impl Reporter {
    /// A line above the bar on a terminal, on stderr otherwise; counts as activity.
    fn say(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None if self.quiet => {}
            None => eprintln!("{line}"),
        }
        if let Some((_, last)) = self.shrinking.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            *last = Instant::now();
        }
    }

    fn time_left(&self) -> String {
        let deadline = self.shrinking.lock().unwrap_or_else(|p| p.into_inner()).and_then(|(d, _)| d);
        deadline
            .map(|d| format!(" ({} s left)", d.saturating_duration_since(Instant::now()).as_secs()))
            .unwrap_or_default()
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
