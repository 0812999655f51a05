//! Giving page ranges back to the kernel, many at a time.
//!
//! The dirty cache returns idle extents to the kernel with `MADV_DONTNEED` (`large/`). In a
//! multi-threaded process every such call ends with a TLB shootdown: the kernel interrupts each
//! other CPU that runs one of the process's threads and waits for it to flush. One call per
//! extent was a JVM's largest single cost in the library (bench/alloc `java`: 71,500 calls in a
//! 6 s run; `smp_call_function_many_cond` and the interrupts' MSR writes were 5 % of its
//! samples; docs/performance.md).
//!
//! So the ranges of one purge or eviction are collected in a [`Batch`] and given back with one
//! `process_madvise(PIDFD_SELF, ranges, MADV_DONTNEED)`, which recent kernels carry out with
//! one TLB flush for all of them (this host's 6.18: 1.2 us a range against 21.9 us,
//! `bench/alloc/discard-cost.c`). Older kernels refuse the call (no `PIDFD_SELF` sentinel, or
//! no `MADV_DONTNEED` through `process_madvise`), and every range then gets a `madvise` of its
//! own, as before; the first refusal is remembered for the process. A pidfd of our own would
//! work on more kernels, but it would be one more file descriptor in the program, which a
//! program closing every descriptor would close or reuse. A program under a seccomp filter gets
//! plain `madvise` only (`sandbox.rs`: a filter may kill a process for a call it does not
//! expect).

use core::sync::atomic::{AtomicU8, Ordering};

/// Ranges in one batch: a purge of more gives them back in several calls.
pub const BATCH: usize = 64;

/// `PIDFD_SELF_THREAD_GROUP` (include/uapi/linux/fcntl.h): the calling process.
const PIDFD_SELF_PROCESS: libc::c_int = -10001;

const UNTRIED: u8 = 0;
const WORKS: u8 = 1;
const REFUSED: u8 = 2;

/// Whether `process_madvise` of this process has worked, been refused, or not been tried.
static BATCHED: AtomicU8 = AtomicU8::new(UNTRIED);

/// Page ranges to give back to the kernel together.
pub struct Batch {
    ranges: [libc::iovec; BATCH],
    len: usize,
}

impl Batch {
    pub const fn new() -> Self {
        Self {
            ranges: [libc::iovec {
                iov_base: core::ptr::null_mut(),
                iov_len: 0,
            }; BATCH],
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_full(&self) -> bool {
        self.len == BATCH
    }

    /// Adds `[addr, addr + len)`, page-aligned; the batch must not be full.
    pub fn push(&mut self, addr: usize, len: usize) {
        debug_assert!(!self.is_full() && len > 0);
        self.ranges[self.len] = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        self.len += 1;
    }

    /// Gives every range back (`MADV_DONTNEED`: afterwards each reads as zero and holds no
    /// memory) and empties the batch.
    ///
    /// # Safety
    /// Every range must be memory of ours that nobody uses until this returns.
    pub unsafe fn discard(&mut self) {
        let ranges = &self.ranges[..self.len];
        // SAFETY: forwarded.
        let done = unsafe { discard_batched(ranges) };
        for range in &ranges[done..] {
            // SAFETY: forwarded.
            unsafe { crate::os::madvise(range.iov_base, range.iov_len, libc::MADV_DONTNEED) };
        }
        self.len = 0;
    }
}

/// Gives back as many of `ranges` as one `process_madvise` does, from the first; returns how
/// many (0 when the kernel, or a seccomp filter, does not allow it).
unsafe fn discard_batched(ranges: &[libc::iovec]) -> usize {
    if ranges.len() < 2 || BATCHED.load(Ordering::Relaxed) == REFUSED || crate::sandbox::confined()
    {
        return 0;
    }
    #[cfg(test)]
    if tests::FORCE_PLAIN.load(Ordering::Relaxed) {
        return 0;
    }
    // SAFETY: the ranges are valid iovecs of our own memory (the caller's contract).
    let advised =
        unsafe { crate::os::process_madvise(PIDFD_SELF_PROCESS, ranges, libc::MADV_DONTNEED) };
    if advised < 0 {
        // EBADF (no PIDFD_SELF), EINVAL (no MADV_DONTNEED for process_madvise), ENOSYS,
        // EPERM: the same answer every time. A batch already advised in part cannot fail here.
        if BATCHED.load(Ordering::Relaxed) == UNTRIED {
            BATCHED.store(REFUSED, Ordering::Relaxed);
            crate::log!("process_madvise refused: one madvise per range from now on");
        }
        return 0;
    }
    if BATCHED.load(Ordering::Relaxed) != WORKS {
        BATCHED.store(WORKS, Ordering::Relaxed);
    }
    // The kernel stops at the first range it could not advise, having advised those before it:
    // count whole ranges only (a range advised in part is advised again, whole, by the caller).
    let mut advised = advised as usize;
    ranges
        .iter()
        .take_while(|range| {
            let whole = advised >= range.iov_len;
            advised = advised.saturating_sub(range.iov_len);
            whole
        })
        .count()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use core::sync::atomic::AtomicBool;

    /// Makes `discard` use one `madvise` per range, as on a kernel that refuses the batch.
    pub(crate) static FORCE_PLAIN: AtomicBool = AtomicBool::new(false);

    const PAGE: usize = objtier_wire::PAGE_SIZE;

    /// `n` ranges of two pages, one page apart, all written: (mapping, its length).
    fn written(n: usize) -> (*mut u8, usize) {
        let len = n * 3 * PAGE;
        // SAFETY: a fresh private anonymous mapping, written within its length.
        unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
            core::ptr::write_bytes(p, 0xA5, len);
            (p, len)
        }
    }

    fn check_and_unmap(p: *mut u8, len: usize, n: usize) {
        for i in 0..n {
            let range = i * 3 * PAGE;
            // SAFETY: within the mapping.
            unsafe {
                assert_eq!(*p.add(range), 0, "range {i}: given back, reads as zero");
                assert_eq!(*p.add(range + 2 * PAGE - 1), 0, "range {i}: its last byte");
                assert_eq!(
                    *p.add(range + 2 * PAGE),
                    0xA5,
                    "range {i}: the page after it kept"
                );
            }
        }
        // SAFETY: our own mapping.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }

    fn discard_ranges(n: usize) {
        let (p, len) = written(n);
        let mut batch = Batch::new();
        for i in 0..n {
            if batch.is_full() {
                // SAFETY: ranges of our own mapping, used by nobody.
                unsafe { batch.discard() };
            }
            batch.push(p as usize + i * 3 * PAGE, 2 * PAGE);
        }
        // SAFETY: as above.
        unsafe { batch.discard() };
        assert_eq!(batch.len(), 0);
        check_and_unmap(p, len, n);
    }

    #[test]
    fn a_batch_gives_back_exactly_its_ranges() {
        discard_ranges(1);
        discard_ranges(BATCH * 2 + 5);
    }

    #[test]
    fn without_process_madvise_each_range_is_given_back_alone() {
        FORCE_PLAIN.store(true, Ordering::Relaxed);
        discard_ranges(BATCH + 3);
        FORCE_PLAIN.store(false, Ordering::Relaxed);
    }
}
