//! Where memory is: tier discovery from sysfs, and the two NUMA syscalls tierbench needs.
//!
//! The fast set comes from `/sys/devices/virtual/memory_tiering`, not from node distances or
//! from "the node with CPUs": that directory is the kernel's own ranking (built from HMAT/CXL
//! performance data), and it is the same ranking objtier's daemon and the kernel's demotion path
//! act on. Measuring against any other notion of "fast" would grade objtier on a different test
//! than the one it takes. Lower `memory_tier<N>` means faster (N is an abstract distance).
//!
//! The readers take a sysfs root so unit tests can feed captured kernel text from a temp dir.
//! The syscalls are called raw (`libc::syscall`) rather than through libnuma, so tierbench has
//! no C dependency and no allocator of its own besides the C `malloc` it is measuring.

use std::fs;
use std::io;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// `MPOL_DEFAULT` from `<linux/mempolicy.h>` (not exported by the libc crate).
const MPOL_DEFAULT: libc::c_int = 0;
/// `MPOL_PREFERRED` from `<linux/mempolicy.h>`.
const MPOL_PREFERRED: libc::c_int = 1;
/// Node mask width passed to `set_mempolicy`; 1024 covers every kernel's `MAX_NUMNODES`.
const NODE_MASK_BITS: usize = 1024;
/// Pages per `move_pages` call: keeps the kernel's per-call work (and our buffers) bounded.
const MOVE_PAGES_BATCH: usize = 4096;

/// The memory tiers as the kernel ranks them, and what tierbench derives from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Nodes of the fastest tier: an access to a page on one of these counts as "fast".
    pub fast_nodes: Vec<u32>,
    /// First node of the slowest tier: where `--first-touch slow` places objects.
    pub slow_node: u32,
}

impl Topology {
    /// Reads the tiers under `sysfs_root` (normally `/sys`).
    ///
    /// With no `memory_tiering` directory or only one tier, every online node is fast and the
    /// slow node is the first of them (node 0 on any ordinary machine): there is no slower tier.
    pub fn discover(sysfs_root: &Path) -> Result<Topology> {
        let tiers = read_memory_tiers(sysfs_root)?;
        if tiers.len() >= 2 {
            let fast_nodes = tiers[0].1.clone();
            let slow_node = tiers[tiers.len() - 1].1[0];
            return Ok(Topology {
                fast_nodes,
                slow_node,
            });
        }
        let online_path = sysfs_root.join("devices/system/node/online");
        let fast_nodes = match fs::read_to_string(&online_path) {
            Ok(text) => parse_nodelist(&text)
                .with_context(|| format!("cannot parse {}", online_path.display()))?,
            // A kernel without CONFIG_NUMA has no node directory: it has exactly node 0.
            Err(err) if err.kind() == io::ErrorKind::NotFound => vec![0],
            Err(err) => return Err(err).context(format!("cannot read {}", online_path.display())),
        };
        let slow_node = *fast_nodes.first().unwrap_or(&0);
        Ok(Topology {
            fast_nodes,
            slow_node,
        })
    }

    pub fn is_fast(&self, node: i32) -> bool {
        node >= 0 && self.fast_nodes.contains(&(node as u32))
    }
}

/// Returns `(tier id, nodes)` for every non-empty memory tier, fastest (lowest id) first.
fn read_memory_tiers(sysfs_root: &Path) -> Result<Vec<(u32, Vec<u32>)>> {
    let tiering_dir = sysfs_root.join("devices/virtual/memory_tiering");
    let entries = match fs::read_dir(&tiering_dir) {
        Ok(entries) => entries,
        // Kernels before 6.1 (or without NUMA) have no tiering directory.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).context(format!("cannot read {}", tiering_dir.display())),
    };
    let mut tiers = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", tiering_dir.display()))?;
        let name = entry.file_name();
        let Some(tier_id) = name
            .to_str()
            .and_then(|name| name.strip_prefix("memory_tier"))
            .and_then(|id| id.parse::<u32>().ok())
        else {
            continue; // `power`, `uevent`, ...
        };
        let nodelist_path = entry.path().join("nodelist");
        let text = fs::read_to_string(&nodelist_path)
            .with_context(|| format!("cannot read {}", nodelist_path.display()))?;
        let nodes = parse_nodelist(&text)
            .with_context(|| format!("cannot parse {}", nodelist_path.display()))?;
        if !nodes.is_empty() {
            tiers.push((tier_id, nodes));
        }
    }
    // Numeric, not lexical: memory_tier100 is slower than memory_tier22.
    tiers.sort_by_key(|(tier_id, _)| *tier_id);
    Ok(tiers)
}

/// Parses a kernel node list such as `0`, `0-1` or `0,2-3` (trailing newline allowed).
pub fn parse_nodelist(text: &str) -> Result<Vec<u32>> {
    let mut nodes = Vec::new();
    for part in text.trim().split(',').filter(|part| !part.is_empty()) {
        let parse_node = |s: &str| {
            s.trim()
                .parse::<u32>()
                .with_context(|| format!("bad node number {s:?} in node list {text:?}"))
        };
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (parse_node(first)?, parse_node(last)?);
                if first > last {
                    bail!("bad node range {part:?} in node list {text:?}");
                }
                nodes.extend(first..=last);
            }
            None => nodes.push(parse_node(part)?),
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    Ok(nodes)
}

/// Sets this thread's policy to prefer `node` for new pages (`None`: back to `MPOL_DEFAULT`).
pub fn set_preferred_node(node: Option<u32>) -> Result<()> {
    let mut mask = [0 as libc::c_ulong; NODE_MASK_BITS / libc::c_ulong::BITS as usize];
    let (mode, mask_ptr, max_node) = match node {
        Some(node) => {
            let node = node as usize;
            if node >= NODE_MASK_BITS {
                bail!("node {node} is beyond the {NODE_MASK_BITS}-node mask tierbench passes");
            }
            let word_bits = libc::c_ulong::BITS as usize;
            mask[node / word_bits] |= 1 << (node % word_bits);
            // The kernel reads `maxnode - 1` bits (a historical off-by-one every caller follows).
            (MPOL_PREFERRED, mask.as_ptr(), NODE_MASK_BITS + 1)
        }
        None => (MPOL_DEFAULT, std::ptr::null(), 0),
    };
    // SAFETY: `mask_ptr` is null or points at `mask`, which holds `max_node - 1` bits and
    // outlives the call; set_mempolicy only reads it.
    let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, mask_ptr, max_node) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOSYS) {
            bail!(
                "set_mempolicy(2) is not available: this kernel lacks CONFIG_NUMA; \
                 run without --first-touch slow"
            );
        }
        return Err(err).context(format!("set_mempolicy(mode {mode}, node {node:?}) failed"));
    }
    Ok(())
}

/// Asks the kernel which node holds each page in `pages` (page-aligned addresses in this process).
///
/// Fills `status` with a node id, or a negative errno (`-ENOENT`: not present, e.g. never touched
/// or swapped out). Nothing moves: a NULL node list turns `move_pages(2)` into a query.
pub fn query_page_nodes(pages: &[usize], status: &mut Vec<i32>) -> Result<()> {
    status.clear();
    status.resize(pages.len(), 0);
    for (page_batch, status_batch) in pages
        .chunks(MOVE_PAGES_BATCH)
        .zip(status.chunks_mut(MOVE_PAGES_BATCH))
    {
        // SAFETY: pid 0 is this process; `page_batch` and `status_batch` have the same length,
        // which is the count passed; the kernel reads the first and writes the second, and a
        // NULL node list means "report, do not move", so no memory we hold changes.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0 as libc::pid_t,
                page_batch.len() as libc::c_ulong,
                page_batch.as_ptr(),
                std::ptr::null::<libc::c_int>(),
                status_batch.as_mut_ptr(),
                0 as libc::c_int,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOSYS) {
                // Under `objtier profile --source emulate`, QEMU has no move_pages: the profile
                // is what is measured, so the pages are reported as located nowhere.
                if std::env::var_os("OBJTIER_EMULATE").is_some() {
                    status_batch.fill(-libc::ENOENT);
                    continue;
                }
                bail!(
                    "move_pages(2) is not available: this kernel lacks CONFIG_NUMA or \
                     CONFIG_MIGRATION, so tierbench cannot see where its pages are; \
                     run it on a NUMA-enabled kernel"
                );
            }
            return Err(err).context("move_pages(2) status query on our own pages failed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodelist_forms() {
        assert_eq!(parse_nodelist("0\n").unwrap(), vec![0]);
        assert_eq!(parse_nodelist("0-1").unwrap(), vec![0, 1]);
        assert_eq!(parse_nodelist("0,2-3\n").unwrap(), vec![0, 2, 3]);
        assert_eq!(parse_nodelist("\n").unwrap(), Vec::<u32>::new());
        assert!(parse_nodelist("a").is_err());
        assert!(parse_nodelist("3-1").is_err());
    }

    fn write(root: &Path, relative: &str, text: &str) {
        let path = root.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn two_tiers_from_hmat() {
        // As seen in the QEMU HMAT guest (see shared TESTBENCH.md).
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0\n",
        );
        write(
            root.path(),
            "devices/virtual/memory_tiering/memory_tier67/nodelist",
            "1\n",
        );
        write(root.path(), "devices/virtual/memory_tiering/uevent", "");
        write(root.path(), "devices/system/node/online", "0-1\n");
        let topology = Topology::discover(root.path()).unwrap();
        assert_eq!(
            topology,
            Topology {
                fast_nodes: vec![0],
                slow_node: 1
            }
        );
        assert!(topology.is_fast(0) && !topology.is_fast(1) && !topology.is_fast(-libc::ENOENT));
    }

    #[test]
    fn tiers_sort_numerically() {
        let root = tempfile::tempdir().unwrap();
        let tiering = "devices/virtual/memory_tiering";
        write(
            root.path(),
            &format!("{tiering}/memory_tier100/nodelist"),
            "3\n",
        );
        write(
            root.path(),
            &format!("{tiering}/memory_tier22/nodelist"),
            "2\n",
        );
        write(
            root.path(),
            &format!("{tiering}/memory_tier4/nodelist"),
            "0-1\n",
        );
        let topology = Topology::discover(root.path()).unwrap();
        assert_eq!(
            topology,
            Topology {
                fast_nodes: vec![0, 1],
                slow_node: 3
            }
        );
    }

    #[test]
    fn one_tier_means_all_online_nodes_are_fast() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0-1\n",
        );
        write(root.path(), "devices/system/node/online", "0-1\n");
        let topology = Topology::discover(root.path()).unwrap();
        assert_eq!(
            topology,
            Topology {
                fast_nodes: vec![0, 1],
                slow_node: 0
            }
        );
    }

    #[test]
    fn no_tiering_and_no_numa() {
        let root = tempfile::tempdir().unwrap();
        let topology = Topology::discover(root.path()).unwrap();
        assert_eq!(
            topology,
            Topology {
                fast_nodes: vec![0],
                slow_node: 0
            }
        );
    }

    #[test]
    fn query_own_page() {
        // Runs anywhere move_pages exists; on a kernel without it the error must say so.
        let page = vec![1u8; 3 * 4096];
        let page_addr = (page.as_ptr() as usize + 4095) & !4095;
        let mut status = Vec::new();
        match query_page_nodes(&[page_addr], &mut status) {
            Ok(()) => assert!(
                status[0] >= 0,
                "a touched page has a node, got {}",
                status[0]
            ),
            Err(err) => assert!(err.to_string().contains("not available"), "{err:#}"),
        }
    }
}
