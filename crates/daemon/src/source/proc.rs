//! Page references through `/proc` as an access source, for kernels without DAMON (see
//! `objtier_sys::procrefs`). Coarse, but better than blind. Once per interval, per process:
//!
//! - **Idle page tracking** (root, `CONFIG_IDLE_PAGE_TRACKING`; preferred when present): the
//!   page frames of the tracked ranges (from pagemap) are looked up in the idle bitmap; each
//!   page accessed since it was marked idle is one access, then all are marked idle again. Per
//!   page, reads and writes alike (no soft-dirty: telling them apart would cost the program a
//!   write fault per written page per interval, and nothing uses the kind yet).
//! - **Referenced bytes**, everywhere else: `smaps` says how many bytes of each mapping were
//!   referenced since the last `clear_refs 2`, and with soft-dirty bits (`clear_refs 4`) pagemap
//!   says which pages were written. Each written page of a tracked range is one access, located
//!   exactly (runs of them are one `Store` observation each); the rest of the mapping's
//!   referenced pages (reads, mostly) are spread evenly over the present, unwritten pages of its
//!   tracked ranges, at most one per page. Pages not present cannot have been referenced, so
//!   they get nothing. Without soft-dirty bits, every referenced page is spread that way.
//!
//! Either way a page counts at most once per interval, however often it was touched: the
//! weight is referenced pages, and ranking relies on the EMA over intervals for frequency. A
//! transparent huge page is one page to the kernel's bits: all of its 4 KiB pages look
//! accessed (written) when one is, so objects sharing one share its accesses.
//!
//! A process's bits are cleared (or its frames marked idle) when it is first followed, and again
//! after each observation, so every observation covers exactly one interval. Between reading and
//! clearing, accesses are lost (the reads take milliseconds).
//!
//! **What clearing costs the program, and the budget.** After a clear, the CPU sets each page's
//! accessed bit again when the program next touches it, and that is the program's time: about
//! 520 ns a page in the virtual machines here (docs/performance.md), so a program touching 150 k
//! pages an interval (600 MiB, a byte a page) lost 75 ms each 2 s interval, 3.7 % of its time,
//! where the daemon's own work was 8 ms. The source measures that cost per page once, at start
//! ([`reference_clear_cost`]), and estimates each window's cost from the pages it found
//! referenced. With a budget (`--proc-budget`, 1 % of the program's time by default), a process
//! whose last window cost more than its share is cleared and read less often: for the next few
//! intervals the source repeats that reading's observations (the access rates stay as last
//! measured) and clears the bits only in the last of them, so that every reading still covers
//! exactly one interval and each clear is followed by one; at most [`MAX_HELD_INTERVALS`] in a
//! row.

use super::observation::{AccessKind, Observation, Source, Target};
use crate::config::DaemonConfig;
use objtier_sys::procrefs::{
    is_gone, reference_clear_cost, ClearRefs, Precision, ProcRefs, RefsKernel, Support,
    PM_PFN_MASK, PM_PRESENT, PM_SOFT_DIRTY,
};
use objtier_wire::PAGE_SIZE;
use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Duration;

const PAGE: u64 = PAGE_SIZE as u64;

/// Pagemap entries read at once (512 KiB).
const PAGEMAP_BATCH: u64 = 1 << 16;

/// Idle bitmap words closer than this are read (and written) in one call: fewer system calls,
/// and the words between cost little (bits left clear mark nothing).
const IDLE_WORD_GAP: u64 = 8;

/// Most intervals in a row a process's last observation is repeated for instead of a new one
/// (with 2 s intervals, a reading every 32 s at least, however costly).
pub const MAX_HELD_INTERVALS: u32 = 15;

/// How much of a program's time clearing its reference bits may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClearBudget {
    /// What clearing costs the program per page it then touches ([`reference_clear_cost`]).
    pub page_cost: Duration,
    /// The share of the program's time the clears may cost (0.01: 1 %).
    pub share: f64,
    /// The daemon's interval.
    pub interval: Duration,
}

impl ClearBudget {
    /// Intervals to repeat an observation for after a window in which `referenced_pages` pages
    /// were touched (each paid `page_cost` once): enough that the window's cost spread over the
    /// intervals until the next reading stays within the share.
    pub fn held_intervals(&self, referenced_pages: u64) -> u32 {
        let cost = referenced_pages as f64 * self.page_cost.as_secs_f64();
        let allowed = self.share * self.interval.as_secs_f64();
        if cost <= allowed || allowed <= 0.0 {
            return 0;
        }
        ((cost / allowed).ceil() - 1.0).min(MAX_HELD_INTERVALS as f64) as u32
    }
}

/// A process's last observation, repeated while `left` (at least 1) intervals remain; a process
/// has one only while it is held.
struct Held {
    observations: Vec<Observation>,
    left: u32,
}

pub struct ProcSource<K: RefsKernel> {
    kernel: K,
    precision: Precision,
    budget: Option<ClearBudget>,
    held: HashMap<u32, Held>,
    /// Pids told about their budget in the log (once each).
    budget_logged: HashSet<u32>,
    targets: Vec<Target>,
    /// Pids whose files are open.
    attached: HashSet<u32>,
    /// Pids cleared (or marked idle) at their last observation or when followed: their next
    /// observation covers exactly the time since. Others are armed at the next `follow`.
    armed: HashSet<u32>,
    /// Pids whose files could not be opened (warned once).
    refused: HashSet<u32>,
    pagemap_buffer: Vec<u64>,
}

/// The best precision this kernel and user allow; logs why nothing better.
pub fn open(config: &DaemonConfig) -> Result<ProcSource<ProcRefs>, String> {
    let proc_root = config.proc_root.as_path();
    let support = Support::probe(proc_root, &config.sys_root);
    // SAFETY: geteuid has no failure mode.
    let euid = unsafe { libc::geteuid() };
    let (precision, not_taken) = Precision::choose(&support, euid)?;
    for why in not_taken {
        tracing::info!("proc source: {why}");
    }
    let mut source = ProcSource::new(ProcRefs::new(proc_root, &config.sys_root), precision);
    if let Some(share) = config.proc_budget {
        let what: &[ClearRefs] = match precision {
            Precision::Referenced { soft_dirty: true } => {
                &[ClearRefs::Anonymous, ClearRefs::SoftDirty]
            }
            // Marking a frame idle clears its accessed bit, as clear_refs does.
            _ => &[ClearRefs::Anonymous],
        };
        match reference_clear_cost(proc_root, what) {
            Ok(page_cost) => {
                tracing::info!(
                    "proc source: clearing reference bits costs a program about {} ns for each \
                     page it touches next (measured); a process is observed less often when \
                     that would take over {}% of its time (--proc-budget)",
                    page_cost.as_nanos(),
                    share * 100.0
                );
                source.budget = Some(ClearBudget {
                    page_cost,
                    share,
                    interval: config.interval,
                });
            }
            Err(e) => tracing::info!(
                "proc source: cannot measure what clearing reference bits costs ({e}); every \
                 process is observed every interval, whatever it costs"
            ),
        }
    }
    Ok(source)
}

/// Appends the page at `address` to `runs`, extending the last run when contiguous.
fn push_page(runs: &mut Vec<(u64, u64)>, address: u64) {
    match runs.last_mut() {
        Some(last) if last.1 == address => last.1 += PAGE,
        _ => runs.push((address, address + PAGE)),
    }
}

/// The parts of sorted `ranges` inside `[start, end)`.
fn intersect(ranges: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let first = ranges.partition_point(|r| r.1 <= start);
    ranges[first..]
        .iter()
        .take_while(|r| r.0 < end)
        .map(|r| (r.0.max(start), r.1.min(end)))
        .filter(|r| r.0 < r.1)
        .collect()
}

/// `ranges` minus `old` (both sorted, non-overlapping).
fn subtract(ranges: &[(u64, u64)], old: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(start, end) in ranges {
        let mut at = start;
        for &(o_start, o_end) in &intersect(old, start, end) {
            if o_start > at {
                out.push((at, o_start));
            }
            at = o_end;
        }
        if at < end {
            out.push((at, end));
        }
    }
    out
}

impl<K: RefsKernel> ProcSource<K> {
    pub fn new(kernel: K, precision: Precision) -> ProcSource<K> {
        ProcSource {
            kernel,
            precision,
            budget: None,
            held: HashMap::new(),
            budget_logged: HashSet::new(),
            targets: Vec::new(),
            attached: HashSet::new(),
            armed: HashSet::new(),
            refused: HashSet::new(),
            pagemap_buffer: Vec::new(),
        }
    }

    /// Observes processes less often when clearing their bits would cost them more than
    /// `budget` allows (None: every interval).
    pub fn set_budget(&mut self, budget: Option<ClearBudget>) {
        self.budget = budget;
    }

    pub fn kernel(&self) -> &K {
        &self.kernel
    }

    pub fn kernel_mut(&mut self) -> &mut K {
        &mut self.kernel
    }

    /// Calls `f(address, entry)` for every page of `[start, end)`.
    fn for_each_page(
        &mut self,
        pid: u32,
        start: u64,
        end: u64,
        mut f: impl FnMut(u64, u64),
    ) -> io::Result<()> {
        let (mut page, last) = (start / PAGE, end.div_ceil(PAGE));
        while page < last {
            let n = (last - page).min(PAGEMAP_BATCH);
            self.pagemap_buffer.resize(n as usize, 0);
            self.kernel
                .pagemap(pid, page, &mut self.pagemap_buffer[..n as usize])?;
            for (i, &entry) in self.pagemap_buffer[..n as usize].iter().enumerate() {
                f((page + i as u64) * PAGE, entry);
            }
            page += n;
        }
        Ok(())
    }

    /// The present pages of `ranges` with their page frames. A frame seen more than once is
    /// not the process's own (the shared zero page, KSM): its idle bit says nothing about it.
    fn frames(&mut self, pid: u32, ranges: &[(u64, u64)]) -> io::Result<Vec<(u64, u64)>> {
        let mut frames = Vec::new();
        for &(start, end) in ranges {
            self.for_each_page(pid, start, end, |address, entry| {
                let pfn = entry & PM_PFN_MASK;
                if entry & PM_PRESENT != 0 && pfn != 0 {
                    frames.push((address, pfn));
                }
            })?;
        }
        let mut pfns: Vec<u64> = frames.iter().map(|&(_, pfn)| pfn).collect();
        pfns.sort_unstable();
        let shared: HashSet<u64> = pfns
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        frames.retain(|(_, pfn)| !shared.contains(pfn));
        Ok(frames)
    }

    /// Marks the frames idle, in as few writes as the gaps allow. `pfns` sorted.
    fn mark_idle(&mut self, pfns: &[u64]) -> io::Result<()> {
        for span in word_spans(pfns) {
            let mut words = vec![0u64; (span.1 - span.0) as usize];
            for &pfn in pfns_in(pfns, span) {
                words[(pfn / 64 - span.0) as usize] |= 1 << (pfn % 64);
            }
            self.kernel.mark_idle(span.0, &words)?;
        }
        Ok(())
    }

    /// Starts a process's first interval: clears its bits (marks its frames idle).
    fn arm(&mut self, pid: u32, ranges: &[(u64, u64)]) -> io::Result<()> {
        match self.precision {
            Precision::IdlePages => {
                let mut pfns: Vec<u64> = self.frames(pid, ranges)?.iter().map(|f| f.1).collect();
                pfns.sort_unstable();
                self.mark_idle(&pfns)
            }
            Precision::Referenced { soft_dirty } => self.clear(pid, soft_dirty),
        }
    }

    /// Arms a process followed for the first time (or again after a gap), unless the budget
    /// says that clearing its bits would already cost it more than its share: then its first
    /// reading waits as a costly reading's next one does, its resident pages standing in for
    /// the pages it will touch (a program's first interval is often its busiest: it fills what
    /// it allocated).
    fn first_arm(&mut self, pid: u32, ranges: &[(u64, u64)]) -> io::Result<()> {
        // A reading held from before the process was disarmed says nothing about now.
        self.held.remove(&pid);
        if self.budget.is_some() {
            let resident = match self.precision {
                Precision::IdlePages => self.frames(pid, ranges)?.len() as u64,
                Precision::Referenced { .. } => self
                    .kernel
                    .smaps(pid)?
                    .iter()
                    .map(|v| v.resident_bytes / PAGE)
                    .sum(),
            };
            let left = self.held_intervals(resident);
            if left > 0 {
                self.held.insert(
                    pid,
                    Held {
                        observations: Vec::new(),
                        left,
                    },
                );
                if self.budget_logged.insert(pid) {
                    tracing::info!(
                        pid,
                        resident_pages = resident,
                        first_reading_in = left + 1,
                        "proc source: clearing this process's reference bits would cost it more \
                         than --proc-budget (estimated from its resident pages); its first \
                         reading comes later"
                    );
                }
                return Ok(());
            }
        }
        self.arm(pid, ranges)
    }

    fn clear(&mut self, pid: u32, soft_dirty: bool) -> io::Result<()> {
        self.kernel.clear_refs(pid, ClearRefs::Anonymous)?;
        if soft_dirty {
            self.kernel.clear_refs(pid, ClearRefs::SoftDirty)?;
        }
        Ok(())
    }

    /// Idle page tracking: every tracked page accessed since it was marked is one access.
    /// Returns the pages accessed (each of which marking it idle again costs the program) and
    /// the intervals to hold this reading for; marks the frames idle again unless it holds.
    fn observe_idle(
        &mut self,
        pid: u32,
        ranges: &[(u64, u64)],
        out: &mut Vec<Observation>,
    ) -> io::Result<(u64, u32)> {
        let mut frames = self.frames(pid, ranges)?;
        let mut pfns: Vec<u64> = frames.iter().map(|f| f.1).collect();
        pfns.sort_unstable();
        let mut idle_words: Vec<(u64, u64)> = Vec::new();
        for span in word_spans(&pfns) {
            let mut words = vec![0u64; (span.1 - span.0) as usize];
            self.kernel.read_idle(span.0, &mut words)?;
            idle_words.extend((span.0..).zip(words));
        }
        let idle = |pfn: u64| {
            let i = idle_words.partition_point(|w| w.0 < pfn / 64);
            idle_words
                .get(i)
                .is_some_and(|w| w.0 == pfn / 64 && w.1 & 1 << (pfn % 64) != 0)
        };
        frames.retain(|&(_, pfn)| !idle(pfn));
        let accessed = frames.len() as u64;
        let mut runs = Vec::new();
        for &(address, _) in &frames {
            push_page(&mut runs, address);
        }
        out.extend(runs.into_iter().map(|(start, end)| Observation {
            latency: None,
            data_source: None,
            pid,
            start,
            end,
            weight: ((end - start) / PAGE) as f64,
            kind: AccessKind::Any,
            time_ns: 0,
        }));
        let hold = self.held_intervals(accessed);
        if hold == 0 {
            self.mark_idle(&pfns)?;
        }
        Ok((accessed, hold))
    }

    /// smaps Referenced per mapping, written pages from soft-dirty bits (see the module doc).
    /// Returns the pages of the whole process referenced since the last clear (each of which the
    /// next clear costs the program again, if it touches it as often) and the intervals to hold
    /// this reading for; clears the bits again unless it holds.
    fn observe_referenced(
        &mut self,
        pid: u32,
        ranges: &[(u64, u64)],
        soft_dirty: bool,
        out: &mut Vec<Observation>,
    ) -> io::Result<(u64, u32)> {
        let vmas = self.kernel.smaps(pid)?;
        let referenced: u64 = vmas.iter().map(|v| v.referenced_bytes / PAGE).sum();
        for vma in &vmas {
            let pieces = intersect(ranges, vma.start, vma.end);
            if pieces.is_empty() {
                continue;
            }
            // A mapping created or grown since the last clear reports every page soft-dirty.
            let writes_known = soft_dirty && !vma.soft_dirty_flag;
            let (mut written, mut unwritten) = (Vec::new(), Vec::new());
            for &(start, end) in &pieces {
                self.for_each_page(pid, start, end, |address, entry| {
                    if entry & PM_PRESENT == 0 {
                        return;
                    }
                    if writes_known && entry & PM_SOFT_DIRTY != 0 {
                        push_page(&mut written, address);
                    } else {
                        push_page(&mut unwritten, address);
                    }
                })?;
            }
            let pages = |runs: &[(u64, u64)]| runs.iter().map(|r| (r.1 - r.0) / PAGE).sum::<u64>();
            let (written_pages, unwritten_pages) = (pages(&written), pages(&unwritten));
            out.extend(written.into_iter().map(|(start, end)| Observation {
                latency: None,
                data_source: None,
                pid,
                start,
                end,
                weight: ((end - start) / PAGE) as f64,
                kind: AccessKind::Store,
                time_ns: 0,
            }));
            // The mapping's other referenced pages, at most one per unwritten present page.
            let rest = (vma.referenced_bytes / PAGE)
                .saturating_sub(written_pages)
                .min(unwritten_pages);
            if rest == 0 {
                continue;
            }
            let per_page = rest as f64 / unwritten_pages as f64;
            let kind = if writes_known {
                AccessKind::Load
            } else {
                AccessKind::Any
            };
            out.extend(unwritten.into_iter().map(|(start, end)| Observation {
                latency: None,
                data_source: None,
                pid,
                start,
                end,
                weight: ((end - start) / PAGE) as f64 * per_page,
                kind,
                time_ns: 0,
            }));
        }
        let hold = self.held_intervals(referenced);
        if hold == 0 {
            self.clear(pid, soft_dirty)?;
        }
        Ok((referenced, hold))
    }

    /// Forgets what was armed or held for `pid` after `e`: it is armed again when next followed.
    fn disarm(&mut self, pid: u32, e: &io::Error) {
        self.held.remove(&pid);
        self.armed.remove(&pid);
        if is_gone(e) {
            tracing::debug!(pid, "proc source: the process exited");
        } else {
            tracing::warn!(pid, "proc source: {e}");
        }
    }

    fn held_intervals(&self, referenced_pages: u64) -> u32 {
        self.budget
            .map_or(0, |b| b.held_intervals(referenced_pages))
    }
}

/// Spans `[first_word, end_word)` of the idle bitmap covering sorted `pfns`, words closer than
/// `IDLE_WORD_GAP` joined.
fn word_spans(pfns: &[u64]) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for &pfn in pfns {
        let word = pfn / 64;
        match spans.last_mut() {
            Some(last) if word < last.1 + IDLE_WORD_GAP => last.1 = last.1.max(word + 1),
            _ => spans.push((word, word + 1)),
        }
    }
    spans
}

/// The part of sorted `pfns` inside a word span.
fn pfns_in(pfns: &[u64], span: (u64, u64)) -> &[u64] {
    let lo = pfns.partition_point(|&p| p / 64 < span.0);
    let hi = pfns.partition_point(|&p| p / 64 < span.1);
    &pfns[lo..hi]
}

impl<K: RefsKernel> Source for ProcSource<K> {
    fn name(&self) -> &'static str {
        "proc"
    }

    fn describe(&self) -> String {
        let held = self.held.len();
        match self.budget {
            Some(b) => format!(
                "proc ({}; budget {}% of a program's time at {} ns a page cleared, {held} \
                 process(es) held now)",
                self.precision.describe(),
                b.share * 100.0,
                b.page_cost.as_nanos()
            ),
            None => format!("proc ({}; no budget)", self.precision.describe()),
        }
    }

    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        let pids: HashSet<u32> = targets.iter().map(|t| t.pid).collect();
        for old in &self.targets {
            if !pids.contains(&old.pid) {
                self.kernel.detach(old.pid);
                self.attached.remove(&old.pid);
                self.armed.remove(&old.pid);
                self.refused.remove(&old.pid);
                self.held.remove(&old.pid);
                self.budget_logged.remove(&old.pid);
            }
        }
        let old = std::mem::take(&mut self.targets);
        for t in targets {
            if !self.attached.contains(&t.pid) {
                match self.kernel.attach(t.pid) {
                    Ok(()) => {
                        self.attached.insert(t.pid);
                    }
                    Err(e) => {
                        if self.refused.insert(t.pid) && !is_gone(&e) {
                            tracing::warn!(pid = t.pid, "proc source cannot follow it: {e}");
                        }
                        continue;
                    }
                }
            }
            if t.ranges.is_empty() {
                continue;
            }
            let holding = self.held.contains_key(&t.pid);
            let result = if !self.armed.contains(&t.pid) {
                self.first_arm(t.pid, &t.ranges)
            } else if self.precision == Precision::IdlePages && !holding {
                // Ranges new since the last observation have frames never marked idle.
                let before = old
                    .iter()
                    .find(|o| o.pid == t.pid)
                    .map_or(&[][..], |o| &o.ranges[..]);
                self.arm(t.pid, &subtract(&t.ranges, before))
            } else {
                Ok(())
            };
            match result {
                Ok(()) => {
                    self.armed.insert(t.pid);
                }
                Err(e) => {
                    self.armed.remove(&t.pid);
                    if !is_gone(&e) {
                        tracing::warn!(pid = t.pid, "proc source: {e}");
                    }
                }
            }
        }
        self.targets = targets.to_vec();
        Ok(())
    }

    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        let mut out = Vec::new();
        let targets = std::mem::take(&mut self.targets);
        for t in &targets {
            if !self.armed.contains(&t.pid) {
                continue;
            }
            if t.ranges.is_empty() {
                // Nothing to look at, nothing cleared: armed again once it has ranges.
                self.armed.remove(&t.pid);
                self.held.remove(&t.pid);
                continue;
            }
            // Within its budget's hold: the last reading's observations again, nothing read;
            // the last held interval clears, so that the next reading covers one interval.
            if let Some(held) = self.held.get_mut(&t.pid) {
                held.left -= 1;
                out.extend(held.observations.iter().cloned());
                if held.left == 0 {
                    self.held.remove(&t.pid);
                    if let Err(e) = self.arm(t.pid, &t.ranges) {
                        self.disarm(t.pid, &e);
                    }
                }
                continue;
            }
            let mut observations = Vec::new();
            let result = match self.precision {
                Precision::IdlePages => self.observe_idle(t.pid, &t.ranges, &mut observations),
                Precision::Referenced { soft_dirty } => {
                    self.observe_referenced(t.pid, &t.ranges, soft_dirty, &mut observations)
                }
            };
            match result {
                Ok((referenced_pages, left)) => {
                    if left > 0 && self.budget_logged.insert(t.pid) {
                        let b = self.budget.expect("a hold needs a budget");
                        tracing::info!(
                            pid = t.pid,
                            referenced_pages,
                            cost_ms =
                                (referenced_pages as f64 * b.page_cost.as_secs_f64() * 1e3).round(),
                            every = left + 1,
                            "proc source: clearing this process's reference bits each interval \
                             would cost it more than --proc-budget; observing it every `every` \
                             intervals"
                        );
                    }
                    if left > 0 {
                        self.held.insert(
                            t.pid,
                            Held {
                                observations: observations.clone(),
                                left,
                            },
                        );
                    }
                    out.extend(observations)
                }
                Err(e) => self.disarm(t.pid, &e),
            }
        }
        self.targets = targets;
        // Referenced bits say "since the last scan", not when: the scan's time stands for it.
        let now = crate::clock::monotonic_ns();
        for o in &mut out {
            o.time_ns = now;
        }
        Ok(out)
    }

    fn release(&mut self) {
        for pid in self.attached.drain() {
            self.kernel.detach(pid);
        }
        self.armed.clear();
        self.held.clear();
        self.budget_logged.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_sys::procrefs::{RecordingRefs, RefsWrite};

    const MIB: u64 = 1 << 20;
    const CHUNK: u64 = 0x7f00_0000_0000;
    const PID: u32 = 7;

    /// A process with eight 1 MiB objects packed into one 1 GiB chunk mapping, all written once
    /// (initialisation), and a source of this precision, not yet following it.
    fn eight_objects_unfollowed(
        precision: Precision,
        soft_dirty: bool,
    ) -> (ProcSource<RecordingRefs>, Target) {
        let mut k = RecordingRefs::new(soft_dirty);
        k.map(PID, CHUNK, CHUNK + 1024 * MIB);
        k.touch(PID, CHUNK, CHUNK + 8 * MIB, true);
        let target = Target {
            pid: PID,
            ranges: (0..8).map(|i| (object(i), object(i) + MIB)).collect(),
        };
        (ProcSource::new(k, precision), target)
    }

    /// The same, followed.
    fn eight_objects(
        precision: Precision,
        soft_dirty: bool,
    ) -> (ProcSource<RecordingRefs>, Target) {
        let (mut source, target) = eight_objects_unfollowed(precision, soft_dirty);
        source.follow(std::slice::from_ref(&target)).unwrap();
        (source, target)
    }

    /// A budget of 1 % of `interval`, at `page_cost` a page.
    fn one_percent(page_cost: Duration, interval: Duration) -> Option<ClearBudget> {
        Some(ClearBudget {
            page_cost,
            share: 0.01,
            interval,
        })
    }

    fn object(i: u64) -> u64 {
        CHUNK + i * MIB
    }

    /// Weight per object.
    fn per_object(observations: &[Observation]) -> Vec<f64> {
        (0..8)
            .map(|i| {
                observations
                    .iter()
                    .map(|o| {
                        let overlap = o
                            .end
                            .min(object(i) + MIB)
                            .saturating_sub(o.start.max(object(i)));
                        o.weight * overlap as f64 / (o.end - o.start) as f64
                    })
                    .sum()
            })
            .collect()
    }

    #[test]
    fn a_budget_holds_a_costly_process_for_as_many_intervals_as_its_cost_needs() {
        let budget = ClearBudget {
            page_cost: Duration::from_micros(1),
            share: 0.01,
            interval: Duration::from_secs(2),
        };
        // 20 ms an interval allowed: 20,000 pages.
        assert_eq!(budget.held_intervals(0), 0);
        assert_eq!(budget.held_intervals(20_000), 0);
        assert_eq!(budget.held_intervals(20_001), 1);
        assert_eq!(
            budget.held_intervals(150_000),
            7,
            "7.5 windows' worth: held 7, read on the 8th"
        );
        assert_eq!(budget.held_intervals(u64::MAX / 2), MAX_HELD_INTERVALS);
        let free = ClearBudget {
            page_cost: Duration::ZERO,
            ..budget
        };
        assert_eq!(free.held_intervals(1 << 40), 0);
    }

    /// A process whose window cost 2.5 times its share is cleared and read one interval in three:
    /// the two between repeat the last reading, and only the second of them clears, so that the
    /// next reading covers one interval as every other does.
    #[test]
    fn a_process_over_its_budget_is_read_less_often_and_its_last_reading_repeated() {
        let (mut source, _) = eight_objects(Precision::Referenced { soft_dirty: false }, false);
        // 10 ms allowed an interval; 2,048 pages at 12 µs cost 24.6 ms: held for 2 intervals.
        source.set_budget(one_percent(
            Duration::from_micros(12),
            Duration::from_secs(1),
        ));
        let writes = |s: &ProcSource<RecordingRefs>| s.kernel().writes.len();
        assert_eq!(writes(&source), 1, "following clears once");
        source.kernel_mut().touch(PID, object(0), object(8), false);
        let first = source.observe().unwrap();
        assert_eq!(per_object(&first), vec![256.0; 8]);
        assert_eq!(writes(&source), 1, "read, not cleared: held");
        // Touched only objects 0 and 1 now: the held reading says all eight, as last measured.
        source.kernel_mut().touch(PID, object(0), object(2), false);
        let again = source.observe().unwrap();
        assert_eq!(per_object(&again), vec![256.0; 8]);
        assert_eq!(
            writes(&source),
            1,
            "nothing cleared in the first held interval"
        );
        let again = source.observe().unwrap();
        assert_eq!(per_object(&again), vec![256.0; 8]);
        assert_eq!(writes(&source), 2, "the last held interval clears");
        // The next reading covers the one interval since: objects 0 and 1 (512 pages, spread
        // over the mapping's present pages without soft-dirty bits).
        source.kernel_mut().touch(PID, object(0), object(2), false);
        let fresh = source.observe().unwrap();
        assert_eq!(per_object(&fresh).iter().sum::<f64>(), 512.0);
        // 512 pages: 6 ms, within the share: cleared at once, read every interval again.
        assert_eq!(writes(&source), 3);
        source.observe().unwrap();
        assert_eq!(writes(&source), 4);
    }

    /// A process whose resident pages alone would cost more than its share to clear is not
    /// cleared when first followed: its first reading waits, and then covers one interval.
    #[test]
    fn a_large_process_is_first_cleared_when_its_budget_allows() {
        // Eight 1 MiB objects, all resident, followed by a source with a budget.
        let followed = |page_cost: Duration| {
            let (mut source, target) =
                eight_objects_unfollowed(Precision::Referenced { soft_dirty: false }, false);
            source.set_budget(one_percent(page_cost, Duration::from_secs(1)));
            source.follow(std::slice::from_ref(&target)).unwrap();
            source
        };
        // 2,048 resident pages at 12 µs: 24.6 ms against 10 ms allowed, held for 2 intervals.
        let mut source = followed(Duration::from_micros(12));
        assert!(
            source.kernel().writes.is_empty(),
            "not cleared when followed"
        );
        assert!(source.observe().unwrap().is_empty());
        assert!(source.kernel().writes.is_empty());
        assert!(source.observe().unwrap().is_empty());
        assert_eq!(
            source.kernel().writes.len(),
            1,
            "cleared in the last held interval"
        );
        source.kernel_mut().touch(PID, object(0), object(1), false);
        let first = source.observe().unwrap();
        assert_eq!(
            per_object(&first).iter().sum::<f64>(),
            256.0,
            "one interval's pages"
        );
        // Within the budget now (256 pages: 3 ms): cleared after the reading, as usual.
        assert_eq!(source.kernel().writes.len(), 2);
        // At 300 ns a page the same process costs 0.6 ms to clear: cleared when followed.
        let cheap = followed(Duration::from_nanos(300));
        assert_eq!(cheap.kernel().writes.len(), 1);
    }

    /// A process held when its objects are all freed (nothing to follow: disarmed) starts over
    /// when it has objects again: it is read, not given its old reading.
    #[test]
    fn a_process_that_had_no_objects_for_a_while_forgets_its_held_reading() {
        let (mut source, target) =
            eight_objects(Precision::Referenced { soft_dirty: false }, false);
        source.set_budget(one_percent(
            Duration::from_micros(12),
            Duration::from_secs(1),
        ));
        source.kernel_mut().touch(PID, object(0), object(8), false);
        assert_eq!(per_object(&source.observe().unwrap()), vec![256.0; 8]);
        // Held for 2 intervals; then no ranges: disarmed.
        let empty = Target {
            pid: PID,
            ranges: Vec::new(),
        };
        source.follow(std::slice::from_ref(&empty)).unwrap();
        assert!(source.observe().unwrap().is_empty());
        // Objects again, now cheap to clear: cleared when followed, read the interval after.
        source.set_budget(one_percent(Duration::from_nanos(1), Duration::from_secs(1)));
        source.follow(std::slice::from_ref(&target)).unwrap();
        let writes = source.kernel().writes.len();
        source.kernel_mut().touch(PID, object(7), object(8), false);
        let fresh = source.observe().unwrap();
        assert_eq!(per_object(&fresh).iter().sum::<f64>(), 256.0, "{fresh:?}");
        assert_eq!(source.kernel().writes.len(), writes + 1, "read and cleared");
    }

    #[test]
    fn writes_are_seen_per_page_and_reads_per_mapping() {
        let (mut source, _) = eight_objects(Precision::Referenced { soft_dirty: true }, true);
        // Following clears the accessed bits (anonymous mappings only), then the soft-dirty bits.
        let clear_both = vec![
            RefsWrite::ClearRefs {
                pid: PID,
                what: ClearRefs::Anonymous,
            },
            RefsWrite::ClearRefs {
                pid: PID,
                what: ClearRefs::SoftDirty,
            },
        ];
        assert_eq!(source.kernel().writes, clear_both);

        source.kernel_mut().touch(PID, object(3), object(4), true);
        source
            .kernel_mut()
            .touch(PID, object(5), object(5) + MIB / 2, false);
        let observations = source.observe().unwrap();
        let stores: Vec<&Observation> = observations
            .iter()
            .filter(|o| o.kind == AccessKind::Store)
            .collect();
        assert_eq!(
            stores.len(),
            1,
            "one run of written pages: {observations:?}"
        );
        assert_eq!((stores[0].start, stores[0].end), (object(3), object(4)));
        assert_eq!(stores[0].weight, 256.0);
        // The 128 read pages are known only per mapping: spread over the other seven objects.
        let weights = per_object(&observations);
        assert_eq!(weights[3], 256.0);
        for (i, w) in weights.iter().enumerate().filter(|&(i, _)| i != 3) {
            assert!((w - 128.0 / 7.0).abs() < 1e-9, "object {i}: {w}");
        }
        assert!(observations
            .iter()
            .filter(|o| o.kind != AccessKind::Store)
            .all(|o| o.kind == AccessKind::Load));
        // ...and both are cleared again, in the same order, after each observation.
        assert_eq!(source.kernel().writes[2..], clear_both[..]);

        // A quiet interval sees nothing.
        assert!(source.observe().unwrap().is_empty());
    }

    #[test]
    fn pages_never_touched_get_nothing_and_a_fresh_mapping_hides_its_writes() {
        let (mut source, mut target) =
            eight_objects(Precision::Referenced { soft_dirty: true }, true);
        // A second chunk mapped after the clear: flagged `sd`, every page of it reads
        // soft-dirty, so its writes cannot be told from its reads.
        let second = CHUNK + 1024 * MIB;
        source.kernel_mut().map(PID, second, second + 1024 * MIB);
        source.kernel_mut().touch(PID, second, second + MIB, true);
        target.ranges.push((second, second + 4 * MIB));
        source.follow(std::slice::from_ref(&target)).unwrap();
        let observations = source.observe().unwrap();
        assert!(observations.iter().all(|o| o.kind == AccessKind::Any));
        assert!(
            observations
                .iter()
                .all(|o| o.start >= second && o.end <= second + MIB),
            "the 3 MiB never touched get nothing: {observations:?}"
        );
        let total: f64 = observations.iter().map(|o| o.weight).sum();
        assert_eq!(total, 256.0);
    }

    #[test]
    fn without_soft_dirty_everything_is_per_mapping() {
        let (mut source, _) = eight_objects(Precision::Referenced { soft_dirty: false }, false);
        assert_eq!(
            source.kernel().writes,
            vec![RefsWrite::ClearRefs {
                pid: PID,
                what: ClearRefs::Anonymous
            }],
            "no soft-dirty clear (and no write faults) without soft-dirty bits"
        );
        source.kernel_mut().touch(PID, object(3), object(4), true);
        let observations = source.observe().unwrap();
        let weights = per_object(&observations);
        for w in &weights {
            assert!((w - 32.0).abs() < 1e-9, "{weights:?}");
        }
        assert!(observations.iter().all(|o| o.kind == AccessKind::Any));
    }

    #[test]
    fn idle_page_tracking_sees_every_page() {
        let (mut source, mut target) = eight_objects(Precision::IdlePages, true);
        // Following marks exactly the frames of the tracked pages idle, and clears no refs.
        let marked = |writes: &[RefsWrite]| -> Vec<u64> {
            let mut pfns: Vec<u64> = writes
                .iter()
                .flat_map(|w| match w {
                    RefsWrite::MarkIdle { first_word, words } => (*first_word..)
                        .zip(words.clone())
                        .flat_map(|(i, word)| {
                            (0..64)
                                .filter(move |b| word & 1 << b != 0)
                                .map(move |b| i * 64 + b)
                        })
                        .collect::<Vec<_>>(),
                    RefsWrite::ClearRefs { .. } => panic!("clear_refs in idle mode: {w:?}"),
                })
                .collect();
            pfns.sort_unstable();
            pfns
        };
        let mut expected: Vec<u64> = (0..8 * 256)
            .map(|i| source.kernel().pfn_of(PID, CHUNK + i * 4096).unwrap())
            .collect();
        expected.sort_unstable();
        assert_eq!(marked(&source.kernel().writes), expected);

        source
            .kernel_mut()
            .touch(PID, object(5), object(5) + MIB / 2, false);
        let observations = source.observe().unwrap();
        assert_eq!(observations.len(), 1, "{observations:?}");
        assert_eq!(
            (
                observations[0].start,
                observations[0].end,
                observations[0].weight
            ),
            (object(5), object(5) + MIB / 2, 128.0)
        );
        assert!(
            source.observe().unwrap().is_empty(),
            "all marked idle again"
        );

        // A new object: its frames are marked when it is followed, so its initialisation
        // writes do not count in the next interval.
        let new = object(8);
        source.kernel_mut().touch(PID, new, new + MIB, true);
        source.kernel_mut().writes.clear();
        target.ranges.push((new, new + MIB));
        source.follow(std::slice::from_ref(&target)).unwrap();
        let mut expected: Vec<u64> = (0..256)
            .map(|i| source.kernel().pfn_of(PID, new + i * 4096).unwrap())
            .collect();
        expected.sort_unstable();
        assert_eq!(marked(&source.kernel().writes), expected);
        assert!(source.observe().unwrap().is_empty());
    }

    #[test]
    fn exited_and_unfollowed_processes_are_dropped() {
        let (mut source, target) = eight_objects(Precision::Referenced { soft_dirty: true }, true);
        source.kernel_mut().exit(PID);
        assert!(source.observe().unwrap().is_empty());
        source.follow(std::slice::from_ref(&target)).unwrap();
        assert!(source.observe().unwrap().is_empty());
        source.follow(&[]).unwrap();
        assert!(source.attached.is_empty() && source.armed.is_empty());
        // A process not (yet) mapped in the fake cannot be attached: skipped, not an error.
        source
            .follow(&[Target {
                pid: 99,
                ranges: vec![(CHUNK, CHUNK + MIB)],
            }])
            .unwrap();
        assert!(source.observe().unwrap().is_empty());
    }

    #[test]
    fn range_helpers() {
        let ranges = [(10, 20), (30, 40), (50, 60)];
        assert_eq!(
            intersect(&ranges, 15, 55),
            vec![(15, 20), (30, 40), (50, 55)]
        );
        assert_eq!(intersect(&ranges, 20, 30), vec![]);
        assert_eq!(
            subtract(&[(0, 100)], &ranges),
            vec![(0, 10), (20, 30), (40, 50), (60, 100)]
        );
        assert_eq!(subtract(&ranges, &ranges), vec![]);
        assert_eq!(
            word_spans(&[0, 63, 64, 64 * 5, 64 * 100]),
            vec![(0, 6), (100, 101)]
        );
        assert_eq!(pfns_in(&[1, 64, 200, 6400], (1, 4)), &[64, 200]);
    }
}
