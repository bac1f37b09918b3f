//! Every fuzz target's committed corpus (`fuzz/corpus/<target>`), run on
//! stable as a regression test: each input once through the same entry
//! point the fuzz target calls, which must return, not panic. A crash that
//! `cargo xtask fuzz` found and that was fixed stays fixed once its input
//! is committed there.

use std::path::Path;

/// A fuzz entry point.
type Entry = fn(&[u8]);

/// The targets of `fuzz/Cargo.toml` and the entry point each one calls.
const TARGETS: &[(&str, Entry)] = &[
    ("frame", queen_frame::fuzz::decode),
    ("push_body", queen_http::fuzz::push_body),
    ("ack_body", queen_http::fuzz::ack_body),
    ("ack_batch_body", queen_http::fuzz::ack_batch_body),
    ("transaction_body", queen_http::fuzz::transaction_body),
    ("configure_body", queen_http::fuzz::configure_body),
    ("path_and_query", queen_http::fuzz::path_and_query),
];

#[test]
fn every_fuzz_corpus_input_is_handled_without_a_panic() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    // The list here and the fuzz crate's targets agree.
    let manifest = std::fs::read_to_string(corpus.join("../Cargo.toml")).unwrap();
    let declared = manifest.matches("[[bin]]").count();
    assert_eq!(
        declared,
        TARGETS.len(),
        "fuzz/Cargo.toml and this list differ"
    );
    for (target, entry) in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target} is not a fuzz target"
        );
        let dir = corpus.join(target);
        let mut inputs = 0;
        for file in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = file.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| entry(&data));
            assert!(outcome.is_ok(), "{target}: {} panicked", path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "{target} has an empty corpus");
    }
}
