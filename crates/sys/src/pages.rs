//! Where pages are, and moving them: `move_pages(2)` behind one narrow trait.
//!
//! Every page move objtier makes goes through [`PageMover`]. [`LinuxPageMover`] issues the
//! syscall in batches; [`RecordingPageMover`] keeps a simulated page→node map and records every
//! call, so a test can assert "these pages, to this node, in this order" without NUMA hardware,
//! and the daemon's `--dry-run` can show what it would do.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

/// Pages per `move_pages` call: large enough to amortise the syscall, small enough that a
/// process exiting mid-migration wastes little work.
pub const BATCH_PAGES: usize = 1024;

/// Per-page result of a query or move: `>= 0` is a node id, `< 0` is `-errno`
/// (`-ENOENT`: not present, `-EFAULT`: not mapped, `-ENOMEM`/`-EBUSY`: could not move).
pub type PageStatus = i32;

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("process {pid} is gone")]
    ProcessGone { pid: u32 },
    #[error(
        "not permitted to move pages of process {pid}: run the daemon as the same user as \
         the process, or as root (CAP_SYS_NICE)"
    )]
    NotPermitted { pid: u32 },
    #[error(
        "move_pages is not available: the kernel lacks CONFIG_NUMA/CONFIG_MIGRATION; \
         objtier needs a NUMA kernel to move pages"
    )]
    Unsupported,
    #[error(
        "not permitted to split huge pages of process {pid}: process_madvise(2) on another \
         process needs CAP_SYS_NICE; run the daemon as root, or set transparent huge pages to \
         `never` (/sys/kernel/mm/transparent_hugepage/enabled). Objects sharing a huge page \
         move together meanwhile"
    )]
    NoHugeSplitPermission { pid: u32 },
    #[error(
        "this kernel cannot split another process's huge pages (process_madvise with \
         MADV_COLD needs Linux 5.10); objects sharing a huge page move together"
    )]
    NoHugeSplit,
    #[error("move_pages on process {pid} failed: {source}")]
    Other { pid: u32, source: io::Error },
}

/// Reads and changes the node backing pages of a process.
pub trait PageMover: Send {
    /// Fills `status` with the node of each page of `pid` (page-aligned addresses).
    fn query(
        &mut self,
        pid: u32,
        pages: &[u64],
        status: &mut [PageStatus],
    ) -> Result<(), MoveError>;

    /// Moves each page to `node`; `status` receives the node each page ended on, or `-errno`.
    fn move_to(
        &mut self,
        pid: u32,
        pages: &[u64],
        node: u32,
        status: &mut [PageStatus],
    ) -> Result<(), MoveError>;

    /// The size of a transparent huge page when the kernel may back anonymous memory with
    /// them, else `None`. `move_pages(2)` moves a huge page whole, whichever of its pages it is
    /// asked to move: a plan that moves only some of them must split it first
    /// ([`split_huge`](Self::split_huge)), or the others move too (and back at the next plan).
    fn huge_page_size(&mut self) -> Option<u64>;

    /// Splits the huge page holding each of `pages` of `pid`, where one does, into base pages
    /// that can move apart. A page not in a huge page is left as it is. The way the kernel
    /// offers, `MADV_COLD` on the page alone, also deactivates that page: pass one that stays
    /// on, or moves to, the slower tier. Returns the pages advised.
    fn split_huge(&mut self, pid: u32, pages: &[u64]) -> Result<u64, MoveError>;
}

/// The real thing. [`LinuxPageMover::new`] locates pages through `/proc/PID/pagemap` where
/// the kernel shows this process page frames and which node holds them (root, and
/// `CONFIG_MEMORY_HOTPLUG`'s memory blocks: 4-5 times cheaper than `move_pages`, see
/// [`crate::pagemap`]); `default()` and everything else use `move_pages`.
#[derive(Default)]
pub struct LinuxPageMover {
    frames: Option<crate::pagemap::FrameNodes>,
    scratch: Vec<u64>,
}

impl LinuxPageMover {
    /// A mover that locates through pagemap when this process can (it checks on a page of
    /// its own that frame numbers show).
    pub fn new() -> LinuxPageMover {
        let frames = crate::pagemap::FrameNodes::discover(Path::new("/sys")).filter(|frames| {
            let buffer = vec![1u8; 2 * crate::PAGE_SIZE];
            let page = (buffer.as_ptr() as u64).next_multiple_of(crate::PAGE_SIZE as u64);
            let mut status = [i32::MIN];
            let own = crate::pagemap::open(std::process::id());
            let located = own.and_then(|f| {
                crate::pagemap::locate(&f, frames, &[page], &mut status, &mut Vec::new())
            });
            std::hint::black_box(&buffer);
            // Frame numbers show (the page is found, or in a block no one node owns).
            matches!(located, Ok(l) if !l.hidden_frames && (status[0] >= 0 || !l.unknown.is_empty()))
        });
        // Pages mapping a zero page must not count as memory on the zero page's node.
        let frames = frames.map(|f| f.with_zero_frames(crate::pagemap::probe_zero_frames()));
        LinuxPageMover {
            frames,
            scratch: Vec::new(),
        }
    }

    /// The zero pages' frames the pagemap locator knows (None when it locates with
    /// `move_pages`, which knows them itself).
    pub fn zero_frames(&self) -> Option<crate::pagemap::ZeroFrames> {
        self.frames.as_ref().map(|f| f.zero_frames())
    }

    /// How this mover locates pages: "pagemap" or "move_pages".
    pub fn locates_with(&self) -> &'static str {
        if self.frames.is_some() {
            "pagemap"
        } else {
            "move_pages"
        }
    }
}

fn move_pages_raw(
    pid: u32,
    pages: &[u64],
    nodes: Option<&[i32]>,
    status: &mut [PageStatus],
) -> Result<(), MoveError> {
    debug_assert_eq!(pages.len(), status.len());
    for ((chunk, stat), index) in pages
        .chunks(BATCH_PAGES)
        .zip(status.chunks_mut(BATCH_PAGES))
        .zip((0..).step_by(BATCH_PAGES))
    {
        let nodes_ptr = nodes.map_or(std::ptr::null(), |n| n[index..index + chunk.len()].as_ptr());
        // SAFETY: pages/nodes/status point at `chunk.len()` valid elements; the kernel only
        // writes `status`. MPOL_MF_MOVE (1<<1) moves pages mapped only by this process.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                pid as libc::c_long,
                chunk.len() as libc::c_ulong,
                chunk.as_ptr() as *const *const libc::c_void,
                nodes_ptr,
                stat.as_mut_ptr(),
                if nodes.is_some() { 1 << 1 } else { 0 } as libc::c_int,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ESRCH) => return Err(MoveError::ProcessGone { pid }),
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    return Err(MoveError::NotPermitted { pid })
                }
                Some(libc::ENOSYS) => return Err(MoveError::Unsupported),
                // ENOMEM, EBUSY...: this batch failed as a whole; mark it and go on, the next
                // interval retries what did not move.
                Some(errno) => stat.fill(-errno),
                None => return Err(MoveError::Other { pid, source: err }),
            }
        }
    }
    Ok(())
}

impl PageMover for LinuxPageMover {
    fn query(
        &mut self,
        pid: u32,
        pages: &[u64],
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        let Some(frames) = &self.frames else {
            return move_pages_raw(pid, pages, None, status);
        };
        // Any trouble with the pagemap (the process gone, not ours to read) and the query
        // falls back to move_pages, which says what it is.
        let located = crate::pagemap::open(pid).and_then(|pagemap| {
            crate::pagemap::locate(&pagemap, frames, pages, status, &mut self.scratch)
        });
        match located {
            Ok(located) if located.unknown.is_empty() => Ok(()),
            Ok(located) => {
                // Frames of memory added since start-up, or hidden: move_pages knows.
                let asked: Vec<u64> = located.unknown.iter().map(|&i| pages[i]).collect();
                let mut answer = vec![0; asked.len()];
                move_pages_raw(pid, &asked, None, &mut answer)?;
                for (&i, &s) in located.unknown.iter().zip(&answer) {
                    status[i] = s;
                }
                if located.hidden_frames {
                    self.frames = None;
                }
                Ok(())
            }
            Err(_) => move_pages_raw(pid, pages, None, status),
        }
    }

    fn move_to(
        &mut self,
        pid: u32,
        pages: &[u64],
        node: u32,
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        let nodes = vec![node as i32; pages.len()];
        move_pages_raw(pid, pages, Some(&nodes), status)
    }

    fn huge_page_size(&mut self) -> Option<u64> {
        huge_page_size_in(Path::new("/sys/kernel/mm/transparent_hugepage"))
    }

    fn split_huge(&mut self, pid: u32, pages: &[u64]) -> Result<u64, MoveError> {
        split_huge_raw(pid, pages)
    }
}

/// The PMD-sized transparent huge page under `thp` (`/sys/kernel/mm/transparent_hugepage`),
/// unless it is disabled: the size's own setting (kernels with per-size THP, 6.8+) decides,
/// or the global one where the size inherits it or has none. `madvise` counts as enabled:
/// the program may ask for huge pages. Smaller (multi-size) THPs are not considered.
pub fn huge_page_size_in(thp: &Path) -> Option<u64> {
    let read = |name: &str| std::fs::read_to_string(thp.join(name)).ok();
    let size: u64 = read("hpage_pmd_size")?.trim().parse().ok()?;
    let selected = |setting: &str| {
        let start = setting.find('[')? + 1;
        let end = start + setting[start..].find(']')?;
        Some(setting[start..end].to_string())
    };
    let own = read(&format!("hugepages-{}kB/enabled", size / 1024)).and_then(|s| selected(&s));
    let mode = match own.as_deref() {
        Some("inherit") | None => selected(&read("enabled")?)?,
        Some(own) => own.to_string(),
    };
    (mode != "never").then_some(size)
}

/// `process_madvise(MADV_COLD)` on each page of `pid`, one page per `iovec`: a range covering
/// only part of a huge page makes the kernel split it (`madvise_cold_or_pageout_pte_range`).
/// A page that is not mapped (`ENOMEM`) is skipped and the rest advised.
fn split_huge_raw(pid: u32, pages: &[u64]) -> Result<u64, MoveError> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0 as libc::c_long) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ESRCH) => MoveError::ProcessGone { pid },
            Some(libc::ENOSYS) => MoveError::NoHugeSplit,
            _ => MoveError::Other { pid, source: err },
        });
    }
    // SAFETY: the descriptor was just opened and is owned here only.
    let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    let iovecs: Vec<libc::iovec> = pages
        .iter()
        .map(|&page| libc::iovec {
            iov_base: page as *mut libc::c_void,
            iov_len: crate::PAGE_SIZE,
        })
        .collect();
    let mut advised = 0u64;
    let mut next = 0;
    while next < iovecs.len() {
        // At most UIO_MAXIOV (1024) vectors a call.
        let chunk = &iovecs[next..iovecs.len().min(next + 1024)];
        // SAFETY: `chunk` is a valid array of iovecs; the kernel reads it and advises the
        // target process's memory, never this one's.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd() as libc::c_long,
                chunk.as_ptr(),
                chunk.len() as libc::c_ulong,
                libc::MADV_COLD as libc::c_long,
                0 as libc::c_ulong,
            )
        };
        if rc >= 0 {
            // A short count means the vector after the advised ones failed: skip it.
            let done = rc as usize / crate::PAGE_SIZE;
            advised += done as u64;
            next += if done < chunk.len() { done + 1 } else { done };
            continue;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // The first vector of the chunk is not mapped (any more): skip it.
            Some(libc::ENOMEM) | Some(libc::EFAULT) => next += 1,
            Some(libc::ESRCH) => return Err(MoveError::ProcessGone { pid }),
            Some(libc::EPERM) | Some(libc::EACCES) => {
                return Err(MoveError::NoHugeSplitPermission { pid })
            }
            Some(libc::ENOSYS) | Some(libc::EINVAL) => return Err(MoveError::NoHugeSplit),
            _ => return Err(MoveError::Other { pid, source: err }),
        }
    }
    Ok(advised)
}

/// A shared mover, so a test can keep a handle on the fake it hands to a daemon.
impl<T: PageMover> PageMover for std::sync::Arc<std::sync::Mutex<T>> {
    fn query(
        &mut self,
        pid: u32,
        pages: &[u64],
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .query(pid, pages, status)
    }

    fn move_to(
        &mut self,
        pid: u32,
        pages: &[u64],
        node: u32,
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .move_to(pid, pages, node, status)
    }

    fn huge_page_size(&mut self) -> Option<u64> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .huge_page_size()
    }

    fn split_huge(&mut self, pid: u32, pages: &[u64]) -> Result<u64, MoveError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .split_huge(pid, pages)
    }
}

/// One call a [`RecordingPageMover`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordedCall {
    Query {
        pid: u32,
        pages: usize,
    },
    Move {
        pid: u32,
        node: u32,
        pages: Vec<u64>,
    },
    SplitHuge {
        pid: u32,
        pages: Vec<u64>,
    },
}

/// A fake kernel: pages live on simulated nodes; moves succeed while the target node has room.
/// Blocks listed in `huge_pages` behave as transparent huge pages: moving any of their pages
/// moves them all, until split.
#[derive(Default)]
pub struct RecordingPageMover {
    /// The huge page size [`PageMover::huge_page_size`] reports; `None`: no huge pages.
    pub huge_page_size: Option<u64>,
    /// (pid, first address) of the blocks of `huge_page_size` that are huge pages.
    pub huge_pages: HashSet<(u32, u64)>,
    /// (pid, page) → node. Absent pages read as `-ENOENT`.
    pub placement: HashMap<(u32, u64), u32>,
    /// Pages each node can hold; absent means unlimited.
    pub node_capacity_pages: HashMap<u32, usize>,
    pub calls: Vec<RecordedCall>,
    /// Pids that have "exited".
    pub gone: Vec<u32>,
}

impl RecordingPageMover {
    pub fn place(&mut self, pid: u32, start: u64, len: u64, node: u32) {
        for page in (start..start + len).step_by(crate::PAGE_SIZE) {
            self.placement.insert((pid, page), node);
        }
    }

    pub fn pages_on(&self, node: u32) -> usize {
        self.placement.values().filter(|&&n| n == node).count()
    }

    /// Page moves recorded so far, as (node, pages) in order.
    pub fn moves(&self) -> Vec<(u32, Vec<u64>)> {
        self.calls
            .iter()
            .filter_map(|c| match c {
                RecordedCall::Move { node, pages, .. } => Some((*node, pages.clone())),
                _ => None,
            })
            .collect()
    }

    /// Pages asked about by status queries recorded so far.
    pub fn queried_pages(&self) -> u64 {
        self.calls
            .iter()
            .map(|c| match c {
                RecordedCall::Query { pages, .. } => *pages as u64,
                RecordedCall::Move { .. } | RecordedCall::SplitHuge { .. } => 0,
            })
            .sum()
    }
}

impl PageMover for RecordingPageMover {
    fn query(
        &mut self,
        pid: u32,
        pages: &[u64],
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        if self.gone.contains(&pid) {
            return Err(MoveError::ProcessGone { pid });
        }
        self.calls.push(RecordedCall::Query {
            pid,
            pages: pages.len(),
        });
        for (page, stat) in pages.iter().zip(status.iter_mut()) {
            *stat = self
                .placement
                .get(&(pid, *page))
                .map_or(-libc::ENOENT, |&n| n as i32);
        }
        Ok(())
    }

    fn move_to(
        &mut self,
        pid: u32,
        pages: &[u64],
        node: u32,
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        if self.gone.contains(&pid) {
            return Err(MoveError::ProcessGone { pid });
        }
        self.calls.push(RecordedCall::Move {
            pid,
            node,
            pages: pages.to_vec(),
        });
        for (page, stat) in pages.iter().zip(status.iter_mut()) {
            let Some(&current) = self.placement.get(&(pid, *page)) else {
                *stat = -libc::ENOENT;
                continue;
            };
            let full = self
                .node_capacity_pages
                .get(&node)
                .is_some_and(|&cap| self.pages_on(node) >= cap);
            if current != node && full {
                *stat = -libc::ENOMEM;
            } else {
                self.placement.insert((pid, *page), node);
                *stat = node as i32;
            }
        }
        // A page of a huge page drags the whole huge page along, as move_pages(2) does.
        if let Some(huge) = self.huge_page_size {
            let mut blocks: Vec<u64> = pages
                .iter()
                .zip(status.iter())
                .filter(|&(_, &stat)| stat == node as i32)
                .map(|(page, _)| page / huge * huge)
                .filter(|&block| self.huge_pages.contains(&(pid, block)))
                .collect();
            blocks.dedup();
            for block in blocks {
                for page in (block..block + huge).step_by(crate::PAGE_SIZE) {
                    if let Some(current) = self.placement.get_mut(&(pid, page)) {
                        *current = node;
                    }
                }
            }
        }
        Ok(())
    }

    fn huge_page_size(&mut self) -> Option<u64> {
        self.huge_page_size
    }

    fn split_huge(&mut self, pid: u32, pages: &[u64]) -> Result<u64, MoveError> {
        if self.gone.contains(&pid) {
            return Err(MoveError::ProcessGone { pid });
        }
        self.calls.push(RecordedCall::SplitHuge {
            pid,
            pages: pages.to_vec(),
        });
        if let Some(huge) = self.huge_page_size {
            for page in pages {
                self.huge_pages.remove(&(pid, page / huge * huge));
            }
        }
        Ok(pages.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_moves_and_capacity() {
        let mut m = RecordingPageMover::default();
        m.place(7, 0x1000, 0x3000, 1);
        m.node_capacity_pages.insert(0, 2);
        let pages = [0x1000, 0x2000, 0x3000, 0x9000];
        let mut status = [0; 4];
        m.move_to(7, &pages, 0, &mut status).unwrap();
        assert_eq!(status, [0, 0, -libc::ENOMEM, -libc::ENOENT]);
        m.query(7, &pages, &mut status).unwrap();
        assert_eq!(status, [0, 0, 1, -libc::ENOENT]);
        m.gone.push(7);
        assert!(matches!(
            m.query(7, &pages, &mut status),
            Err(MoveError::ProcessGone { pid: 7 })
        ));
    }

    /// In the fake, a page of a huge page moves the whole of it until the huge page is split.
    #[test]
    fn fake_huge_pages_move_whole_until_split() {
        let huge = 2 << 20;
        let mut m = RecordingPageMover {
            huge_page_size: Some(huge),
            ..Default::default()
        };
        m.place(7, huge, 2 * huge, 1);
        m.huge_pages.extend([(7, huge), (7, 2 * huge)]);
        let mut status = [0; 1];
        m.move_to(7, &[huge], 0, &mut status).unwrap();
        assert_eq!(m.pages_on(0), 512, "the whole huge page came along");
        assert_eq!(m.split_huge(7, &[2 * huge + 4096]).unwrap(), 1);
        m.move_to(7, &[2 * huge], 0, &mut status).unwrap();
        assert_eq!(m.pages_on(0), 513, "a split one moves a page at a time");
    }

    #[test]
    fn huge_page_size_follows_the_settings() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        assert_eq!(huge_page_size_in(dir.path()), None, "no THP support at all");
        write("hpage_pmd_size", "2097152\n");
        write("enabled", "always madvise [never]\n");
        assert_eq!(huge_page_size_in(dir.path()), None);
        write("enabled", "always [madvise] never\n");
        assert_eq!(huge_page_size_in(dir.path()), Some(2 << 20));
        write(
            "hugepages-2048kB/enabled",
            "always inherit madvise [never]\n",
        );
        assert_eq!(
            huge_page_size_in(dir.path()),
            None,
            "the size's own setting wins"
        );
        write(
            "hugepages-2048kB/enabled",
            "always [inherit] madvise never\n",
        );
        assert_eq!(huge_page_size_in(dir.path()), Some(2 << 20));
        write("enabled", "always madvise [never]\n");
        write(
            "hugepages-2048kB/enabled",
            "[always] inherit madvise never\n",
        );
        assert_eq!(huge_page_size_in(dir.path()), Some(2 << 20));
    }

    /// Anonymous huge pages of `start`'s mapping, in KiB, from /proc/self/smaps.
    fn anon_huge_kib(start: u64) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16))
                    {
                        inside = lo <= start && start < hi;
                        continue;
                    }
                }
            }
            if let Some(kib) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
                return kib.trim().trim_end_matches(" kB").parse().unwrap();
            }
        }
        0
    }

    /// The real split, on a huge page of our own: one page advised, the huge page gone, the
    /// data intact.
    #[test]
    fn real_split_of_own_huge_page() {
        let huge = 2usize << 20;
        // SAFETY: a fresh private anonymous mapping, unmapped at the end of the test.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * huge,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let start = (map as usize).next_multiple_of(huge);
        // SAFETY: [start, start + huge) lies inside the mapping.
        let block = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, huge) };
        unsafe { libc::madvise(start as *mut libc::c_void, huge, libc::MADV_HUGEPAGE) };
        for (i, byte) in block.iter_mut().enumerate() {
            *byte = i as u8;
        }
        if anon_huge_kib(start as u64) == 0 {
            eprintln!("SKIP: the kernel gave no huge page here");
        } else {
            match split_huge_raw(std::process::id(), &[start as u64 + 4096]) {
                Ok(advised) => {
                    assert_eq!(advised, 1);
                    assert_eq!(anon_huge_kib(start as u64), 0, "the huge page was split");
                }
                Err(MoveError::NoHugeSplit) => eprintln!("SKIP: {}", MoveError::NoHugeSplit),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(block.iter().enumerate().all(|(i, &b)| b == i as u8));
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(map, 2 * huge) };
    }

    /// The real syscall on our own memory: works on any NUMA-enabled kernel, one node or many.
    /// Where this process may read page frames (root), pagemap must agree with it page for
    /// page: touched, untouched (not present), read only (the zero page: not present either),
    /// and a hole (unmapped).
    #[test]
    fn real_query_of_own_pages_pagemap_agrees() {
        let n = 64;
        let ps = crate::PAGE_SIZE;
        // SAFETY: a fresh anonymous mapping of n + 1 pages, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                (n + 1) * ps,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let base = map as u64;
        // Touch the even pages; unmap the last to leave a hole after the range.
        for i in (0..n).step_by(2) {
            // SAFETY: inside the mapping.
            unsafe { *(map as *mut u8).add(i * ps) = 1 };
        }
        // Read every fourth odd page: it maps the zero page.
        for i in (1..n).step_by(4) {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::read_volatile((map as *const u8).add(i * ps)) };
        }
        // SAFETY: the mapping's last page.
        unsafe { libc::munmap((map as *mut u8).add(n * ps) as *mut _, ps) };
        let pages: Vec<u64> = (0..=n as u64).map(|i| base + i * ps as u64).collect();
        let mut by_syscall = vec![i32::MIN; pages.len()];
        match LinuxPageMover::default().query(std::process::id(), &pages, &mut by_syscall) {
            Ok(()) => {}
            Err(MoveError::Unsupported) => return eprintln!("SKIP: move_pages unsupported here"),
            Err(e) => panic!("{e}"),
        }
        for (i, &s) in by_syscall.iter().enumerate() {
            let present = i < n && i % 2 == 0;
            assert_eq!(s >= 0, present, "page {i}: {s}");
        }
        let mut mover = LinuxPageMover::new();
        if mover.locates_with() == "pagemap" {
            let mut by_pagemap = vec![i32::MIN; pages.len()];
            mover
                .query(std::process::id(), &pages, &mut by_pagemap)
                .unwrap();
            // Untouched and unmapped pages are both "not present" to pagemap.
            let normalise = |v: &[i32]| -> Vec<i32> {
                v.iter()
                    .map(|&s| if s < 0 { -libc::ENOENT } else { s })
                    .collect()
            };
            assert_eq!(normalise(&by_pagemap), normalise(&by_syscall));
        } else {
            eprintln!("SKIP: no page frames or memory blocks here; move_pages only");
        }
        // SAFETY: the rest of the mapping made above.
        unsafe { libc::munmap(map, n * ps) };
    }
}
