//! The library's one layer of system calls (as mimalloc's `prim`): every call the library makes
//! into the kernel goes through a function here, and nowhere else.
//!
//! Each is a thin wrapper with the kernel's (or libc's) own arguments and result, so that a
//! call site reads as before and its `// SAFETY:` comment still says why its pointers are good.
//! Having them in one place says, at a glance, which system calls the library makes, which is
//! what a seccomp filter decides on (`sandbox.rs` keeps the library quiet once one is in), and
//! it keeps the preload rules in view: nothing here allocates, reads the environment or takes a
//! lock. Calls into the dynamic loader (`dl_iterate_phdr`, in `site.rs`) and mimalloc's are not
//! system calls and stay where they are used.
//!
//! # Safety
//! Every function is `unsafe` with the contract of the libc function or system call it wraps:
//! pointers valid for what the call reads or writes, and file descriptors and memory ranges the
//! library owns.

use core::ffi::{c_char, c_int, c_long, c_void};

// --- memory --------------------------------------------------------------------------------------

/// `mmap(2)`. Returns `MAP_FAILED` on failure.
///
/// # Safety
/// As `libc::mmap`; a fixed mapping must not replace memory anyone uses.
#[inline]
pub unsafe fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { libc::mmap(addr, len, prot, flags, fd, offset) }
}

/// `munmap(2)`.
///
/// # Safety
/// The range is the library's own, and nothing uses it any more.
#[inline]
pub unsafe fn munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::munmap(addr, len) }
}

/// `madvise(2)`.
///
/// # Safety
/// The range is the library's own (or mimalloc's), and the advice keeps what must be kept.
#[inline]
pub unsafe fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::madvise(addr, len, advice) }
}

/// `process_madvise(2)` of `ranges` in the process `pidfd` names (5.10+; `MADV_DONTNEED` for
/// it, 6.13+). Returns the bytes advised, or -1 with errno set.
///
/// # Safety
/// The ranges are valid iovecs of memory the library owns and nobody uses until this returns.
#[inline]
pub unsafe fn process_madvise(pidfd: c_int, ranges: &[libc::iovec], advice: c_int) -> c_long {
    // SAFETY: forwarded; the iovec array outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd,
            ranges.as_ptr(),
            ranges.len(),
            advice,
            0,
        )
    }
}

/// `mbind(2)` of `[addr, addr + len)` in `mode` to the nodes of `mask` (`mask_bits` bits), or
/// back to the default policy (`mode` 0, an empty `mask`).
///
/// # Safety
/// The range is the library's own.
#[inline]
pub unsafe fn mbind(addr: usize, len: usize, mode: i64, mask: &[u64], mask_bits: u64) -> c_long {
    let mask_ptr = if mask.is_empty() {
        core::ptr::null()
    } else {
        mask.as_ptr()
    };
    // SAFETY: forwarded; the mask outlives the call and holds `mask_bits` bits.
    unsafe { libc::syscall(libc::SYS_mbind, addr, len, mode, mask_ptr, mask_bits, 0u32) }
}

/// A query-only `move_pages(2)` of one page of this process: its NUMA node (or a negative errno)
/// into `status`. Returns the call's result (negative with errno set when the call failed).
///
/// # Safety
/// `status` is valid for one write.
#[inline]
pub unsafe fn move_pages_query(page: *const c_void, status: *mut c_int) -> c_long {
    // SAFETY: forwarded; the page array is a local that outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            1usize,
            &page as *const *const c_void,
            core::ptr::null::<c_int>(),
            status,
            0,
        )
    }
}

// --- waiting -------------------------------------------------------------------------------------

/// `futex(FUTEX_WAIT_PRIVATE)`: sleeps while `*word == expected` (spurious wake-ups happen).
///
/// # Safety
/// `word` is a live atomic of this process.
#[inline]
pub unsafe fn futex_wait(word: *const u32, expected: u32) {
    // SAFETY: forwarded.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        );
    }
}

/// `futex(FUTEX_WAKE_PRIVATE)`: wakes up to `count` waiters on `word`.
///
/// # Safety
/// `word` is a live atomic of this process.
#[inline]
pub unsafe fn futex_wake(word: *const u32, count: c_int) {
    // SAFETY: forwarded.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        );
    }
}

/// `sched_yield(2)`.
///
/// # Safety
/// None beyond the module's.
#[inline]
pub unsafe fn sched_yield() -> c_int {
    // SAFETY: no preconditions.
    unsafe { libc::sched_yield() }
}

/// `nanosleep(2)` for `pause`.
///
/// # Safety
/// None beyond the module's.
#[inline]
pub unsafe fn nanosleep(pause: &libc::timespec) -> c_int {
    // SAFETY: forwarded; no remainder is asked for.
    unsafe { libc::nanosleep(pause, core::ptr::null_mut()) }
}

/// `clock_gettime(2)` of `clock`, in nanoseconds.
///
/// # Safety
/// None beyond the module's (an unknown clock reads as 0).
#[inline]
pub unsafe fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// --- files and sockets ---------------------------------------------------------------------------

/// `open(2)`.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[inline]
pub unsafe fn open(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::open(path, flags) }
}

/// `open(2)` of a file it may create, with its permission bits.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[inline]
pub unsafe fn open_mode(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::open(path, flags, mode) }
}

/// `unlink(2)`.
///
/// # Safety
/// `path` is a NUL-terminated string naming a file of the library's own.
#[inline]
pub unsafe fn unlink(path: *const c_char) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::unlink(path) }
}

/// `readlink(2)`: writes at most `len` bytes, without a NUL.
///
/// # Safety
/// `path` is a NUL-terminated string; `buf` is valid for `len` bytes of writes.
#[inline]
pub unsafe fn readlink(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    // SAFETY: forwarded.
    unsafe { libc::readlink(path, buf, len) }
}

/// `read(2)`.
///
/// # Safety
/// `buf` is valid for `len` bytes of writes.
#[inline]
pub unsafe fn read(fd: c_int, buf: *mut c_void, len: usize) -> isize {
    // SAFETY: forwarded.
    unsafe { libc::read(fd, buf, len) }
}

/// `write(2)`.
///
/// # Safety
/// `buf` is valid for `len` bytes of reads.
#[inline]
pub unsafe fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
    // SAFETY: forwarded.
    unsafe { libc::write(fd, buf, len) }
}

/// `close(2)`.
///
/// # Safety
/// `fd` is the library's own, and nothing uses it any more.
#[inline]
pub unsafe fn close(fd: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::close(fd) }
}

/// `fstat(2)`.
///
/// # Safety
/// `st` is valid for a write.
#[inline]
pub unsafe fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::fstat(fd, st) }
}

/// `fcntl(fd, F_ADD_SEALS, seals)`.
///
/// # Safety
/// `fd` is the library's own.
#[inline]
pub unsafe fn add_seals(fd: c_int, seals: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) }
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, lowest)`: a close-on-exec duplicate numbered `lowest` or more.
///
/// # Safety
/// `fd` is the library's own.
#[inline]
pub unsafe fn dup_cloexec_from(fd: c_int, lowest: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) }
}

/// `memfd_create(2)`.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[inline]
pub unsafe fn memfd_create(name: *const c_char, flags: libc::c_uint) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::memfd_create(name, flags) }
}

/// `ftruncate(2)`.
///
/// # Safety
/// `fd` is the library's own.
#[inline]
pub unsafe fn ftruncate(fd: c_int, len: libc::off_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::ftruncate(fd, len) }
}

/// `socket(2)`.
///
/// # Safety
/// None beyond the module's.
#[inline]
pub unsafe fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::socket(domain, kind, protocol) }
}

/// `connect(2)`.
///
/// # Safety
/// `addr` is valid for `len` bytes.
#[inline]
pub unsafe fn connect(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::connect(fd, addr, len) }
}

/// `send(2)`.
///
/// # Safety
/// `buf` is valid for `len` bytes of reads.
#[inline]
pub unsafe fn send(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: forwarded.
    unsafe { libc::send(fd, buf, len, flags) }
}

/// `sendmsg(2)`.
///
/// # Safety
/// `msg` and everything it points to are valid for the call.
#[inline]
pub unsafe fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    // SAFETY: forwarded.
    unsafe { libc::sendmsg(fd, msg, flags) }
}

/// `recv(2)`.
///
/// # Safety
/// `buf` is valid for `len` bytes of writes.
#[inline]
pub unsafe fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: forwarded.
    unsafe { libc::recv(fd, buf, len, flags) }
}

/// `poll(2)`.
///
/// # Safety
/// `fds` is valid for `count` entries.
#[inline]
pub unsafe fn poll(fds: *mut libc::pollfd, count: libc::nfds_t, timeout_ms: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::poll(fds, count, timeout_ms) }
}

// --- the process ---------------------------------------------------------------------------------

/// `getpid(2)`.
///
/// # Safety
/// None beyond the module's.
#[inline]
pub unsafe fn getpid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

/// `geteuid(2)`.
///
/// # Safety
/// None beyond the module's.
#[inline]
pub unsafe fn geteuid() -> libc::uid_t {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// Sets this thread's `errno` (the malloc family reports ENOMEM through it).
///
/// # Safety
/// None beyond the module's.
#[inline]
pub unsafe fn set_errno(value: c_int) {
    // SAFETY: the thread's own errno location.
    unsafe { *libc::__errno_location() = value };
}

/// `pthread_atfork(3)`: the library's handlers around `fork()` (its locks held across it).
///
/// # Safety
/// The handlers are safe to call in the forking thread and in the child.
#[inline]
pub unsafe fn atfork(
    prepare: unsafe extern "C" fn(),
    parent: unsafe extern "C" fn(),
    child: unsafe extern "C" fn(),
) -> c_int {
    // SAFETY: forwarded.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) }
}
