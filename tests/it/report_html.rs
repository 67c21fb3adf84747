//! `report.html` of a real failing run, read back with an HTML parser and loaded in headless
//! Chromium: the page must load without a single console message (its one script logs
//! nothing, so any message is an error or a Content-Security-Policy violation, such as a
//! script hash that does not match), its script must have drawn the open failures'
//! timelines, and a screenshot of the failing scenario is taken (`docs/report-timeline.png`
//! when `TWICE_UPDATE_SCREENSHOT=1`).
//!
//! Chromium comes from `TWICE_CHROMIUM`, or the first of [`CHROMIUM_NAMES`] on the `PATH`
//! (`cargo xtask test` installs and sets it). Without one the browser part is skipped with a
//! loud note, except under `CI`, where that is a failure.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use results::{Outcome, RunResults, ScenarioResult, Source, Totals};
use runner::run::{self, Case, Driver, RunContext};
use scraper::{Html, Selector};

use crate::mutant_naive::{Bug, Naive, Style};

/// The run seed.
const SEED: u64 = 1;
/// Fails with `no-duplicate-effect` under the naive-retry mutant: the reply is held past the
/// client's timeout, the mutant resends without a key, and the payment is refunded twice.
const DUPLICATE: &str = "timeout_taken_as_no";
/// Fails with `honest-terminal-states` under the same mutant: the keyless resend is refused
/// (the payment is already refunded) and the mutant believes the refusal.
const LOST_REPLY: &str = "lost_refund_reply";
/// Passed by the same mutant: no reply is lost, so it never retries.
const PASSING: &str = "crash_while_refund_in_flight";
/// Where Chromium is looked for when `TWICE_CHROMIUM` is not set, in this order.
const CHROMIUM_NAMES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];
/// Chromium is killed after this long: the test never hangs on a browser.
const CHROMIUM_WAIT_MS: u64 = 60_000;
const SCREENSHOT_WIDTH_PX: u32 = 1400;
const SCREENSHOT_HEIGHT_PX: u32 = 1100;

/// A directory under the system's temporary directory, removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("twice-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temporary directory can be created");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Quiet;

impl run::Progress for Quiet {
    fn started(&self, _total: usize) {}
    fn finished(&self, _result: &ScenarioResult) {}
    fn done(&self) {}
}

fn catalog_case(name: &str) -> Case {
    let scenario = scenarios::catalog::catalog()
        .expect("the catalog loads")
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no catalog scenario {name}"));
    Case { scenario, source: Source::Catalog }
}

/// The naive-retry mutant on two scenarios it fails and one it passes, in the sim driver.
fn mutant_run(work: &Path) -> RunResults {
    let factory = Naive::with(Style::LookupFirst, Bug::NaiveRetry);
    let driver = Driver::Sim(&factory);
    let cases: Vec<Case> = [PASSING, DUPLICATE, LOST_REPLY].into_iter().map(catalog_case).collect();
    let results = run::run_cases(&cases, &RunContext::new(SEED, &driver, work, "twice run"), 1, &Quiet);
    run::results(SEED, &driver, None, results)
}

fn result<'a>(run: &'a RunResults, name: &str) -> &'a ScenarioResult {
    run.results.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no result for {name}"))
}

fn section_id(r: &ScenarioResult) -> String {
    format!("s-{}", r.position)
}

fn sel(css: &str) -> Selector {
    Selector::parse(css).unwrap_or_else(|e| panic!("bad selector {css}: {e}"))
}

/// What the page must show of this run, read back with a parser, before any script ran.
fn check_structure(html: &str, run: &RunResults) {
    let doc = Html::parse_document(html);
    let failures = run.results.iter().filter(|r| r.outcome != Outcome::Passed).count();
    // The page's one script, and a timeline's JSON per failure; no timeline drawn yet.
    assert_eq!(doc.select(&sel("script:not([type])")).count(), 1);
    assert_eq!(doc.select(&sel("script[type=\"application/json\"].timeline-data")).count(), failures);
    assert_eq!(doc.select(&sel("table.timeline")).count(), 0);
    assert_eq!(doc.select(&sel("main > section.scenario")).count(), failures);
    let failing = result(run, DUPLICATE);
    let id = section_id(failing);
    let section = doc.select(&sel(&format!("section#{id}"))).next().expect("the failing scenario's section");
    let text = |css: &str| -> Vec<String> {
        section.select(&sel(css)).map(|e| e.text().collect::<String>()).collect()
    };
    assert_eq!(section.select(&sel(":scope > details[open]")).count(), 1, "the failure is open");
    assert!(
        text(".violation h3").iter().any(|h| h.contains("no-duplicate-effect")),
        "{:?}",
        text(".violation h3")
    );
    let evidence = text(".violation .evidence li");
    for v in failing.violations() {
        for line in &v.evidence {
            assert!(evidence.contains(line), "evidence {line:?} not shown: {evidence:?}");
        }
    }
    assert_eq!(text("code.replay"), vec![failing.replay.clone()]);
    // Without JavaScript, the events as a plain list.
    let noscript = text(".timeline-slot > noscript");
    assert_eq!(noscript.len(), 1);
    let list = Html::parse_fragment(&noscript[0]);
    let details: Vec<String> =
        list.select(&sel("table.events td:last-child")).map(|e| e.text().collect()).collect();
    assert!(details.iter().any(|d| d.contains("second effect for intent refund-7301")), "{details:?}");

    let passing = result(run, PASSING);
    // A pass is a row of the passed table: name, verdicts in short, counts and replay, no
    // timeline.
    let row = doc
        .select(&sel(&format!("section.passed-rows table.passed tr#{}", section_id(passing))))
        .next()
        .expect("the passing row");
    let row_text: String = row.text().collect();
    assert!(row_text.contains(PASSING) && row_text.contains(&passing.replay), "{row_text}");
    assert!(row_text.contains("event"), "its crash counts among its events: {row_text}");
    assert_eq!(doc.select(&sel("section.passed-rows .timeline-slot")).count(), 0);
}

/// The timeline the page's script drew in the failing scenario's open section (`dom`: the
/// document as Chromium left it).
fn check_drawn_timeline(dom: &str, run: &RunResults) {
    let doc = Html::parse_document(dom);
    let failing = result(run, DUPLICATE);
    let section = doc
        .select(&sel(&format!("section#{}", section_id(failing))))
        .next()
        .expect("the failing scenario's section");
    let text = |css: &str| -> Vec<String> {
        section.select(&sel(css)).map(|e| e.text().collect::<String>()).collect()
    };
    assert_eq!(
        section.select(&sel(".timeline-slot > .timeline-wrap > table.timeline")).count(),
        1,
        "drawn once"
    );
    let lanes: Vec<String> = section
        .select(&sel("table.timeline th.lane"))
        .filter_map(|th| th.attr("data-lane"))
        .map(String::from)
        .collect();
    // Every service of the run has a lane, the idle one too.
    assert_eq!(lanes, vec!["w1", "payments", "workspaces", "harness"]);
    let duplicates = text("table.timeline .effect.dup");
    assert_eq!(duplicates.len(), 1, "{duplicates:?}");
    assert!(duplicates[0].contains("second effect for intent refund-7301"), "{duplicates:?}");
    let causes = text("table.timeline .req.cause");
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert!(causes[0].contains("no key"), "the keyless resend made it: {causes:?}");
    assert_eq!(text("table.timeline .fault-tag"), vec!["⚡ timeout_after_commit"]);
    let rows = section.select(&sel("table.timeline tbody tr")).count();
    assert_eq!(rows, section.select(&sel("table.timeline td.cell")).count(), "one event per row");
}

/// Chromium's binary: `TWICE_CHROMIUM`, or the first of [`CHROMIUM_NAMES`] on the `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TWICE_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    CHROMIUM_NAMES
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// What one headless Chromium run left.
struct Browser {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs headless Chromium on `url` with the test's flags plus `extra`, in a fresh profile;
/// kills its process group after [`CHROMIUM_WAIT_MS`].
fn headless(chromium: &Path, profile: &Path, extra: &[OsString], url: &str) -> Browser {
    use std::os::unix::process::CommandExt as _;
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout ends Chromium's helpers too.
        .process_group(0);
    let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
    // Both pipes are drained on their own threads: a full pipe would stall Chromium.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
        rx
    };
    let stdout = drain(Box::new(child.stdout.take().expect("a piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("a piped stderr")));
    let deadline = Instant::now() + Duration::from_millis(CHROMIUM_WAIT_MS);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                // SAFETY: a plain kill(2) of the process group this test started.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                let err = stderr.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
                panic!(
                    "{} did not finish {url} within {CHROMIUM_WAIT_MS} ms; stderr:\n{err}",
                    chromium.display()
                );
            }
        }
    };
    // Helpers that outlive the browser could keep a pipe open: wait for them only so long.
    let collect = |rx: mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    Browser { status, stdout: collect(stdout), stderr: collect(stderr) }
}

/// The console messages in Chromium's log. With `--enable-logging=stderr` every console
/// message (log, warning, error, uncaught exception, CSP violation alike) is one line
/// `[PID:TID:MMDD/HHMMSS.micros:INFO:CONSOLE:LINE] "MESSAGE", source: URL (LINE)`; older
/// versions wrote `CONSOLE(LINE)`. Other `ERROR` lines (D-Bus, GPU) are the browser's own.
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE:") || l.contains(":CONSOLE(") || l.contains("\"Uncaught "))
        .collect()
}

const CONTROL_PAGE: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>control</title></head>
<body><p>control</p>
<script>console.error("twice-control"); undefinedFunction();</script>
</body></html>
"#;

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

#[test]
fn the_html_report_of_a_failing_run_loads_cleanly_in_a_browser() {
    let tmp = TempDir::new("report-html");
    let run = mutant_run(&tmp.0.join("work"));
    let outcomes: Vec<(&str, Outcome)> = run.results.iter().map(|r| (r.name.as_str(), r.outcome)).collect();
    assert_eq!(
        outcomes,
        vec![(PASSING, Outcome::Passed), (DUPLICATE, Outcome::Violated), (LOST_REPLY, Outcome::Violated)]
    );
    let failing = result(&run, DUPLICATE);
    let broken: Vec<&str> = failing.violations().map(|v| v.invariant.as_str()).collect();
    assert!(broken.contains(&"no-duplicate-effect"), "{broken:?}");

    let html = reports::html::render(&run);
    check_structure(&html, &run);
    let report = tmp.0.join("report.html");
    std::fs::write(&report, &html).expect("report.html can be written");

    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no Chromium: set TWICE_CHROMIUM or put one of {CHROMIUM_NAMES:?} on the PATH (`cargo xtask test` \
             installs it with apt-get when it runs as root)"
        );
        eprintln!(
            "\n!!! report_html: NO CHROMIUM FOUND (TWICE_CHROMIUM, {CHROMIUM_NAMES:?}): only the structure of \
             report.html was checked, not how a browser loads it !!!\n"
        );
        return;
    };

    // The report: loads, shows the failure, and logs nothing.
    let dump = [OsString::from("--dump-dom")];
    let loaded = headless(&chromium, &tmp.0.join("profile-report"), &dump, &file_url(&report));
    assert!(loaded.status.success(), "chromium failed ({}); stderr:\n{}", loaded.status, loaded.stderr);
    assert!(loaded.stdout.contains(&format!("id=\"{}\"", section_id(failing))), "dom:\n{}", loaded.stdout);
    assert!(loaded.stdout.contains("no-duplicate-effect"));
    let console = console_lines(&loaded.stderr);
    assert!(console.is_empty(), "the report logged to the console:\n{}", console.join("\n"));
    check_drawn_timeline(&loaded.stdout, &run);

    // The control: the same check sees a console error and an uncaught exception.
    let control = tmp.0.join("control.html");
    std::fs::write(&control, CONTROL_PAGE).expect("the control page can be written");
    let controlled = headless(&chromium, &tmp.0.join("profile-control"), &dump, &file_url(&control));
    assert!(controlled.status.success(), "chromium failed on the control page:\n{}", controlled.stderr);
    let console = console_lines(&controlled.stderr);
    assert!(
        console.iter().any(|l| l.contains("twice-control")) && console.iter().any(|l| l.contains("Uncaught")),
        "the console check does not see the control page's errors; stderr:\n{}",
        controlled.stderr
    );

    // A screenshot of the failing scenario alone, so that it starts at the top of the page.
    let alone = RunResults {
        totals: Totals::of(std::slice::from_ref(failing)),
        results: vec![failing.clone()],
        ..run.clone()
    };
    let page = tmp.0.join("screenshot.html");
    std::fs::write(&page, reports::html::render(&alone)).expect("the screenshot page can be written");
    let png = tmp.0.join("report-timeline.png");
    let shoot = [
        OsString::from(format!("--screenshot={}", png.display())),
        OsString::from(format!("--window-size={SCREENSHOT_WIDTH_PX},{SCREENSHOT_HEIGHT_PX}")),
        OsString::from("--hide-scrollbars"),
        OsString::from("--force-device-scale-factor=1"),
    ];
    let shot = headless(&chromium, &tmp.0.join("profile-screenshot"), &shoot, &file_url(&page));
    assert!(shot.status.success(), "chromium failed taking the screenshot:\n{}", shot.stderr);
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "no screenshot at {}; stderr:\n{}", png.display(), shot.stderr);
    if std::env::var("TWICE_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report-timeline.png");
        std::fs::copy(&png, &doc).expect("docs/report-timeline.png can be written");
        eprintln!("report_html: wrote {}", doc.display());
    }
}
