//! The executor's command line: how `--executor "python3 my_executor.py"` becomes a program
//! and its arguments (no shell runs), and where the reference executor's binary is.

use std::fmt;
use std::path::{Path, PathBuf};

/// How to start one worker of the executor under test: a program and its arguments, run
/// without a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// Why a command line could not be split into words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandLineError {
    #[error("the executor command is empty")]
    Empty,
    #[error("the executor command has an unterminated {quote} quote: {line}")]
    Unterminated { quote: char, line: String },
    #[error("the executor command ends with a lone backslash: {0}")]
    TrailingBackslash(String),
}

/// Why the reference executor binary was not found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("cannot tell where the running program is: {0}")]
    CurrentExe(std::io::Error),
    #[error(
        "no {name} binary at {} (it is looked for next to the running program); build it with `cargo build --workspace --bins`",
        path.display()
    )]
    Missing { name: &'static str, path: PathBuf },
}

/// The reference executor's binary name.
pub const REFERENCE_BINARY: &str = "twice-executor";

impl ExecutorCommand {
    /// Splits a command line such as `python3 my_executor.py --flag` into a program and its
    /// arguments: words are separated by whitespace; `'...'` quotes literally; `"..."` quotes
    /// with `\"` and `\\` as escapes; outside quotes a backslash escapes the next character.
    /// No shell runs: no variables, globs, pipes or redirections.
    pub fn parse(line: &str) -> Result<ExecutorCommand, CommandLineError> {
        let mut words = split_words(line)?.into_iter();
        let program = words.next().ok_or(CommandLineError::Empty)?;
        Ok(ExecutorCommand { program: PathBuf::from(program), args: words.collect() })
    }

    /// The reference executor, `twice-executor`, next to the running program (as `cargo`
    /// builds them, and as they are installed together).
    pub fn reference() -> Result<ExecutorCommand, LocateError> {
        let exe = std::env::current_exe().map_err(LocateError::CurrentExe)?;
        let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        ExecutorCommand::reference_in(&dir)
    }

    /// The reference executor in `dir`.
    pub fn reference_in(dir: &Path) -> Result<ExecutorCommand, LocateError> {
        let path = dir.join(REFERENCE_BINARY);
        if !path.is_file() {
            return Err(LocateError::Missing { name: REFERENCE_BINARY, path });
        }
        Ok(ExecutorCommand { program: path, args: Vec::new() })
    }
}

impl fmt::Display for ExecutorCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words =
            std::iter::once(self.program.to_string_lossy().into_owned()).chain(self.args.iter().cloned());
        for (i, word) in words.enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if word.is_empty() || word.chars().any(|c| c.is_whitespace() || "'\"\\".contains(c)) {
                write!(f, "'{}'", word.replace('\'', "'\\''"))?;
            } else {
                f.write_str(&word)?;
            }
        }
        Ok(())
    }
}

fn split_words(line: &str) -> Result<Vec<String>, CommandLineError> {
    let unterminated = |quote| CommandLineError::Unterminated { quote, line: line.to_string() };
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(unterminated('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(unterminated('"')),
                        },
                        Some(c) => word.push(c),
                        None => return Err(unterminated('"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(CommandLineError::TrailingBackslash(line.to_string())),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        let c = ExecutorCommand::parse(line).unwrap();
        std::iter::once(c.program.to_string_lossy().into_owned()).chain(c.args).collect()
    }

    #[test]
    fn command_lines_split_on_whitespace_and_respect_quotes() {
        assert_eq!(words("python3 my_executor.py --flag"), ["python3", "my_executor.py", "--flag"]);
        assert_eq!(words("  a\t b  "), ["a", "b"]);
        assert_eq!(words(r#"run "two words" 'it''s' x\ y"#), ["run", "two words", "its", "x y"]);
        assert_eq!(words(r#"e "a \"q\" \\ \n" '' "#), ["e", r#"a "q" \ \n"#, ""]);
        assert_eq!(words("a'b c'd"), ["ab cd"]);
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        assert_eq!(ExecutorCommand::parse("  "), Err(CommandLineError::Empty));
        assert!(matches!(
            ExecutorCommand::parse("a 'b"),
            Err(CommandLineError::Unterminated { quote: '\'', .. })
        ));
        assert!(matches!(
            ExecutorCommand::parse("a \"b"),
            Err(CommandLineError::Unterminated { quote: '"', .. })
        ));
        assert!(matches!(ExecutorCommand::parse("a\\"), Err(CommandLineError::TrailingBackslash(_))));
    }

    #[test]
    fn a_command_displays_as_a_line_that_parses_back() {
        let c = ExecutorCommand {
            program: "/opt/my exec".into(),
            args: vec!["--x".into(), "it's".into(), "".into()],
        };
        assert_eq!(ExecutorCommand::parse(&c.to_string()).unwrap(), c);
    }

    #[test]
    fn a_missing_reference_binary_names_the_path_and_the_fix() {
        let err = ExecutorCommand::reference_in(Path::new("/nonexistent-dir")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent-dir/twice-executor") && err.contains("cargo build"), "{err}");
    }
}
