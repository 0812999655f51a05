//! How chunks and the allocator's tables are mapped: aligned anonymous memory (with or without
//! slack for the alignment), kept off transparent huge pages where it is written sparsely, and
//! bound to a tier's nodes. Built on the library's system calls (`crate::os`).

use super::*;

pub(super) const MPOL_PREFERRED: i64 = 1;
pub(super) const MPOL_PREFERRED_MANY: i64 = 5;

/// Binds `[base, base + bytes)` to prefer the nodes in `nodes`: the node itself
/// (`MPOL_PREFERRED`) when it is one, all of them where the kernel has `MPOL_PREFERRED_MANY`
/// (5.15+) when they are several, else the lowest one; `nodes` 0 gives the range back to the
/// default policy. A failure leaves the range as it was (its objects start wherever first touch
/// or the old policy puts them, and the daemon moves them later).
///
/// One node is bound with `MPOL_PREFERRED` because of huge pages: under it a fault that finds
/// no free 2 MiB block on the node takes base pages there, where `MPOL_PREFERRED_MANY` takes
/// the huge page from another node at once (without reclaim or compaction on the preferred
/// ones): on a fragmented fast node, objects placed fast were born slow in 2 MiB steps.
pub(crate) fn bind_preferred(base: usize, bytes: usize, nodes: u64) {
    if crate::sandbox::confined() {
        return;
    }
    if nodes == 0 {
        // SAFETY: mbind with MPOL_DEFAULT and no mask, on a range we own.
        unsafe { crate::os::mbind(base, bytes, 0, &[], 0) };
        return;
    }
    let mask = [nodes, 0u64];
    let lowest = [1u64 << nodes.trailing_zeros(), 0u64];
    let modes: &[(i64, &[u64; 2])] = if nodes.is_power_of_two() {
        &[(MPOL_PREFERRED, &mask)]
    } else {
        &[(MPOL_PREFERRED_MANY, &mask), (MPOL_PREFERRED, &lowest)]
    };
    for &(mode, mask) in modes {
        // SAFETY: mbind on a range we own; the mask outlives the call and holds maxnode bits.
        let rc = unsafe { crate::os::mbind(base, bytes, mode, mask, (mask.len() * 64) as u64) };
        if rc == 0 {
            return;
        }
    }
}

/// Maps `bytes` of private anonymous memory; `accounted` leaves out MAP_NORESERVE.
pub(super) fn map_anonymous(bytes: usize, accounted: bool) -> *mut u8 {
    map_anonymous_at(0, bytes, accounted)
}

/// `map_anonymous` at `addr` exactly, if nothing is mapped there (`MAP_FIXED_NOREPLACE`; a
/// kernel before 4.17 takes it as a hint, so the caller checks where the mapping landed); 0:
/// anywhere.
pub(super) fn map_anonymous_at(addr: usize, bytes: usize, accounted: bool) -> *mut u8 {
    let noreserve = if accounted { 0 } else { libc::MAP_NORESERVE };
    let fixed = if addr != 0 {
        libc::MAP_FIXED_NOREPLACE
    } else {
        0
    };
    // SAFETY: a fresh private anonymous mapping; MAP_FIXED_NOREPLACE never replaces one.
    let p = unsafe {
        crate::os::mmap(
            addr as *mut libc::c_void,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | noreserve | fixed,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        core::ptr::null_mut()
    } else {
        p as *mut u8
    }
}

/// Maps `bytes` of memory for the allocator's own tables, without transparent huge pages: like
/// jemalloc's metadata (`metadata_thp:disabled`), they are written sparsely, and under
/// `transparent_hugepage=always` each first write would make 2 MiB resident. That memory is
/// taken where first touch puts it, in the fast tier, before the program's own data.
pub(super) fn map_metadata(bytes: usize) -> *mut u8 {
    let p = map_anonymous(bytes, false);
    if !p.is_null() {
        keep_off_huge_pages(p as usize, bytes);
    }
    p
}

/// Advises `[start, start + len)`, memory the library mapped or mimalloc reserved, against
/// transparent huge pages (`MADV_NOHUGEPAGE`), for memory that would be written sparsely: under
/// `transparent_hugepage=always` each first write there would make 2 MiB resident, in the fast
/// tier, where first touch puts it. EINVAL (a kernel without THP) is fine: there are no huge
/// pages to avoid.
pub(crate) fn keep_off_huge_pages(start: usize, len: usize) {
    // SAFETY: the advice changes which page size backs the range, never its contents.
    unsafe { crate::os::madvise(start as *mut libc::c_void, len, libc::MADV_NOHUGEPAGE) };
}

/// Maps `bytes` (a multiple of CHUNK_BYTES) aligned to CHUNK_BYTES, trimming the excess.
pub(super) fn map_aligned(bytes: usize, accounted: bool) -> Option<usize> {
    let padded = bytes.checked_add(CHUNK_BYTES)?;
    let raw = map_anonymous(padded, accounted) as usize;
    let base = if raw == 0 {
        // The slack refused (an address-space limit): without it.
        map_aligned_without_slack(bytes, accounted)?
    } else {
        let base = raw.next_multiple_of(CHUNK_BYTES);
        // SAFETY: both trims are inside the mapping we just created and own.
        unsafe {
            if base > raw {
                crate::os::munmap(raw as *mut libc::c_void, base - raw);
            }
            let end = base + bytes;
            if raw + padded > end {
                crate::os::munmap(end as *mut libc::c_void, raw + padded - end);
            }
        }
        base
    };
    if (base + bytes) >> CHUNK_SHIFT > GRANULES {
        // SAFETY: unmapping our own mapping, outside the range the owner table covers.
        unsafe { crate::os::munmap(base as *mut libc::c_void, bytes) };
        return None;
    }
    Some(base)
}

/// Maps `bytes` aligned to CHUNK_BYTES in as much address space as it covers, for a process
/// whose limit (`ulimit -v`) refused the slack `map_aligned` asks for: a process under a limit of
/// a few GiB can then have two or three chunks instead of one. Where the kernel would place
/// `bytes` is free, and so, usually, is the address space below it (the mmap area grows down):
/// the range from that place rounded down to the alignment is asked for exactly.
pub(super) fn map_aligned_without_slack(bytes: usize, accounted: bool) -> Option<usize> {
    let probe = map_anonymous(bytes, accounted) as usize;
    if probe == 0 {
        return None;
    }
    if probe.is_multiple_of(CHUNK_BYTES) {
        return Some(probe);
    }
    // SAFETY: unmapping the probe we just mapped.
    unsafe { crate::os::munmap(probe as *mut libc::c_void, bytes) };
    let base = probe - probe % CHUNK_BYTES;
    let p = map_anonymous_at(base, bytes, accounted) as usize;
    if p == base {
        return Some(base);
    }
    if p != 0 {
        // An old kernel took the address as a hint and mapped elsewhere.
        // SAFETY: unmapping the mapping we just made.
        unsafe { crate::os::munmap(p as *mut libc::c_void, bytes) };
    }
    None
}
