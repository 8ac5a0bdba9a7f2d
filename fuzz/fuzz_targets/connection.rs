//! Fuzzes a whole server connection: the input is everything a client
//! sends (client flags, options, then requests and payloads). Seeds:
//! `fuzz/corpus/connection/` (valid sessions from `nbd::fuzzing::seeds`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nbd::fuzzing::connection(data);
});
