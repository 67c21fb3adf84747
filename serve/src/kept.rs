//! Scenarios given to serve as TOML text (`POST /__twice/scenario` with `{"toml": TEXT}` and
//! no `origin`), kept as files. A verdict's replay line, `twice serve --scenario FILE --seed
//! N`, must name a file that exists, and such text has none of its own: serve writes it to
//! one, byte for byte, and the replay line names that.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What the directory of kept scenarios is called, before its random suffix.
pub(crate) const KEPT_DIR_PREFIX: &str = "twice-serve-scenarios-";
/// Different texts kept under one scenario name (`NAME.toml`, `NAME-2.toml`, ...) before
/// serve keeps no more of that name: a bound on the files one serve writes per name.
pub(crate) const KEPT_PER_NAME_MAX: usize = 1_000;

/// The directory serve keeps scenario texts in, made when the first one comes.
#[derive(Default)]
pub(crate) struct KeptScenarios {
    dir: Mutex<Option<PathBuf>>,
}

impl KeptScenarios {
    /// The file holding `text`, scenario `name`'s TOML: `NAME.toml` in a directory of this
    /// serve's own under the system's temporary directory (`TMPDIR`), or the file of an
    /// earlier load of the same text. Serve never removes it: the replay line must still work
    /// once serve and the test that loaded the scenario are gone.
    pub(crate) fn keep(&self, name: &str, text: &str) -> std::io::Result<PathBuf> {
        let mut dir = self.dir.lock().unwrap_or_else(|p| p.into_inner());
        let dir = match dir.as_ref() {
            Some(made) => made.clone(),
            None => {
                // A fresh directory under a random name, made by serve: nobody else's file or
                // link can stand where serve writes.
                let made = tempfile::Builder::new().prefix(KEPT_DIR_PREFIX).tempdir()?.keep();
                dir.insert(made).clone()
            }
        };
        keep_in(&dir, name, text)
    }
}

/// Writes `text` to the first of `NAME.toml`, `NAME-2.toml`, ... in `dir` that is free, or
/// finds the one that already holds exactly it.
fn keep_in(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    let stem = results::names::file_name_part(name);
    for n in 1..=KEPT_PER_NAME_MAX {
        let file = if n == 1 { format!("{stem}.toml") } else { format!("{stem}-{n}.toml") };
        let path = dir.join(file);
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut created) => {
                created.write_all(text.as_bytes())?;
                return Ok(path);
            }
            // Loaded before (each test of a session loads its scenario again): the same file.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if std::fs::read(&path)? == text.as_bytes() {
                    return Ok(path);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} already holds {KEPT_PER_NAME_MAX} different scenarios named {name}",
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_text_is_one_file_and_another_text_of_that_name_another() {
        let kept = KeptScenarios::default();
        let first = kept.keep("refund", "name = \"refund\"\n").unwrap();
        let again = kept.keep("refund", "name = \"refund\"\n").unwrap();
        let other = kept.keep("refund", "name = \"refund\"\n# changed\n").unwrap();
        assert_eq!(first, again);
        assert_eq!(first.file_name().unwrap(), "refund.toml");
        assert_eq!(other.file_name().unwrap(), "refund-2.toml");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "name = \"refund\"\n# changed\n");
        let dir = first.parent().unwrap();
        assert!(dir.file_name().unwrap().to_string_lossy().starts_with(KEPT_DIR_PREFIX), "{}", dir.display());
        // A name is one safe component of a file name, whatever it holds.
        let odd = kept.keep("../up", "x").unwrap();
        assert_eq!(odd.parent(), Some(dir));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
