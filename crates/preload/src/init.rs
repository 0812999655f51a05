//! Initialisation: the ELF constructor (options, mimalloc's arenas, the fork handlers, the
//! heartbeat), and what runs around `fork()`.

use crate::*;
use core::ffi::c_void;

/// mimalloc's `mi_option_arena_reserve` (its index in v2's `mi_option_e`).
pub(crate) const MI_OPTION_ARENA_RESERVE: libmimalloc_sys::mi_option_t = 23;
/// Arena reservations of 64 MiB (mimalloc's default is 1 GiB): the daemon tracks each arena
/// as small-object blocks and locates their pages every interval, so spans far beyond what a
/// program uses cost it query time for nothing. mimalloc still grows the reservation for later
/// arenas, and `MIMALLOC_ARENA_RESERVE` still wins.
pub(crate) const ARENA_RESERVE_KIB: libc::c_long = 64 << 10;
/// mimalloc's own default for it.
pub(crate) const MIMALLOC_ARENA_RESERVE_KIB: libc::c_long = 1 << 20;
/// mimalloc's `mi_option_arena_eager_commit`: 2 (its default) commits a whole arena when it is
/// reserved, on systems that overcommit (Linux). We set 0: arenas are reserved inaccessible and
/// committed as segments need them, a thread's first segment page by page (mimalloc's
/// `eager_commit_delay`), as mimalloc does outside arenas. With transparent huge pages
/// `always`, a committed arena makes the first touch of every thread's segment fault in 2 MiB:
/// 8 threads allocating a few small objects each held 20 MiB instead of 4.6 MiB, taken where
/// first touch puts it, in the fast tier ahead of the program's data (docs/performance.md).
/// `MIMALLOC_ARENA_EAGER_COMMIT` set to 0 or 1 still wins; set to 2, it reads as the default
/// and is replaced, as `MIMALLOC_ARENA_RESERVE=1GiB` is.
pub(crate) const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
pub(crate) const MIMALLOC_ARENA_EAGER_COMMIT: libc::c_long = 2;

extern "C" fn constructor() {
    options::init();
    emulate::init();
    sandbox::init();
    site::init();
    // SAFETY: mimalloc's options are plain reads and writes; it reads these when it next
    // reserves an arena. Each is left alone when its MIMALLOC_* variable changed the default.
    unsafe {
        for (option, default, ours) in [
            (
                MI_OPTION_ARENA_RESERVE,
                MIMALLOC_ARENA_RESERVE_KIB,
                ARENA_RESERVE_KIB,
            ),
            (MI_OPTION_ARENA_EAGER_COMMIT, MIMALLOC_ARENA_EAGER_COMMIT, 0),
        ] {
            if libmimalloc_sys::mi_option_get(option) == default {
                libmimalloc_sys::mi_option_set(option, ours);
            }
        }
    }
    // SAFETY: plain reads of the options set above (or by their MIMALLOC_* variables).
    let (reserve_kib, eager_commit) = unsafe {
        (
            libmimalloc_sys::mi_option_get(MI_OPTION_ARENA_RESERVE),
            libmimalloc_sys::mi_option_get(MI_OPTION_ARENA_EAGER_COMMIT),
        )
    };
    arenas::keep_first_off_huge_pages(reserve_kib.max(0) as usize * 1024, eager_commit == 1);
    // SAFETY: registering plain extern "C" handlers.
    unsafe {
        crate::os::atfork(fork_prepare, fork_parent, fork_child);
        libmimalloc_sys::mi_register_deferred_free(
            Some(small_object_heartbeat),
            core::ptr::null_mut(),
        );
    }
}

/// mimalloc calls this now and then on its slow path (when a thread needs a fresh page of
/// small blocks, and after a fixed number of allocations), so a program that allocates only
/// small objects still checks its daemon link and announces new small-object arenas, without a
/// single instruction added to the fast path.
///
/// mimalloc may call it from inside the large-object allocator (which allocates its own
/// metadata with mimalloc while holding a shard's lock), and the link check may take those
/// locks (to attach, or for a resync step): so it only runs when every one is free, which this
/// thread then surely does not hold. Otherwise the next heartbeat or tracked allocation does it.
unsafe extern "C" fn small_object_heartbeat(_force: bool, _heartbeat: u64, _arg: *mut c_void) {
    if large::busy() {
        return;
    }
    if let Some(_guard) = HookGuard::enter() {
        let now = report::now_ns();
        report::tick(now);
        // A program that now allocates only small objects returns its idle cache of freed
        // large ones too.
        large::purge_if_due(now);
    }
}

extern "C" fn fork_prepare() {
    large::before_fork();
}

extern "C" fn fork_parent() {
    // SAFETY: pairs with fork_prepare in this thread.
    unsafe { large::after_fork_parent() };
}

extern "C" fn fork_child() {
    // SAFETY: we are the single thread of the new child.
    unsafe { large::after_fork_child() };
    report::after_fork_child();
}

#[used]
#[link_section = ".init_array"]
pub(crate) static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg(feature = "lockstats")]
extern "C" fn print_lockstats() {
    lock::stats::print();
}

#[cfg(feature = "lockstats")]
#[used]
#[link_section = ".fini_array"]
pub(crate) static PRINT_LOCKSTATS: extern "C" fn() = print_lockstats;
