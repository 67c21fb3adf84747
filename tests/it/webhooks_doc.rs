//! docs/webhooks.md does what it says: its two five-minute shops (pytest and vitest) are taken
//! from the page as written, put in empty folders, and run from the packages `cargo xtask
//! package` builds, with no cargo on the `PATH`: the naive shop must fail with exactly the lines
//! the page quotes, and the careful one pass. Its scenario example is a valid scenario once
//! named, and its table lists exactly the catalog's webhook scenarios.

use crate::newcomer::{assert_quoted, example, node_pin, pin_in};
use crate::packages::{
    INSTALL_WAIT, RUN_WAIT, clean, must, package, path_without_rust, pinned, python, root, run, scratch,
};

const PAGE: &str = "docs/webhooks.md";
const PYTEST_HEADING: &str = "## Five minutes with pytest";
const VITEST_HEADING: &str = "## Five minutes with vitest";
/// Where the Node SDKs the examples use are pinned.
const NODE_SDKS: &str = "examples/executors/typescript/package.json";

fn page() -> String {
    std::fs::read_to_string(root().join(PAGE)).unwrap()
}

#[test]
fn the_pages_scenario_example_is_valid_and_its_table_lists_the_webhook_scenarios() {
    let text = page();
    let start = text.find("```toml\n").expect("a TOML example") + "```toml\n".len();
    let end = text[start..].find("\n```").unwrap() + start + 1;
    let named = format!("name = \"webhook_example\"\n{}", &text[start..end]);
    let scenario = scenarios::parse_scenario(&named, PAGE).unwrap_or_else(|e| panic!("{e}"));
    assert!(scenario.needs_webhooks());
    let webhook: Vec<String> = scenarios::full_catalog()
        .unwrap()
        .into_iter()
        .filter(|s| s.needs_webhooks())
        .map(|s| s.name)
        .collect();
    assert!(webhook.len() >= 6, "{webhook:?}");
    let section = &text[text.find("## The webhook scenarios of the catalog").unwrap() + 3..];
    let table = &section[..section.find("\n## ").unwrap_or(section.len())];
    let listed: Vec<&str> =
        table.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
    let mut want: Vec<&str> = webhook.iter().map(String::as_str).collect();
    let mut got = listed.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "{PAGE}'s table and the catalog's webhook scenarios differ");
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_pytest_shop_of_the_webhooks_page_fails_naive_as_quoted_from_the_wheel() {
    let wheel = package("TWICE_WHEEL");
    let shown = example(PAGE, PYTEST_HEADING, "python");
    let dir = scratch("webhooks-python");
    let venv = dir.join("venv");
    let bin = venv.join("bin");
    let system = path_without_rust(&[]);
    let mut make = clean(python(), &dir, &system);
    make.args(["-m", "venv"]).arg(&venv);
    must(make, "python -m venv", INSTALL_WAIT);
    // The page's `pip install twice-kit pytest stripe resend`, from the wheel and at the pins.
    let mut install = clean(bin.join("pip"), &dir, &system);
    install.args(["install", "--quiet", "--disable-pip-version-check"]).arg(&wheel);
    install.args([pinned("pytest"), pinned("stripe"), pinned("resend")]);
    must(install, "pip install the wheel, pytest, stripe and resend", INSTALL_WAIT);

    let folder = dir.join("shop");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("test_shop.py"), &shown.code).unwrap();
    let mut pytest = clean("pytest", &folder, &path_without_rust(&[&bin]));
    pytest.args(["-p", "no:cacheprovider"]).env("PYTHONDONTWRITEBYTECODE", "1").env("NO_COLOR", "1");
    let (passed, output) = run(pytest, "pytest (the webhooks page's shop)", RUN_WAIT);
    assert!(!passed, "the naive shop passed:\n{output}");
    assert!(output.contains("1 failed, 1 passed"), "{output}");
    assert!(output.contains("FAILED test_shop.py::test_a_paid_order_is_welcomed_once[naive]"), "{output}");
    assert_quoted(PAGE, &shown.quoted, &output);
    let _ = std::fs::remove_dir_all(&dir);
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_vitest_shop_of_the_webhooks_page_fails_naive_as_quoted_from_the_tarballs() {
    let kit = package("TWICE_NPM_KIT");
    let platform = package("TWICE_NPM_PLATFORM");
    let shown = example(PAGE, VITEST_HEADING, "ts");
    let dir = scratch("webhooks-node");
    let folder = dir.join("shop");
    std::fs::create_dir_all(&folder).unwrap();
    // The platform package comes from its tarball; its scope's registry is nowhere.
    std::fs::write(folder.join(".npmrc"), "@twice-kit:registry=http://127.0.0.1:9/\nfetch-retries=0\n")
        .unwrap();
    let system = path_without_rust(&[]);
    // The page's `npm install --save-dev twice-kit stripe resend vitest`.
    let mut install = clean("npm", &folder, &system);
    install.args(["install", "--save-dev", "--no-audit", "--no-fund"]).arg(&kit).arg(&platform);
    install.args([pin_in(NODE_SDKS, "stripe"), pin_in(NODE_SDKS, "resend"), node_pin("vitest")]);
    must(install, "npm install twice-kit, stripe, resend and vitest", INSTALL_WAIT);

    std::fs::write(folder.join("shop.test.ts"), &shown.code).unwrap();
    let mut vitest = clean("npx", &folder, &system);
    vitest.args(["--no-install", "vitest", "run"]).env("NO_COLOR", "1");
    let (passed, output) = run(vitest, "npx vitest run (the webhooks page's shop)", RUN_WAIT);
    assert!(!passed, "the naive shop passed:\n{output}");
    assert!(output.contains("1 failed | 1 passed"), "{output}");
    assert!(output.contains("× a paid order is welcomed once (naive)"), "{output}");
    assert_quoted(PAGE, &shown.quoted, &output);
    let _ = std::fs::remove_dir_all(&dir);
}
