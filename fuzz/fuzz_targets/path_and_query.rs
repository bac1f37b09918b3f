//! Fuzz target `path_and_query`: arbitrary bytes into `queen_http::fuzz::path_and_query`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queen_http::fuzz::path_and_query(data);
});
