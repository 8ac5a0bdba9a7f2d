//! The preload library of `zmem run`: loaded into an unmodified, dynamically
//! linked program by `LD_PRELOAD`, it makes one compressed region for the
//! process and serves the program's large anonymous memory from it (the
//! `mmap`s of private anonymous memory and the allocations of glibc's
//! `malloc` family at least a smallest size; smaller allocations stay in
//! glibc's heap). Pages beyond the resident limit live compressed in the
//! region's store and come back on a fault, which the kernel's own
//! accesses (system calls) fault too: the region needs a userfaultfd that
//! serves kernel faults (`/dev/userfaultfd`, or the system call with
//! `vm.unprivileged_userfaultfd=1`).
//!
//! Without `ZMEM_RUN_LIMIT` in its environment the library does nothing.
//! At exit each process writes its statistics (`PID.json`) into
//! `ZMEM_RUN_STATS_DIR`; a process that cannot make its region writes why
//! there instead, and says it on its standard error only with
//! `ZMEM_RUN_VERBOSE` (the program's own output stays the program's).
//!
//! A forked child keeps its own copy of the region (the region rebuilds
//! itself); so does a child of `_Fork()`, of glibc's `clone()` without
//! `CLONE_VM`, and of the `clone` (no stack of its own), `clone3` (the
//! same) and `fork` system calls made through glibc's `syscall()`, which
//! glibc's `fork()` handlers do not see (`forks` runs them). Not covered:
//! a raw `clone` or `clone3` on a stack of its own or with `CLONE_SETTLS`
//! (passed through unchanged), and a system call the program makes with
//! its own instruction (a static program, Go's runtime), which no
//! interposed symbol is on the way of: such a child reads the parent's
//! evicted pages as zeros. A copy sharing the memory (`CLONE_VM`: threads,
//! `vfork`, `posix_spawn`) needs nothing. A program it runs gets a region
//! of its own.
//!
//! The modules:
//! - `settings`: the environment `zmem run` sets;
//! - `span`: which pages of the region are handed out;
//! - `system`: glibc's allocator and the kernel's calls, with no hook on
//!   the way (also this library's Rust allocator);
//! - `process`: the process's region and the span's books under a lock;
//! - `hooks`: the interposed allocator and mapping symbols;
//! - `forks`: the interposed `_Fork`, `clone` and `syscall`;
//! - `report`: the statistics at exit, and the library's messages;
//! - `threads`: the program's threads counted, so the region's own never
//!   keep a process alive after the program's last thread ends.

pub mod settings;
pub mod span;
pub mod system;

// The hooks and what only they use are left out of the crate's unit-test
// binary, which must keep glibc's allocator.
#[cfg(not(test))]
mod forks;
#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
mod process;
#[cfg(not(test))]
mod report;
#[cfg(not(test))]
mod threads;

/// The library's own allocations go straight to glibc.
#[cfg(not(test))]
#[global_allocator]
static ALLOC: system::LibcAlloc = system::LibcAlloc;

/// Runs when the library is loaded, before the program's `main`.
#[cfg(not(test))]
extern "C" fn load() {
    // Needed by `malloc_usable_size`, `_Fork`, `clone` and `syscall` even
    // when the library is inert.
    system::find_usable_size();
    forks::find();
    let settings = match settings::Settings::from_env() {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            report::problem(&format!("{e}; the program runs without a region"));
            return;
        }
    };
    match process::Process::start(settings) {
        Ok(_) => {
            report::at_exit();
            threads::start();
        }
        Err(e) => report::problem(&format!("no region ({e}); the program runs without one")),
    }
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static LOAD: extern "C" fn() = load;
