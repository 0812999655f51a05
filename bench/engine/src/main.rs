//! engine-bench: what one profiling interval of the daemon costs for 10^4 .. 10^6 records.
//!
//! A daemon is assembled as the daemon's own tests do it: a synthetic two-tier topology, the
//! recording fake page mover (`objtier_sys::pages::RecordingPageMover`) in place of
//! `move_pages`, a synthetic access source that returns the same DAMON-like regions every
//! interval, and synthetic processes whose objects are announced through their real event rings
//! (snapshot `Alloc` events, drained by the daemon's own code). Then [`Daemon::interval`] runs
//! as it does every 2 s: aggregate the regions into records, commit, locate every page (in the
//! fake), build candidates, prioritise, assign tiers, place sites, schedule and "migrate".
//!
//! Reported per size, each size in its own process (so memory figures do not mix), and run
//! twice: as the daemon runs, and with glibc told to keep freed memory, which shows what the
//! interval's page faults on fresh buffers cost:
//! - CPU time on this thread (one core; on a shared machine wall time also counts other
//!   processes' turns): the first interval (it migrates: first touch filled the fast tier in
//!   address order) and the median of the steady ones after it, and how much of each was spent
//!   inside the fake mover (hash lookups per page, which the kernel does instead);
//! - the pure policy calls (`prioritize`, `assign_tiers`) on the same candidates, median;
//! - heap bytes per record: the daemon's state (records and objects maps), each map alone, and
//!   the most extra heap one interval holds at once; and the process's peak RSS, which also
//!   holds the fake kernel's page map;
//! - once, what the kernel's `move_pages` status query costs per page on this machine, which the
//!   fake stands in for;
//! - once, at the largest size, what records coming and going cost the record store (frees and
//!   allocations at random addresses, the walk before and after it settles, the settling), next
//!   to a `BTreeMap` given the same changes, since the intervals above change no record.
//!
//! Heap figures come from a counting global allocator (bytes requested, so without malloc's
//! own per-allocation overhead). This is a benchmark, not a test: it never fails on a number.

use anyhow::{bail, Context, Result};
use clap::Parser;
use objtier_daemon::config::DaemonConfig;
use objtier_daemon::process::Process;
use objtier_daemon::source::{AccessKind, AccessSource, Observation, Source, Target};
use objtier_daemon::Daemon;
use objtier_policy::{
    assign_tiers, prioritize, Candidate, Prioritization, ProcessPolicy, TierBudget, TierBytes,
    DEFAULT_SPLIT_BYTES,
};
use objtier_sys::pages::{MoveError, PageMover, PageStatus, RecordingPageMover};
use objtier_sys::topology::Topology;
use objtier_wire::{event_flags, Event, EventKind, PAGE_SIZE};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod churn;
mod events;
mod kernel;
mod tables;

use churn::*;
use kernel::*;
use tables::*;

/// The system allocator, counting live and peak requested bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a new peak measurement; returns the live bytes it starts from.
fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Ordering::Relaxed);
    now
}

#[derive(Parser, Clone)]
#[command(
    name = "engine-bench",
    about = "Times the objtier daemon's interval and its policy for many records against a fake \
             kernel (see docs/performance.md)"
)]
struct Args {
    /// Record counts to measure, comma-separated (each in its own process).
    #[arg(long, value_delimiter = ',', default_values_t = [10_000u64, 100_000, 1_000_000])]
    records: Vec<u64>,
    /// Attached processes the records are spread over.
    #[arg(long, default_value_t = 4)]
    processes: u32,
    /// Steady intervals timed after the first (the median is reported).
    #[arg(long, default_value_t = 7)]
    intervals: u32,
    /// Sampled regions per interval, all processes together (DAMON's default max_nr_regions).
    #[arg(long, default_value_t = 1000)]
    regions: u32,
    /// Runs of each policy call timed (the median is reported).
    #[arg(long, default_value_t = 7)]
    policy_runs: u32,
    /// Print one JSON object per size instead of the markdown table.
    #[arg(long)]
    json: bool,
    /// Pages of our own memory to time the kernel's move_pages status query on.
    #[arg(long, default_value_t = 1 << 16)]
    kernel_query_pages: usize,
    /// Only the cost per event of draining a program's ring (`events.rs`), for these windows
    /// (objects freed after this many younger ones), comma-separated.
    #[arg(long, value_delimiter = ',')]
    events_only: Option<Vec<u64>>,
    /// Events drained per window in the event-cost measurement.
    #[arg(long, default_value_t = 4 << 20)]
    events: u64,
    /// Measure one size in this process (what the parent runs per size, twice).
    #[arg(long, hide = true)]
    one: Option<u64>,
    /// With --one: tell glibc to keep freed memory (mmap and trim thresholds at 1 GiB), as a
    /// daemon that kept its interval buffers would: the interval then takes no page faults.
    #[arg(long, hide = true)]
    keep_freed_memory: bool,
}

/// CPU time of this thread, in nanoseconds: what "time on one core" means on a shared machine,
/// where wall time also counts the time other processes had the CPU.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A page mover that times (in CPU time) the one it wraps.
struct Timed<M> {
    inner: M,
    ns: Arc<AtomicU64>,
}

impl<M: PageMover> PageMover for Timed<M> {
    fn query(
        &mut self,
        pid: u32,
        pages: &[u64],
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        let t = cpu_ns();
        let r = self.inner.query(pid, pages, status);
        self.ns.fetch_add(cpu_ns() - t, Ordering::Relaxed);
        r
    }

    fn move_to(
        &mut self,
        pid: u32,
        pages: &[u64],
        node: u32,
        status: &mut [PageStatus],
    ) -> Result<(), MoveError> {
        let t = cpu_ns();
        let r = self.inner.move_to(pid, pages, node, status);
        self.ns.fetch_add(cpu_ns() - t, Ordering::Relaxed);
        r
    }

    fn huge_page_size(&mut self) -> Option<u64> {
        self.inner.huge_page_size()
    }

    fn split_huge(&mut self, pid: u32, pages: &[u64]) -> Result<u64, MoveError> {
        let t = cpu_ns();
        let r = self.inner.split_huge(pid, pages);
        self.ns.fetch_add(cpu_ns() - t, Ordering::Relaxed);
        r
    }
}

/// An access source that delivers the same observations every interval: DAMON-like regions,
/// each weighted as DAMON's are (sampled accesses times pages).
struct Synthetic(Vec<Observation>);

impl Source for Synthetic {
    fn name(&self) -> &'static str {
        "synthetic"
    }
    fn describe(&self) -> String {
        format!("synthetic ({} regions)", self.0.len())
    }
    fn follow(&mut self, _targets: &[Target]) -> anyhow::Result<()> {
        Ok(())
    }
    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        let now = objtier_daemon::monotonic_ns();
        let mut observations = self.0.clone();
        for o in &mut observations {
            o.time_ns = now;
        }
        Ok(observations)
    }
}

/// splitmix64: deterministic, dependency-free pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Object size in pages: 1, 2, 4, 8 or 16 with probability 1/2, 1/4, 1/8, 1/16, 1/16
    /// (mean 3 pages, 12 KiB: most tracked objects are just above the 4 KiB threshold).
    fn pages(&mut self) -> u64 {
        (1u64 << (self.next() | 1 << 4).trailing_zeros()).min(16)
    }
}

fn two_tiers(fast_bytes: u64) -> Topology {
    Topology::two_tiers(fast_bytes, fast_bytes, 64 * fast_bytes)
}

/// What one interval cost.
struct Interval {
    cpu_ns: u64,
    wall_ns: u64,
    /// CPU time spent inside the fake page mover.
    mover_ns: u64,
    moved_pages: u64,
    /// Pages the interval asked the (fake) kernel to locate.
    located_pages: u64,
    /// Most heap the interval had allocated at once beyond what it started with.
    peak_extra_bytes: usize,
}

const FIRST_PID: u32 = 10_000;
/// Distinct allocation sites per process.
const SITES: u64 = 256;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Peak resident set of this process, in bytes.
fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as u64 * 1024
}

/// Measures one size; returns its results as JSON.
fn measure(args: &Args, records: u64) -> Result<serde_json::Value> {
    let sys = tempfile::tempdir()?;
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let mover_ns = Arc::new(AtomicU64::new(0));
    let mut config = DaemonConfig::new(sys.path().join("sock"));
    // An empty sysfs: free memory stays as the synthetic topology says.
    config.sys_root = sys.path().to_owned();
    let mut rng = Rng(0x0b7_1e4);
    let start_live = live();
    let processes = args.processes.max(1) as u64;
    let now_ns = objtier_daemon::monotonic_ns();
    // Objects of each process, announced as the library re-announces live objects when it
    // attaches (snapshot events, which become records at once).
    let mut objects: Vec<Vec<(u64, u64)>> = Vec::new();
    let mut peers = Vec::new();
    let mut built = Vec::new();
    let build_started = Instant::now();
    let mut state_bytes = 0usize;
    for pi in 0..processes {
        let (mut p, peer) =
            Process::synthetic(pi + 1, FIRST_PID + pi as u32, 1 << 16, DEFAULT_SPLIT_BYTES)?;
        let before = live();
        let n = records / processes + u64::from(pi < records % processes);
        let mut list = Vec::with_capacity(n as usize);
        let mut addr = 0x7f00_0000_0000u64 - (pi << 40);
        for i in 0..n {
            let len = rng.pages() * PAGE_SIZE as u64;
            // Now and then a freed neighbour leaves a gap, as in a real heap.
            if rng.next().is_multiple_of(8) {
                addr += PAGE_SIZE as u64;
            }
            list.push((addr, len));
            let event = Event {
                kind: EventKind::Alloc as u32,
                flags: event_flags::SNAPSHOT,
                addr,
                len,
                // Born well before the bench: past the proactive policy's settling intervals.
                time_ns: now_ns.saturating_sub(60_000_000_000),
                site: 1 + rng.next() % SITES,
            };
            addr += len;
            if !p.ring.header().push(&event) {
                bail!("ring full");
            }
            if i % (1 << 15) == (1 << 15) - 1 {
                p.drain();
            }
        }
        p.drain();
        if p.records().len() as u64 != n {
            bail!("process {pi}: {} records, expected {n}", p.records().len());
        }
        // Only the maps' growth: the Vec of objects above is the bench's own.
        state_bytes += live() - before - list.capacity() * 16;
        objects.push(list);
        peers.push(peer);
        built.push(p);
    }
    let build_s = build_started.elapsed().as_secs_f64();
    let _ = start_live;

    // Place the pages the way first touch does: the fast tier fills in address order. The fast
    // tier holds 30 % of the tracked bytes, so its 90 % budget takes 27 % of them.
    let total_bytes: u64 = objects.iter().flatten().map(|(_, l)| l).sum();
    let total_pages = total_bytes / PAGE_SIZE as u64;
    let fast_bytes = (total_bytes as f64 * 0.3) as u64 / PAGE_SIZE as u64 * PAGE_SIZE as u64;
    {
        let mut fake = fake.lock().unwrap();
        let mut fast_left = fast_bytes;
        for (pi, list) in objects.iter().enumerate() {
            let pid = FIRST_PID + pi as u32;
            for &(start, len) in list {
                let node = if fast_left >= len { 0 } else { 1 };
                if node == 0 {
                    fast_left -= len;
                }
                fake.place(pid, start, len, node);
            }
        }
    }

    // Sampled regions: each covers a run of consecutive objects of one process (DAMON with
    // fvaddr monitors exactly the tracked ranges and splits them into at most max_nr_regions
    // regions); 40 % are idle, the others were seen in 1..20 of 20 samples.
    let mut regions = Vec::new();
    let per_process = (args.regions as u64 / processes).max(1);
    for (pi, list) in objects.iter().enumerate() {
        let per_region = (list.len() as u64).div_ceil(per_process).max(1) as usize;
        for run in list.chunks(per_region) {
            let r = rng.next() % 100;
            let nr_accesses = if r < 40 { 0 } else { 1 + r % 20 };
            let (first, last) = (run[0], run[run.len() - 1]);
            let (start, end) = (first.0, last.0 + last.1);
            regions.push(Observation {
                latency: None,
                data_source: None,
                pid: FIRST_PID + pi as u32,
                start,
                end,
                weight: (nr_accesses * ((end - start) / PAGE_SIZE as u64)) as f64,
                kind: AccessKind::Any,
                time_ns: 0, // stamped by each interval's observe()
            });
        }
    }
    let region_count = regions.len();
    drop(objects);

    let policy = objtier_daemon::builtin_policy(&config);
    let mut daemon = Daemon::new(
        config,
        two_tiers(fast_bytes),
        AccessSource::new(Box::new(Synthetic(regions))),
        Box::new(Timed {
            inner: fake.clone(),
            ns: mover_ns.clone(),
        }),
        policy,
    );
    for p in built {
        daemon.processes.insert(p.id, p);
    }

    // The intervals. The fake records every move it makes; forget them between intervals.
    let run_interval = |daemon: &mut Daemon| {
        fake.lock().unwrap().calls.clear();
        mover_ns.store(0, Ordering::Relaxed);
        let base = reset_peak();
        let (wall, cpu) = (Instant::now(), cpu_ns());
        daemon.interval();
        let (cpu, wall) = (cpu_ns() - cpu, wall.elapsed().as_nanos() as u64);
        let report = daemon.last_interval.as_ref().expect("an interval report");
        let located_pages = fake.lock().unwrap().queried_pages();
        Interval {
            located_pages,
            cpu_ns: cpu,
            wall_ns: wall,
            mover_ns: mover_ns.load(Ordering::Relaxed),
            moved_pages: report.promoted_pages + report.demoted_pages,
            peak_extra_bytes: PEAK.load(Ordering::Relaxed) - base,
        }
    };
    let before_intervals = live();
    let first = run_interval(&mut daemon);
    let mut steady = Vec::new();
    for _ in 0..args.intervals {
        steady.push(run_interval(&mut daemon));
    }
    // What the daemon holds from one interval to the next beyond its records (its kept
    // buffers, sampled state).
    let kept = live().saturating_sub(before_intervals);
    let steady_ms = |f: fn(&Interval) -> u64| median(steady.iter().map(|s| ms(f(s))).collect());
    let steady_moved: u64 = steady.iter().map(|s| s.moved_pages).sum();
    let transient = steady
        .iter()
        .chain([&first])
        .map(|s| s.peak_extra_bytes)
        .max()
        .unwrap_or(0);
    let budgets: Vec<TierBudget> = daemon
        .last_interval
        .as_ref()
        .map(|r| &r.budget_bytes_by_tier)
        .context("no interval report")?
        .iter()
        .map(|&budget_bytes| TierBudget { budget_bytes })
        .collect();

    // The pure policy, on the candidates the daemon builds (rebuilt here the same way).
    let mut candidates = Vec::new();
    let mut policies = Vec::new();
    {
        let fake = fake.lock().unwrap();
        for (pi, p) in daemon.processes.values().enumerate() {
            policies.push(ProcessPolicy {
                fast_cap_bytes: p.fast_capacity_bytes,
                priority: p.priority,
            });
            for (start, r) in p.records() {
                let mut resident = TierBytes::from_elem(0, 2);
                for page in (start..start + r.len).step_by(PAGE_SIZE) {
                    if let Some(&node) = fake.placement.get(&(p.pid, page)) {
                        resident[node as usize] += PAGE_SIZE as u64;
                    }
                }
                candidates.push(r.candidate(
                    candidates.len(),
                    pi,
                    resident,
                    p.advice_for(start, r.len),
                ));
            }
        }
    }
    let (mut prioritize_ms, mut assign_ms) = (Vec::new(), Vec::new());
    for _ in 0..args.policy_runs.max(1) {
        let t = cpu_ns();
        let order = prioritize(&candidates, Prioritization::Apb);
        prioritize_ms.push(ms(cpu_ns() - t));
        let t = cpu_ns();
        let options = objtier_policy::FillFastestFirst::default();
        let assignment = assign_tiers(&candidates, &order, &budgets, &policies, &options);
        assign_ms.push(ms(cpu_ns() - t));
        std::hint::black_box(assignment);
    }
    let candidate_bytes = std::mem::size_of::<Candidate>();
    drop(candidates);

    // Each map alone: what dropping it gives back.
    let mut map_bytes = |take: &mut dyn FnMut(&mut Process) -> usize| {
        let before = live();
        let mut len = 0;
        for p in daemon.processes.values_mut() {
            len += take(p);
        }
        (before - live()) as f64 / len.max(1) as f64
    };
    let records_map = map_bytes(&mut |p| {
        let m = p.objects.take_records();
        let n = m.len();
        drop(m);
        n
    });
    let objects_map = map_bytes(&mut |p| {
        let m = p.objects.take_objects();
        let n = m.len();
        drop(m);
        n
    });
    drop(peers);

    let n = records as f64;
    Ok(serde_json::json!({
        "records": records,
        "processes": processes,
        "pages": total_pages,
        "regions": region_count,
        "build_s": build_s,
        "first_interval_ms": ms(first.cpu_ns),
        "first_interval_mover_ms": ms(first.mover_ns),
        "first_interval_moved_pages": first.moved_pages,
        "interval_ms": steady_ms(|s| s.cpu_ns),
        "interval_wall_ms": steady_ms(|s| s.wall_ns),
        "interval_mover_ms": steady_ms(|s| s.mover_ns),
        "interval_own_ms": steady_ms(|s| s.cpu_ns - s.mover_ns),
        "first_interval_located_pages": first.located_pages,
        "interval_located_pages": median(steady.iter().map(|s| s.located_pages as f64).collect()),
        "steady_moved_pages": steady_moved,
        "prioritize_ms": median(prioritize_ms),
        "assign_tiers_ms": median(assign_ms),
        "state_bytes_per_record": state_bytes as f64 / n,
        "records_map_bytes_per_record": records_map,
        "objects_map_bytes_per_record": objects_map,
        "record_bytes": std::mem::size_of::<objtier_daemon::process::Record>(),
        "candidate_bytes": candidate_bytes,
        "interval_peak_extra_bytes_per_record": transient as f64 / n,
        "kept_between_intervals_bytes_per_record": kept as f64 / n,
        "peak_rss_mib": peak_rss_bytes() as f64 / (1 << 20) as f64,
    }))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(records) = args.one {
        if args.keep_freed_memory {
            // SAFETY: mallopt only changes glibc's thresholds.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
            }
        }
        println!("{}", measure(&args, records)?);
        return Ok(());
    }
    if let Some(windows) = &args.events_only {
        return print_event_costs(windows, args.events, args.json);
    }
    let exe = std::env::current_exe()?;
    let one = |records: u64, keep: bool| -> Result<serde_json::Value> {
        let mut command = std::process::Command::new(&exe);
        command.args([
            "--one",
            &records.to_string(),
            "--processes",
            &args.processes.to_string(),
            "--intervals",
            &args.intervals.to_string(),
            "--regions",
            &args.regions.to_string(),
            "--policy-runs",
            &args.policy_runs.to_string(),
        ]);
        if keep {
            command.arg("--keep-freed-memory");
        }
        let out = command
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("running one size")?;
        if !out.status.success() {
            bail!("the run for {records} records failed ({})", out.status);
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let mut rows = Vec::new();
    for &records in &args.records {
        let mut row = one(records, false)?;
        let kept = one(records, true)?;
        row["kept_interval_own_ms"] = kept["interval_own_ms"].clone();
        row["kept_interval_ms"] = kept["interval_ms"].clone();
        if args.json {
            println!("{row}");
        } else {
            eprintln!("{records} records done");
        }
        rows.push(row);
    }
    let kernel = kernel_query_ns_per_page(args.kernel_query_pages);
    let largest = args.records.iter().copied().max().unwrap_or(0);
    let churn = records_churn(largest, &[1000, 100]);
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "kernel_query_ns_per_page": kernel.iter().map(|(how, all, turn)| (how.to_string(), serde_json::json!({"all": all, "twelfth": turn}))).collect::<serde_json::Map<String, serde_json::Value>>() })
        );
        println!("{}", serde_json::json!({ "records_churn": churn }));
    } else {
        print_tables(&rows, kernel);
        print_churn(&churn);
    }
    print_event_costs(&EVENT_WINDOWS, args.events, args.json)
}

/// Windows of the event-cost measurement by default: objects freed soon (a thread's scratch
/// buffers) and after a batch of 100,000 (a pipeline's).
const EVENT_WINDOWS: [u64; 2] = [1_000, 100_000];
