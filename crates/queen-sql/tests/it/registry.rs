//! The registry and the `sql/` directory agree.

use std::path::{Path, PathBuf};

use queen_sql::registry::{ApplyMode, FILES};

fn sql_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql")
}

fn sql_files_on_disk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            sql_files_on_disk(&entry.path(), &format!("{name}/"), out);
        } else if name.ends_with(".sql") {
            out.push(name);
        }
    }
}

/// Every file on disk is registered, once. (A registered name and its text
/// come from one path, `sql_file!`, so they cannot disagree.)
#[test]
fn every_sql_file_is_registered_once() {
    let mut on_disk = Vec::new();
    sql_files_on_disk(&sql_dir(), "", &mut on_disk);
    on_disk.sort();
    let mut registered: Vec<String> = FILES.iter().map(|f| f.name.to_owned()).collect();
    registered.sort();
    assert_eq!(registered, on_disk);
}

/// The functions a file creates, by name.
fn functions_defined_in(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for marker in [
        "CREATE OR REPLACE FUNCTION queen.",
        "CREATE FUNCTION queen.",
    ] {
        for (at, _) in text.match_indices(marker) {
            let rest = &text[at + marker.len()..];
            let end = rest.find('(').unwrap_or(rest.len());
            names.push(rest[..end].trim().to_owned());
        }
    }
    names
}

/// After an apply, schema `queen` holds exactly the functions the registered
/// files define: a file left out of the apply, or a function still in the
/// database that no file defines any more, fails it.
#[tokio::test]
async fn an_applied_schema_holds_exactly_the_functions_the_files_define() {
    let db = queen_testkit::TestDb::new().await;
    let client = db.client().await;
    let mut defined: Vec<String> = FILES
        .iter()
        .flat_map(|f| functions_defined_in(f.text))
        .collect();
    defined.sort();
    defined.dedup();
    assert!(defined.len() > 20, "{defined:?}");
    let mut applied = crate::rows_as_text(
        &client,
        "SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'queen'::regnamespace",
        &[],
    )
    .await;
    applied.sort();
    assert_eq!(applied, defined);
}

#[test]
fn schema_files_come_first_in_file_name_order() {
    let names: Vec<&str> = FILES.iter().map(|f| f.name).collect();
    let n_schema = names
        .iter()
        .take_while(|n| n.starts_with("schema/"))
        .count();
    assert!(
        names[n_schema..].iter().all(|n| !n.starts_with("schema/")),
        "{names:?}"
    );
    assert!(names[..n_schema].is_sorted(), "{names:?}");
}

#[test]
fn only_the_concurrent_index_file_runs_outside_the_transaction() {
    let concurrent: Vec<&str> = FILES
        .iter()
        .filter(|f| f.mode == ApplyMode::Concurrent)
        .map(|f| f.name)
        .collect();
    assert_eq!(concurrent, ["schema/090_concurrent_indexes.sql"]);
    // Nothing in a transactional file may build an index concurrently: it
    // would fail inside the schema transaction.
    for file in FILES.iter().filter(|f| f.mode == ApplyMode::Transactional) {
        let code_lines = file
            .text
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"));
        for line in code_lines {
            assert!(!line.contains("CONCURRENTLY"), "{}: {line}", file.name);
        }
    }
}

/// Each function's digest: its result type, volatility, settings and body.
const DIGESTS_SQL: &str = "\
SELECT md5(concat_ws(E'\\n', pg_get_function_result(p.oid), p.provolatile,
                     array_to_string(p.proconfig, ','), p.prosrc))
       || '  ' || n.nspname || '.' || p.proname
       || '(' || pg_get_function_identity_arguments(p.oid) || ')'
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname IN ('queen', 'queen_streams')";

/// The digests `sql/function_digests.txt` records (its `#` lines are
/// comments).
const DIGESTS: &str = include_str!("../../../../sql/function_digests.txt");

/// A procedure's name promises its meaning to every broker version that
/// calls it, and each version re-applies its own body at boot: a body
/// changed under a released name is overwritten by (and overwrites) the
/// other version's during a rolling upgrade. So every function's digest is
/// recorded, and a change to one fails here: give the new meaning a new
/// name, or, when both bodies answer the same (a faster plan), say so in the
/// file beside the new digest.
#[tokio::test]
async fn released_function_bodies_keep_their_digests() {
    let db = queen_testkit::TestDb::empty().await;
    let client = db.client().await;
    queen_sql::apply_schema(&client)
        .await
        .unwrap_or_else(|e| panic!("apply_schema: {}", queen_sql::error_chain(&e)));
    let name = |line: &str| line.split_once("  ").map(|(_, n)| n.to_owned());
    let mut applied = crate::rows_as_text(&client, DIGESTS_SQL, &[]).await;
    applied.sort_by_key(|line| name(line));
    let mut recorded: Vec<&str> = DIGESTS
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .collect();
    recorded.sort_by_key(|line| name(line));
    if applied != recorded {
        let known: Vec<Option<String>> = recorded.iter().map(|l| name(l)).collect();
        let changed: Vec<&String> = applied
            .iter()
            .filter(|line| !recorded.contains(&line.as_str()) && known.contains(&name(line)))
            .collect();
        panic!(
            "the applied functions differ from sql/function_digests.txt.\n\
             Changed bodies of recorded names (a new meaning needs a new name):\n{}\n\n\
             The digests now, one per line:\n{}",
            changed
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            applied.join("\n")
        );
    }
}
