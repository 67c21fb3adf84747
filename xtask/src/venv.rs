//! The Python venv of the SDK tests, the Python kit's tests and the Python benchmark
//! (`target/twice-venv`), kept exactly at `tests/requirements.txt` plus the kit of
//! `clients/python`: both commands prepare it, so it has a module of its own. Other pinned
//! venvs (`cargo xtask fuzz-api`'s) are made the same way, by [`Venv`].

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::target_dir;

/// The venv for the Python SDK tests, under the target directory.
const VENV_DIR: &str = "twice-venv";
/// In the venv: the hash of the requirements and the kit's `pyproject.toml` it was installed
/// from.
const VENV_STAMP: &str = "twice-requirements.hash";
const REQUIREMENTS: &str = "tests/requirements.txt";
/// The Python kit (`twice-kit`, import name `twice`), installed editable into the venv: its
/// tests and the example apps' tests use its pytest plugin.
const KIT: &str = "clients/python";
/// What decides how the kit installs (name, entry points, build backend); its code is read in
/// place, being installed editable.
pub(crate) const KIT_PYPROJECT: &str = "clients/python/pyproject.toml";

/// Makes `target/twice-venv` hold exactly what `tests/requirements.txt` asks for, and the kit
/// of `clients/python`; returns the absolute path of its interpreter. Installs only when the
/// requirements, the kit's `pyproject.toml` or the checkout's path changed since the last
/// install (or none finished).
pub(crate) fn prepare_venv(root: &Path) -> Result<PathBuf> {
    let venv = Venv {
        dir: target_dir(root).join(VENV_DIR),
        requirements: REQUIREMENTS,
        also_hashed: &[KIT_PYPROJECT],
        stamp: VENV_STAMP,
        rerun: "cargo xtask test",
    };
    venv.prepare(root, |python, retry| install_kit(root, python, &venv.dir, retry))
}

/// Installs the Python kit of `clients/python` into the venv whose interpreter is `python`:
/// editable, so its tests always run its current code; without build isolation and
/// dependencies, so the build uses the flit_core pinned in the requirements and pip fetches
/// nothing.
pub(crate) fn install_kit(root: &Path, python: &Path, venv: &Path, retry: &str) -> Result<()> {
    println!("xtask: installing the Python kit {KIT} into {} (pip, editable)", venv.display());
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-e",
        ])
        .arg(root.join(KIT))
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("could not run {}\n{retry}", python.display()))?;
    if !status.success() {
        bail!("`pip install -e {KIT}` into {} failed ({status})\n{retry}", venv.display());
    }
    Ok(())
}

/// A venv under the target directory kept exactly at a pinned requirements file: installed
/// again only when that file (or another it depends on) changed since the last complete
/// install, which a stamp of their hash in the venv records.
pub(crate) struct Venv<'a> {
    /// Where the venv lives.
    pub(crate) dir: PathBuf,
    /// The requirements file, relative to the repository's root.
    pub(crate) requirements: &'a str,
    /// Other files, relative to the root, whose change calls for an install too.
    pub(crate) also_hashed: &'a [&'a str],
    /// The stamp's file name in the venv.
    pub(crate) stamp: &'a str,
    /// The command that prepares the venv, named in the advice after a failure.
    pub(crate) rerun: &'a str,
}

impl Venv<'_> {
    /// Makes the venv hold what its requirements ask for, then runs `finish` (given the
    /// interpreter and the advice to print after a failure) before the stamp is written;
    /// returns the absolute path of the venv's interpreter.
    pub(crate) fn prepare(
        &self,
        root: &Path,
        finish: impl FnOnce(&Path, &str) -> Result<()>,
    ) -> Result<PathBuf> {
        // The checkout's own path too: the kit is installed editable, pointing into it, so a
        // target directory shared by two checkouts (CARGO_TARGET_DIR) must install it again
        // for each rather than run one checkout's tests on the other's kit.
        let mut hashed = root.to_string_lossy().as_bytes().to_vec();
        for file in std::iter::once(&self.requirements).chain(self.also_hashed) {
            let path = root.join(file);
            hashed.extend(fs::read(&path).with_context(|| format!("could not read {}", path.display()))?);
        }
        let hash = format!("fnv1a64:{:016x}\n", fnv1a64(&hashed));
        let venv = &self.dir;
        let python = venv.join("bin").join("python");
        let stamp = venv.join(self.stamp);
        let retry = format!(
            "fix the cause above and run `{}` again; to start from scratch, delete {} first",
            self.rerun,
            venv.display()
        );

        if python.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == hash) {
            println!("xtask: Python venv {} is up to date with {}", venv.display(), self.requirements);
            return Ok(python);
        }
        if !python.exists() {
            println!("xtask: creating Python venv {} (python3 -m venv)", venv.display());
            let status = Command::new("python3")
                .args(["-m", "venv"])
                .arg(venv)
                .stdin(Stdio::null())
                .status()
                .with_context(|| {
                    format!("could not run python3 to create the venv: is Python 3 installed?\n{retry}")
                })?;
            if !status.success() {
                bail!(
                    "`python3 -m venv {}` failed ({status}); on Debian or Ubuntu the venv module is in the \
                     python3-venv package\n{retry}",
                    venv.display()
                );
            }
        }
        // A stamp only after a complete install: an interrupted one is redone next time.
        let _ = fs::remove_file(&stamp);
        println!(
            "xtask: installing {} into {} (pip; this can take a few minutes the first time)",
            self.requirements,
            venv.display()
        );
        let status = Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"])
            .arg(root.join(self.requirements))
            .stdin(Stdio::null())
            .status()
            .with_context(|| format!("could not run {}\n{retry}", python.display()))?;
        if !status.success() {
            bail!(
                "`pip install -r {}` into {} failed ({status})\n{retry}",
                self.requirements,
                venv.display()
            );
        }
        finish(&python, &retry)?;
        fs::write(&stamp, &hash).with_context(|| format!("could not write {}", stamp.display()))?;
        println!("xtask: {} installed into {}", self.requirements, venv.display());
        Ok(python)
    }
}

/// FNV-1a, 64 bits: stable across Rust versions, enough to notice an edited file.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}
