//! Puts the commit `twice` is built from into `TWICE_COMMIT`, for `twice --version`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    // A source tree that is not a git checkout (a crate tarball) has no commit to name.
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TWICE_COMMIT={commit}");
    // Built again when HEAD moves: a checkout of another commit, or a new commit on the branch.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).map(PathBuf::from);
            let refs = common.unwrap_or(dir);
            println!("cargo:rerun-if-changed={}", refs.join(&branch).display());
            println!("cargo:rerun-if-changed={}", refs.join("packed-refs").display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
