//! Fuzz target `ack_batch_body`: arbitrary bytes into `queen_http::fuzz::ack_batch_body`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queen_http::fuzz::ack_batch_body(data);
});
