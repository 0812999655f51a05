//! libobjtier.so: the allocator objtier preloads into unmodified programs.
//!
//! It replaces the malloc family. Small objects go to mimalloc, linked in; objects of at least
//! `OBJTIER_TRACK_MIN` bytes (4 KiB by default, the paper's tracking threshold) get whole pages of
//! their own (`large/`) so the daemon can move each one between tiers alone, and each of their
//! allocations and frees is reported to the daemon through a shared-memory ring (`report.rs`),
//! tagged with a hash of its call path (`site.rs`, cached per caller: `malloc`, `calloc` and
//! `realloc` enter through three-instruction assembly stubs that hand over the caller's return
//! address and stack pointer). The daemon answers through the same shared memory: which tier a
//! site's new objects start in (`large/` keeps chunks bound to each tier's nodes), and when to
//! re-announce the live objects after dropped events. `api.rs` is the C API of
//! `include/objtier.h`.
//!
//! Layout: `malloc.rs` (the malloc family's implementation), `exports.rs` (the exported
//! symbols), `init.rs` (the constructor and fork), `large/` (page-granular objects),
//! `free_index.rs` (its index of free extents), `discard.rs` (giving pages back in batches),
//! `budget.rs` (a placement's budgets), `arenas.rs` (mimalloc's arenas), `report.rs` (the
//! daemon link), `site.rs`, `options.rs`, `sandbox.rs`, `lock.rs`, and `os.rs`, the one layer
//! every system call goes through.
//!
//! Besides the standard calls it exports glibc's own names for them (`__libc_malloc` and
//! company: a program that calls those must get memory our `free` knows) and glibc's tuning and
//! statistics calls (`mallopt`, `malloc_trim`, `mallinfo`, `mallinfo2`, `malloc_stats`,
//! `malloc_info`), which glibc would otherwise answer about a heap nobody allocates from, and it
//! passes `prctl` and `syscall` on to the kernel, watching for a seccomp filter. Edge
//! cases follow glibc, including where it differs between versions (`aligned_alloc`).
//! C++ `operator new` and `delete` need nothing of ours: libstdc++ builds them on `malloc`,
//! `aligned_alloc` and `free`.
//!
//! # Preload rules
//! This code runs inside every allocation of someone else's program, so it obeys these rules:
//! - **No allocation through the public malloc symbols from inside the library.** Rust's own
//!   allocations go to mimalloc directly (the `#[global_allocator]` below); any allocation that
//!   happens while we are inside our own hooks (the unwinder, the attach path) is detected by a
//!   per-thread guard and served by mimalloc untracked, so the library never recurses into itself.
//! - **No `getenv`, no stdio before or during init.** Options are read by scanning `environ` in
//!   the ELF constructor; before it runs, defaults apply and nothing is reported.
//! - **Never block the application.** The daemon link is non-blocking; a full ring drops events
//!   and counts them; a missing daemon is retried at most once a second.
//! - **Fork-safe.** Our lock is held across `fork()` and reset in the child; a child attaches as
//!   its own process, never through its parent's ring.
//! - **Quiet under a seccomp filter.** Once the program is confined (`sandbox.rs`), only the
//!   system calls any allocator makes; a filter kills the program for a call it refuses.
//! - **No panics across the C boundary.** Nothing here unwraps; the release profile aborts.

// Unit tests do not export the malloc family (it would replace the test harness's allocator),
// which leaves the code behind it unused there.
#![cfg_attr(test, allow(dead_code))]

extern crate alloc;

mod api;
mod arenas;
mod budget;
mod discard;
mod emulate;
#[cfg(not(test))]
mod exports;
mod free_index;
mod init;
mod large;
mod lock;
mod malloc;
mod options;
mod os;
mod report;
mod sandbox;
mod site;

use arenas::owned_by_mimalloc;
use core::ffi::c_void;
use libmimalloc_sys as mi;
use malloc::*;

/// Rust-side allocations inside the library go straight to mimalloc, never through `malloc`.
struct MimallocDirect;

// SAFETY: forwards to mimalloc, which implements the GlobalAlloc contract for these calls.
unsafe impl core::alloc::GlobalAlloc for MimallocDirect {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        // SAFETY: mimalloc accepts any size and power-of-two alignment.
        unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: core::alloc::Layout) {
        // SAFETY: `ptr` came from `alloc` above.
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }
    unsafe fn alloc_zeroed(&self, layout: core::alloc::Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: core::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout.align()`.
        unsafe { mi::mi_realloc_aligned(ptr as *mut c_void, size, layout.align()) as *mut u8 }
    }
}

#[global_allocator]
static GLOBAL: MimallocDirect = MimallocDirect;

/// Writes a diagnostic line to stderr when `OBJTIER_DEBUG=1`, without allocating.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        if $crate::options::get().debug {
            $crate::write_stderr(format_args!($($arg)*));
        }
    };
}

#[doc(hidden)]
pub fn write_stderr(args: core::fmt::Arguments<'_>) {
    struct Buf {
        bytes: [u8; 512],
        len: usize,
    }
    impl core::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let n = s.len().min(self.bytes.len() - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
    let mut buf = Buf {
        bytes: [0; 512],
        len: 0,
    };
    let _ = core::fmt::write(&mut buf, format_args!("objtier[{}]: ", std::process::id()));
    let _ = core::fmt::write(&mut buf, args);
    let _ = core::fmt::Write::write_str(&mut buf, "\n");
    // SAFETY: writes our own stack buffer to fd 2.
    unsafe { crate::os::write(2, buf.bytes.as_ptr() as *const c_void, buf.len) };
}

#[cfg(test)]
mod tests {
    use super::extent_for_move;

    #[test]
    fn an_object_moved_to_grow_by_a_small_step_gets_half_again_its_old_size() {
        const MIB: usize = 1 << 20;
        assert_eq!(extent_for_move(MIB, MIB + 4096), 3 * MIB / 2);
        // A step of half or more gets what it asked for.
        assert_eq!(extent_for_move(MIB, 3 * MIB / 2), 3 * MIB / 2);
        assert_eq!(extent_for_move(MIB, 2 * MIB), 2 * MIB);
        // Not growing, or no room in the address space: nothing added.
        assert_eq!(extent_for_move(MIB, MIB), MIB);
        assert_eq!(extent_for_move(2 * MIB, MIB), MIB);
        assert_eq!(extent_for_move(usize::MAX - 1, usize::MAX), usize::MAX);
    }
}
