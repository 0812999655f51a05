//! The C API of `include/objtier.h`: what a program can tell objtier about its own memory.
//!
//! Each call is one event into the ring (or, for `objtier_tier_of`, one `move_pages` query and a
//! look at the tiers the daemon described in the control area): nothing allocates or blocks, so
//! the functions are safe to call from any thread at any time, including signal handlers.

use crate::report;
use core::ffi::{c_int, c_uint, c_void};
use objtier_wire::{advice, EventKind, PAGE_SIZE};

/// Priorities outside this range are refused (they would only be typos).
const PRIORITY_RANGE: core::ops::RangeInclusive<c_int> = -1000..=1000;

fn fail(errno: c_int) -> c_int {
    crate::set_errno(errno);
    -1
}

/// Attaches now if not attached yet (attaching is otherwise lazy, on tracked allocations), at
/// most as often as the allocation path would try.
fn attached() -> bool {
    if report::ring().is_none() {
        report::tick(report::now_ns());
    }
    report::ring().is_some()
}

/// `int objtier_set_priority(int priority)`.
#[no_mangle]
pub extern "C" fn objtier_set_priority(priority: c_int) -> c_int {
    if !PRIORITY_RANGE.contains(&priority) {
        return fail(libc::EINVAL);
    }
    attached();
    report::set_priority(priority);
    0
}

/// `int objtier_advise(void *addr, size_t len, unsigned hints)`.
#[no_mangle]
pub extern "C" fn objtier_advise(addr: *mut c_void, len: usize, hints: c_uint) -> c_int {
    let start = addr as usize;
    if hints & !advice::ALL != 0 || len == 0 || start.checked_add(len).is_none() {
        return fail(libc::EINVAL);
    }
    let first = start - start % PAGE_SIZE;
    let Some(end) = (start + len).checked_next_multiple_of(PAGE_SIZE) else {
        return fail(libc::EINVAL);
    };
    if !attached() {
        return fail(libc::ENOTCONN);
    }
    if !report::push_raw(
        EventKind::Advise,
        hints,
        first as u64,
        (end - first) as u64,
        0,
    ) {
        return fail(libc::EAGAIN);
    }
    0
}

/// `int objtier_phase(unsigned phase)`.
#[no_mangle]
pub extern "C" fn objtier_phase(phase: c_uint) -> c_int {
    if !attached() {
        return fail(libc::ENOTCONN);
    }
    if !report::push_raw(EventKind::Phase, 0, phase as u64, 0, 0) {
        return fail(libc::EAGAIN);
    }
    0
}

/// `int objtier_tier_of(const void *addr)`.
#[no_mangle]
pub extern "C" fn objtier_tier_of(addr: *const c_void) -> c_int {
    attached();
    let Some(control) = report::control().filter(|c| c.tier_nodes(0).is_some()) else {
        return fail(libc::ENOTCONN);
    };
    if crate::sandbox::confined() {
        // Its seccomp filter may refuse move_pages, and kill the program for asking.
        return fail(libc::EPERM);
    }
    let node = match node_of(addr) {
        Ok(node) => node,
        // move_pages itself failed (e.g. ENOSYS without NUMA support): its errno is set.
        Err(None) => return -1,
        Err(Some(errno)) => return fail(errno),
    };
    match control.tier_of_node(node) {
        Some(tier) => tier as c_int,
        None => fail(libc::ENOENT),
    }
}

/// The NUMA node of the page holding `addr`, by a query-only `move_pages`. Err(Some(ENOENT))
/// for a page not present, Err(Some(EFAULT)) for one that cannot be asked about, Err(None)
/// when the call itself failed (errno set).
pub(crate) fn node_of(addr: *const c_void) -> Result<u32, Option<c_int>> {
    let page = (addr as usize - addr as usize % PAGE_SIZE) as *const c_void;
    let mut status: c_int = 0;
    // SAFETY: a query-only move_pages (nodes = NULL) of one page of our own process; the page
    // and status arrays are locals that outlive the call.
    let rc = unsafe { crate::os::move_pages_query(page, &mut status) };
    match (rc, status) {
        (rc, _) if rc < 0 => Err(None),
        (_, status) if status == -libc::ENOENT => Err(Some(libc::ENOENT)),
        (_, status) if status < 0 => Err(Some(libc::EFAULT)),
        (_, node) => Ok(node as u32),
    }
}
