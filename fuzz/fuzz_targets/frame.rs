//! Fuzz target `frame`: arbitrary bytes into `queen_frame::fuzz::decode`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queen_frame::fuzz::decode(data);
});
