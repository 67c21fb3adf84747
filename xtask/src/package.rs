//! `cargo xtask package`: twice as a Python wheel and as npm packages, from release binaries,
//! so that a Python or Node team installs it with pip or npm and no Rust (docs/release.md).
//!
//! - The wheel (`clients/python/build_wheel.py`): the Python kit with `twice` and
//!   `twice-executor` as its scripts, tagged for the binaries' platform.
//! - The npm packages, in esbuild's pattern: `twice-kit` (the TypeScript kit of
//!   `clients/node`, compiled, with the `twice` command's launcher) names one optional
//!   dependency per platform, `@twice-kit/<os>-<cpu>`, each holding that platform's binaries
//!   and saying its `os` and `cpu`, so npm installs only the one that fits the machine.
//!
//! Everything lands in `target/packages/` (or `--out`): `python/*.whl`, `npm/*.tgz`, and
//! nothing else. The npm packages are laid out for `npm pack` in a stage of their own under
//! the target directory, removed on every path. The suite installs the packages into a fresh
//! venv and a fresh Node project (`tests/it/packages.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::node::{NODE_KIT, build_node_kit};
use crate::{cargo, exit_code, root, target_dir};

pub(crate) const USAGE: &str = "\
  package [--target TRIPLE] [--bin-dir DIR] [--out DIR]
                  build the release binaries (for TRIPLE when given, else this machine)
                  and package them: a twice-kit wheel (target/packages/python) and the
                  npm packages twice-kit and @twice-kit/<os>-<cpu> (target/packages/npm);
                  --bin-dir packages binaries already built there instead";

/// The TypeScript kit, from the workspace root.
/// The scope of the per-platform packages.
const PLATFORM_SCOPE: &str = "@twice-kit";

/// A platform twice is packaged for: its Rust target, npm's names for it and the wheel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Platform {
    pub(crate) triple: &'static str,
    /// npm's `process.platform` and `process.arch`.
    pub(crate) npm_os: &'static str,
    pub(crate) npm_cpu: &'static str,
    /// `build_wheel.py`'s `--os` and `--arch`.
    pub(crate) wheel_os: &'static str,
    pub(crate) wheel_arch: &'static str,
}

impl Platform {
    /// `@twice-kit/linux-x64` and the like.
    pub(crate) fn npm_name(&self) -> String {
        format!("{PLATFORM_SCOPE}/{}-{}", self.npm_os, self.npm_cpu)
    }
}

/// Every platform a release is built for (docs/release.md).
pub(crate) const PLATFORMS: [Platform; 4] = [
    Platform {
        triple: "x86_64-unknown-linux-gnu",
        npm_os: "linux",
        npm_cpu: "x64",
        wheel_os: "linux",
        wheel_arch: "x86_64",
    },
    Platform {
        triple: "aarch64-unknown-linux-gnu",
        npm_os: "linux",
        npm_cpu: "arm64",
        wheel_os: "linux",
        wheel_arch: "aarch64",
    },
    Platform {
        triple: "x86_64-apple-darwin",
        npm_os: "darwin",
        npm_cpu: "x64",
        wheel_os: "macos",
        wheel_arch: "x86_64",
    },
    Platform {
        triple: "aarch64-apple-darwin",
        npm_os: "darwin",
        npm_cpu: "arm64",
        wheel_os: "macos",
        wheel_arch: "aarch64",
    },
];

/// The platform of this machine, when it is one of [`PLATFORMS`].
pub(crate) fn host() -> Option<Platform> {
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    PLATFORMS.into_iter().find(|p| {
        let os_matches = matches!((os, p.npm_os), ("linux", "linux") | ("macos", "darwin"));
        os_matches && p.wheel_arch == arch
    })
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    target: Option<String>,
    bin_dir: Option<PathBuf>,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut parsed = Args::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| rest.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--target" => parsed.target = Some(value("--target")?.clone()),
            "--bin-dir" => parsed.bin_dir = Some(PathBuf::from(value("--bin-dir")?)),
            "--out" => parsed.out = Some(PathBuf::from(value("--out")?)),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    Ok(parsed)
}

/// What `package` made.
#[derive(Debug)]
pub(crate) struct Packages {
    pub(crate) wheel: PathBuf,
    pub(crate) npm_kit: PathBuf,
    pub(crate) npm_platform: PathBuf,
}

pub(crate) fn package(args: &[String]) -> Result<i32> {
    let args = parse(args)?;
    let root = root();
    let platform = match &args.target {
        Some(triple) => PLATFORMS.into_iter().find(|p| p.triple == triple).with_context(|| {
            let known: Vec<&str> = PLATFORMS.iter().map(|p| p.triple).collect();
            format!("no package for target `{triple}`; known: {}", known.join(", "))
        })?,
        None => {
            host().context("this machine is none of the platforms twice is packaged for; pass --target")?
        }
    };
    let bin_dir = match args.bin_dir {
        Some(dir) => root.join(dir),
        None => {
            let code = build_release(&root, args.target.as_deref())?;
            if code != 0 {
                return Ok(code);
            }
            let target = target_dir(&root);
            match &args.target {
                Some(triple) => target.join(triple).join("release"),
                None => target.join("release"),
            }
        }
    };
    let out = args.out.map_or_else(|| target_dir(&root).join("packages"), |dir| root.join(dir));
    let made = make(&root, &bin_dir, &out, platform)?;
    println!("xtask: {}", made.wheel.display());
    println!("xtask: {}", made.npm_kit.display());
    println!("xtask: {}", made.npm_platform.display());
    Ok(0)
}

/// `cargo build --release` of the two binaries the packages carry.
pub(crate) fn build_release(root: &Path, triple: Option<&str>) -> Result<i32> {
    let mut command = cargo();
    command.args([
        "build",
        "--release",
        "-p",
        "twice",
        "--bin",
        "twice",
        "-p",
        "executor",
        "--bin",
        "twice-executor",
    ]);
    if let Some(triple) = triple {
        command.args(["--target", triple]);
    }
    println!("xtask: building the release binaries (cargo build --release)");
    let status = command.current_dir(root).status().context("could not start cargo build")?;
    Ok(if status.success() { 0 } else { exit_code(status) })
}

/// The wheel and the two npm packages for `platform`, from the binaries in `bin_dir`.
pub(crate) fn make(root: &Path, bin_dir: &Path, out: &Path, platform: Platform) -> Result<Packages> {
    let twice = bin_dir.join("twice");
    let executor = bin_dir.join("twice-executor");
    for binary in [&twice, &executor] {
        if !binary.is_file() {
            bail!("{} is missing: build it first (cargo build --release --bins)", binary.display());
        }
    }
    let wheel = build_wheel(root, &twice, &executor, &out.join("python"), platform)?;
    let version = kit_version(root)?;
    let (npm_platform, npm_kit) = staged(root, &out.join("npm"), |stage, npm_dir| {
        let npm_platform = pack_platform(stage, npm_dir, platform, &version, &twice, &executor)?;
        Ok((npm_platform, pack_kit(root, stage, npm_dir, &version)?))
    })?;
    Ok(Packages { wheel, npm_kit, npm_platform })
}

/// Runs `pack(stage, npm_dir)`, which lays packages out in `stage` and packs them into
/// `npm_dir`. The stage is a fresh directory under the target directory, removed when this
/// returns, on an error too: the output holds only what was packed, and two packagings at
/// once never share a stage.
fn staged<T>(root: &Path, npm_dir: &Path, pack: impl FnOnce(&Path, &Path) -> Result<T>) -> Result<T> {
    // Earlier versions staged inside the output; an output one of them made keeps that folder.
    let old_stage = npm_dir.join("stage");
    if old_stage.exists() {
        fs::remove_dir_all(&old_stage)
            .with_context(|| format!("could not remove {}", old_stage.display()))?;
    }
    fs::create_dir_all(npm_dir).with_context(|| format!("could not create {}", npm_dir.display()))?;
    let target = target_dir(root);
    fs::create_dir_all(&target).with_context(|| format!("could not create {}", target.display()))?;
    let stage = tempfile::Builder::new()
        .prefix("package-stage-")
        .tempdir_in(&target)
        .with_context(|| format!("could not make a stage for the npm packages in {}", target.display()))?;
    let packed = pack(stage.path(), npm_dir);
    let path = stage.path().to_path_buf();
    // Closed explicitly, so that a stage that cannot be removed is an error, not a leftover;
    // the packing's own error comes first.
    let closed = stage.close();
    let packed = packed?;
    closed.with_context(|| format!("could not remove the stage {}", path.display()))?;
    Ok(packed)
}

fn build_wheel(
    root: &Path,
    twice: &Path,
    executor: &Path,
    out: &Path,
    platform: Platform,
) -> Result<PathBuf> {
    // Any Python 3.11 or later: the builder uses the standard library only.
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| "python3".into());
    let script = root.join("clients/python/build_wheel.py");
    println!("xtask: building the wheel ({})", script.display());
    let output = Command::new(&python)
        .arg(&script)
        .arg("--twice")
        .arg(twice)
        .arg("--executor")
        .arg(executor)
        .arg("--out")
        .arg(out)
        .args(["--os", platform.wheel_os, "--arch", platform.wheel_arch])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not run {} (Python 3.11 or later)", python.to_string_lossy()))?;
    if !output.status.success() {
        bail!("{} failed ({})", script.display(), output.status);
    }
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Ok(PathBuf::from(printed))
}

fn kit_version(root: &Path) -> Result<String> {
    let manifest = read_json(&root.join(NODE_KIT).join("package.json"))?;
    manifest["version"].as_str().map(str::to_string).context("clients/node/package.json has no version")
}

fn read_json(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("could not read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    fs::write(path, text).with_context(|| format!("could not write {}", path.display()))
}

/// The package.json of a platform package: its binaries, for npm to install only where
/// `os` and `cpu` match.
pub(crate) fn platform_manifest(platform: Platform, version: &str) -> Value {
    json!({
        "name": platform.npm_name(),
        "version": version,
        "description": format!("The twice binaries for {}-{} (installed by twice-kit)", platform.npm_os, platform.npm_cpu),
        "license": "MIT OR Apache-2.0",
        "os": [platform.npm_os],
        "cpu": [platform.npm_cpu],
        "files": ["bin"],
        "preferUnplugged": true,
    })
}

/// The kit's package.json as published: the source's text (its keys in their order: a
/// conditional export's `types` must come before `default`), without what only the kit's
/// development needs (`scripts`, `devDependencies`), naming every platform package as an
/// optional dependency. The source is as npm writes it: one top-level key per line indented
/// by two spaces, which is what the edit relies on and then checks by parsing the result.
pub(crate) fn kit_manifest(source: &str, version: &str) -> Result<String> {
    let lines: Vec<&str> = source.trim_end().lines().collect();
    let (Some(&"{"), Some(&"}")) = (lines.first(), lines.last()) else {
        bail!("clients/node/package.json is not an object written as npm writes it");
    };
    // Each top-level entry: its key and its lines, without a trailing comma.
    let mut entries: Vec<(String, Vec<String>)> = Vec::new();
    for line in &lines[1..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("  \"") {
            let key = rest.split('"').next().unwrap_or_default().to_string();
            entries.push((key, Vec::new()));
        }
        let Some((_, body)) = entries.last_mut() else {
            bail!("clients/node/package.json: a line before any key")
        };
        body.push(line.to_string());
    }
    entries.retain(|(key, _)| key != "scripts" && key != "devDependencies");
    let optional: Map<String, Value> =
        PLATFORMS.iter().map(|p| (p.npm_name(), Value::String(version.to_string()))).collect();
    let optional = serde_json::to_string_pretty(&Value::Object(optional))?.replace('\n', "\n  ");
    entries.push(("optionalDependencies".into(), vec![format!("  \"optionalDependencies\": {optional}")]));
    let count = entries.len();
    let mut text = String::from("{\n");
    for (index, (_, body)) in entries.iter_mut().enumerate() {
        if let Some(last) = body.last_mut() {
            let trimmed = last.trim_end().trim_end_matches(',').to_string();
            *last = if index + 1 < count { format!("{trimmed},") } else { trimmed };
        }
        for line in body.iter() {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str("}\n");
    let parsed: Value = serde_json::from_str(&text).context("the published package.json is not JSON")?;
    if parsed.get("scripts").is_some() || parsed["version"] != json!(version) {
        bail!("the published package.json is not what it should be:\n{text}");
    }
    Ok(text)
}

fn pack_platform(
    stage: &Path,
    npm_dir: &Path,
    platform: Platform,
    version: &str,
    twice: &Path,
    executor: &Path,
) -> Result<PathBuf> {
    let dir = stage.join(format!("{}-{}", platform.npm_os, platform.npm_cpu));
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).with_context(|| format!("could not create {}", bin.display()))?;
    for (from, name) in [(twice, "twice"), (executor, "twice-executor")] {
        let to = bin.join(name);
        fs::copy(from, &to)
            .with_context(|| format!("could not copy {} to {}", from.display(), to.display()))?;
        set_executable(&to)?;
    }
    write_json(&dir.join("package.json"), &platform_manifest(platform, version))?;
    let readme = format!(
        "# {}\n\nThe `twice` and `twice-executor` binaries for {}-{}. Install `twice-kit`, which depends on \
         this package where it fits the machine.\n",
        platform.npm_name(),
        platform.npm_os,
        platform.npm_cpu
    );
    fs::write(dir.join("README.md"), readme)?;
    npm_pack(&dir, npm_dir)
}

fn pack_kit(root: &Path, stage: &Path, npm_dir: &Path, version: &str) -> Result<PathBuf> {
    let kit = root.join(NODE_KIT);
    build_node_kit(root, "cargo xtask package")?;
    let dir = stage.join("twice-kit");
    fs::create_dir_all(&dir)?;
    for entry in ["dist", "bin"] {
        copy_tree(&kit.join(entry), &dir.join(entry))?;
    }
    fs::copy(kit.join("README.md"), dir.join("README.md"))
        .context("could not copy clients/node/README.md")?;
    for licence in ["LICENSE-APACHE", "LICENSE-MIT"] {
        fs::copy(root.join(licence), dir.join(licence))
            .with_context(|| format!("could not copy {licence}"))?;
    }
    for launcher in ["twice.js", "twice-executor.js"] {
        set_executable(&dir.join("bin").join(launcher))?;
    }
    let source =
        fs::read_to_string(kit.join("package.json")).context("could not read clients/node/package.json")?;
    fs::write(dir.join("package.json"), kit_manifest(&source, version)?)
        .context("could not write the published package.json")?;
    npm_pack(&dir, npm_dir)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("could not create {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("could not read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("could not copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("could not make {} executable", path.display()))
}

/// `npm pack` of `dir` into `out`; the tarball's path.
fn npm_pack(dir: &Path, out: &Path) -> Result<PathBuf> {
    let output = Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(out)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("could not run npm pack")?;
    if !output.status.success() {
        bail!("`npm pack` in {} failed ({})", dir.display(), output.status);
    }
    let name = String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or_default().trim().to_string();
    let tarball = out.join(&name);
    if name.is_empty() || !tarball.is_file() {
        bail!("`npm pack` in {} named no tarball it wrote ({name:?})", dir.display());
    }
    Ok(tarball)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_and_bad_ones_refused() {
        let args = |a: &[&str]| parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(args(&[]).unwrap(), Args::default());
        let read = args(&["--target", "aarch64-unknown-linux-gnu", "--out", "dist"]).unwrap();
        assert_eq!(read.target.as_deref(), Some("aarch64-unknown-linux-gnu"));
        assert_eq!(read.out, Some(PathBuf::from("dist")));
        assert!(args(&["--target"]).is_err());
        assert!(args(&["--wheel"]).unwrap_err().to_string().contains("unknown argument `--wheel`"));
    }

    #[test]
    fn the_kit_names_every_platform_package_and_each_says_where_it_fits() {
        let source = std::fs::read_to_string(root().join("clients/node/package.json")).unwrap();
        let text = kit_manifest(&source, "0.1.0").unwrap();
        let kit: Value = serde_json::from_str(&text).unwrap();
        assert!(kit.get("scripts").is_none() && kit.get("devDependencies").is_none(), "{text}");
        assert_eq!(kit["name"], json!("twice-kit"));
        // TypeScript takes the first condition that matches: `types` must stay first.
        let exports = text.split("\"exports\"").nth(1).unwrap();
        assert!(exports.find("\"types\"").unwrap() < exports.find("\"default\"").unwrap(), "{text}");
        let files = kit["files"].as_array().unwrap();
        assert!(files.contains(&json!("LICENSE-MIT")) && files.contains(&json!("LICENSE-APACHE")), "{text}");
        let optional = kit["optionalDependencies"].as_object().unwrap();
        assert_eq!(optional.len(), PLATFORMS.len());
        for platform in PLATFORMS {
            assert_eq!(optional[&platform.npm_name()], json!("0.1.0"));
            let manifest = platform_manifest(platform, "0.1.0");
            assert_eq!(manifest["os"], json!([platform.npm_os]));
            assert_eq!(manifest["cpu"], json!([platform.npm_cpu]));
        }
        assert_eq!(PLATFORMS[0].npm_name(), "@twice-kit/linux-x64");
        assert!(kit_manifest("[]", "0.1.0").is_err());
    }

    /// A scratch directory under the target directory, removed when dropped.
    fn scratch() -> tempfile::TempDir {
        let target = target_dir(&root());
        fs::create_dir_all(&target).unwrap();
        tempfile::Builder::new().prefix("xtask-package-test-").tempdir_in(target).unwrap()
    }

    /// The npm output holds the tarball and nothing else: not the stage it was laid out in
    /// (which is under the target directory and gone afterwards), nor the one an earlier
    /// version left in the output. Runs `npm pack`, as `cargo xtask test` does.
    #[test]
    fn a_packed_platform_package_leaves_only_its_tarball_in_the_output() {
        let scratch = scratch();
        let bin = scratch.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        let (twice, executor) = (bin.join("twice"), bin.join("twice-executor"));
        for binary in [&twice, &executor] {
            fs::write(binary, "#!/bin/sh\n").unwrap();
        }
        let npm_dir = scratch.path().join("out").join("npm");
        fs::create_dir_all(npm_dir.join("stage").join("linux-x64")).unwrap();
        let mut seen_stage = PathBuf::new();
        let tarball = staged(&root(), &npm_dir, |stage, npm_dir| {
            seen_stage = stage.to_path_buf();
            pack_platform(stage, npm_dir, PLATFORMS[0], "0.1.0", &twice, &executor)
        })
        .unwrap();
        let left: Vec<_> = fs::read_dir(&npm_dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(left, std::slice::from_ref(&tarball), "only the tarball is left in {}", npm_dir.display());
        assert!(tarball.extension().is_some_and(|e| e == "tgz"), "{}", tarball.display());
        assert!(seen_stage.starts_with(target_dir(&root())), "{}", seen_stage.display());
        assert!(!seen_stage.exists(), "the stage is removed");
    }

    #[test]
    fn the_stage_is_removed_when_packing_fails() {
        let scratch = scratch();
        let npm_dir = scratch.path().join("npm");
        let mut seen_stage = PathBuf::new();
        let failed = staged(&root(), &npm_dir, |stage, _| -> Result<()> {
            seen_stage = stage.to_path_buf();
            fs::write(stage.join("half.json"), "{").unwrap();
            bail!("npm pack failed")
        });
        assert!(failed.unwrap_err().to_string().contains("npm pack failed"));
        assert!(!seen_stage.as_os_str().is_empty() && !seen_stage.exists(), "{}", seen_stage.display());
        assert_eq!(fs::read_dir(&npm_dir).unwrap().count(), 0);
    }
}
