//! docs/webhooks.md does what it says: its two five-minute shops (pytest and vitest) are taken
//! from the page as written, put in empty folders, and run from the packages `cargo xtask
//! package` builds, with no cargo on the `PATH`: the naive shop must fail with exactly the lines
//! the page quotes, and the careful one pass. Its scenario example is a valid scenario once
//! named, and its table lists exactly the catalog's webhook scenarios.

use crate::newcomer::{
    assert_quoted, example, node_pin, pin_in, pytest_from_the_wheel, vitest_from_the_tarballs,
};
use crate::packages::{pinned, root};

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
    let webhook: Vec<String> =
        scenarios::catalog().unwrap().into_iter().filter(|s| s.needs_webhooks()).map(|s| s.name).collect();
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
    let shown = example(PAGE, PYTEST_HEADING, "python");
    // The page's `pip install twice-kit pytest stripe resend`, at the suite's pins.
    let pins = [pinned("pytest"), pinned("stripe"), pinned("resend")];
    let (passed, output) = pytest_from_the_wheel("webhooks-python", "test_shop.py", &shown.code, &pins);
    assert!(!passed, "the naive shop passed:\n{output}");
    assert!(output.contains("1 failed, 1 passed"), "{output}");
    assert!(output.contains("FAILED test_shop.py::test_a_paid_order_is_welcomed_once[naive]"), "{output}");
    assert_quoted(PAGE, &shown.quoted, &output);
}

#[ignore = "needs the wheel and npm packages that cargo xtask test makes"]
#[test]
fn the_vitest_shop_of_the_webhooks_page_fails_naive_as_quoted_from_the_tarballs() {
    let shown = example(PAGE, VITEST_HEADING, "ts");
    // The page's `npm install --save-dev twice-kit stripe resend vitest`, at the examples' pins.
    let pins = [pin_in(NODE_SDKS, "stripe"), pin_in(NODE_SDKS, "resend"), node_pin("vitest")];
    let (passed, output) = vitest_from_the_tarballs("webhooks-node", "shop.test.ts", &shown.code, &pins);
    assert!(!passed, "the naive shop passed:\n{output}");
    assert!(output.contains("1 failed | 1 passed"), "{output}");
    assert!(output.contains("× a paid order is welcomed once (naive)"), "{output}");
    assert_quoted(PAGE, &shown.quoted, &output);
}
