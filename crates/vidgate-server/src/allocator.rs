//! What vidgate asks of glibc's allocator, so that a node's resident memory
//! goes back near its idle size after work.
//!
//! glibc gives threads their own arenas, up to eight per core, and keeps
//! what they freed for reuse. The local engine's encoder threads take tens
//! of MB each, so a rendering node otherwise kept several arenas' worth of
//! freed memory after its renders (41–69 MB after six 5 s 720p clips, idle
//! 23 MB; `cargo bench -p vidgate --bench hot_paths -- memory`).

/// Caps the allocator's arenas at one per core (the threads that run at
/// once), unless the operator set `MALLOC_ARENA_MAX`, which glibc has
/// already applied. Called first thing in `main`, before other threads
/// exist. With the cap, the node above held 25–27 MB after the renders, and
/// they took as long.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn limit_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only sets a parameter of the allocator; glibc takes
    // its own lock for it.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() {}

/// Hands the memory a render freed back to the operating system: glibc
/// keeps freed arena memory for reuse, so without this a node's resident
/// memory stays at its largest render's size long after it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn return_freed_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it
    // takes the arenas' locks like any allocation does.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn return_freed_memory() {}
