//! Every README names every service `twice serve` runs, and each kit's table of URLs lists
//! exactly those: a service added to serve and forgotten in a README fails here (the Python
//! kit's once left out `messages`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use fake_services::Fakes;
use vocabulary::TokioClock;

/// The READMEs a user reads first: the project's and each kit's.
const READMES: [&str; 3] = ["README.md", "clients/python/README.md", "clients/node/README.md"];

/// The names of the fakes serve runs, from the fakes themselves.
fn services() -> BTreeSet<String> {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), 0);
    fakes.all().iter().map(|fake| fake.name().to_string()).collect()
}

fn read(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The names in backticks on `line`.
fn code_spans(line: &str) -> BTreeSet<String> {
    line.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn every_readme_names_every_service_serve_runs() {
    let services = services();
    assert_eq!(services.len(), 5, "{services:?}");
    for file in READMES {
        let text = read(file);
        let missing: Vec<&String> = services
            .iter()
            .filter(|s| !text.contains(&format!("`{s}`")) && !text.contains(&format!("**{s}**")))
            .collect();
        assert!(missing.is_empty(), "{file} never names {missing:?} (as `name` or **name**)");
    }
}

#[test]
fn each_kits_url_table_lists_exactly_the_services_and_control() {
    let services = services();
    for file in ["clients/python/README.md", "clients/node/README.md"] {
        let text = read(file);
        let row = text
            .lines()
            .find(|line| line.starts_with("| `url(service)`"))
            .unwrap_or_else(|| panic!("{file} has no table row for `url(service)`"));
        let named: BTreeSet<String> =
            code_spans(row).into_iter().filter(|s| !s.contains('(') && s != "urls").collect();
        let mut expected = services.clone();
        expected.insert("control".into());
        assert_eq!(named, expected, "{file}: {row}");
    }
}
