//! Puts the commit `twice` is built from into `TWICE_COMMIT`, for `twice --version`.

use std::path::{Path, PathBuf};
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
        watch(&dir.join("HEAD"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).map(PathBuf::from);
            let refs = common.unwrap_or(dir);
            let loose = refs.join(&branch);
            // A branch held only in `packed-refs` gets a loose file at its next commit, and
            // packed-refs stays as it was: the folder the file will appear in is watched.
            if !watch(&loose) {
                loose.parent().map(watch);
            }
            watch(&refs.join("packed-refs"));
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// Names `path` for Cargo to watch, if it exists. Cargo reruns a build script every time for
/// a watched file that is missing, so naming a ref file that is not there (a checkout without
/// `packed-refs`, a branch held only in `packed-refs`) would rebuild the crate on every
/// `cargo build`. A branch moving from one file to the other removes or rewrites a file that
/// is watched, so the move is still seen. Says whether it was named.
fn watch(path: &Path) -> bool {
    let exists = path.exists();
    if exists {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    exists
}
