//! The intent log's SQL schema exists three times: here (`src/log/schema.rs`), in the Python
//! example (`examples/executors/python/intent_log.py`) and in the TypeScript one
//! (`examples/executors/typescript/src/intentLog.ts`). A log one of them writes is meant to be
//! read by the others' design, so the three must make the same tables: each example's schema
//! text is applied to an empty SQLite database and the tables it makes are compared, column by
//! column and index by index, with those of a log this crate opened.

use std::path::{Path, PathBuf};

use executor::Durability;
use executor::log::IntentLog;
use rusqlite::Connection;

/// The tables and indexes of the log, each as its name and a description of its shape.
type Shape = Vec<(String, String)>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The schema's statements as a file holds them: from its first `CREATE TABLE` to the end of
/// the string literal they are in (`"""` in Python, a backtick in TypeScript).
fn schema_text(file: &str) -> String {
    let path = workspace().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = text.find("CREATE TABLE").unwrap_or_else(|| panic!("{file} has no CREATE TABLE"));
    let rest = &text[start..];
    let end = rest.find(['"', '`']).unwrap_or_else(|| panic!("{file}: the schema's string does not end"));
    rest[..end].to_string()
}

/// The shape of every table and index in `conn`: each column's position, name, type, whether
/// it is NOT NULL, its default and its place in the primary key; each index's columns and
/// uniqueness.
fn shape(conn: &Connection) -> Shape {
    let mut out = Vec::new();
    let mut tables = conn
        .prepare(
            "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name",
        )
        .unwrap();
    let items: Vec<(String, String, String)> = tables
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (kind, name, table) in items {
        let described = if kind == "table" {
            let mut columns = conn.prepare(&format!("PRAGMA table_info({name})")).unwrap();
            columns
                .query_map([], |r| {
                    Ok(format!(
                        "{}:{}:{}:notnull={}:default={:?}:pk={}",
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, i64>(5)?
                    ))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            let mut columns = conn.prepare(&format!("PRAGMA index_info({name})")).unwrap();
            let on: Vec<String> =
                columns.query_map([], |r| r.get::<_, String>(2)).unwrap().map(Result::unwrap).collect();
            format!("{kind} on {table}({})", on.join(", "))
        };
        out.push((format!("{kind} {name}"), described));
    }
    out
}

/// The shape of a log this crate made, in a directory of its own (`name`: tests run at once).
fn reference_shape(name: &str) -> Shape {
    let dir = std::env::temp_dir().join(format!("twice-schemas-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("intents.sqlite");
    drop(IntentLog::open(&path, Durability::Normal).unwrap());
    let shape = shape(&Connection::open(&path).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    shape
}

fn shape_of(schema: &str) -> Shape {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(schema).unwrap_or_else(|e| panic!("the schema does not apply: {e}\n{schema}"));
    shape(&conn)
}

#[test]
fn the_python_and_typescript_intent_logs_make_the_tables_the_reference_log_makes() {
    let reference = reference_shape("equal");
    let names: Vec<&str> = reference.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "table history",
            "table intents",
            "index intents_state",
            "table nonces",
            "table triggers",
            "table webhook_endpoints",
            "table webhook_events"
        ],
        "{reference:#?}"
    );
    for file in ["examples/executors/python/intent_log.py", "examples/executors/typescript/src/intentLog.ts"]
    {
        assert_eq!(shape_of(&schema_text(file)), reference, "{file}'s intent log differs from the reference");
    }
}

#[test]
fn a_column_that_differs_is_seen() {
    let python = schema_text("examples/executors/python/intent_log.py");
    let renamed = python.replacen("last_sent_ms INTEGER", "last_send_ms INTEGER", 1);
    assert_ne!(renamed, python, "the schema has last_sent_ms");
    let reference = reference_shape("differs");
    assert_ne!(shape_of(&renamed), reference);
    let loose = python.replacen("attempts INTEGER NOT NULL", "attempts INTEGER", 1);
    assert_ne!(loose, python, "the schema has attempts");
    assert_ne!(shape_of(&loose), reference);
}
