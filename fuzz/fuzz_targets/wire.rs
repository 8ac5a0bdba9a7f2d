//! Fuzzes every wire parser (option headers, GO/INFO and meta-context data,
//! request headers, reply headers and payloads) on the same input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nbd::fuzzing::parsers(data);
});
