//! libobjtier.so: the allocator objtier preloads into unmodified programs.
//!
//! It replaces the malloc family. Small objects go to mimalloc, linked in; objects of at least
//! `OBJTIER_TRACK_MIN` bytes (4 KiB by default, the paper's tracking threshold) get whole pages of
//! their own (`large.rs`) so the daemon can move each one between tiers alone, and each of their
//! allocations and frees is reported to the daemon through a shared-memory ring (`report.rs`),
//! tagged with a hash of its call path (`site.rs`, cached per caller: `malloc`, `calloc` and
//! `realloc` enter through three-instruction assembly stubs that hand over the caller's return
//! address and stack pointer). The daemon answers through the same shared memory: which tier a
//! site's new objects start in (`large.rs` keeps chunks bound to each tier's nodes), and when to
//! re-announce the live objects after dropped events. `api.rs` is the C API of
//! `include/objtier.h`.
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
mod free_index;
mod large;
mod lock;
mod options;
mod os;
mod report;
mod sandbox;
mod site;

use arenas::owned_by_mimalloc;
use core::cell::Cell;
use core::ffi::c_void;
use libmimalloc_sys as mi;
use objtier_wire::{event_flags, EventKind, PAGE_SIZE};

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

thread_local! {
    /// Set while this thread runs objtier's own code that may allocate (unwinding, attaching).
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    /// Objects of short-lived sites this thread has allocated, to report one in
    /// `SHORT_LIVED_SAMPLE` of them.
    static SHORT_LIVED_SEEN: Cell<u32> = const { Cell::new(0) };
}

/// Objects of more than this many bytes are reported even from a site the daemon found
/// short-lived: few programs make them fast enough for their reports to cost much, and a large
/// object is the one whose tier matters most if the daemon was wrong about its site.
const SHORT_LIVED_MAX_BYTES: usize = 1 << 20;

/// Whether this thread should report this object of a short-lived site: one in
/// `SHORT_LIVED_SAMPLE`, so that the daemon still sees how long the site's objects live.
#[inline]
fn sample_short_lived() -> bool {
    SHORT_LIVED_SEEN
        .try_with(|seen| {
            let n = seen.get().wrapping_add(1);
            seen.set(n);
            n % objtier_wire::SHORT_LIVED_SAMPLE == 0
        })
        .unwrap_or(true)
}

/// Marks this thread as inside objtier until dropped; None if it already was (re-entry).
struct HookGuard;

impl HookGuard {
    #[inline]
    fn enter() -> Option<HookGuard> {
        IN_HOOK
            .try_with(|flag| (!flag.replace(true)).then_some(HookGuard))
            .ok()
            .flatten()
    }
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|flag| flag.set(false));
    }
}

/// Alignment of `malloc`: what C requires for any object that fits the size (mimalloc gives
/// 16 bytes from 16-byte blocks up, 8 for the 8-byte class, as C allows).
const MIN_ALIGN: usize = 8;

/// True if a plain mimalloc block of `size` bytes is already aligned to `align`.
#[inline]
fn plain_block_suffices(size: usize, align: usize) -> bool {
    align <= MIN_ALIGN || (align <= 16 && size >= 16)
}

#[inline]
fn set_errno(value: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { crate::os::set_errno(value) };
}

/// Allocates `size` bytes aligned to `align` (a power of two): tracked pages or mimalloc.
#[inline]
unsafe fn allocate(size: usize, align: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { allocate_from(size, align, site::Caller::UNKNOWN) }
}

/// `allocate`, for a call from `caller` (which keys the allocation-site cache).
#[inline]
unsafe fn allocate_from(size: usize, align: usize, caller: site::Caller) -> *mut c_void {
    let tracked = options::get().tracks(size);
    let p = match tracked.then(|| allocate_tracked(size, align, caller)) {
        Some(Some((p, _))) => p as *mut c_void,
        // A huge object's own chunk refused: the program's ENOMEM, as glibc's would be.
        Some(None) if !large::fits_a_chunk(size, align.max(PAGE_SIZE)) => core::ptr::null_mut(),
        // Small, or tracked pages refused (no address space for a chunk under `ulimit -v`):
        // mimalloc's, untracked, as glibc would have served it.
        // SAFETY: plain mimalloc allocation.
        _ if plain_block_suffices(size, align) => unsafe { mi::mi_malloc(size) },
        // SAFETY: align is a power of two (checked by callers).
        _ => unsafe { mi::mi_malloc_aligned(size, align) },
    };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

#[cold]
fn allocate_tracked(
    size: usize,
    align: usize,
    caller: site::Caller,
) -> Option<(*mut u8, large::Contents)> {
    let guard = HookGuard::enter();
    let now = report::now_ns();
    if guard.is_some() {
        // Before the allocation, so that the first tracked object of a process (which is what
        // triggers the lazy attach) already gets its site and placement.
        report::tick(now);
    }
    let depth = options::get().site_depth;
    let control = report::control();
    // The frames of an unwind, kept for describing a new site; made (512 bytes zeroed) only
    // when there is an unwind, not on every tracked allocation.
    let mut frames: Option<site::Frames> = None;
    // The site: from the cache when this caller (return address and stack pointer) was seen
    // before, else by unwinding (about a microsecond for 16 frames), remembered for next time.
    let site = if guard.is_some() && depth > 0 && control.is_some() {
        site::cached(caller).unwrap_or_else(|| {
            let site = site::capture(depth, frames.insert(site::Frames::new()));
            site::remember(caller, site);
            site
        })
    } else {
        0
    };
    let advice = control.map_or_else(Default::default, |c| c.site_advice(site));
    // The daemon found that this site's objects die before it could ever tier them: they are
    // allocated as any other, but only one in SHORT_LIVED_SAMPLE is reported (to show the
    // daemon if that changes), and the others' frees are not reported either.
    let (report, flags) = if advice.short_lived && size <= SHORT_LIVED_MAX_BYTES {
        (sample_short_lived(), event_flags::SAMPLED)
    } else {
        (true, 0)
    };
    let placed = control.map_or(Placed::NOWHERE, |c| place(c, site, advice, size));
    let allocated = large::alloc(
        size,
        align.max(PAGE_SIZE),
        placed.nodes,
        site,
        placed.kept,
        now,
        |extent| {
            if report {
                report::push_alloc(extent, now, site, flags)
            } else {
                report::UNREPORTED
            }
        },
    );
    if let (Some((p, contents)), Some(tail)) = (allocated, placed.tail) {
        spill_tail(p, size, contents, placed.kept, tail);
    }
    // A program that allocates but no longer frees returns its idle cached memory too.
    large::purge_if_due(now);
    if guard.is_some() && site != 0 && site::first_sighting(site) {
        let frames = frames.get_or_insert_with(|| {
            // A cache hit: unwind once more, for the frames.
            let mut frames = site::Frames::new();
            site::capture(depth, &mut frames);
            frames
        });
        report::describe_site(site, frames);
    }
    allocated
}

/// Where a new tracked object goes: the NUMA nodes of its chunk (0: first touch), what its
/// placement budget charged it ([`budget::Charge::kept`], with [`large::KEPT_REBOUND`] when its
/// tail goes one tier down), and those lower nodes.
#[derive(Clone, Copy)]
struct Placed {
    nodes: u64,
    kept: u64,
    tail: Option<u64>,
}

impl Placed {
    const NOWHERE: Placed = Placed {
        nodes: 0,
        kept: 0,
        tail: None,
    };
}

/// The daemon's word on a new object of `site` (`advice`), `size` bytes: its site's tier, or a
/// placement's fallback tier for a site it did not place; within the site's budget there, or
/// one tier down beyond it, or split across the two for the object that crosses the budget.
fn place(
    control: &objtier_wire::Control,
    site: u64,
    advice: objtier_wire::SiteAdvice,
    size: usize,
) -> Placed {
    let Some(tier) = advice.tier.or_else(|| control.default_tier()) else {
        return Placed::NOWHERE;
    };
    let Some(nodes) = control.tier_nodes(tier) else {
        return Placed::NOWHERE;
    };
    let lower = control.tier_nodes(tier + 1);
    let slot = control.site_slot(site);
    let (Some(lower), Some(slot), true) = (
        lower,
        slot,
        advice.tier.is_some() && advice.budget_pages > 0,
    ) else {
        return Placed {
            nodes,
            kept: 0,
            tail: None,
        };
    };
    let pages = size.div_ceil(PAGE_SIZE);
    let charge = budget::charge(slot, advice.budget_pages, pages);
    match charge.head_pages {
        0 => Placed {
            nodes: lower,
            kept: 0,
            tail: None,
        },
        head if head >= pages => Placed {
            nodes,
            kept: charge.kept,
            tail: None,
        },
        _ => Placed {
            nodes,
            kept: charge.kept | large::KEPT_REBOUND,
            tail: Some(lower),
        },
    }
}

/// Binds the pages of a new object past what its budget charged (`kept`'s head) one tier down
/// (`tail`): it crossed its site's budget. Pages of a reused extent that are resident already
/// are dropped first, so that they fault in where the binding says.
fn spill_tail(p: *mut u8, size: usize, contents: large::Contents, kept: u64, tail: u64) {
    let head = (kept & 0xffff_ffff) as usize * PAGE_SIZE;
    let len = size.next_multiple_of(PAGE_SIZE);
    if head >= len {
        return;
    }
    let start = p as usize + head;
    if contents == large::Contents::Dirty {
        // SAFETY: the tail is the new object's own pages, not yet handed out.
        unsafe { crate::os::madvise(start as *mut c_void, len - head, libc::MADV_DONTNEED) };
    }
    large::bind_preferred(start, len - head, tail);
}

#[inline]
unsafe fn release(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    if large::contains(ptr as *const u8) {
        let now = report::now_ns();
        large::free(ptr as *mut u8, now, |extent, freed| {
            report::push_free(extent, freed.event, now);
            budget::refund(freed.kept);
        });
    } else if owned_by_mimalloc(ptr) {
        // SAFETY: mimalloc owns it.
        unsafe { mi::mi_free(ptr) }
    }
    // Anything else was not allocated by us (e.g. by the dynamic loader before we were
    // interposed): leaking it is the only safe answer.
}

/// Usable bytes of a block we own; 0 for pointers we do not know.
#[inline]
unsafe fn usable_size(ptr: *const c_void) -> usize {
    if ptr.is_null() {
        0
    } else if large::contains(ptr as *const u8) {
        large::extent_of(ptr as *const u8).map_or(0, |e| e.len)
    } else if owned_by_mimalloc(ptr) {
        // SAFETY: mimalloc owns it.
        unsafe { mi::mi_usable_size(ptr) }
    } else {
        0
    }
}

unsafe fn reallocate(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { reallocate_from(ptr, size, site::Caller::UNKNOWN) }
}

unsafe fn reallocate_from(ptr: *mut c_void, size: usize, caller: site::Caller) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: plain allocation.
        return unsafe { allocate_from(size, MIN_ALIGN, caller) };
    }
    if size == 0 {
        // glibc frees and returns NULL for realloc(p, 0).
        // SAFETY: ptr is a live block (caller contract).
        unsafe { release(ptr) };
        return core::ptr::null_mut();
    }
    let options = options::get();
    let is_large = large::contains(ptr as *const u8);
    if !is_large && !options.tracks(size) && owned_by_mimalloc(ptr) {
        // SAFETY: small stays small: mimalloc's realloc keeps the contents.
        let p = unsafe { mi::mi_realloc(ptr, size) };
        if p.is_null() {
            set_errno(libc::ENOMEM);
        }
        return p;
    }
    // SAFETY: ptr is a live block (caller contract).
    let old = unsafe { usable_size(ptr) };
    if is_large && size <= old && size > old / 2 && size >= options.track_min_bytes {
        return ptr; // fits in the pages it already has
    }
    if is_large && size > old {
        // Grow into the free pages that follow, if there are enough: no copy, and the pages
        // already there stay where the daemon put them.
        let now = report::now_ns();
        let grown = large::grow_in_place(ptr as *mut u8, size, now, |before, after| {
            report::push(EventKind::Moved, 0, after, now, before.addr as u64);
        });
        if grown {
            return ptr;
        }
    }
    if is_large && old > 0 && options.tracks(size) {
        // SAFETY: ptr is a live tracked object of `old` usable bytes (caller contract).
        return unsafe { move_tracked(ptr, old, size) };
    }
    if old == 0 {
        // A pointer we did not allocate; we cannot know its size. Copy what is certainly
        // readable (up to the end of its page) rather than lose or overread data.
        set_errno(libc::ENOMEM);
        let readable = PAGE_SIZE - (ptr as usize % PAGE_SIZE);
        // SAFETY: fresh allocation, then a copy bounded by both sizes.
        unsafe {
            let p = allocate_from(size, MIN_ALIGN, caller);
            if !p.is_null() {
                core::ptr::copy_nonoverlapping(ptr as *const u8, p as *mut u8, size.min(readable));
            }
            return p;
        }
    }
    // SAFETY: move to a new block, copying the smaller of the two sizes; free the old one only
    // on success (realloc must leave the original intact on failure).
    unsafe {
        let p = allocate_from(size, MIN_ALIGN, caller);
        if p.is_null() {
            return p;
        }
        core::ptr::copy_nonoverlapping(ptr as *const u8, p as *mut u8, size.min(old));
        release(ptr);
        p
    }
}

/// Moves the tracked object at `ptr`, of `old` usable bytes, to new pages for `size` bytes, and
/// tells the daemon in one [`EventKind::Moved`] that the new object continues the old one: it
/// keeps its allocation site, its tier (below), and at the daemon its access history, so a
/// grown array is not ranked cold as a newcomer. Null (and the old object intact) when there is
/// no memory.
///
/// A growing object gets room for half again its old size when that is more than `size`, so
/// that the next growths happen in place. Programs grow arrays by a fixed step (LAMMPS adds
/// 16,384 atoms' worth to each per-atom array, some 24 times in the evaluation's run); when the
/// pages that follow are taken, each step copies the whole array, so the bytes copied grow with
/// the square of the array's final size (on lammps 0.2 GB, 6.4 M cache misses, a tenth of the
/// run's). glibc avoids the copy with `mremap`, which objtier's objects, carved out of shared
/// chunks, cannot use. With the room, an array that grows by steps moves a logarithmic number of
/// times. The room costs address space, not memory: pages never written are not resident (those
/// taken from the cache of freed memory are dropped), the daemon ranks records by resident
/// bytes, and a free gives them back with the rest.
#[cold]
unsafe fn move_tracked(ptr: *mut c_void, old: usize, size: usize) -> *mut c_void {
    let now = report::now_ns();
    if let Some(_guard) = HookGuard::enter() {
        report::tick(now);
    }
    let site = large::site_of(ptr as *const u8);
    // The copy starts in the tier the object is in (where the daemon put it, or first touch),
    // not in its site's starting tier: that is a guess for new objects, and this one has a
    // history. The evaluation's igraph at 50 % had 15-18 % of its accesses fast with the site's
    // tier (its vectors' site was placed slow, and the vectors that grow are the hot ones), and
    // 25-50 % (mean 40 %, six runs) with the object's.
    let nodes = report::control()
        // With one tier there is nothing to choose (and no reason for chunks of a placement).
        .filter(|c| c.tier_nodes(1).is_some())
        .and_then(|c| {
            let node = api::node_of(ptr).ok()?;
            c.tier_of_node(node).and_then(|tier| c.tier_nodes(tier))
        })
        .unwrap_or(0);
    let room = extent_for_move(old, size);
    let mut extent = large::Extent { addr: 0, len: 0 };
    // No report of its own: the move below tells of it.
    let mut allocate = |bytes| {
        large::alloc(bytes, PAGE_SIZE, nodes, site, 0, now, |e| {
            extent = e;
            0
        })
    };
    let allocated = match allocate(room) {
        None if room > size => allocate(size),
        allocated => allocated,
    };
    let Some((p, contents)) = allocated else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let used = size.next_multiple_of(PAGE_SIZE);
    if contents == large::Contents::Dirty && extent.len > used {
        // SAFETY: [p + used, end of extent) is the new extent's own, not yet handed out.
        unsafe {
            crate::os::madvise(
                p.add(used) as *mut c_void,
                extent.len - used,
                libc::MADV_DONTNEED,
            )
        };
    }
    // SAFETY: both are live objects of at least the bytes copied, and distinct.
    unsafe { core::ptr::copy_nonoverlapping(ptr as *const u8, p, size.min(old)) };
    // Reported under the old object's lock, before its pages can be reused (as a free is).
    // The copy is not charged to its site's budget (it stays in the old one's tier), and the
    // old one's charge comes back.
    large::free(ptr as *mut u8, now, |from, freed| {
        report::push(EventKind::Moved, 0, extent, now, from.addr as u64);
        budget::refund(freed.kept);
    });
    large::purge_if_due(now);
    p as *mut c_void
}

/// The bytes to allocate for a tracked object of `old` usable bytes that moves to hold `size`:
/// half again its old size when it grows by less than that (see [`move_tracked`]).
fn extent_for_move(old: usize, size: usize) -> usize {
    match old.checked_add(old / 2) {
        Some(room) if size > old => room.max(size),
        _ => size,
    }
}

unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: alignment validated.
    unsafe { allocate(size, align.max(MIN_ALIGN)) }
}

// ---------------------------------------------------------------------------------------------
// The exported malloc family. Not compiled into unit tests, which must not replace the test
// harness's own allocator.

/// Defines the exported `$name`, taking `$args` integer arguments, as a naked stub that calls
/// `$inner($args..., return_address, stack_pointer)`: the caller's return address and its
/// stack pointer at the call, read where the ABI leaves them, then a tail jump (so `$inner`
/// returns straight to the caller). Other architectures get a plain function passing
/// `Caller::UNKNOWN`.
#[cfg(not(test))]
macro_rules! caller_stub {
    ($name:ident, $inner:ident, 1) => {
        caller_stub!(@naked $name, $inner, (a: usize), "rsi", "rdx", "x1", "x2");
    };
    ($name:ident, $inner:ident, 2) => {
        caller_stub!(@naked $name, $inner, (a: usize, b: usize), "rdx", "rcx", "x2", "x3");
    };
    (@naked $name:ident, $inner:ident, ($($arg:ident: $ty:ty),*), $ra_x86:literal, $sp_x86:literal, $ra_arm:literal, $sp_arm:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> *mut c_void {
            // At entry [rsp] holds the return address; rsp + 8 is the caller's stack pointer.
            core::arch::naked_asm!(
                concat!("mov ", $ra_x86, ", [rsp]"),
                concat!("lea ", $sp_x86, ", [rsp + 8]"),
                "jmp {inner}",
                inner = sym $inner,
            )
        }
        #[cfg(target_arch = "aarch64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> *mut c_void {
            // The link register holds the return address; sp is the caller's.
            core::arch::naked_asm!(
                concat!("mov ", $ra_arm, ", x30"),
                concat!("mov ", $sp_arm, ", sp"),
                "b {inner}",
                inner = sym $inner,
            )
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> *mut c_void {
            // SAFETY: forwarded with an unknown caller.
            unsafe { $inner($($arg,)* 0, 0) }
        }
    };
}

#[cfg(not(test))]
mod exports {
    use super::*;

    // malloc, calloc and realloc enter through a few instructions of assembly that pass on the
    // caller's return address and stack pointer (see `site::Caller`), so that the allocation
    // site of a repeated call comes from a cache instead of an unwind.
    caller_stub!(malloc, malloc_from, 1);
    caller_stub!(calloc, calloc_from, 2);
    caller_stub!(realloc, realloc_from, 2);

    unsafe extern "C" fn malloc_from(size: usize, ra: usize, sp: usize) -> *mut c_void {
        // SAFETY: forwards to our allocator.
        unsafe { allocate_from(size, MIN_ALIGN, site::Caller { ra, sp }) }
    }

    /// `prctl`, on its way to the kernel: `PR_SET_SECCOMP` confines the program
    /// (`sandbox.rs`). Declared with the five integer arguments every option takes at most,
    /// where libc declares it variadic: the same registers on x86_64 and aarch64.
    #[no_mangle]
    pub unsafe extern "C" fn prctl(
        option: core::ffi::c_int,
        a2: core::ffi::c_ulong,
        a3: core::ffi::c_ulong,
        a4: core::ffi::c_ulong,
        a5: core::ffi::c_ulong,
    ) -> core::ffi::c_int {
        if option == libc::PR_SET_SECCOMP {
            sandbox::confine("prctl(PR_SET_SECCOMP)");
        }
        let args = [
            option as core::ffi::c_long,
            a2 as _,
            a3 as _,
            a4 as _,
            a5 as _,
            0,
        ];
        // SAFETY: the caller's prctl, passed on unchanged.
        unsafe { sandbox::raw_syscall(libc::SYS_prctl, args) as core::ffi::c_int }
    }

    /// `syscall`, on its way to the kernel: `seccomp(SECCOMP_SET_MODE_*)` (libseccomp's way)
    /// confines the program (`sandbox.rs`). Six integer arguments after the number, as libc's
    /// own reads whatever the caller passed.
    #[no_mangle]
    pub unsafe extern "C" fn syscall(
        number: core::ffi::c_long,
        a1: core::ffi::c_long,
        a2: core::ffi::c_long,
        a3: core::ffi::c_long,
        a4: core::ffi::c_long,
        a5: core::ffi::c_long,
        a6: core::ffi::c_long,
    ) -> core::ffi::c_long {
        if number == libc::SYS_seccomp && sandbox::seccomp_installs(a1) {
            sandbox::confine("seccomp()");
        }
        // SAFETY: the caller's system call, passed on unchanged.
        unsafe { sandbox::raw_syscall(number, [a1, a2, a3, a4, a5, a6]) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn free(ptr: *mut c_void) {
        // SAFETY: caller passes a pointer from this allocator or NULL.
        unsafe { release(ptr) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn cfree(ptr: *mut c_void) {
        // SAFETY: as free.
        unsafe { release(ptr) }
    }

    unsafe extern "C" fn calloc_from(
        count: usize,
        size: usize,
        ra: usize,
        sp: usize,
    ) -> *mut c_void {
        let Some(total) = count.checked_mul(size) else {
            set_errno(libc::ENOMEM);
            return core::ptr::null_mut();
        };
        let tracked = options::get().tracks(total);
        let p = match tracked.then(|| allocate_tracked(total, MIN_ALIGN, site::Caller { ra, sp })) {
            // Never-used or MADV_DONTNEED'd pages are already zero; only reused ones need it.
            Some(Some((p, large::Contents::Zeroed))) => p as *mut c_void,
            Some(Some((p, large::Contents::Dirty))) => {
                // SAFETY: p is a fresh allocation of at least `total` bytes.
                unsafe { core::ptr::write_bytes(p, 0, total) };
                p as *mut c_void
            }
            // As in `allocate_from`: a huge object's own chunk refused is ENOMEM; small objects,
            // and tracked ones whose chunk was refused, are mimalloc's.
            Some(None) if !large::fits_a_chunk(total, PAGE_SIZE) => core::ptr::null_mut(),
            // SAFETY: mimalloc's zeroing allocation.
            _ => unsafe { mi::mi_zalloc(total) },
        };
        if p.is_null() {
            set_errno(libc::ENOMEM);
        }
        p
    }

    unsafe extern "C" fn realloc_from(
        ptr: *mut c_void,
        size: usize,
        ra: usize,
        sp: usize,
    ) -> *mut c_void {
        // SAFETY: caller contract of realloc.
        unsafe { reallocate_from(ptr, size, site::Caller { ra, sp }) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn reallocarray(
        ptr: *mut c_void,
        count: usize,
        size: usize,
    ) -> *mut c_void {
        let Some(total) = count.checked_mul(size) else {
            set_errno(libc::ENOMEM);
            return core::ptr::null_mut();
        };
        // SAFETY: caller contract of realloc.
        unsafe { reallocate(ptr, total) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn posix_memalign(
        out: *mut *mut c_void,
        align: usize,
        size: usize,
    ) -> i32 {
        if !align.is_power_of_two() || !align.is_multiple_of(core::mem::size_of::<*mut c_void>()) {
            return libc::EINVAL;
        }
        // SAFETY: alignment validated.
        let p = unsafe { allocate(size, align.max(MIN_ALIGN)) };
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: caller passes a valid out pointer.
        unsafe { *out = p };
        0
    }

    #[no_mangle]
    pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
        if !align.is_power_of_two() && aligned_alloc_is_memalign() {
            // SAFETY: memalign's contract is aligned_alloc's.
            return unsafe { memalign(align, size) };
        }
        // SAFETY: validated inside.
        unsafe { aligned(align, size) }
    }

    /// True if the glibc we run on is older than 2.38, where `aligned_alloc` was an alias of
    /// `memalign` (a non-power-of-two alignment is rounded up, 0 means none); 2.38 made it fail
    /// with EINVAL. Asked only on that rare path, so it needs no cache.
    fn aligned_alloc_is_memalign() -> bool {
        // SAFETY: returns a pointer to a static NUL-terminated string such as "2.36"; it does
        // not allocate.
        let version = unsafe { core::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        let mut numbers = version
            .to_bytes()
            .split(|&b| b == b'.')
            .map(|part| core::str::from_utf8(part).ok()?.parse::<u32>().ok());
        match (numbers.next().flatten(), numbers.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor) < (2, 38),
            _ => false,
        }
    }

    #[no_mangle]
    pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
        // glibc rounds a non-power-of-two alignment up instead of failing.
        let align = align.max(1).checked_next_power_of_two().unwrap_or(0);
        // SAFETY: validated inside.
        unsafe { aligned(align, size) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
        // SAFETY: page alignment is a power of two.
        unsafe { aligned(PAGE_SIZE, size) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
        let Some(rounded) = size.max(1).checked_next_multiple_of(PAGE_SIZE) else {
            set_errno(libc::ENOMEM);
            return core::ptr::null_mut();
        };
        // SAFETY: page alignment is a power of two.
        unsafe { aligned(PAGE_SIZE, rounded) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
        // SAFETY: caller passes one of our pointers or NULL.
        unsafe { usable_size(ptr) }
    }

    // glibc's own names for its allocator. Programs (and some libraries, e.g. old Boehm GC
    // glue) call these to reach "the real malloc"; glibc's versions would hand out glibc-heap
    // memory that our free cannot recognise, so they are ours too.

    #[no_mangle]
    pub unsafe extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
        // SAFETY: as malloc.
        unsafe { malloc_from(size, 0, 0) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn __libc_free(ptr: *mut c_void) {
        // SAFETY: as free.
        unsafe { free(ptr) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn __libc_calloc(count: usize, size: usize) -> *mut c_void {
        // SAFETY: as calloc.
        unsafe { calloc_from(count, size, 0, 0) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: as realloc.
        unsafe { realloc_from(ptr, size, 0, 0) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: as memalign.
        unsafe { memalign(align, size) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
        // SAFETY: as valloc.
        unsafe { valloc(size) }
    }

    #[no_mangle]
    pub unsafe extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
        // SAFETY: as pvalloc.
        unsafe { pvalloc(size) }
    }

    // glibc's tuning and statistics calls. Left to glibc, they would report on (or trim) a heap
    // nobody allocates from.

    /// Accepts glibc's tuning knobs and ignores them (mimalloc and the page extents have their
    /// own policies). Returns what glibc returns: 1, except for an M_MXFAST outside 0..=160
    /// (80 * sizeof(size_t) / 4, glibc's MAX_FAST_SIZE). glibc returns 1 for unknown
    /// parameters too.
    #[no_mangle]
    pub extern "C" fn mallopt(param: i32, value: i32) -> i32 {
        const M_MXFAST: i32 = 1;
        let max_fast = 80 * core::mem::size_of::<usize>() / 4;
        let rejected = param == M_MXFAST && usize::try_from(value).map_or(true, |v| v > max_fast);
        i32::from(!rejected)
    }

    /// Returns free memory to the kernel: mimalloc's abandoned and free pages, and the page
    /// extents' dirty cache. 1 if memory was released, as in glibc (which ignores `pad` beyond
    /// keeping that much at the heap top; we have no top).
    #[no_mangle]
    pub extern "C" fn malloc_trim(_pad: usize) -> i32 {
        let before = mimalloc_committed_bytes();
        // SAFETY: a forced collection of mimalloc's free memory; safe at any time.
        unsafe { mi::mi_collect(true) };
        let mimalloc_released = mimalloc_committed_bytes() < before;
        let tracked_released = large::trim();
        i32::from(mimalloc_released || tracked_released)
    }

    /// What we can tell cheaply about our memory, in glibc's terms:
    /// - `arena`: mimalloc's committed bytes plus the page extents' dirty cache;
    /// - `uordblks`: mimalloc's committed bytes (an upper bound on its bytes in use, which a
    ///   release build of mimalloc does not count);
    /// - `fordblks`: the dirty cache (freed tracked memory kept resident for reuse);
    /// - `hblkhd`: bytes of live tracked objects (like glibc's mmapped chunks).
    ///
    /// `uordblks + hblkhd` is thus "in use", as with glibc. The counts (`ordblks`, `smblks`,
    /// `hblks`), `fsmblks`, `keepcost` and `usmblks` (always 0 in glibc too) are 0.
    #[no_mangle]
    pub extern "C" fn mallinfo2() -> libc::mallinfo2 {
        let committed = mimalloc_committed_bytes();
        let cached = large::cached_bytes();
        libc::mallinfo2 {
            arena: committed + cached,
            ordblks: 0,
            smblks: 0,
            hblks: 0,
            hblkhd: large::LIVE_BYTES.load(core::sync::atomic::Ordering::Relaxed) as usize,
            usmblks: 0,
            fsmblks: 0,
            uordblks: committed,
            fordblks: cached,
            keepcost: 0,
        }
    }

    /// `mallinfo2` in `int`s, saturated (glibc wraps them around past 2 GiB).
    #[no_mangle]
    pub extern "C" fn mallinfo() -> libc::mallinfo {
        let info = mallinfo2();
        let int = |bytes: usize| i32::try_from(bytes).unwrap_or(i32::MAX);
        libc::mallinfo {
            arena: int(info.arena),
            ordblks: int(info.ordblks),
            smblks: int(info.smblks),
            hblks: int(info.hblks),
            hblkhd: int(info.hblkhd),
            usmblks: int(info.usmblks),
            fsmblks: int(info.fsmblks),
            uordblks: int(info.uordblks),
            fordblks: int(info.fordblks),
            keepcost: int(info.keepcost),
        }
    }

    /// One line on stderr (glibc prints a table there), written without allocating.
    #[no_mangle]
    pub extern "C" fn malloc_stats() {
        let info = mallinfo2();
        write_stderr(format_args!(
            "malloc_stats: small objects (mimalloc): {} bytes committed; tracked objects: {} \
             bytes live, {} bytes freed and kept resident",
            info.uordblks, info.hblkhd, info.fordblks
        ));
    }

    /// glibc's XML report, reduced to what we know (see `mallinfo2`). Like glibc, fails with
    /// EINVAL for any `options` but 0. The text is formatted on the stack and written with
    /// `fwrite`: this is the application's call, made outside any allocation of ours, so a
    /// buffer that stdio allocates for `stream` is an ordinary application allocation.
    ///
    /// # Safety
    /// `stream` must be an open `FILE`.
    #[no_mangle]
    pub unsafe extern "C" fn malloc_info(options: i32, stream: *mut libc::FILE) -> i32 {
        if options != 0 || stream.is_null() {
            return libc::EINVAL;
        }
        let info = mallinfo2();
        let mut text = StackText::<512>::new();
        let _ = core::fmt::write(
            &mut text,
            format_args!(
                "<malloc version=\"objtier-1\">\n\
                 <total type=\"mimalloc\" size=\"{}\"/>\n\
                 <total type=\"tracked\" size=\"{}\"/>\n\
                 <total type=\"cached\" size=\"{}\"/>\n\
                 <system type=\"current\" size=\"{}\"/>\n\
                 </malloc>\n",
                info.uordblks,
                info.hblkhd,
                info.fordblks,
                info.arena + info.hblkhd
            ),
        );
        // SAFETY: writes our stack buffer to the caller's stream.
        unsafe { libc::fwrite(text.bytes.as_ptr() as *const c_void, 1, text.len, stream) };
        0
    }

    /// Bytes mimalloc holds from the OS (its segments, whether in use or free).
    fn mimalloc_committed_bytes() -> usize {
        let mut committed = 0;
        let unused = core::ptr::null_mut();
        // SAFETY: mimalloc writes the counters whose pointers are not NULL.
        unsafe {
            mi::mi_process_info(
                unused,
                unused,
                unused,
                unused,
                unused,
                &mut committed,
                unused,
                unused,
            )
        };
        committed
    }

    /// Text formatted into a fixed buffer, cut short if it does not fit.
    struct StackText<const N: usize> {
        bytes: [u8; N],
        len: usize,
    }

    impl<const N: usize> StackText<N> {
        fn new() -> Self {
            StackText {
                bytes: [0; N],
                len: 0,
            }
        }
    }

    impl<const N: usize> core::fmt::Write for StackText<N> {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let n = s.len().min(N - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Initialisation.

/// mimalloc's `mi_option_arena_reserve` (its index in v2's `mi_option_e`).
const MI_OPTION_ARENA_RESERVE: libmimalloc_sys::mi_option_t = 23;
/// Arena reservations of 64 MiB (mimalloc's default is 1 GiB): the daemon tracks each arena
/// as small-object blocks and locates their pages every interval, so spans far beyond what a
/// program uses cost it query time for nothing. mimalloc still grows the reservation for later
/// arenas, and `MIMALLOC_ARENA_RESERVE` still wins.
const ARENA_RESERVE_KIB: libc::c_long = 64 << 10;
/// mimalloc's own default for it.
const MIMALLOC_ARENA_RESERVE_KIB: libc::c_long = 1 << 20;
/// mimalloc's `mi_option_arena_eager_commit`: 2 (its default) commits a whole arena when it is
/// reserved, on systems that overcommit (Linux). We set 0: arenas are reserved inaccessible and
/// committed as segments need them, a thread's first segment page by page (mimalloc's
/// `eager_commit_delay`), as mimalloc does outside arenas. With transparent huge pages
/// `always`, a committed arena makes the first touch of every thread's segment fault in 2 MiB:
/// 8 threads allocating a few small objects each held 20 MiB instead of 4.6 MiB, taken where
/// first touch puts it, in the fast tier ahead of the program's data (docs/performance.md).
/// `MIMALLOC_ARENA_EAGER_COMMIT` set to 0 or 1 still wins; set to 2, it reads as the default
/// and is replaced, as `MIMALLOC_ARENA_RESERVE=1GiB` is.
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MIMALLOC_ARENA_EAGER_COMMIT: libc::c_long = 2;

extern "C" fn constructor() {
    options::init();
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
static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg(feature = "lockstats")]
extern "C" fn print_lockstats() {
    lock::stats::print();
}

#[cfg(feature = "lockstats")]
#[used]
#[link_section = ".fini_array"]
static PRINT_LOCKSTATS: extern "C" fn() = print_lockstats;

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
