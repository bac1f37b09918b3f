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

#[test]
fn every_sql_file_is_registered_once_with_its_current_text() {
    let mut on_disk = Vec::new();
    sql_files_on_disk(&sql_dir(), "", &mut on_disk);
    on_disk.sort();
    let mut registered: Vec<String> = FILES.iter().map(|f| f.name.to_owned()).collect();
    registered.sort();
    assert_eq!(registered, on_disk);
    for file in FILES {
        let text = std::fs::read_to_string(sql_dir().join(file.name)).unwrap();
        assert_eq!(file.text, text, "{} is stale", file.name);
    }
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
