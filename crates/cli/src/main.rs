//! The `zmem` binary: everything is in the library half (`src/lib.rs`),
//! which holds the command tree so tests can walk it.

fn main() -> std::process::ExitCode {
    zmem_cli::main()
}
