//! Fuzz target `push_body`: arbitrary bytes into `queen_http::fuzz::push_body`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queen_http::fuzz::push_body(data);
});
