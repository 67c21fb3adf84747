//! docs/scenarios.md stays true: it lists the catalog as it is, its examples parse, and the
//! errors it quotes are the ones the parser gives.

use std::path::PathBuf;

use scenarios::catalog::{self, CATALOG};
use scenarios::parse_scenario;

use crate::errors;

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/scenarios.md")
}

fn doc() -> String {
    std::fs::read_to_string(doc_path()).unwrap()
}

/// The fenced blocks of `text` whose info string is `lang`, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_end() == format!("```{lang}") => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => out.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    out
}

const BEGIN: &str =
    "<!-- catalog:begin (generated from scenarios/catalog by the docs test; do not edit by hand) -->";
const END: &str = "<!-- catalog:end -->";

/// The first sentence of a description: the one line the catalog table shows.
fn first_sentence(description: &str) -> &str {
    match description.find(". ") {
        Some(end) => &description[..=end],
        None => description,
    }
}

/// The catalog table, as the docs must show it.
fn catalog_table() -> String {
    let mut table = String::from("| scenario | failure mode | what happens |\n|---|---|---|\n");
    for s in catalog::catalog().unwrap() {
        table.push_str(&format!(
            "| [`{name}`](../scenarios/catalog/{name}.toml) | `{mode}` | {description} |\n",
            name = s.name,
            mode = s.failure_mode.as_deref().unwrap_or(""),
            description = first_sentence(&s.description).replace('|', "\\|"),
        ));
    }
    table
}

#[test]
fn the_docs_list_the_catalog_as_it_is() {
    let mut text = doc();
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        panic!("docs/scenarios.md lacks the catalog markers");
    };
    let listed = &text[begin + BEGIN.len()..end];
    let want = format!("\n{}", catalog_table());
    if listed != want {
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let updated = format!("{}{want}{}", &text[..begin + BEGIN.len()], &text[end..]);
            // Other tests read the page concurrently: replace it in one step.
            let temp = doc_path().with_extension("md.tmp");
            std::fs::write(&temp, &updated).unwrap();
            std::fs::rename(&temp, doc_path()).unwrap();
            text = updated;
        } else {
            panic!(
                "docs/scenarios.md's catalog table is out of date; run \
                 UPDATE_DOCS=1 cargo test -p scenarios --test it docs, or paste:\n{want}"
            );
        }
    }
    for (name, _) in CATALOG {
        assert!(text.contains(&format!("`{name}`")), "docs/scenarios.md does not mention {name}");
    }
}

#[test]
fn the_docs_examples_are_valid_scenarios() {
    let examples: Vec<String> =
        blocks(&doc(), "toml").into_iter().filter(|b| !b.contains("drop_after_comit")).collect();
    assert!(!examples.is_empty());
    for example in examples {
        if let Err(e) = parse_scenario(&example, "docs/scenarios.md") {
            panic!("{e}\n{example}");
        }
    }
}

#[test]
fn the_docs_quote_real_errors() {
    let text = doc();
    let broken = blocks(&text, "toml").into_iter().find(|b| b.contains("drop_after_comit")).unwrap();
    let outputs = blocks(&text, "text");
    let error = parse_scenario(&broken, "refund.toml").unwrap_err().to_string();
    assert_eq!(outputs[0].trim_end(), error);
    let known: Vec<String> =
        errors::CASES.iter().map(|(name, tail, _)| errors::rendered(name, tail)).collect();
    for line in outputs[1].lines() {
        assert!(
            known.iter().any(|k| k == line),
            "docs/scenarios.md quotes an error the parser does not give: {line}"
        );
    }
}
