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

use super::{AccessKind, Observation, Source, Target};
use crate::config::DaemonConfig;
use objtier_sys::procrefs::{
    is_gone, ClearRefs, Precision, ProcRefs, RefsKernel, Support, PM_PFN_MASK, PM_PRESENT,
    PM_SOFT_DIRTY,
};
use objtier_wire::PAGE_SIZE;
use std::collections::HashSet;
use std::io;
use std::path::Path;

const PAGE: u64 = PAGE_SIZE as u64;

/// Pagemap entries read at once (512 KiB).
const PAGEMAP_BATCH: u64 = 1 << 16;

/// Idle bitmap words closer than this are read (and written) in one call: fewer system calls,
/// and the words between cost little (bits left clear mark nothing).
const IDLE_WORD_GAP: u64 = 8;

pub struct ProcSource<K: RefsKernel> {
    kernel: K,
    precision: Precision,
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
    let proc_root = Path::new("/proc");
    let support = Support::probe(proc_root, &config.sys_root);
    // SAFETY: geteuid has no failure mode.
    let euid = unsafe { libc::geteuid() };
    let (precision, not_taken) = Precision::choose(&support, euid)?;
    for why in not_taken {
        tracing::info!("proc source: {why}");
    }
    Ok(ProcSource::new(
        ProcRefs::new(proc_root, &config.sys_root),
        precision,
    ))
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
            targets: Vec::new(),
            attached: HashSet::new(),
            armed: HashSet::new(),
            refused: HashSet::new(),
            pagemap_buffer: Vec::new(),
        }
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

    fn clear(&mut self, pid: u32, soft_dirty: bool) -> io::Result<()> {
        self.kernel.clear_refs(pid, ClearRefs::Anonymous)?;
        if soft_dirty {
            self.kernel.clear_refs(pid, ClearRefs::SoftDirty)?;
        }
        Ok(())
    }

    /// Idle page tracking: every tracked page accessed since it was marked is one access.
    fn observe_idle(
        &mut self,
        pid: u32,
        ranges: &[(u64, u64)],
        out: &mut Vec<Observation>,
    ) -> io::Result<()> {
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
        let mut runs = Vec::new();
        for &(address, _) in &frames {
            push_page(&mut runs, address);
        }
        out.extend(runs.into_iter().map(|(start, end)| Observation {
            pid,
            start,
            end,
            weight: ((end - start) / PAGE) as f64,
            kind: AccessKind::Any,
            time_ns: 0,
        }));
        self.mark_idle(&pfns)
    }

    /// smaps Referenced per mapping, written pages from soft-dirty bits (see the module doc).
    fn observe_referenced(
        &mut self,
        pid: u32,
        ranges: &[(u64, u64)],
        soft_dirty: bool,
        out: &mut Vec<Observation>,
    ) -> io::Result<()> {
        let vmas = self.kernel.smaps(pid)?;
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
                pid,
                start,
                end,
                weight: ((end - start) / PAGE) as f64 * per_page,
                kind,
                time_ns: 0,
            }));
        }
        self.clear(pid, soft_dirty)
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
        format!("proc ({})", self.precision.describe())
    }

    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        let pids: HashSet<u32> = targets.iter().map(|t| t.pid).collect();
        for old in &self.targets {
            if !pids.contains(&old.pid) {
                self.kernel.detach(old.pid);
                self.attached.remove(&old.pid);
                self.armed.remove(&old.pid);
                self.refused.remove(&old.pid);
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
            let result = if !self.armed.contains(&t.pid) {
                self.arm(t.pid, &t.ranges)
            } else if self.precision == Precision::IdlePages {
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
                Ok(()) => out.extend(observations),
                Err(e) => {
                    self.armed.remove(&t.pid);
                    if is_gone(&e) {
                        tracing::debug!(pid = t.pid, "proc source: the process exited");
                    } else {
                        tracing::warn!(pid = t.pid, "proc source: {e}");
                    }
                }
            }
        }
        self.targets = targets;
        // Referenced bits say "since the last scan", not when: the scan's time stands for it.
        let now = crate::monotonic_ns();
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
    /// (initialisation), followed by a source of this precision.
    fn eight_objects(
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
        let mut source = ProcSource::new(k, precision);
        source.follow(std::slice::from_ref(&target)).unwrap();
        (source, target)
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
