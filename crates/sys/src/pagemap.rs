//! Locating pages through `/proc/PID/pagemap`: the page frame each page is in, and the node
//! that frame belongs to.
//!
//! `move_pages(2)` with no target answers "which node" directly, at about 200 ns a page on the
//! development machine. Reading a process's page table entries from its pagemap costs 35-50 ns
//! a page; the node then comes from the frame number and the memory blocks each node holds
//! (`/sys/devices/system/node/nodeN/memoryM`). Frame numbers are shown only to a reader with
//! `CAP_SYS_ADMIN` (others read zeros), and memory blocks exist with `CONFIG_MEMORY_HOTPLUG`;
//! where either is missing, [`crate::pages::LinuxPageMover`] locates with `move_pages` alone.
//!
//! A page that was read but never written maps the kernel's shared zero page (or, in a huge
//! page, the huge zero page): pagemap shows it present, in the zero page's frame, where
//! `move_pages` answers `-EFAULT` and cannot move it. Such pages hold no memory of the process,
//! so [`locate`] answers as `move_pages` does once it knows those frames ([`ZeroFrames`]).

use crate::pages::PageStatus;
use crate::PAGE_SIZE;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Entries read at most per `pread`, and the gap (in pages) between two asked pages up to
/// which one read covers both: reading the entries between (about 40 ns each for present
/// pages) is cheaper than another system call (about 700 ns).
const MAX_ENTRIES: usize = 1 << 16;
const MAX_GAP_PAGES: u64 = 16;

const PRESENT: u64 = 1 << 63;
/// `node_of_block` of a block listed under more than one node.
const SHARED: i32 = -2;
const PFN_MASK: u64 = (1 << 55) - 1;

/// Which node each memory block (a range of page frames) belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameNodes {
    /// log2 of the page frames in a block.
    frames_per_block_shift: u32,
    /// Node of each block number; -1 where no node lists the block, [`SHARED`] where several
    /// do.
    node_of_block: Vec<i32>,
    zero: ZeroFrames,
}

/// The frames of the kernel's zero pages, which [`locate`] reports as `-EFAULT`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroFrames {
    /// The zero page's frame (static: it never moves).
    pub page: Option<u64>,
    /// The huge zero page's first frame and its frame count. The kernel may free and
    /// reallocate it once no process maps it; a process that mapped it keeps it until it exits,
    /// so the frames stay valid while the prober lives.
    pub huge: Option<(u64, u64)>,
}

impl ZeroFrames {
    pub fn contains(&self, pfn: u64) -> bool {
        self.page == Some(pfn)
            || self
                .huge
                .is_some_and(|(first, count)| (first..first + count).contains(&pfn))
    }
}

impl FrameNodes {
    /// Reads the memory block size and each node's blocks under `sys_root`
    /// (`/sys/devices/system/memory/block_size_bytes`, `/sys/devices/system/node/nodeN/memoryM`).
    /// None when the kernel does not show them.
    pub fn discover(sys_root: &Path) -> Option<FrameNodes> {
        let text = std::fs::read_to_string(sys_root.join("devices/system/memory/block_size_bytes"))
            .ok()?;
        let block_bytes = u64::from_str_radix(text.trim(), 16).ok()?;
        if !block_bytes.is_power_of_two() || block_bytes < PAGE_SIZE as u64 {
            return None;
        }
        let mut node_of_block: Vec<i32> = Vec::new();
        for entry in std::fs::read_dir(sys_root.join("devices/system/node"))
            .ok()?
            .flatten()
        {
            let name = entry.file_name();
            let Some(node) = name.to_str().and_then(|n| n.strip_prefix("node")) else {
                continue;
            };
            let Ok(node) = node.parse::<i32>() else {
                continue;
            };
            for block in std::fs::read_dir(entry.path()).ok()?.flatten() {
                let name = block.file_name();
                let Some(Ok(block)) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("memory"))
                    .map(str::parse::<usize>)
                else {
                    continue;
                };
                if block >= node_of_block.len() {
                    node_of_block.resize(block + 1, -1);
                }
                // A block holding frames of two nodes (a node whose size is not a multiple
                // of the block size, as in a VM with a 126 MiB node) is listed under both:
                // its frames are left to move_pages.
                node_of_block[block] = match node_of_block[block] {
                    -1 => node,
                    n if n == node => node,
                    _ => SHARED,
                };
            }
        }
        if node_of_block.iter().all(|&n| n < 0) {
            return None;
        }
        Some(FrameNodes {
            frames_per_block_shift: (block_bytes / PAGE_SIZE as u64).trailing_zeros(),
            node_of_block,
            zero: ZeroFrames::default(),
        })
    }

    /// These frames, reported as zero pages.
    pub fn with_zero_frames(mut self, zero: ZeroFrames) -> FrameNodes {
        self.zero = zero;
        self
    }

    pub fn zero_frames(&self) -> ZeroFrames {
        self.zero
    }

    /// The node of page frame `pfn`, if a node lists its block.
    pub fn node_of(&self, pfn: u64) -> Option<i32> {
        let block = (pfn >> self.frames_per_block_shift) as usize;
        self.node_of_block.get(block).copied().filter(|&n| n >= 0)
    }
}

/// What reading a pagemap gave, beyond the statuses written.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Located {
    /// Indices of pages present in a frame no node lists (memory added since discovery):
    /// their status is left as it was, for the caller to ask `move_pages`.
    pub unknown: Vec<usize>,
    /// A present page showed frame 0: the reader may not see frame numbers.
    pub hidden_frames: bool,
}

/// Fills `status` with the node of each page in `pages` (page-aligned addresses) from
/// `pagemap` (a process's `/proc/PID/pagemap`, or anything laid out like one), `-ENOENT` for a
/// page not present, or `-EFAULT` for one that maps a zero page (what `move_pages` answers).
/// Pages close to each other (ascending, gaps of at most 16 pages) are read in one `pread`.
pub fn locate(
    pagemap: &impl FileExt,
    frames: &FrameNodes,
    pages: &[u64],
    status: &mut [PageStatus],
    scratch: &mut Vec<u64>,
) -> std::io::Result<Located> {
    debug_assert_eq!(pages.len(), status.len());
    let mut located = Located::default();
    let page_size = PAGE_SIZE as u64;
    let mut i = 0;
    while i < pages.len() {
        // The run of pages [i, j) one read covers.
        let first = pages[i] / page_size;
        let mut last = first;
        let mut j = i + 1;
        while j < pages.len() {
            let p = pages[j] / page_size;
            if p < last || p - last > MAX_GAP_PAGES || p - first >= MAX_ENTRIES as u64 {
                break;
            }
            last = p;
            j += 1;
        }
        let entries = (last - first + 1) as usize;
        scratch.clear();
        scratch.resize(entries, 0);
        // SAFETY: a u64 slice viewed as bytes: same memory, no invalid values.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr() as *mut u8, entries * 8) };
        let mut read = 0;
        while read < bytes.len() {
            match pagemap.read_at(&mut bytes[read..], first * 8 + read as u64) {
                Ok(0) => break, // beyond the address space: not present
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        for k in i..j {
            let entry = scratch[(pages[k] / page_size - first) as usize];
            if entry & PRESENT == 0 {
                status[k] = -libc::ENOENT;
                continue;
            }
            let pfn = entry & PFN_MASK;
            if frames.zero.contains(pfn) {
                status[k] = -libc::EFAULT;
                continue;
            }
            if pfn == 0 {
                located.hidden_frames = true;
                located.unknown.push(k);
                continue;
            }
            match frames.node_of(pfn) {
                Some(node) => status[k] = node,
                None => located.unknown.push(k),
            }
        }
        i = j;
    }
    Ok(located)
}

/// Finds the zero pages' frames by mapping them into this process: a page read but never
/// written, and a huge page likewise where transparent huge pages are enabled (its absence is
/// not an error: `huge` stays None). The mappings are kept for the life of the process, which
/// keeps the huge zero page where it was found. None of either when frames do not show.
pub fn probe_zero_frames() -> ZeroFrames {
    let Ok(pagemap) = open(std::process::id()) else {
        return ZeroFrames::default();
    };
    let huge_bytes = 2 << 20;
    let frames_per_huge = huge_bytes as u64 / PAGE_SIZE as u64;
    // A fresh private anonymous read-only mapping of `len` bytes, never unmapped.
    let map = |len: usize| -> Option<u64> {
        // SAFETY: a new mapping, placed by the kernel; only ever read.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(p as u64)
    };
    let frame_of = |addr: u64| -> Option<u64> {
        // SAFETY: `addr` is inside a mapping made by `map`, readable.
        unsafe { std::ptr::read_volatile(addr as *const u8) };
        frame_at(&pagemap, addr)
    };
    // One page: too small a mapping for a huge page, whatever the THP mode.
    let page = map(PAGE_SIZE).and_then(frame_of);
    // Two huge pages of address space hold one aligned huge page.
    let huge = map(2 * huge_bytes)
        .map(|base| base.next_multiple_of(huge_bytes as u64))
        .filter(|&aligned| {
            // SAFETY: [aligned, aligned + huge) lies inside the mapping.
            let rc = unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    huge_bytes,
                    libc::MADV_HUGEPAGE,
                )
            };
            rc == 0
        })
        .and_then(|aligned| Some((frame_of(aligned)?, frame_of(aligned + PAGE_SIZE as u64)?)))
        // A huge zero page: its first frame aligned to its size, the next page in the next
        // frame; a small zero page there (THP off or out of huge pages) is not one.
        .filter(|&(first, second)| {
            Some(first) != page && first % frames_per_huge == 0 && second == first + 1
        })
        .map(|(first, _)| (first, frames_per_huge));
    ZeroFrames { page, huge }
}

/// The frame of the page at `addr` in `pagemap`, if it is present and frames show.
fn frame_at(pagemap: &impl FileExt, addr: u64) -> Option<u64> {
    let mut entry = [0u8; 8];
    pagemap
        .read_exact_at(&mut entry, addr / PAGE_SIZE as u64 * 8)
        .ok()?;
    let entry = u64::from_le_bytes(entry);
    (entry & PRESENT != 0 && entry & PFN_MASK != 0).then_some(entry & PFN_MASK)
}

/// Opens `/proc/PID/pagemap`.
pub fn open(pid: u32) -> std::io::Result<File> {
    File::open(format!("/proc/{pid}/pagemap"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// 128 MiB blocks (32768 frames): blocks 0-1 on node 0, 2 on node 1, 4 on node 0, 5 on both
    /// (a node ends, and the next begins, inside it).
    fn two_nodes() -> (tempfile::TempDir, FrameNodes) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "devices/system/memory/block_size_bytes", "8000000\n");
        for (node, block) in [(0, 0), (0, 1), (1, 2), (0, 4), (0, 5), (1, 5)] {
            std::fs::create_dir_all(
                root.join(format!("devices/system/node/node{node}/memory{block}")),
            )
            .unwrap();
        }
        write(root, "devices/system/node/node0/meminfo", "");
        write(root, "devices/system/node/online", "0-1\n");
        let frames = FrameNodes::discover(root).unwrap();
        (dir, frames)
    }

    #[test]
    fn frames_map_to_the_nodes_listing_their_blocks() {
        let (_dir, frames) = two_nodes();
        assert_eq!(frames.frames_per_block_shift, 15);
        assert_eq!(frames.node_of(0), Some(0));
        assert_eq!(frames.node_of(2 * 32768 - 1), Some(0));
        assert_eq!(frames.node_of(2 * 32768), Some(1));
        assert_eq!(frames.node_of(3 * 32768), None, "no node lists block 3");
        assert_eq!(frames.node_of(4 * 32768 + 5), Some(0));
        assert_eq!(
            frames.node_of(5 * 32768 + 5),
            None,
            "two nodes list block 5"
        );
        assert_eq!(frames.node_of(1 << 40), None);
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(FrameNodes::discover(empty.path()), None);
    }

    /// A pagemap laid out in a file: page p's entry at byte 8p.
    #[test]
    fn locate_reads_runs_and_maps_frames_to_nodes() {
        let (_dir, frames) = two_nodes();
        let file = tempfile::tempfile().unwrap();
        let base = 0x7f00_0000_0000u64 / PAGE_SIZE as u64;
        let entry = |pfn: u64| PRESENT | pfn;
        // page offset from base -> entry
        let table = [
            (0u64, entry(10)),            // node 0
            (1, entry(2 * 32768 + 7)),    // node 1
            (2, 0),                       // not present
            (3, 1 << 62),                 // swapped: not present
            (100, entry(3 * 32768)),      // block 3: unknown
            (5000, entry(4 * 32768 + 1)), // node 0, far away: its own read
            (5001, PRESENT),              // frame 0: hidden
        ];
        for (offset, e) in table {
            file.write_at(&e.to_le_bytes(), (base + offset) * 8)
                .unwrap();
        }
        let pages: Vec<u64> = table
            .iter()
            .map(|(o, _)| (base + o) * PAGE_SIZE as u64)
            .collect();
        let mut status = vec![i32::MIN; pages.len()];
        let mut scratch = Vec::new();
        let located = locate(&file, &frames, &pages, &mut status, &mut scratch).unwrap();
        assert_eq!(&status[..4], &[0, 1, -libc::ENOENT, -libc::ENOENT]);
        assert_eq!(status[5], 0);
        assert_eq!(
            (status[4], status[6]),
            (i32::MIN, i32::MIN),
            "left for the caller"
        );
        assert_eq!(
            located,
            Located {
                unknown: vec![4, 6],
                hidden_frames: true
            }
        );
        // Pages beyond the end of the file (the address space) are not present; out of order
        // pages start a new read.
        let pages = [
            (base + 9_000_000) * PAGE_SIZE as u64,
            base * PAGE_SIZE as u64,
        ];
        let mut status = [i32::MIN; 2];
        locate(&file, &frames, &pages, &mut status, &mut scratch).unwrap();
        assert_eq!(status, [-libc::ENOENT, 0]);
    }

    /// Pages mapping a zero page are answered as move_pages answers them.
    #[test]
    fn zero_pages_are_efault() {
        let (_dir, frames) = two_nodes();
        let frames = frames.with_zero_frames(ZeroFrames {
            page: Some(11),
            huge: Some((4 * 32768, 512)),
        });
        let file = tempfile::tempfile().unwrap();
        let base = 0x7f00_0000_0000u64 / PAGE_SIZE as u64;
        for (offset, pfn) in [
            (0u64, 10u64),
            (1, 11),
            (2, 4 * 32768 + 511),
            (3, 4 * 32768 + 512),
        ] {
            file.write_at(&(PRESENT | pfn).to_le_bytes(), (base + offset) * 8)
                .unwrap();
        }
        let pages: Vec<u64> = (0..4).map(|o| (base + o) * PAGE_SIZE as u64).collect();
        let mut status = [i32::MIN; 4];
        locate(&file, &frames, &pages, &mut status, &mut Vec::new()).unwrap();
        assert_eq!(status, [0, -libc::EFAULT, -libc::EFAULT, 0]);
    }

    /// On this machine: the probe finds the zero page where frames show (root), and a page
    /// read in a fresh mapping is then located as move_pages locates it.
    #[test]
    fn probed_zero_page_matches_move_pages() {
        use crate::pages::{LinuxPageMover, PageMover};
        let zero = probe_zero_frames();
        let Some(page) = zero.page else {
            eprintln!("frame numbers do not show here (not root): nothing to check");
            return;
        };
        assert_ne!(page, 0);
        // A calloc-like read-only page: map one and read it.
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_SIZE,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: readable, inside the mapping.
        unsafe { std::ptr::read_volatile(p as *const u8) };
        let pagemap = open(std::process::id()).unwrap();
        assert_eq!(frame_at(&pagemap, p as u64), Some(page));
        let mut status = [i32::MIN];
        // The move_pages locator (`default()`: no pagemap).
        LinuxPageMover::default()
            .query(std::process::id(), &[p as u64], &mut status)
            .unwrap();
        assert_eq!(status[0], -libc::EFAULT, "move_pages says so too");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, PAGE_SIZE) };
    }
}
