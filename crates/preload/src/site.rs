//! Allocation sites: a 64-bit hash of the call path that led to a tracked allocation.
//!
//! The paper's bkmalloc hashes up to 16 return addresses from `backtrace(3)`. glibc's
//! `backtrace` `dlopen`s libgcc_s on first use (which allocates); we call libgcc's
//! `_Unwind_Backtrace` directly instead: libgcc_s is already loaded as a dependency of this
//! library, so unwinding needs no loader work, and the recursion guard in `lib.rs` routes any
//! allocation the unwinder itself makes straight to mimalloc, untracked.
//!
//! Frames inside libobjtier.so itself are skipped, so the first frame hashed is the caller of
//! `malloc` (or `operator new`'s caller, one frame further up through libstdc++).
//!
//! Each site is described to the daemon once per attach: its frames' return addresses, which
//! the daemon turns into `module+offset` through the process's memory map (a form that matches
//! across runs despite ASLR). A fixed, lock-free set remembers which sites were described.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

#[allow(non_camel_case_types)]
type _Unwind_Trace_Fn = extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> c_int;

extern "C" {
    fn _Unwind_Backtrace(trace: _Unwind_Trace_Fn, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

/// Address range of this library's code, set once by the constructor.
static SELF_START: AtomicUsize = AtomicUsize::new(0);
static SELF_END: AtomicUsize = AtomicUsize::new(0);

/// Most frames a site can have (`OBJTIER_SITE_DEPTH` is clamped to this).
pub const MAX_FRAMES: usize = 64;

/// Return addresses of one call path, innermost first.
pub struct Frames {
    pub ips: [usize; MAX_FRAMES],
    pub len: usize,
}

impl Frames {
    pub const fn new() -> Self {
        Self {
            ips: [0; MAX_FRAMES],
            len: 0,
        }
    }
}

struct Walk<'a> {
    hash: u64,
    max_frames: usize,
    frames: &'a mut Frames,
}

extern "C" fn on_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Walk` passed by `capture`, alive for the whole unwind; `ctx` is the
    // unwinder's context for this frame.
    let (walk, ip) = unsafe { (&mut *(arg as *mut Walk), _Unwind_GetIP(ctx)) };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    if ip >= SELF_START.load(Ordering::Relaxed) && ip < SELF_END.load(Ordering::Relaxed) {
        return URC_NO_REASON;
    }
    walk.hash = mix(walk.hash, ip as u64);
    walk.frames.ips[walk.frames.len] = ip;
    walk.frames.len += 1;
    if walk.frames.len >= walk.max_frames {
        URC_END_OF_STACK
    } else {
        URC_NO_REASON
    }
}

#[inline]
fn mix(hash: u64, value: u64) -> u64 {
    (hash.rotate_left(23) ^ value).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Hash of up to `max_frames` return addresses above this library, which it leaves in
/// `frames`; never 0 (0 means unknown).
#[inline(never)]
pub fn capture(max_frames: usize, frames: &mut Frames) -> u64 {
    frames.len = 0;
    let max_frames = max_frames.min(MAX_FRAMES);
    if max_frames == 0 {
        return 0;
    }
    let mut walk = Walk {
        hash: 0x243F_6A88_85A3_08D3,
        max_frames,
        frames,
    };
    // SAFETY: `on_frame` only touches `walk` through the pointer we pass, which outlives the call.
    unsafe { _Unwind_Backtrace(on_frame, &mut walk as *mut Walk as *mut c_void) };
    let h = walk.hash ^ (walk.hash >> 29);
    h.max(1)
}

/// Records where this library's code lives so that its own frames are not hashed.
pub fn init() {
    struct Search {
        needle: usize,
        start: usize,
        end: usize,
    }
    extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` for each object; `data` is our Search.
        unsafe {
            let search = &mut *(data as *mut Search);
            let info = &*info;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                    let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    let end = start + ph.p_memsz as usize;
                    if search.needle >= start && search.needle < end {
                        search.start = start;
                        search.end = end;
                        return 1;
                    }
                }
            }
        }
        0
    }
    let mut search = Search {
        needle: capture as fn(usize, &mut Frames) -> u64 as usize,
        start: 0,
        end: 0,
    };
    // SAFETY: dl_iterate_phdr calls `visit` synchronously with our `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    SELF_START.store(search.start, Ordering::Relaxed);
    SELF_END.store(search.end, Ordering::Relaxed);
}

/// Sites described to the current daemon: an insert-only open-addressing set, cleared on attach.
const DESCRIBED_SLOTS: usize = 8192;
const DESCRIBED_PROBES: usize = 16;
static DESCRIBED: [AtomicU64; DESCRIBED_SLOTS] = [const { AtomicU64::new(0) }; DESCRIBED_SLOTS];

/// Claims the description of `site`: true for exactly one caller per site (until `forget_all`).
/// False also when the set is full around the site's slot: the site goes undescribed rather
/// than being described on every allocation.
pub fn first_sighting(site: u64) -> bool {
    let start = (site ^ (site >> 29)) as usize;
    for probe in 0..DESCRIBED_PROBES {
        let slot = &DESCRIBED[(start + probe) & (DESCRIBED_SLOTS - 1)];
        match slot.compare_exchange(0, site, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(existing) if existing == site => return false,
            Err(_) => {}
        }
    }
    false
}

/// Forgets which sites were described (a new daemon knows none of them).
pub fn forget_all() {
    for slot in &DESCRIBED {
        slot.store(0, Ordering::Relaxed);
    }
}
