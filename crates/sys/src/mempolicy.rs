//! The calling thread's memory policy (`set_mempolicy(2)`), which its later threads and an
//! exec'd program inherit: objtier's own processes prefer the slowest tier, so that they never
//! take fast memory from the programs they tier, and a guided program's memory that its
//! placement names no tier for prefers the placement's fallback tier.

use std::io;

const MPOL_PREFERRED: i64 = 1;
const MPOL_PREFERRED_MANY: i64 = 5;
/// Mask words passed: 1024 nodes, every kernel's `MAX_NUMNODES`.
const MASK_WORDS: usize = 16;

/// Makes new pages of this thread (and of threads and programs it starts from now on) prefer
/// `nodes`: one node with `MPOL_PREFERRED`, several with `MPOL_PREFERRED_MANY` (5.15+), else
/// the lowest of them. Pages fall to other nodes when these are full; nothing fails for it.
pub fn prefer_nodes(nodes: &[u32]) -> io::Result<()> {
    let mut mask = [0u64; MASK_WORDS];
    for &node in nodes {
        let node = node as usize;
        if node >= MASK_WORDS * 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("node {node} is beyond the {}-node mask", MASK_WORDS * 64),
            ));
        }
        mask[node / 64] |= 1 << (node % 64);
    }
    let Some(&lowest) = nodes.iter().min() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no node to prefer",
        ));
    };
    let mut one = [0u64; MASK_WORDS];
    one[lowest as usize / 64] = 1 << (lowest % 64);
    let modes: &[(i64, &[u64; MASK_WORDS])] = if nodes.len() == 1 {
        &[(MPOL_PREFERRED, &mask)]
    } else {
        &[(MPOL_PREFERRED_MANY, &mask), (MPOL_PREFERRED, &one)]
    };
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for &(mode, mask) in modes {
        // SAFETY: the mask outlives the call and holds MASK_WORDS * 64 bits (the kernel reads
        // `maxnode - 1` of them); set_mempolicy only reads it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_set_mempolicy,
                mode,
                mask.as_ptr(),
                (MASK_WORDS * 64 + 1) as u64,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        last = io::Error::last_os_error();
    }
    Err(last)
}

/// This thread's policy mode (`MPOL_DEFAULT` 0, `MPOL_PREFERRED` 1, ...), for tests.
pub fn mode() -> io::Result<i32> {
    let mut mode: i32 = -1;
    // SAFETY: get_mempolicy writes one int to `mode`; no mask is asked for.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut i32,
            std::ptr::null_mut::<u64>(),
            0u64,
            0u64,
            0u64,
        )
    };
    if rc == 0 {
        Ok(mode)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_prefers_its_node_and_a_bad_node_is_refused() {
        // In a thread of its own: the policy stays with it.
        std::thread::spawn(|| {
            assert!(prefer_nodes(&[]).is_err());
            assert!(prefer_nodes(&[4096]).is_err());
            // Node 0 exists on every machine, NUMA or not (no CONFIG_NUMA: ENOSYS).
            match prefer_nodes(&[0]) {
                Ok(()) => assert_eq!(mode().unwrap(), MPOL_PREFERRED as i32),
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS)),
            }
        })
        .join()
        .unwrap();
    }
}
