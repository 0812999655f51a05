//! A tiny futex mutex for the library's own state.
//!
//! `std::sync::Mutex` would work until `fork()`: a child forked while another thread held it can
//! never take it again. This one can be reset by the `pthread_atfork` child handler, and it never
//! allocates, so it is safe inside `malloc`.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// The lock word comes first and the whole mutex starts and ends on a 128-byte boundary (two
/// cache lines, which x86 prefetches in pairs): the word shares its lines with the data it
/// guards, which its holder touches anyway, and never with a neighbour's. Without it the large
/// allocator's shards, one after another in a static array, put each shard's lock on the line
/// where the next shard's state began, and `cleaner` (bench/alloc) ran 2.8 % slower, `xthreads`
/// 1.5 % (the performance log, bench/alloc/results/LOG.md, 2026-11-29).
#[repr(C, align(128))]
pub struct FutexMutex<T> {
    state: AtomicU32,
    /// When the holder took it (`lockstats`).
    #[cfg(feature = "lockstats")]
    held_since: core::sync::atomic::AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `state`.
unsafe impl<T: Send> Sync for FutexMutex<T> {}

pub struct Guard<'a, T> {
    mutex: &'a FutexMutex<T>,
}

/// Measurement only (`lockstats` feature): how often the library's locks are taken, how often
/// a taker found them held, how often it slept, and cycles spent waiting and holding.
#[cfg(feature = "lockstats")]
pub mod stats {
    use core::sync::atomic::{AtomicU64, Ordering};
    pub static ACQUIRED: AtomicU64 = AtomicU64::new(0);
    pub static CONTENDED: AtomicU64 = AtomicU64::new(0);
    pub static SLEPT: AtomicU64 = AtomicU64::new(0);
    pub static WAIT_CYCLES: AtomicU64 = AtomicU64::new(0);
    pub static HOLD_CYCLES: AtomicU64 = AtomicU64::new(0);

    #[inline]
    pub fn cycles() -> u64 {
        // SAFETY: rdtsc has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn print() {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::write_stderr(format_args!(
            "lockstats: acquired {} contended {} slept {} wait_cycles {} hold_cycles {}",
            l(&ACQUIRED),
            l(&CONTENDED),
            l(&SLEPT),
            l(&WAIT_CYCLES),
            l(&HOLD_CYCLES)
        ));
    }
}

impl<T> FutexMutex<T> {
    pub const fn new(value: T) -> Self {
        Self {
            state: AtomicU32::new(UNLOCKED),
            #[cfg(feature = "lockstats")]
            held_since: core::sync::atomic::AtomicU64::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Whether some thread holds the lock now. Only as a hint, with one sure use: a thread that
    /// sees it free does not hold it itself, so it may take it without deadlocking.
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Takes the lock if it is free now; None (at once) if it is held.
    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        #[cfg(feature = "lockstats")]
        {
            stats::add(&stats::ACQUIRED, 1);
            self.held_since.store(stats::cycles(), Ordering::Relaxed);
        }
        Some(Guard { mutex: self })
    }

    pub fn lock(&self) -> Guard<'_, T> {
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            #[cfg(feature = "lockstats")]
            let t0 = stats::cycles();
            self.lock_contended();
            #[cfg(feature = "lockstats")]
            {
                stats::add(&stats::CONTENDED, 1);
                stats::add(&stats::WAIT_CYCLES, stats::cycles() - t0);
            }
        }
        #[cfg(feature = "lockstats")]
        {
            stats::add(&stats::ACQUIRED, 1);
            self.held_since.store(stats::cycles(), Ordering::Relaxed);
        }
        Guard { mutex: self }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0;
        while spins < 100 {
            if self.state.load(Ordering::Relaxed) == UNLOCKED
                && self
                    .state
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            core::hint::spin_loop();
            spins += 1;
        }
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            #[cfg(feature = "lockstats")]
            stats::add(&stats::SLEPT, 1);
            // SAFETY: futex(FUTEX_WAIT_PRIVATE) on our own atomic; spurious wake-ups are handled
            // by the loop.
            unsafe { crate::os::futex_wait(self.state.as_ptr(), CONTENDED) };
        }
    }

    fn unlock(&self) {
        #[cfg(feature = "lockstats")]
        stats::add(
            &stats::HOLD_CYCLES,
            stats::cycles().wrapping_sub(self.held_since.load(Ordering::Relaxed)),
        );
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            // SAFETY: wakes one waiter on our own atomic.
            unsafe { crate::os::futex_wake(self.state.as_ptr(), 1) };
        }
    }

    /// Forcibly marks the mutex unlocked.
    ///
    /// # Safety
    /// Only for the `pthread_atfork` child handler, where the child is single-threaded and the
    /// parent's holder (the forking thread itself, via the prepare handler) no longer runs.
    pub unsafe fn force_unlock(&self) {
        self.state.store(UNLOCKED, Ordering::Release);
    }

    /// Takes the lock without a guard (for the atfork prepare handler).
    pub fn lock_raw(&self) {
        core::mem::forget(self.lock());
    }

    /// Releases a lock taken with `lock_raw` (atfork parent handler).
    ///
    /// # Safety
    /// The calling thread must hold the lock via `lock_raw`.
    pub unsafe fn unlock_raw(&self) {
        self.unlock();
    }
}

impl<T> core::ops::Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves we hold the lock.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T> core::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves we hold the lock exclusively.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}
