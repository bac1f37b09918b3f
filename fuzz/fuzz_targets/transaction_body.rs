//! Fuzz target `transaction_body`: arbitrary bytes into `queen_http::fuzz::transaction_body`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queen_http::fuzz::transaction_body(data);
});
