//! Where pages are, and moving them: `move_pages(2)` behind one narrow trait.
//!
//! Every page move objtier makes goes through [`PageMover`]. [`LinuxPageMover`] issues the
//! syscall in batches; [`RecordingPageMover`] keeps a simulated page→node map and records every
//! call, so a test can assert "these pages, to this node, in this order" without NUMA hardware,
//! and the daemon's `--dry-run` can show what it would do.

use std::collections::HashMap;
use std::io;

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
}

/// The real thing.
#[derive(Default)]
pub struct LinuxPageMover;

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
        move_pages_raw(pid, pages, None, status)
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
}

/// A fake kernel: pages live on simulated nodes; moves succeed while the target node has room.
#[derive(Default)]
pub struct RecordingPageMover {
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
                RecordedCall::Move { .. } => 0,
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
        Ok(())
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

    /// The real syscall on our own memory: works on any NUMA-enabled kernel, one node or many.
    #[test]
    fn real_query_of_own_page() {
        let page = vec![1u8; 2 * crate::PAGE_SIZE];
        let addr = (page.as_ptr() as u64).next_multiple_of(crate::PAGE_SIZE as u64);
        let mut status = [i32::MIN];
        match LinuxPageMover.query(std::process::id(), &[addr], &mut status) {
            Ok(()) => assert!(status[0] >= 0, "a touched page has a node: {status:?}"),
            Err(MoveError::Unsupported) => eprintln!("SKIP: move_pages unsupported here"),
            Err(e) => panic!("{e}"),
        }
    }
}
