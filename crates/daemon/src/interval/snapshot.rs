//! Stage 3 of an interval: a snapshot of what the daemon knows, for the plan.
//!
//! `move_pages` with no target says where the records' pages are, so budgets are charged with
//! what is really resident and moves name only pages that must move. It is asked a batch of
//! whole records at a time; a record's pages are consecutive, so only their statuses are kept
//! (4 bytes a page) and the plan recomputes the addresses. While the records hold at most
//! `LOCATE_PAGES_MIN` pages, all are located every time; beyond, a rotating share of them (a
//! quarter, at most `LOCATE_PAGES_MAX` pages; plus the new and the just-moved ones), the
//! others counted where they were when last located, which keeps the kernel's query time per
//! interval bounded however large the job. Each record is aged (its access estimate moves on
//! by one interval) as the pass reaches it, and becomes a policy candidate.

use super::buffers::IntervalBuffers;
pub use super::buffers::{RecordPages, NOT_LOCATED};
use crate::daemon::Daemon;
use crate::process::ResidentPages;
use crate::record::Record;
use objtier_policy::{Candidate, ProcessPolicy, TierBytes};
use objtier_sys::pages::{MoveError, PageMover, PageStatus, BATCH_PAGES};
use objtier_sys::topology::Topology;
use objtier_wire::PAGE_SIZE;

/// What the daemon knows at an enforcement, as the plan sees it: a candidate per record (in
/// memory order, processes in id order, a process's records consecutive), where each record's
/// pages are, and each process's terms.
pub struct Snapshot {
    /// The processes' ids, indexed as `Candidate::process` and `RecordPages::process`.
    pub process_ids: Vec<u64>,
    /// Per process: what the planner knows of it (fast-tier cap, priority).
    pub policies: Vec<ProcessPolicy>,
    /// Per process: its pages must not move (`--no-migrate`).
    pub pinned: Vec<bool>,
    pub candidates: Vec<Candidate>,
    /// Per candidate, where its pages are.
    pub spans: Vec<RecordPages>,
    /// Per process, the statuses of its located pages.
    pub statuses: Vec<Vec<PageStatus>>,
    /// Resident bytes of all the records on each tier, which the budgets are charged with.
    pub ours_by_tier: Vec<u64>,
    /// The tier of each node id (a lookup per page).
    pub node_tiers: Vec<Option<usize>>,
}

impl Snapshot {
    /// The tier a page's status says it is in (none: not present, or an error).
    pub fn tier_of(&self, status: PageStatus) -> Option<usize> {
        usize::try_from(status)
            .ok()
            .and_then(|node| self.node_tiers.get(node).copied().flatten())
    }

    /// The statuses of a located record's pages.
    pub fn statuses_of(&self, span: &RecordPages) -> &[PageStatus] {
        &self.statuses[span.process][span.first_page..span.first_page + span.pages]
    }

    /// The buffers, emptied of nothing, for the daemon to keep until the next enforcement.
    pub(crate) fn into_buffers(self) -> IntervalBuffers {
        let mut buffers = IntervalBuffers {
            candidates: self.candidates,
            spans: self.spans,
            statuses: self.statuses,
        };
        buffers.trim();
        buffers
    }
}

/// Pages the kernel is asked to locate per interval, at most (plus the records whose location is
/// not known): about 60 ms of `move_pages` status queries at the ~230 ns a page measured on the
/// development host, for 1 GiB of records.
const LOCATE_PAGES_MAX: u64 = 1 << 18;

/// Records of up to this many pages (64 MiB) are all located every interval.
const LOCATE_PAGES_MIN: u64 = 1 << 14;

/// Between the two, each interval locates this share of the records' pages: every record is
/// located at least every fourth interval (8 s at the default interval).
const LOCATE_TURNS: u64 = 4;

/// How many of `record_pages` pages one interval locates. Locating is not free where it counts:
/// reading a page's entry walks its page table and `struct page`, while a record's pages move
/// only when the daemon moves them (which it knows: moved records are located at the next
/// interval) or when the program touches or frees pages.
pub(super) fn locate_pages_per_interval(record_pages: u64) -> u64 {
    (record_pages / LOCATE_TURNS).clamp(LOCATE_PAGES_MIN, LOCATE_PAGES_MAX)
}

/// Whether a record not needing it is located at this enforcement: one in `share` of them, by
/// address, a different share each time. The unit is the 2 MiB block a record starts in: the
/// records located together lie together, so that the kernel is asked about runs of pages
/// (what reading `/proc/PID/pagemap` is cheap for, and a huge page is located whole).
pub fn locate_in_turn(start: u64, share: u64, turn: u64) -> bool {
    // Fibonacci hashing of the block number spreads neighbouring blocks over the turns.
    let spread = (start >> 21).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    share <= 1 || spread % share == turn % share
}

/// The tier of each node id (`Topology::tier_of_node` as a table, for a lookup per page).
fn node_tier_table(topology: &Topology) -> Vec<Option<usize>> {
    let nodes = topology.tiers.iter().flat_map(|t| t.nodes.iter().copied());
    let len = nodes.max().map_or(0, |n| n as usize + 1);
    (0..len).map(|n| topology.tier_of_node(n as u32)).collect()
}

/// Asks `mover` where `batch`'s pages are, appends their statuses to `status` and empties
/// `batch`. Once the process is gone or its pages cannot be located, the rest of its pages are
/// marked with that error without asking again.
fn locate(
    mover: &mut dyn PageMover,
    pid: u32,
    batch: &mut Vec<u64>,
    status: &mut Vec<PageStatus>,
    failed: &mut Option<PageStatus>,
) {
    let from = status.len();
    status.resize(from + batch.len(), -libc::ENOENT);
    let result = match *failed {
        Some(errno) => Err(errno),
        None if batch.is_empty() => Ok(()),
        None => match mover.query(pid, batch, &mut status[from..]) {
            Ok(()) => Ok(()),
            Err(MoveError::ProcessGone { .. }) => Err(-libc::ESRCH),
            Err(e) => {
                tracing::warn!(pid, "cannot locate pages: {e}");
                Err(-libc::EIO)
            }
        },
    };
    if let Err(errno) = result {
        status[from..].fill(errno);
        *failed = Some(errno);
    }
    batch.clear();
}

/// A record's access estimate and its last two intervals' samples move on by one interval (its
/// last access time was set by attribution, from the observations').
fn age(aggregate: &dyn objtier_policy::Aggregate, record: &mut Record) {
    // Below the smallest normal f32 (about 10^-38 accesses an interval) the EMA is 0: a decaying
    // value would otherwise end as a subnormal, slow to compute with, that never reaches 0 (0.9
    // times the smallest subnormal rounds back up to it).
    let aggregated =
        aggregate.aggregate(record.ema_accesses as f64, record.interval_accesses as f64) as f32;
    record.ema_accesses = if aggregated < f32::MIN_POSITIVE {
        0.0
    } else {
        aggregated
    };
    record.previous_accesses = record.recent_accesses;
    record.recent_accesses = record.interval_accesses;
    record.interval_accesses = 0.0;
}

impl Daemon {
    /// Ages every record, when the interval does not enforce (an enforcement ages them in its
    /// snapshot's pass).
    pub(super) fn age_records(&mut self) {
        let aggregate = &*self.policy.aggregate;
        for p in self.processes.values_mut() {
            for (_, record) in p.records_mut().iter_mut() {
                age(aggregate, record);
            }
        }
    }

    /// At debug level, each process's four hottest records.
    pub(super) fn log_hottest(&self) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        for p in self.processes.values() {
            let mut hottest: Vec<(u64, &Record)> = p.records().iter().collect();
            hottest.sort_by(|a, b| b.1.ema_accesses.total_cmp(&a.1.ema_accesses));
            for (start, r) in hottest.iter().take(4) {
                tracing::debug!(
                    pid = p.pid,
                    start = format_args!("{start:#x}"),
                    len = r.len,
                    recent = r.recent_accesses,
                    ema = r.ema_accesses,
                    "hot record"
                );
            }
        }
    }

    /// Stage 3 (see the module doc): locates the records' pages (all, or a share of them),
    /// ages each record and makes it a candidate, in one pass over each process's records.
    pub(super) fn snapshot(&mut self) -> Snapshot {
        let tiers = self.topology.tiers.len();
        let node_tiers = node_tier_table(&self.topology);
        let tier_of = |s: PageStatus| -> Option<usize> {
            usize::try_from(s)
                .ok()
                .and_then(|node| node_tiers.get(node).copied().flatten())
        };
        let share = if tiers > 3 {
            1
        } else {
            self.record_pages
                .div_ceil(locate_pages_per_interval(self.record_pages))
                .max(1)
        };
        let turn = self.totals.enforcements;
        let mut record_pages = 0u64;
        let process_ids: Vec<u64> = self.processes.keys().copied().collect();
        let record_count = self.processes.values().map(|p| p.records().len()).sum();
        // The interval's largest buffers are the daemon's between enforcements (see
        // `IntervalBuffers`): emptied, not freed.
        let mut buffers = std::mem::take(&mut self.buffers);
        buffers.prepare(record_count, process_ids.len());
        let IntervalBuffers {
            candidates,
            spans,
            statuses,
        } = &mut buffers;
        let mut policies = Vec::with_capacity(process_ids.len());
        let mut pinned_processes = Vec::with_capacity(process_ids.len());
        let mut ours_by_tier = vec![0u64; tiers];
        let mut batch: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
        let aggregate = &*self.policy.aggregate;
        for (pi, id) in process_ids.iter().enumerate() {
            let p = self
                .processes
                .get_mut(id)
                .expect("the ids were just read from the map");
            policies.push(ProcessPolicy {
                fast_cap_bytes: p.fast_capacity_bytes,
                priority: p.priority,
            });
            pinned_processes.push(p.no_migrate);
            // One pass over the records: a batch of whole records' pages is located, then
            // those records become candidates.
            let status = &mut statuses[pi];
            // A process known to have exited is not asked (its pid may be another's now).
            let mut failed = p.exited().then_some(-libc::ESRCH);
            let pid = p.pid;
            // A profiled process's recorder follows each located page's tier (its moves, and
            // the tier of a sampled page); its small-object blocks are a site of their own.
            let blocks = (tiers > 1 && p.recorder.is_some()).then(|| p.objects.blocks().clone());
            let (table, advice) = p.objects.records_and_advice_mut();
            let mut recorder = p.recorder.as_mut().filter(|_| blocks.is_some());
            // A process whose pages must not move (`--no-migrate`): every record stays where
            // it is, as scratch memory would, and counts against its tier's budget there.
            let pinned = if p.no_migrate {
                objtier_wire::advice::SCRATCH
            } else {
                0
            };
            let mut process_resident = vec![0u64; tiers];
            let mut candidate =
                |start: u64, record: &Record, resident: TierBytes, first_page: usize| {
                    for (sum, r) in process_resident.iter_mut().zip(&resident) {
                        *sum += r;
                    }
                    candidates.push(record.candidate(
                        candidates.len(),
                        pi,
                        resident,
                        crate::process::advice_for(advice, start, record.len) | pinned,
                    ));
                    spans.push(RecordPages {
                        process: pi,
                        start,
                        first_page,
                        pages: (record.len / PAGE_SIZE as u64) as usize,
                        site: record.site,
                    });
                };
            // Each record is aged as the pass reaches it, before it becomes a candidate.
            let mut records = table
                .iter_mut()
                .map(|(start, record)| {
                    age(aggregate, record);
                    (start, record)
                })
                .peekable();
            let mut located: Vec<(u64, &mut Record)> = Vec::new();
            while records.peek().is_some() {
                while let Some(&(start, ref record)) = records.peek() {
                    let n = (record.len / PAGE_SIZE as u64) as usize;
                    if !record.resident.known() || locate_in_turn(start, share, turn) {
                        if !located.is_empty() && batch.len() + n > BATCH_PAGES {
                            break;
                        }
                        batch.extend((start..start + record.len).step_by(PAGE_SIZE));
                        let (start, record) = records.next().expect("peeked");
                        record_pages += n as u64;
                        located.push((start, record));
                    } else {
                        // Counted where it was when last located.
                        let (start, record) = records.next().expect("peeked");
                        record_pages += n as u64;
                        candidate(start, record, record.resident.bytes(tiers), NOT_LOCATED);
                    }
                }
                if located.is_empty() {
                    continue;
                }
                let mut first_page = status.len();
                locate(self.mover.as_mut(), pid, &mut batch, status, &mut failed);
                for (start, record) in located.drain(..) {
                    let n = (record.len / PAGE_SIZE as u64) as usize;
                    let mut resident = TierBytes::from_elem(0, tiers);
                    for &s in &status[first_page..first_page + n] {
                        if let Some(t) = tier_of(s) {
                            resident[t] += PAGE_SIZE as u64;
                        }
                    }
                    record.resident = if failed.is_some() {
                        ResidentPages::UNKNOWN
                    } else {
                        ResidentPages::from_bytes(&resident)
                    };
                    if let (Some(r), Some(blocks), None) = (recorder.as_mut(), &blocks, failed) {
                        let key = crate::recorder::SiteKey::of_record(record.site, start, blocks);
                        let pages = &status[first_page..first_page + n];
                        r.pages_located(key, start, pages.iter().map(|&s| tier_of(s)));
                    }
                    candidate(start, record, resident, first_page);
                    first_page += n;
                }
            }
            drop(records);
            if let Some(r) = recorder {
                r.pages_look_done(|start, pages| {
                    table
                        .get(start)
                        .is_some_and(|r| r.len / PAGE_SIZE as u64 == pages as u64)
                });
            }
            for (ours, process) in ours_by_tier.iter_mut().zip(&process_resident) {
                *ours += process;
            }
            p.resident_bytes_by_tier = process_resident;
        }
        self.record_pages = record_pages;
        let IntervalBuffers {
            candidates,
            spans,
            statuses,
        } = buffers;
        Snapshot {
            process_ids,
            policies,
            pinned: pinned_processes,
            candidates,
            spans,
            statuses,
            ours_by_tier,
            node_tiers,
        }
    }

    /// The records the plan may move (`may_move`, by candidate) that were counted from their
    /// last location are located now, their pages' statuses appended to their process's. One
    /// that cannot be (its process exited, the query failed) stays [`NOT_LOCATED`], and does not
    /// move this step.
    pub(super) fn locate_stale_movers(&mut self, snapshot: &mut Snapshot, may_move: &[bool]) {
        for (span, _) in snapshot
            .spans
            .iter_mut()
            .zip(may_move)
            .filter(|(span, &may)| may && span.first_page == NOT_LOCATED)
        {
            let process = &self.processes[&snapshot.process_ids[span.process]];
            if process.exited() {
                continue;
            }
            let pages: Vec<u64> = (span.start..).step_by(PAGE_SIZE).take(span.pages).collect();
            let status = &mut snapshot.statuses[span.process];
            let first_page = status.len();
            status.resize(first_page + span.pages, -libc::ENOENT);
            match self
                .mover
                .query(process.pid, &pages, &mut status[first_page..])
            {
                Ok(()) => span.first_page = first_page,
                Err(e) => {
                    tracing::debug!(pid = process.pid, "cannot locate a record's pages: {e}");
                    status.truncate(first_page);
                }
            }
        }
    }
}
