//! twice as a Python or Node team installs it, with no Rust: the wheel and the npm packages
//! that `cargo xtask package` builds (`cargo xtask test` makes them first, from the debug
//! binaries, and names them in `TWICE_WHEEL`, `TWICE_NPM_KIT` and `TWICE_NPM_PLATFORM`), each
//! installed into a fresh venv or a fresh Node project whose PATH holds no cargo. The
//! installed `twice` runs a catalog scenario, and each kit's example passes against the
//! binary it came with (no `TWICE_BIN`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest an install (pip or npm, from a registry or its cache) may take.
pub(crate) const INSTALL_WAIT: Duration = Duration::from_secs(600);
/// The longest `twice run --scenario` or an example's suite may take.
pub(crate) const RUN_WAIT: Duration = Duration::from_secs(300);
/// The only directories on a run's PATH besides the venv's or the project's: the system's,
/// where python3, node and npm are and cargo is not.
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub(crate) fn package(variable: &str) -> PathBuf {
    let path = std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "{variable} is not set: run the suite with `cargo xtask test`, which builds the packages first"
        )
    });
    assert!(
        path.is_file(),
        "{variable} names {}, which is not a file: run `cargo xtask package`",
        path.display()
    );
    path
}

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The PATH a run gets: `first` (the venv's bin/, the project's node_modules/.bin) and the
/// system's directories, and a check that no cargo is on it.
pub(crate) fn path_without_rust(first: &[&Path]) -> String {
    let mut dirs: Vec<String> = first.iter().map(|d| d.display().to_string()).collect();
    dirs.extend(SYSTEM_PATH.split(':').map(str::to_string));
    for dir in &dirs {
        assert!(
            !Path::new(dir).join("cargo").exists(),
            "cargo is in {dir}: the run would not prove no Rust is needed"
        );
    }
    dirs.join(":")
}

/// A command with nothing of the suite's environment that would find twice or Rust for it:
/// the PATH given, and no variable of cargo's, rustup's or twice's own, nor one that points
/// Python or Node at other packages. The rest (certificates, proxies, pip's and npm's
/// settings) is the machine's, as a user's shell has it.
pub(crate) fn clean(program: impl AsRef<std::ffi::OsStr>, dir: &Path, path: &str) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir).env("PATH", path);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        let suite = ["CARGO", "RUSTUP", "RUST", "TWICE_"].iter().any(|prefix| name.starts_with(prefix));
        if suite || ["VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "NODE_PATH"].contains(&name.as_str()) {
            command.env_remove(&name);
        }
    }
    command
}

/// Runs `command` to its end within `wait`: whether it succeeded, and the tail of its output
/// (stdout and stderr together). Killed, and the test failed with that tail, on the bound.
pub(crate) fn run(mut command: Command, what: &str, wait: Duration) -> (bool, String) {
    let dir = scratch(&format!("run-{}", what.replace(|c: char| !c.is_ascii_alphanumeric(), "-")));
    let out = dir.join("output.txt");
    let file = std::fs::File::create(&out).unwrap();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let deadline = Instant::now() + wait;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    let tail = &output[output.len().saturating_sub(12_000)..];
    match status {
        None => panic!("{what} did not finish within {wait:?}:\n{tail}"),
        Some(status) => (status.success(), tail.to_string()),
    }
}

pub(crate) fn must(command: Command, what: &str, wait: Duration) -> String {
    let (ok, output) = run(command, what, wait);
    assert!(ok, "{what} failed:\n{output}");
    output
}

/// The pinned version of `name` in tests/requirements.txt (`name==X`).
pub(crate) fn pinned(name: &str) -> String {
    let text = std::fs::read_to_string(root().join("tests/requirements.txt")).unwrap();
    let prefix = format!("{name}==");
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("tests/requirements.txt pins no {name}"))
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The Python that makes the fresh venv: the suite's (its venv's base interpreter makes a
/// new venv with nothing of the suite's packages in it).
pub(crate) fn python() -> PathBuf {
    std::env::var_os("TWICE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("TWICE_PYTHON is not set: run the suite with `cargo xtask test`"))
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_wheel_gives_twice_and_the_pytest_plugin_in_a_fresh_venv_without_rust() {
    let wheel = package("TWICE_WHEEL");
    let dir = scratch("wheel");
    let venv = dir.join("venv");
    let bin = venv.join("bin");
    let system = path_without_rust(&[]);
    let mut make = clean(python(), &dir, &system);
    make.args(["-m", "venv"]).arg(&venv);
    must(make, "python -m venv", INSTALL_WAIT);
    let mut install = clean(bin.join("pip"), &dir, &system);
    install.args(["install", "--quiet", "--disable-pip-version-check"]).arg(&wheel);
    install.args([pinned("pytest"), pinned("stripe")]);
    must(install, "pip install the wheel", INSTALL_WAIT);
    for name in ["twice", "twice-executor"] {
        assert!(bin.join(name).is_file(), "the wheel installed no {name} into {}", bin.display());
    }

    // The command, as a user types it in the activated venv.
    let activated = path_without_rust(&[&bin]);
    let mut scenario = clean("twice", &dir, &activated);
    scenario.args(["run", "--scenario", "lost_refund_reply", "--report-dir"]).arg(dir.join("report"));
    let output = must(scenario, "twice run --scenario lost_refund_reply (from the wheel)", RUN_WAIT);
    assert!(
        output.contains("1 scenario against reference executor") && output.contains("1 passed, 0 violated"),
        "{output}"
    );

    // The example's suite, with the venv's interpreter but its bin/ not on the PATH: the
    // plugin finds the binary the wheel installed beside it.
    let example = root().join("examples/apps/refund_worker");
    let mut pytest = clean(bin.join("python"), &example, &system);
    pytest.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]).env("PYTHONDONTWRITEBYTECODE", "1");
    let output = must(pytest, "pytest examples/apps/refund_worker (the wheel's kit)", RUN_WAIT);
    assert!(output.contains("passed"), "{output}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_npm_packages_give_twice_and_the_kit_in_a_fresh_node_project_without_rust() {
    let kit = package("TWICE_NPM_KIT");
    let platform = package("TWICE_NPM_PLATFORM");
    let dir = scratch("npm");
    let project = dir.join("refund_worker_node");
    let example = root().join("examples/apps/refund_worker_node");
    copy_source(&example, &project);
    // The platform packages are named in twice-kit's optionalDependencies; the one for this
    // machine is installed from its tarball, and the scope's registry is nowhere, so that no
    // package of that name is ever fetched from the public registry in a test.
    std::fs::write(project.join(".npmrc"), "@twice-kit:registry=http://127.0.0.1:9/\nfetch-retries=0\n")
        .unwrap();
    let system = path_without_rust(&[]);
    let mut ci = clean("npm", &project, &system);
    ci.args(["ci", "--no-audit", "--no-fund"]);
    must(ci, "npm ci (the example's lockfile)", INSTALL_WAIT);
    let mut install = clean("npm", &project, &system);
    install.args(["install", "--no-save", "--no-audit", "--no-fund"]).arg(&kit).arg(&platform);
    must(install, "npm install twice-kit and its platform package", INSTALL_WAIT);

    let mut scenario = clean("npx", &project, &system);
    scenario
        .args(["--no-install", "twice", "run", "--scenario", "lost_refund_reply", "--report-dir"])
        .arg(dir.join("report"));
    let output = must(scenario, "npx twice run --scenario lost_refund_reply (from npm)", RUN_WAIT);
    assert!(
        output.contains("1 scenario against reference executor") && output.contains("1 passed, 0 violated"),
        "{output}"
    );

    let mut vitest = clean("npx", &project, &system);
    vitest.args(["--no-install", "vitest", "run"]);
    let output = must(vitest, "vitest run (the example, on the npm kit)", RUN_WAIT);
    assert!(output.contains("passed"), "{output}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example's files without what an install or a run leaves.
fn copy_source(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if ["node_modules", "dist", ".vitest"].iter().any(|skip| name == *skip) {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_source(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The wheel, the npm packages and the binaries inside them say one version: the workspace's.
#[test]
fn the_kits_and_the_workspace_have_one_version() {
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let workspace = cargo
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("Cargo.toml's workspace version");
    let pyproject = std::fs::read_to_string(root().join("clients/python/pyproject.toml")).unwrap();
    assert!(pyproject.contains(&format!("\nversion = \"{workspace}\"\n")), "clients/python/pyproject.toml");
    let init = std::fs::read_to_string(root().join("clients/python/src/twice/__init__.py")).unwrap();
    assert!(init.contains(&format!("__version__ = \"{workspace}\"")), "twice.__version__");
    let node: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("clients/node/package.json")).unwrap())
            .unwrap();
    assert_eq!(node["version"], serde_json::json!(workspace), "clients/node/package.json");
}
