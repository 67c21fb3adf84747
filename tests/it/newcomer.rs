//! The first hour, as a newcomer spends it: each kit's README says what to install, shows a
//! first test to put in an empty folder and quotes the verdict the naive worker in it gets.
//! Here that test is taken from the README as written, put in an empty folder, and run from
//! the packages `cargo xtask package` builds (the wheel; the npm tarballs), with no cargo on
//! the `PATH`: the naive worker must fail with exactly the lines the README quotes, and the
//! careful one pass. docs/byo.md's five-minute version is the Python README's, held equal here.

use crate::packages::{
    INSTALL_WAIT, RUN_WAIT, clean, must, package, path_without_rust, pinned, python, root, run, scratch,
};

/// The Python kit's README, and the heading its first test comes after.
const PYTHON_README: &str = "clients/python/README.md";
const PYTHON_HEADING: &str = "## A first test";
/// The Node kit's README, and the heading its first test comes after.
const NODE_README: &str = "clients/node/README.md";
const NODE_HEADING: &str = "## A first test, with vitest";
/// The page whose five-minute version is the Python README's first test.
const BYO: &str = "docs/byo.md";
const BYO_HEADING: &str = "## The five-minute version, with pytest";

/// A README's first example after `heading`: the first ` ```lang ` block's code, and the lines
/// of the first ` ```text ` block after it (the verdict it quotes).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Example {
    pub(crate) code: String,
    pub(crate) quoted: Vec<String>,
}

pub(crate) fn example(page: &str, heading: &str, lang: &str) -> Example {
    let text = std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("{page} has no `{heading}`"));
    let after = &text[start..];
    let code = block(after, lang).unwrap_or_else(|| panic!("{page}: no ```{lang} block after `{heading}`"));
    let rest = &after[after.find(&code).unwrap() + code.len()..];
    let quoted = block(rest, "text").unwrap_or_else(|| panic!("{page}: no ```text block after the example"));
    Example { code, quoted: quoted.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect() }
}

/// The body of the first fenced block of `lang` in `text`.
fn block(text: &str, lang: &str) -> Option<String> {
    let open = format!("```{lang}\n");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find("\n```")? + start + 1;
    Some(text[start..end].to_string())
}

/// Every quoted line is in the output (pytest and vitest indent them their own way).
pub(crate) fn assert_quoted(page: &str, quoted: &[String], output: &str) {
    let seen: Vec<&str> = output.lines().map(|l| l.trim_start_matches(['E', ' ']).trim()).collect();
    for line in quoted {
        assert!(
            seen.contains(&line.as_str()),
            "{page} quotes a line the run did not print:\n{line}\n---\n{output}"
        );
    }
}

#[test]
fn byo_md_leads_with_the_python_readme_s_first_test() {
    let readme = example(PYTHON_README, PYTHON_HEADING, "python");
    let byo = example(BYO, BYO_HEADING, "python");
    assert_eq!(byo, readme, "{BYO}'s five-minute test and its quoted verdict must be {PYTHON_README}'s");
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_python_readme_s_first_test_fails_the_naive_worker_as_quoted_from_the_wheel() {
    let readme = example(PYTHON_README, PYTHON_HEADING, "python");
    // The README's `pip install twice-kit pytest stripe`, from the wheel and at the suite's pins.
    let (passed, output) = pytest_from_the_wheel(
        "newcomer-python",
        "test_refund.py",
        &readme.code,
        &[pinned("pytest"), pinned("stripe")],
    );
    assert!(!passed, "the naive worker passed:\n{output}");
    assert!(output.contains("1 failed, 1 passed"), "{output}");
    assert!(output.contains("FAILED test_refund.py::test_a_refund_happens_once[refund_naive]"), "{output}");
    assert_quoted(PYTHON_README, &readme.quoted, &output);
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_node_readme_s_first_test_fails_the_naive_worker_as_quoted_from_the_tarballs() {
    let readme = example(NODE_README, NODE_HEADING, "ts");
    // The README's `npm install --save-dev twice-kit stripe vitest`, from the tarballs and at
    // the example's pins.
    let pins = [node_pin("stripe"), node_pin("vitest")];
    let (passed, output) = vitest_from_the_tarballs("newcomer-node", "refund.test.ts", &readme.code, &pins);
    assert!(!passed, "the naive worker passed:\n{output}");
    assert!(output.contains("1 failed | 1 passed"), "{output}");
    assert!(output.contains("× a refund happens once (refundNaive)"), "{output}");
    assert_quoted(NODE_README, &readme.quoted, &output);
}

/// Writes `code` as `file` into an empty folder and runs pytest there, in a fresh venv holding
/// the wheel `cargo xtask package` built and `pins`, with no cargo on the `PATH`: whether it
/// passed, and its output.
pub(crate) fn pytest_from_the_wheel(label: &str, file: &str, code: &str, pins: &[String]) -> (bool, String) {
    let wheel = package("TWICE_WHEEL");
    let dir = scratch(label);
    let venv = dir.join("venv");
    let bin = venv.join("bin");
    let system = path_without_rust(&[]);
    let mut make = clean(python(), &dir, &system);
    make.args(["-m", "venv"]).arg(&venv);
    must(make, "python -m venv", INSTALL_WAIT);
    let mut install = clean(bin.join("pip"), &dir, &system);
    install.args(["install", "--quiet", "--disable-pip-version-check"]).arg(&wheel).args(pins);
    must(install, &format!("pip install the wheel and {pins:?}"), INSTALL_WAIT);

    let folder = dir.join("example");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(file), code).unwrap();
    let mut pytest = clean("pytest", &folder, &path_without_rust(&[&bin]));
    pytest.args(["-p", "no:cacheprovider"]).env("PYTHONDONTWRITEBYTECODE", "1").env("NO_COLOR", "1");
    let ran = run(pytest, &format!("pytest ({file})"), RUN_WAIT);
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

/// Writes `code` as `file` into an empty Node project and runs `npx vitest run` there, with
/// twice-kit and its platform package installed from the tarballs `cargo xtask package` built
/// and `pins` from the registry, and no cargo on the `PATH`: whether it passed, and its output.
pub(crate) fn vitest_from_the_tarballs(
    label: &str,
    file: &str,
    code: &str,
    pins: &[String],
) -> (bool, String) {
    let kit = package("TWICE_NPM_KIT");
    let platform = package("TWICE_NPM_PLATFORM");
    let dir = scratch(label);
    let folder = dir.join("example");
    std::fs::create_dir_all(&folder).unwrap();
    // The platform package is installed from its tarball, and its scope's registry is nowhere,
    // so that no package of that name is fetched from the public registry in a test.
    std::fs::write(folder.join(".npmrc"), "@twice-kit:registry=http://127.0.0.1:9/\nfetch-retries=0\n")
        .unwrap();
    let system = path_without_rust(&[]);
    let mut install = clean("npm", &folder, &system);
    install.args(["install", "--save-dev", "--no-audit", "--no-fund"]).arg(&kit).arg(&platform).args(pins);
    must(install, &format!("npm install twice-kit and {pins:?}"), INSTALL_WAIT);

    std::fs::write(folder.join(file), code).unwrap();
    let mut vitest = clean("npx", &folder, &system);
    // Plain text to compare: vitest colours its output wherever `CI` is set, as on CI runners.
    vitest.args(["--no-install", "vitest", "run"]).env("NO_COLOR", "1");
    let ran = run(vitest, &format!("npx vitest run ({file})"), RUN_WAIT);
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

/// `name@version` as the Node example pins it (examples/apps/refund_worker_node/package.json).
pub(crate) fn node_pin(name: &str) -> String {
    pin_in("examples/apps/refund_worker_node/package.json", name)
}

/// `name@version` as the package.json at `manifest` (from the repository's root) pins it.
pub(crate) fn pin_in(manifest: &str, name: &str) -> String {
    let manifest = root().join(manifest);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let version = ["dependencies", "devDependencies"]
        .iter()
        .find_map(|table| json[table][name].as_str())
        .unwrap_or_else(|| panic!("{} pins no {name}", manifest.display()));
    format!("{name}@{version}")
}

#[test]
fn a_readme_example_is_its_first_code_block_and_the_text_block_after_it() {
    let dir = scratch("newcomer-parse");
    let page = dir.join("README.md");
    std::fs::write(
        &page,
        "# x\n\n## A\n\n```sh\nno\n```\n\n```py\nprint(1)\n```\n\n```text\n  E: one\n\ntwo\n```\n",
    )
    .unwrap();
    // An absolute path: `root().join` keeps it as it is.
    let parsed = example(page.to_str().unwrap(), "## A", "py");
    assert_eq!(parsed, Example { code: "print(1)\n".into(), quoted: vec!["E: one".into(), "two".into()] });
}
