//! `twice check`: an application's claims posted to a running `twice serve`, judged once the
//! world has settled (or at once, `--no-wait`), and the report files of its verdict.

use anyhow::Context;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Options of `twice check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The URLs file `twice serve --urls-file` wrote (its `control` entry is where the
    /// claims go).
    #[arg(long, value_name = "PATH")]
    pub urls_file: PathBuf,
    /// The application's claims: {"claims": [{"id", "action", "state", ...}]} (docs/byo.md).
    #[arg(long, value_name = "PATH")]
    pub claims: PathBuf,
    /// Where the report files go.
    #[arg(long, default_value = "twice-report")]
    pub report_dir: PathBuf,
    /// Judge at once, without waiting for the world to settle (a late commit, a delivery still
    /// due, a request still in flight): the verdict is marked "judged before the world settled",
    /// with what was still pending, and with nothing violated exits 3, not 0.
    #[arg(long)]
    pub no_wait: bool,
}

/// How long `twice check` waits for serve's verdict once the world has settled.
pub const CHECK_MS_MAX: u64 = 60_000;

/// `twice check`: posts the claims to a running serve, writes the report files of its
/// verdict, and exits as `twice run` does (0 held, 1 violated, 2 could not check), or 3 when
/// `--no-wait` judged a world still unsettled and found nothing violated yet.
pub fn check(args: CheckArgs) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let text = std::fs::read_to_string(&args.urls_file)
        .with_context(|| format!("cannot read {}", args.urls_file.display()))?;
    let urls = urls_of(&text).with_context(|| {
        format!("{}: expected the JSON object twice serve --urls-file writes", args.urls_file.display())
    })?;
    let control = urls.get("control").with_context(|| {
        format!(
            "{}: no \"control\" URL; write it with a twice serve of this version",
            args.urls_file.display()
        )
    })?;
    let body =
        std::fs::read(&args.claims).with_context(|| format!("cannot read {}", args.claims.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Serve waits for the world to settle first (at most its settle bound, plus a margin):
    // the exchange may take that long more.
    let (query, timeout_ms) = if args.no_wait {
        ("?wait=false", CHECK_MS_MAX)
    } else {
        ("", CHECK_MS_MAX + super::settle::SETTLE_WAIT_MS_MAX)
    };
    let request = crate::client::Request {
        method: "POST",
        url: format!("{control}/__twice/check{query}"),
        headers: vec![("content-type".into(), "application/json".into())],
        body,
        timeout_ms,
    };
    let answer = runtime
        .block_on(crate::client::exchange(request))
        .map_err(|e| anyhow::anyhow!("no verdict from twice serve at {control}: {e}"))?;
    let value: serde_json::Value = serde_json::from_slice(&answer.body)
        .with_context(|| format!("twice serve at {control} answered {} with no JSON", answer.status))?;
    if answer.status != 200 {
        let message = value["error"]["message"].as_str().unwrap_or("no message");
        anyhow::bail!("{}: {message}", args.claims.display());
    }
    let results: results::RunResults = serde_json::from_value(value["results"].clone())
        .context("twice serve's verdict is not in this version's results shape")?;
    runner::pipeline::report(&results, &args.report_dir)?;
    print!("{}", runner::run::summary(&results));
    println!(
        "report: {} (results.json, summary.md, junit.xml, report.html; {:.1} s)",
        args.report_dir.display(),
        started.elapsed().as_secs_f64()
    );
    let code = runner::exit::of(&results);
    if code == runner::exit::UNSETTLED {
        println!(
            "twice check: no verdict yet: nothing was violated in what was read, but the world had \
             not settled (above); check again without --no-wait (exit {code})"
        );
    }
    Ok(code)
}

/// The URLs in a URLs file's text: its string entries (the file also lists the funded dev
/// accounts, under `accounts`).
pub fn urls_of(text: &str) -> serde_json::Result<BTreeMap<String, String>> {
    let file: BTreeMap<String, serde_json::Value> = serde_json::from_str(text)?;
    Ok(file.into_iter().filter_map(|(name, value)| Some((name, value.as_str()?.to_string()))).collect())
}
