//! The boundaries ARCHITECTURE.md states inside the crates, checked against their source (the
//! crate-level table is `boundaries.rs`'s): which modules of the runner may use the executor, no
//! file-level import loop in any crate's product code, no product file over
//! [`FILE_LINES_MAX`] lines and no product function over [`FUNCTION_LINES_MAX`].
//!
//! The source is read as text: comments and string literals are dropped, then every path
//! (`crate::a::b`, `super::c`, the branches of a `use x::{y, z}` tree) is resolved against the
//! module the file is, so a crossing is found however it is spelt.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest a product source file may be: past it, a file holds more than one idea.
const FILE_LINES_MAX: usize = 600;

/// Longest a product function may be, from its `fn` line to its closing brace: past it, a
/// function does more than one thing, and its parts want names.
const FUNCTION_LINES_MAX: usize = 100;

/// The crates whose `src/` is product code (xtask is the project's own tooling, and is held
/// to the same rules).
const CRATES: [&str; 13] = [
    "vocabulary",
    "scenarios",
    "fake-services",
    "executor",
    "results",
    "reports",
    "checker",
    "runner",
    "serve",
    "conformance",
    "twice",
    "bench-support",
    "xtask",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory is readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The source without comments, string literals and character literals (each replaced by a
/// space, so that tokens on either side stay apart, and by the line breaks it held, so that
/// the code keeps its lines).
fn code_of(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            blank(&mut out, &chars[start..i.min(chars.len())]);
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(out.chars().last()) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(_) => j += 1,
                }
            }
            i = j;
            blank(&mut out, &chars[start..i.min(chars.len())]);
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            blank(&mut out, &chars[start..i.min(chars.len())]);
        } else if c == '\'' && is_char_literal(&chars, i) {
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            blank(&mut out, &chars[start..i.min(chars.len())]);
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// What stands for a stripped comment or literal: a space, and each line break it held.
fn blank(out: &mut String, stripped: &[char]) {
    out.push(' ');
    out.extend(stripped.iter().filter(|c| **c == '\n'));
}

/// `code` without its `#[cfg(test)] mod name { ... }` blocks (tests may use anything), and
/// the names of the modules it declares as `#[cfg(test)] mod name;` (files of tests).
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut test_files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let after = &rest[at + MARK.len()..];
        let item = after.trim_start();
        let Some(declared) = item.strip_prefix("mod ").or_else(|| item.strip_prefix("pub mod ")) else {
            rest = after;
            continue;
        };
        let name: String = declared.trim_start().chars().take_while(|c| ident_char(Some(*c))).collect();
        let body = declared.trim_start()[name.len()..].trim_start();
        if let Some(after_declaration) = body.strip_prefix(';') {
            test_files.push(name);
            rest = after_declaration;
        } else if body.starts_with('{') {
            let mut depth = 0;
            let mut end = body.len();
            for (i, c) in body.char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = i + 1;
                    break;
                }
            }
            rest = &body[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    (out, test_files)
}

fn ident_char(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Whether the `'` at `i` opens a character literal (`'a'`, `'\n'`) rather than a lifetime.
fn is_char_literal(chars: &[char], i: usize) -> bool {
    matches!((chars.get(i + 1), chars.get(i + 2)), (Some('\\'), _) | (Some(_), Some('\'')))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Colons,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while ident_char(chars.get(i).copied()) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::Colons);
            i += 2;
            continue;
        }
        out.push(match c {
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            _ => Token::Other,
        });
        i += 1;
    }
    out
}

/// Every path of two or more segments in `tokens`, with `use` trees expanded.
fn paths(tokens: &[Token]) -> Vec<Vec<String>> {
    fn path_at(
        tokens: &[Token],
        mut i: usize,
        mut segments: Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) -> usize {
        while let Some(Token::Ident(name)) = tokens.get(i) {
            segments.push(name.clone());
            if tokens.get(i + 1) != Some(&Token::Colons) {
                i += 1;
                break;
            }
            match tokens.get(i + 2) {
                Some(Token::Ident(_)) => i += 2,
                Some(Token::Open) => {
                    let mut j = i + 3;
                    while j < tokens.len() && tokens[j] != Token::Close {
                        if tokens[j] == Token::Comma || !matches!(tokens[j], Token::Ident(_)) {
                            j += 1;
                            continue;
                        }
                        j = path_at(tokens, j, segments.clone(), out);
                        // `a as b`: the alias is no path.
                        if tokens.get(j) == Some(&Token::Ident("as".into())) {
                            j += 2;
                        }
                    }
                    return j + 1;
                }
                _ => {
                    i += 2;
                    break;
                }
            }
        }
        if segments.last().is_some_and(|s| s == "self") {
            segments.pop();
        }
        if segments.len() >= 2 {
            out.push(segments);
        }
        i
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts = matches!(tokens[i], Token::Ident(_)) && (i == 0 || tokens[i - 1] != Token::Colons);
        i = if starts { path_at(tokens, i, Vec::new(), &mut out).max(i + 1) } else { i + 1 };
    }
    out
}

/// The module a source file is, as segments under `crate` (`src/check/claims.rs` is
/// `check::claims`; `lib.rs`, `main.rs` and a `mod.rs` are their folder's module).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("the file is under src");
    let mut segments: Vec<String> =
        relative.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if segments.last().is_some_and(|s| s == "mod" || s == "lib" || s == "main") {
        segments.pop();
    }
    segments
}

/// `path` as seen from `module`, with `crate`, `self` and `super` resolved: `Some` with the
/// segments under `crate` for a path into the crate, `None` for another crate's or a local one.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("self") => Some(module.iter().chain(&path[1..]).cloned().collect()),
        Some("super") => {
            let mut base = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        _ => None,
    }
}

/// One product file, read.
struct Source {
    /// Relative to the workspace, for messages.
    name: String,
    module: Vec<String>,
    lines: usize,
    /// Every path, as written.
    paths: Vec<Vec<String>>,
}

fn crate_sources(krate: &str) -> Vec<Source> {
    let src = workspace().join(krate).join("src");
    let texts: Vec<(PathBuf, String)> = rust_files(&src)
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a source file is readable");
            (file, text)
        })
        .collect();
    read(&src, krate, &texts)
}

/// Sources from their texts; files that hold only tests (declared `#[cfg(test)] mod x;`) and
/// the test modules inside files are left out: the rules are about product code.
fn read(src: &Path, krate: &str, texts: &[(PathBuf, String)]) -> Vec<Source> {
    let mut test_modules = BTreeSet::new();
    let mut sources = Vec::new();
    for (file, text) in texts {
        let module = module_of(src, file);
        let (code, tests) = without_tests(&code_of(text));
        test_modules.extend(tests.into_iter().map(|name| [module.clone(), vec![name]].concat()));
        sources.push(Source {
            name: format!("{krate}/src/{}", file.strip_prefix(src).expect("under src").display()),
            module,
            lines: text.lines().count(),
            paths: paths(&tokens(&code)),
        });
    }
    sources.retain(|s| !test_modules.iter().any(|t| s.module.starts_with(t)));
    sources
}

/// A binary's root (`main.rs`, `src/bin/*`): a crate of its own, which uses the library as an
/// outside crate does.
fn is_binary(name: &str) -> bool {
    name.ends_with("/src/main.rs") || name.contains("/src/bin/")
}

/// Every crossing of the runner's module rule in `sources`: the reference executor is used
/// in process by the sim backend alone (the live backend runs it as any other program, through
/// its binary). The crate-level rules (the checker knows no driver, nothing uses the command
/// line) are `boundaries.rs`'s.
fn runner_problems(sources: &[Source]) -> Vec<String> {
    let mut problems = Vec::new();
    for source in sources.iter().filter(|s| !is_binary(&s.name)) {
        let under = |m: &str| source.module.first().is_some_and(|first| first == m);
        for path in &source.paths {
            if path[0] == "executor" && !under("sim") {
                problems.push(format!(
                    "{}: uses {}; the runner uses the executor crate only in its sim backend",
                    source.name,
                    path.join("::")
                ));
            }
        }
    }
    problems
}

/// Every file-level import loop among `sources` (one crate): each as its files in order. A
/// file's use of its own module's ancestors or descendants is no edge (a child using what
/// its parent holds is how a Rust module tree is read), so a loop is between files that are
/// neither.
fn import_loops(sources: &[Source]) -> Vec<Vec<String>> {
    let by_module: BTreeMap<&[String], usize> =
        sources.iter().enumerate().map(|(i, s)| (s.module.as_slice(), i)).collect();
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); sources.len()];
    for (from, source) in sources.iter().enumerate().filter(|(_, s)| !is_binary(&s.name)) {
        for path in &source.paths {
            // A path may also start at a child module by its bare name (`use node::View;`).
            let child = || {
                let mut segments = source.module.clone();
                segments.extend(path.iter().cloned());
                by_module.contains_key(&segments[..source.module.len() + 1]).then_some(segments)
            };
            let Some(target) = resolve(&source.module, path).or_else(child) else { continue };
            // The longest prefix of the path that is a file's module.
            let Some(to) = (1..=target.len()).rev().find_map(|n| by_module.get(&target[..n]).copied()) else {
                continue;
            };
            let (a, b) = (&source.module, &sources[to].module);
            if to != from && !a.starts_with(b) && !b.starts_with(a) && !is_binary(&sources[to].name) {
                edges[from].insert(to);
            }
        }
    }
    // Tarjan's strongly connected components; one of two or more files is a loop.
    struct Walk<'e> {
        edges: &'e [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk<'_>, v: usize) {
        w.index[v] = Some(w.next);
        w.low[v] = w.next;
        w.next += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &u in w.edges[v].iter() {
            match w.index[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(i) if w.on_stack[u] => w.low[v] = w.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                component.push(u);
                if u == v {
                    break;
                }
            }
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let n = sources.len();
    let mut walk = Walk {
        edges: &edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            visit(&mut walk, v);
        }
    }
    walk.found
        .into_iter()
        .map(|component| {
            let mut names: Vec<String> = component.into_iter().map(|i| sources[i].name.clone()).collect();
            names.sort();
            names
        })
        .collect()
}

#[test]
fn the_runner_keeps_its_module_boundaries() {
    let problems = runner_problems(&crate_sources("runner"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_product_file_imports_in_a_loop() {
    let loops: Vec<String> = CRATES
        .iter()
        .flat_map(|krate| import_loops(&crate_sources(krate)))
        .map(|files| files.join(" <-> "))
        .collect();
    assert!(loops.is_empty(), "file-level import loops:\n{}", loops.join("\n"));
}

#[test]
fn no_product_file_is_over_the_line_limit() {
    let long: Vec<String> = CRATES
        .iter()
        .flat_map(|krate| crate_sources(krate))
        .filter(|s| s.lines > FILE_LINES_MAX)
        .map(|s| format!("{}: {} lines", s.name, s.lines))
        .collect();
    assert!(long.is_empty(), "over {FILE_LINES_MAX} lines (split it by concept):\n{}", long.join("\n"));
}

/// Every function of `code` (comments, literals and test modules already gone, lines kept) as
/// its name, the line its `fn` is on (from 1) and its length in lines. A declaration without
/// a body (a trait's) is none; a function inside another is counted in both.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let mut found = Vec::new();
    // Open bodies: the function's name and line, and the brace depth its body opened at.
    let mut open: Vec<(String, usize, usize)> = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let (mut depth, mut nesting, mut line) = (0, 0, 1);
    for (at, c) in code.char_indices() {
        match c {
            '\n' => line += 1,
            'f' if code[at..].starts_with("fn")
                && !ident_char(code[..at].chars().last())
                && !ident_char(code[at + 2..].chars().next()) =>
            {
                let name: String =
                    code[at + 2..].trim_start().chars().take_while(|c| ident_char(Some(*c))).collect();
                if !name.is_empty() {
                    pending = Some((name, line));
                }
            }
            // A `;` outside brackets before the body ends a declaration (`[u8; 4]` does not).
            ';' if nesting == 0 => pending = None,
            '(' | '[' => nesting += 1,
            ')' | ']' => nesting -= 1,
            '{' => {
                depth += 1;
                if let Some((name, start)) = pending.take() {
                    open.push((name, start, depth));
                }
            }
            '}' => {
                if open.last().is_some_and(|o| o.2 == depth) {
                    let (name, start, _) = open.pop().expect("an open body");
                    found.push((name, start, line - start + 1));
                }
                depth -= 1;
            }
            _ => {}
        }
    }
    found
}

#[test]
fn no_product_function_is_over_the_line_limit() {
    let mut long = Vec::new();
    for krate in CRATES {
        for source in crate_sources(krate) {
            let path = workspace().join(&source.name);
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            let (code, _) = without_tests(&code_of(&text));
            for (name, line, lines) in functions(&code) {
                if lines > FUNCTION_LINES_MAX {
                    long.push(format!("{}:{line}: fn {name}: {lines} lines", source.name));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {FUNCTION_LINES_MAX} lines (split it into parts that each hold one concept):\n{}",
        long.join("\n")
    );
}

#[test]
fn a_function_is_measured_from_its_fn_line_to_its_closing_brace() {
    let text = "trait T { fn declared(&self); }\n\
                fn outer() {\n    let s = \"{ not a brace\n}\";\n    fn inner() -> u8 {\n        1\n    }\n}\n\
                impl X { pub(crate) async fn method<'a>(&'a self) -> impl Fn(u8) -> u8 { |x| x } }\n\
                fn array() -> [u8; 2] {\n    [0; 2]\n}\n";
    let found = functions(&without_tests(&code_of(text)).0);
    assert_eq!(
        found,
        vec![
            ("inner".to_string(), 5, 3),
            ("outer".to_string(), 2, 7),
            ("method".to_string(), 9, 1),
            ("array".to_string(), 10, 3)
        ],
        "{found:?}"
    );
}

/// Sources made from text, as if they were files of one crate.
fn sources(files: &[(&str, &str)]) -> Vec<Source> {
    let src = Path::new("/x/src");
    let texts: Vec<(PathBuf, String)> = files.iter().map(|(f, t)| (src.join(f), t.to_string())).collect();
    read(src, "x", &texts)
}

#[test]
fn each_kind_of_crossing_is_found_however_it_is_spelt() {
    let found = runner_problems(&sources(&[
        ("live.rs", "use executor::protocol::code;"),
        ("setup.rs", "fn f() -> executor::Limits { Default::default() }"),
        ("engine.rs", "use {executor::World, std::fmt};"),
    ]));
    let expected = [
        "x/src/live.rs: uses executor::protocol::code",
        "x/src/setup.rs: uses executor::Limits",
        "x/src/engine.rs: uses executor::World",
    ];
    for want in expected {
        assert!(found.iter().any(|p| p.starts_with(want)), "{want} not found in {found:#?}");
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn comments_strings_and_allowed_places_are_no_crossing() {
    let found = runner_problems(&sources(&[
        ("engine.rs", "/// executor::Limits\nconst T: &str = \"twice::executor\";"),
        ("sim.rs", "use executor::log::IntentLog;"),
        ("sim/executors.rs", "use executor::World;"),
        ("bin/twice-executor.rs", "use executor::World;"),
        ("process.rs", "let s = r#\"executor::World\"#; let c = '\"'; fn f<'a>(x: &'a str) {}"),
        ("run.rs", "fn f() {}\n#[cfg(test)]\nmod tests { use executor::World; }\n#[cfg(test)]\nmod more;"),
        ("run/more.rs", "use executor::World;"),
    ]));
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_loop_between_sibling_files_is_found_and_a_parent_child_pair_is_not() {
    let loops = import_loops(&sources(&[
        ("a.rs", "use crate::b::B;"),
        ("b.rs", "use crate::c::{self, C};"),
        ("c.rs", "use super::a::A;"),
        ("d.rs", "pub mod e; use e::E; pub struct D;"),
        ("d/e.rs", "use super::D;"),
    ]));
    assert_eq!(loops, vec![vec!["x/src/a.rs".to_string(), "x/src/b.rs".into(), "x/src/c.rs".into()]]);
}
