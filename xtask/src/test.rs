//! `cargo xtask test`: the venv and the binaries that the end-to-end tests need, Chromium for
//! the HTML report test, the TypeScript example executor, the wheel and npm packages of a
//! release (`package.rs`), then `cargo test` with `TWICE_PYTHON`, `TWICE_NODE_EXECUTOR`,
//! `TWICE_BIN_DIR`, `TWICE_CHROMIUM`, `TWICE_WHEEL`, `TWICE_NPM_KIT` and `TWICE_NPM_PLATFORM` set.

use std::env;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::node::{install_lockfile, prepare_node_executor};
use crate::package;
use crate::venv::prepare_venv;
use crate::{cargo, exit_code, output_of, root, target_dir};

pub(crate) fn test(args: &[String]) -> Result<i32> {
    let root = root();
    let python = prepare_venv(&root)?;
    // The TypeScript example runs on the Node SDKs of its lockfile, compiled to dist/.
    let node_executor = prepare_node_executor(&root)?;
    // The MCP client tests (tests/it/mcp_clients.rs) run the TypeScript MCP SDK of tests/mcp.
    install_lockfile(&root, "tests/mcp", "cargo xtask test")?;
    // End-to-end tests run the project's binaries (`twice`, `twice-executor`) as real child
    // processes; cargo builds a package's binaries only for that package's own tests, so
    // build them all first and tell the tests where they are.
    println!("xtask: building the binaries (cargo build --workspace --bins)");
    let built = cargo().args(["build", "--workspace", "--bins"]).current_dir(&root).status();
    let built = built.context("could not start cargo build")?;
    if !built.success() {
        return Ok(exit_code(built));
    }
    let bin_dir = target_dir(&root).join("debug");
    // The packagings' tests (tests/it/packages.rs) install the wheel and the npm packages a
    // release makes, from the release binaries, as a Python or Node team would.
    let code = package::build_release(&root, None)?;
    if code != 0 {
        return Ok(code);
    }
    let host = package::host().context("this machine is none of the platforms twice is packaged for")?;
    let packages =
        package::make(&root, &target_dir(&root).join("release"), &target_dir(&root).join("packages"), host)?;
    let mut command = cargo();
    command.arg("test").env("TWICE_BIN_DIR", &bin_dir);
    for (name, path) in [
        ("TWICE_WHEEL", &packages.wheel),
        ("TWICE_NPM_KIT", &packages.npm_kit),
        ("TWICE_NPM_PLATFORM", &packages.npm_platform),
    ] {
        println!("xtask: {name}={}", path.display());
        command.env(name, path);
    }
    // The HTML report test loads report.html in headless Chromium.
    match prepare_chromium() {
        Some(chromium) => {
            println!("xtask: TWICE_CHROMIUM={}", chromium.display());
            command.env("TWICE_CHROMIUM", chromium);
        }
        None => println!(
            "xtask: warning: no Chromium found; the HTML report test checks the page's structure only \
             (and fails under CI)"
        ),
    }
    // `--workspace` would override a `-p`, so add it only when no package is chosen.
    if !selects_package(args) {
        command.arg("--workspace");
    }
    command.args(with_prepared_tests(args)).current_dir(&root).env("TWICE_PYTHON", &python);
    println!("xtask: TWICE_PYTHON={}", python.display());
    command.env("TWICE_NODE_EXECUTOR", &node_executor);
    println!("xtask: TWICE_NODE_EXECUTOR={}", node_executor.display());
    println!("xtask: running cargo test{}", if selects_package(args) { "" } else { " --workspace" });
    let status = command.status().context("could not start cargo test")?;
    Ok(exit_code(status))
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
