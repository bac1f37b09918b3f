//! Hygiene checks, run by `cargo xtask tidy` and as an ordinary `#[test]`
//! (so plain `cargo test` enforces them):
//!
//! - every `.rs` file opens with a `//!` module doc;
//! - no trailing whitespace in `.rs`, `.sql`, `.md` and `.toml` files;
//! - no ignored or should-panic tests, and no `todo!`/`unimplemented!` stubs;
//! - every `.sql` file under `sql/` is listed in `queen-sql`'s registry, and every
//!   file the registry names exists;
//! - no crate's `src/` but `queen-sql`'s (and the test kit's) holds SQL text;
//! - `ARCHITECTURE.md` is a codemap: under 3,000 words, no procedure version
//!   suffixes, no measured figures; no issue numbers under `crates/` or in
//!   the headings of `docs/`;
//! - the CLI (`queen-cli`) is an HTTP client: no workspace crate among its
//!   dependencies (its tests may serve a broker in process).

use std::path::{Path, PathBuf};

/// Directories whose files are checked.
const SOURCE_DIRS: &[&str] = &["crates", "xtask", "tests", "benches", "sql"];

/// Run every check; `Err` lists each problem on its own line.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        collect(&root.join(dir), &mut files);
    }
    for extra in ["README.md", "ARCHITECTURE.md", "Cargo.toml"] {
        files.push(root.join(extra));
    }
    // Built from pieces so this file does not flag itself.
    let banned = [
        format!("#[{}", "ignore"),
        format!("#[{}", "should_panic"),
        format!("{}!(", "todo"),
        format!("{}!(", "unimplemented"),
    ];
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            problems.push(format!("{}: missing or unreadable", rel(root, file)));
            continue;
        };
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext == "rs" {
            if !text.trim_start().starts_with("//!") {
                problems.push(format!(
                    "{}: does not start with a //! doc",
                    rel(root, file)
                ));
            }
            for pattern in &banned {
                if text.contains(pattern.as_str()) {
                    problems.push(format!("{}: contains `{pattern}`", rel(root, file)));
                }
            }
        }
        if matches!(ext, "rs" | "sql" | "md" | "toml") {
            for (idx, line) in text.lines().enumerate() {
                if line.ends_with(' ') || line.ends_with('\t') {
                    problems.push(format!(
                        "{}:{}: trailing whitespace",
                        rel(root, file),
                        idx + 1
                    ));
                }
            }
        }
    }
    check_sql_registry(root, &mut problems);
    check_sql_only_in_queen_sql(root, &files, &mut problems);
    check_statuses_only_in_error_rs(root, &files, &mut problems);
    check_engine_boundary(root, &files, &mut problems);
    check_codemap_and_history(root, &files, &mut problems);
    check_cli_speaks_http_only(root, &files, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The codemap names things and states invariants: figures live in `docs/`
/// (they go stale), procedure names without their `_vN` suffix (it changes),
/// and history lives in commit messages, not in code comments or doc titles.
fn check_codemap_and_history(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) {
    const MAX_WORDS: usize = 3_000;
    const UNITS: &[&str] = &["ms", "us", "µs", "msg/s", "MB", "MiB", "GiB", "KiB", "%"];
    let codemap = root.join("ARCHITECTURE.md");
    if let Ok(text) = std::fs::read_to_string(&codemap) {
        let words = text.split_whitespace().count();
        if words >= MAX_WORDS {
            problems.push(format!(
                "ARCHITECTURE.md: {words} words, keep it under {MAX_WORDS}"
            ));
        }
        for (idx, line) in text.lines().enumerate() {
            let tokens: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | ';'))
                .filter(|t| !t.is_empty())
                .collect();
            let suffixed = tokens.iter().any(|t| {
                let t = t.trim_matches(|c: char| matches!(c, '`' | '.' | ':'));
                t.rsplit_once("_v")
                    .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            });
            if suffixed {
                problems.push(format!(
                    "ARCHITECTURE.md:{}: a procedure's version suffix",
                    idx + 1
                ));
            }
            let figure = tokens.windows(2).any(|w| {
                w[0].bytes().all(|b| b.is_ascii_digit() || b == b'.')
                    && w[0].bytes().any(|b| b.is_ascii_digit())
                    && UNITS.contains(&w[1].trim_end_matches('.'))
            }) || tokens.iter().any(|t| {
                UNITS.iter().any(|u| {
                    t.strip_suffix(u).is_some_and(|n| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                    })
                })
            });
            if figure {
                problems.push(format!(
                    "ARCHITECTURE.md:{}: a measured figure (figures live in docs/)",
                    idx + 1
                ));
            }
        }
    }
    for (relative, text) in texts_under(root, files, "crates/") {
        for (idx, line) in text.lines().enumerate() {
            if mentions_issue_number(&line.to_lowercase()) {
                problems.push(format!("{relative}:{}: names an issue number", idx + 1));
            }
        }
    }
    let mut docs = Vec::new();
    collect(&root.join("docs"), &mut docs);
    for file in docs
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (idx, line) in text.lines().enumerate() {
            if line.starts_with('#') && mentions_issue_number(&line.to_lowercase()) {
                problems.push(format!(
                    "{}:{}: a heading names an issue number",
                    rel(root, file),
                    idx + 1
                ));
            }
        }
    }
}

/// `queen-cli` talks to brokers over HTTP like any client: its
/// `[dependencies]` name no workspace crate and its `src/` uses none, so it
/// cannot reach around the API (its `[dev-dependencies]` may: the tests
/// serve a broker in process).
fn check_cli_speaks_http_only(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) {
    const CRATES: &[&str] = &[
        "queen-frame",
        "queen-sql",
        "queen-pg",
        "queen-engine",
        "queen-http",
        "queen-server",
        "queen-testkit",
        "queen-tests",
    ];
    for (relative, text) in texts_under(root, files, "crates/queen-cli/") {
        if relative == "crates/queen-cli/Cargo.toml" {
            let mut in_dependencies = false;
            for (idx, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.starts_with('[') {
                    in_dependencies = line == "[dependencies]";
                } else if in_dependencies && CRATES.iter().any(|c| line.starts_with(c)) {
                    problems.push(format!(
                        "{relative}:{}: the CLI depends on a workspace crate; it speaks HTTP only",
                        idx + 1
                    ));
                }
            }
        } else if relative.starts_with("crates/queen-cli/src/") {
            for (idx, line) in text.lines().enumerate() {
                if CRATES
                    .iter()
                    .any(|c| line.contains(&format!("{}::", c.replace('-', "_"))))
                {
                    problems.push(format!(
                        "{relative}:{}: the CLI uses a workspace crate; it speaks HTTP only",
                        idx + 1
                    ));
                }
            }
        }
    }
}

/// The files of `files` whose path under `root` starts with `prefix`, with
/// their text (unreadable ones skipped: the main pass reports them).
fn texts_under<'a>(
    root: &'a Path,
    files: &'a [PathBuf],
    prefix: &'a str,
) -> impl Iterator<Item = (String, String)> + 'a {
    files
        .iter()
        .map(|file| (rel(root, file), file))
        .filter(move |(relative, _)| relative.starts_with(prefix))
        .filter_map(|(relative, file)| Some((relative, std::fs::read_to_string(file).ok()?)))
}

/// `issue 12`, `issues 12 and 20`, `issue #12`: the word followed by a number.
fn mentions_issue_number(lower: &str) -> bool {
    let mut rest = lower;
    while let Some(at) = rest.find("issue") {
        let after = rest[at + "issue".len()..]
            .trim_start_matches('s')
            .trim_start()
            .trim_start_matches('#');
        if after.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
            return true;
        }
        rest = &rest[at + "issue".len()..];
    }
    false
}

/// SQL text lives in `sql/` and `queen-sql` only: a crate's `src/` that
/// spells a statement (the test kit's, test support, excepted; tests may).
fn check_sql_only_in_queen_sql(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) {
    // Built from pieces so this file does not flag itself.
    let statements = [
        format!("\"{} ", "SELECT"),
        format!("\"{} ", "WITH"),
        format!("\"{} INTO", "INSERT"),
        format!("\"{} FROM", "DELETE"),
        format!("\"{} ", "LISTEN"),
        format!("{}($", "pg_notify"),
        format!(" FROM {}.", "queen"),
    ];
    for file in files {
        let relative = rel(root, file);
        let mut parts = relative.split('/');
        let (Some("crates"), Some(krate), Some("src")) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if matches!(krate, "queen-sql" | "queen-testkit")
            || file.extension().is_none_or(|e| e != "rs")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (idx, line) in text.lines().enumerate() {
            // Docs may show a statement; code may not hold one.
            if line.trim_start().starts_with("//") {
                continue;
            }
            if statements.iter().any(|s| line.contains(s.as_str())) {
                problems.push(format!(
                    "{relative}:{}: SQL text outside queen-sql",
                    idx + 1
                ));
            }
        }
    }
}

/// Failure statuses are chosen in `queen-http/src/error.rs` only: a file
/// elsewhere in the HTTP crate naming a 4xx or 5xx `StatusCode` chooses one
/// itself (handlers answer 200 or 204, and return an `HttpError` for the rest).
fn check_statuses_only_in_error_rs(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) {
    const SUCCESS: &[&str] = &["OK", "NO_CONTENT", "CREATED", "ACCEPTED", "NOT_MODIFIED"];
    let needle = format!("{}::", "StatusCode");
    for file in files {
        let relative = rel(root, file);
        if !relative.starts_with("crates/queen-http/src/")
            || relative == "crates/queen-http/src/error.rs"
            || file.extension().is_none_or(|e| e != "rs")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        // Unit tests assert statuses; they choose none.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (idx, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices(needle.as_str()) {
                let name: String = line[at + needle.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                    .collect();
                if !name.is_empty() && !SUCCESS.contains(&name.as_str()) {
                    problems.push(format!(
                        "{relative}:{}: StatusCode::{name} chosen outside error.rs",
                        idx + 1
                    ));
                }
            }
        }
    }
}

/// The engine's API takes and answers the engine's own types: it re-exports
/// from `queen-sql` only the error type and the records that are the
/// storage model's own (a queue's settings, a cursor's lag, a subscription
/// record), which a copy would repeat field for field.
fn check_engine_boundary(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) {
    const ALLOWED: &[&str] = &[
        "SqlError",
        "error_chain",
        "QueueSettings",
        "CursorLag",
        "Subscription",
    ];
    let needle = format!("pub use {}::", "queen_sql");
    for (relative, text) in texts_under(root, files, "crates/queen-engine/src/") {
        for (idx, line) in text.lines().enumerate() {
            let Some(at) = line.find(needle.as_str()) else {
                continue;
            };
            let names = &line[at + needle.len()..];
            let names = names.rsplit("::").next().unwrap_or(names);
            for name in names
                .trim_matches(|c: char| c == '{' || c == '}' || c == ';' || c.is_whitespace())
                .split(',')
                .map(|name| name.split(" as ").next().unwrap_or(name).trim())
                .filter(|name| !name.is_empty())
            {
                if !ALLOWED.contains(&name) {
                    problems.push(format!(
                        "{relative}:{}: the engine re-exports queen-sql's `{name}`; give it its own type",
                        idx + 1
                    ));
                }
            }
        }
    }
}

/// Every `sql/**/*.sql` file is named in the registry, and the reverse.
fn check_sql_registry(root: &Path, problems: &mut Vec<String>) {
    let registry_path = root.join("crates/queen-sql/src/registry.rs");
    let Ok(registry) = std::fs::read_to_string(&registry_path) else {
        problems.push("crates/queen-sql/src/registry.rs: missing".to_owned());
        return;
    };
    let mut sql_files = Vec::new();
    collect(&root.join("sql"), &mut sql_files);
    for file in sql_files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "sql"))
    {
        let relative = rel(&root.join("sql"), file);
        if !registry.contains(&relative) {
            problems.push(format!(
                "sql/{relative}: not listed in the queen-sql registry"
            ));
        }
    }
    for (idx, _) in registry.match_indices("sql/") {
        let rest = &registry[idx + 4..];
        let end = rest.find('"').unwrap_or(rest.len());
        let named = &rest[..end];
        if named.ends_with(".sql") && !root.join("sql").join(named).is_file() {
            problems.push(format!("registry names sql/{named}, which does not exist"));
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn rel(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tree_is_tidy() {
        if let Err(problems) = super::check(&crate::workspace_root()) {
            panic!("tidy found problems:\n{}", problems.join("\n"));
        }
    }

    #[test]
    fn tidy_catches_a_missing_module_doc_and_trailing_space() {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
        let crates = dir.join("crates/x/src");
        std::fs::create_dir_all(&crates).unwrap();
        std::fs::create_dir_all(dir.join("crates/queen-sql/src")).unwrap();
        std::fs::create_dir_all(dir.join("sql/schema")).unwrap();
        std::fs::write(
            crates.join("lib.rs"),
            "fn f() {} \nconst Q: &str = \"SELECT 1\";\n",
        )
        .unwrap();
        std::fs::write(dir.join("sql/schema/001_x.sql"), "SELECT 1;\n").unwrap();
        std::fs::write(dir.join("crates/queen-sql/src/registry.rs"), "//! r\n").unwrap();
        std::fs::create_dir_all(dir.join("crates/queen-cli/src")).unwrap();
        std::fs::write(
            dir.join("crates/queen-cli/Cargo.toml"),
            "[dependencies]\nclap = \"4\"\nqueen-engine.workspace = true\n\n[dev-dependencies]\nqueen-http.workspace = true\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("crates/queen-cli/src/main.rs"),
            "//! m\nuse queen_sql::x;\n",
        )
        .unwrap();
        for extra in ["README.md", "ARCHITECTURE.md", "Cargo.toml"] {
            std::fs::write(dir.join(extra), "x\n").unwrap();
        }
        let problems = super::check(&dir).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        let text = problems.join("\n");
        assert!(text.contains("does not start with a //! doc"), "{text}");
        assert!(text.contains("trailing whitespace"), "{text}");
        assert!(text.contains("sql/schema/001_x.sql: not listed"), "{text}");
        assert!(
            text.contains("lib.rs:2: SQL text outside queen-sql"),
            "{text}"
        );
        assert!(
            text.contains("crates/queen-cli/Cargo.toml:3: the CLI depends on a workspace crate"),
            "{text}"
        );
        assert!(
            !text.contains("crates/queen-cli/Cargo.toml:6"),
            "dev-dependencies are allowed: {text}"
        );
        assert!(
            text.contains("crates/queen-cli/src/main.rs:2: the CLI uses a workspace crate"),
            "{text}"
        );
    }

    #[test]
    fn tidy_catches_figures_suffixes_and_issue_numbers() {
        let dir = std::env::temp_dir().join(format!("xtask-codemap-{}", std::process::id()));
        let src = dir.join("crates/x/src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(dir.join("crates/queen-sql/src")).unwrap();
        std::fs::create_dir_all(dir.join("sql")).unwrap();
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(
            src.join("lib.rs"),
            "//! x\n// as issue 12 asked\n// see issue #4\n",
        )
        .unwrap();
        std::fs::write(dir.join("crates/queen-sql/src/registry.rs"), "//! r\n").unwrap();
        std::fs::write(dir.join("docs/a.md"), "# Issue 7: pushes\n").unwrap();
        std::fs::write(
            dir.join("ARCHITECTURE.md"),
            "`log_push_v1` flushes\na flush takes 1.2 ms\nreseeds at 40% of\n",
        )
        .unwrap();
        for extra in ["README.md", "Cargo.toml"] {
            std::fs::write(dir.join(extra), "x\n").unwrap();
        }
        let problems = super::check(&dir).unwrap_err();
        let too_long = "word ".repeat(3_000);
        std::fs::write(dir.join("ARCHITECTURE.md"), too_long).unwrap();
        let long = super::check(&dir).unwrap_err().join("\n");
        let _ = std::fs::remove_dir_all(&dir);
        let text = problems.join("\n");
        assert!(
            text.contains("ARCHITECTURE.md:1: a procedure's version suffix"),
            "{text}"
        );
        assert!(
            text.contains("ARCHITECTURE.md:2: a measured figure"),
            "{text}"
        );
        assert!(
            text.contains("ARCHITECTURE.md:3: a measured figure"),
            "{text}"
        );
        assert!(text.contains("lib.rs:2: names an issue number"), "{text}");
        assert!(text.contains("lib.rs:3: names an issue number"), "{text}");
        assert!(
            text.contains("docs/a.md:1: a heading names an issue number"),
            "{text}"
        );
        assert!(long.contains("3000 words, keep it under 3000"), "{long}");
    }
}
