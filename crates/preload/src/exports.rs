//! The exported malloc family (and glibc's names and tuning calls for it, `prctl` and
//! `syscall` on their way to the kernel). Not compiled into unit tests, which must not replace
//! the test harness's own allocator.

use crate::*;
use core::ffi::c_void;
use libmimalloc_sys as mi;
use objtier_wire::PAGE_SIZE;

/// Defines the exported `$name`, taking `$args` integer arguments, as a naked stub that calls
/// `$inner($args..., return_address, stack_pointer)`: the caller's return address and its
/// stack pointer at the call, read where the ABI leaves them, then a tail jump (so `$inner`
/// returns straight to the caller). Other architectures get a plain function passing
/// `Caller::UNKNOWN`.
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

unsafe extern "C" fn calloc_from(count: usize, size: usize, ra: usize, sp: usize) -> *mut c_void {
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
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    // SAFETY: caller contract of realloc.
    unsafe { reallocate(ptr, total) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
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
