//! `cargo xtask test`: the venv and the binaries that the end-to-end tests need, Chromium for
//! the HTML report test, the TypeScript example executor, the wheel and npm packages
//! (`package.rs`, from the debug binaries), then the suite (cargo-nextest when installed, else
//! `cargo test`) with `TWICE_PYTHON`, `TWICE_NODE_EXECUTOR`, `TWICE_BIN_DIR`,
//! `TWICE_CHROMIUM`, `TWICE_WHEEL`, `TWICE_NPM_KIT` and `TWICE_NPM_PLATFORM` set. Each step
//! prints how long it took.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};

use crate::node::{install_lockfile, prepare_node_executor};
use crate::package;
use crate::venv::prepare_venv;
use crate::{cargo, exit_code, output_of, root, target_dir};

pub(crate) fn test(args: &[String]) -> Result<i32> {
    let root = root();
    let started = Instant::now();
    // The whole suite's test binaries are compiled while the venv and Node's packages are
    // fetched; a narrower run leaves cargo to build what it selects.
    let vars = prepare(&root, args.is_empty())?;
    println!("xtask: prepared in {} s", started.elapsed().as_secs());
    let code = run_tests(&root, args, &vars)?;
    println!("xtask: the suite took {} s in all", started.elapsed().as_secs());
    Ok(code)
}

/// What the suite's prepared tests are told, by name: an environment variable and its path.
pub(crate) type Prepared = Vec<(&'static str, PathBuf)>;

/// Everything the prepared tests need, made or checked, each step timed; the variables that
/// name them. What comes over the network (PyPI, npm, apt: [`fetch`]) is fetched on a thread of
/// its own while cargo compiles ([`build`]), so that neither waits for the other; with
/// `test_binaries`, the compile includes the whole workspace's tests.
pub(crate) fn prepare(root: &Path, test_binaries: bool) -> Result<Prepared> {
    let (fetched, built) = thread::scope(|s| {
        let fetched = s.spawn(|| fetch(root));
        let built = build(root, test_binaries);
        (fetched.join(), built)
    });
    let fetched =
        fetched.map_err(|_| anyhow!("the thread that fetched the venv and Node's packages panicked"))??;
    let (bin_dir, packages) = built?;
    let mut vars = vec![
        ("TWICE_BIN_DIR", bin_dir),
        ("TWICE_WHEEL", packages.wheel),
        ("TWICE_NPM_KIT", packages.npm_kit),
        ("TWICE_NPM_PLATFORM", packages.npm_platform),
        ("TWICE_PYTHON", fetched.python),
        ("TWICE_NODE_EXECUTOR", fetched.node_executor),
    ];
    match fetched.chromium {
        Some(chromium) => vars.push(("TWICE_CHROMIUM", chromium)),
        None => println!(
            "xtask: warning: no Chromium found; the HTML report test checks the page's structure only \
             (and fails under CI)"
        ),
    }
    for (name, value) in &vars {
        println!("xtask: {name}={}", value.display());
    }
    Ok(vars)
}

/// What [`fetch`] prepares.
struct Fetched {
    python: PathBuf,
    node_executor: PathBuf,
    chromium: Option<PathBuf>,
}

/// The venv with the pinned SDKs, the TypeScript example (its lockfile installed, compiled to
/// dist/), the MCP clients' lockfile (tests/it/mcp_clients.rs), Chromium for the HTML report
/// test.
fn fetch(root: &Path) -> Result<Fetched> {
    let python = step("the Python venv", || prepare_venv(root))?;
    let node_executor = step("the TypeScript example", || prepare_node_executor(root))?;
    step("the MCP clients", || install_lockfile(root, "tests/mcp", "cargo xtask test"))?;
    let chromium = step("Chromium", || Ok(prepare_chromium()))?;
    Ok(Fetched { python, node_executor, chromium })
}

/// The binaries, the packages made from them, and with `test_binaries` the workspace's tests;
/// the binaries' folder and the packages.
fn build(root: &Path, test_binaries: bool) -> Result<(PathBuf, package::Packages)> {
    // End-to-end tests run the project's binaries (`twice`, `twice-executor`) as real child
    // processes; cargo builds a package's binaries only for that package's own tests, so
    // build them all first and tell the tests where they are.
    step("the binaries", || cargo_step(root, &["build", "--workspace", "--bins"]))?;
    let bin_dir = target_dir(root).join("debug");
    // The packagings' tests (tests/it/packages.rs) install the wheel and the npm packages as a
    // Python or Node team would. They are made here from the debug binaries just built: the
    // packaging is what is under test, and a release build would double the suite's compile.
    let host = package::host().context("this machine is none of the platforms twice is packaged for")?;
    let packages =
        step("the packages", || package::make(root, &bin_dir, &target_dir(root).join("packages"), host))?;
    if test_binaries {
        step("the test binaries", || cargo_step(root, &["test", "--workspace", "--no-run"]))?;
    }
    Ok((bin_dir, packages))
}

/// Tests side by side under nextest: three for every two cores. About a third of the suite's
/// test time is waiting (a misbehaving executor's timeouts, child processes starting), so a
/// test per core leaves the cores idle that long: on 2 cores, 3 at a time took the suite from
/// 548 s to 474 s, every test passing. `NEXTEST_TEST_THREADS` overrides it.
fn test_threads() -> usize {
    let cores = thread::available_parallelism().map_or(2, usize::from);
    (cores * 3).div_ceil(2).max(2)
}

/// `cargo ARGS` at the root, said first; an error when it fails.
fn cargo_step(root: &Path, args: &[&str]) -> Result<()> {
    println!("xtask: cargo {}", args.join(" "));
    let status = cargo().args(args).current_dir(root).stdin(Stdio::null()).status();
    let status = status.with_context(|| format!("could not start cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({})", args.join(" "), exit_code(status));
    }
    Ok(())
}

/// Runs one preparation step and says how long it took, so that a slow one is seen.
fn step<T>(what: &str, work: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let out = work()?;
    println!("xtask: {what}: ready in {:.1} s", started.elapsed().as_secs_f64());
    Ok(out)
}

/// The test run proper, with `vars` set: under cargo-nextest when it is installed (every test
/// binary's tests side by side, so one long test no longer holds the binaries after it, and
/// `.config/nextest.toml` bounds each test), then the doc tests, which nextest does not run;
/// under `cargo test` otherwise.
fn run_tests(root: &Path, args: &[String], vars: &[(&str, PathBuf)]) -> Result<i32> {
    let nextest = cargo()
        .args(["nextest", "--version"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    let mut command = cargo();
    if nextest {
        command.args(["nextest", "run"]);
        if env::var_os("NEXTEST_TEST_THREADS").is_none() {
            command.args(["--test-threads", &test_threads().to_string()]);
        }
    } else {
        println!("xtask: cargo-nextest is not installed (cargo install cargo-nextest): using cargo test");
        command.arg("test");
    }
    // `--workspace` would override a `-p`, so add it only when no package is chosen.
    let whole = !selects_package(args);
    if whole {
        command.arg("--workspace");
    }
    command.args(with_prepared_tests(args)).current_dir(root).envs(vars.iter().map(|(k, v)| (k, v)));
    println!(
        "xtask: running cargo {}{}",
        if nextest { "nextest run" } else { "test" },
        if whole { " --workspace" } else { "" }
    );
    let code = exit_code(command.status().context("could not start the tests")?);
    if code != 0 || !nextest || !args.is_empty() {
        return Ok(code);
    }
    println!("xtask: running the doc tests (cargo test --workspace --doc)");
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]).current_dir(root).envs(vars.iter().map(|(k, v)| (k, v)));
    Ok(exit_code(doc.status().context("could not start cargo test --doc")?))
}

/// The tests that need what this command prepares (the venv, Node, the packages) are
/// `#[ignore]`d with that reason, so that a plain `cargo test` runs every hermetic test and
/// lists those; here they run too (`--include-ignored`), all but the long soak, which is
/// `cargo xtask soak`'s. The flags go to the test binaries, after a `--` the caller's args
/// may already hold.
pub(crate) fn with_prepared_tests(args: &[String]) -> Vec<String> {
    let mut out = args.to_vec();
    if !out.iter().any(|a| a == "--") {
        out.push("--".into());
    }
    out.extend(["--include-ignored", "--skip", SOAK_TEST].map(String::from));
    out
}

/// The one ignored test `cargo xtask test` leaves out (`tests/it/soak.rs`).
const SOAK_TEST: &str = "soak::soak";

/// Where Chromium is looked for on the `PATH`, in this order (the HTML report test's order).
const CHROMIUM_NAMES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// Chromium for the HTML report test: `TWICE_CHROMIUM`, or the first of [`CHROMIUM_NAMES`] on
/// the `PATH`; when there is none, installs Debian's `chromium` package first ([`apt_install`]).
/// A failed install is a warning: only that test needs it.
pub(crate) fn prepare_chromium() -> Option<PathBuf> {
    if let Some(path) = env::var_os("TWICE_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    if let Some(found) = find_on_path(&CHROMIUM_NAMES) {
        return Some(found);
    }
    if apt_install("chromium", "the HTML report test") {
        return find_on_path(&CHROMIUM_NAMES);
    }
    None
}

/// Installs a Debian package with `apt-get install -y --no-install-recommends` when we are root
/// on Linux with `apt-get`; whether it installed. A failure is a warning naming `purpose`: the
/// caller says what goes without it.
pub(crate) fn apt_install(package: &str, purpose: &str) -> bool {
    let root_user = output_of("id", &["-u"]).is_some_and(|uid| uid == "0");
    if !(cfg!(target_os = "linux") && root_user && find_on_path(&["apt-get"]).is_some()) {
        return false;
    }
    println!(
        "xtask: installing {package} for {purpose} (apt-get install -y --no-install-recommends {package})"
    );
    let installed = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", package])
        .stdin(Stdio::null())
        .status();
    match installed {
        Ok(status) if status.success() => true,
        Ok(status) => {
            eprintln!("xtask: warning: apt-get install {package} failed ({status}); going on");
            false
        }
        Err(e) => {
            eprintln!("xtask: warning: could not run apt-get ({e}); going on");
            false
        }
    }
}

/// The first of `names` found as a file in a directory of the `PATH`.
pub(crate) fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    names.iter().flat_map(|name| env::split_paths(&path).map(move |dir| dir.join(name))).find(|p| p.is_file())
}

/// Whether cargo arguments (before any `--`) choose packages themselves.
pub(crate) fn selects_package(args: &[String]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        a == "-p"
            || a == "--package"
            || a.starts_with("--package=")
            || (a.starts_with("-p") && !a.starts_with("--"))
            || a == "--workspace"
            || a == "--all"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_selection_is_noticed() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(selects_package(&args(&["-p", "xtask"])));
        assert!(selects_package(&args(&["-pxtask"])));
        assert!(selects_package(&args(&["--package=xtask"])));
        assert!(!selects_package(&args(&["--release", "--", "-p"])));
    }

    #[test]
    fn the_prepared_tests_are_included_after_the_callers_own_test_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let tail = ["--include-ignored", "--skip", "soak::soak"];
        assert_eq!(with_prepared_tests(&[]), args(&[&["--"][..], &tail].concat()));
        assert_eq!(
            with_prepared_tests(&args(&["-p", "twice-tests", "--", "python_executor"])),
            args(&[&["-p", "twice-tests", "--", "python_executor"][..], &tail].concat())
        );
        assert!(!selects_package(&args(&[])));
    }
}
