//! The `hotcold` workload: N objects, the last K of them hot, and a measurement of where the
//! hot accesses land.
//!
//! Design choices, each made so the numbers are ground truth rather than objtier's opinion:
//!
//! - **Objects come from the C `malloc`**, called directly, so under `LD_PRELOAD=libobjtier.so`
//!   they are objtier's objects, exactly as a real application's would be.
//! - **Hot and cold objects can come from different allocation sites** (`--sites distinct`): the
//!   cold ones through one `#[inline(never)]` function, the hot ones through another, so that a
//!   per-site profile (a site is malloc's call path) can tell them apart, as it can in a real
//!   program whose hot data has its own allocation site. By default (`shared`) one loop
//!   allocates them all, and no site says which objects will be hot.
//! - **Hot objects are allocated and touched last.** First-touch placement fills the fast node in
//!   allocation order, so on a machine whose fast node is small the cold objects take it and the
//!   hot ones start in the slow tier: the worst start, which a tiering system has to fix.
//!   `--first-touch slow` gives the same start on a machine whose fast node is big.
//! - **Accesses are counted per page and weighted by where that page is.** The kernel places and
//!   migrates pages, not objects, and an object can be split across nodes mid-migration; counting
//!   per page makes `fast_share` the share of accesses that really hit the fast tier, whatever
//!   the split. Page locations come from `move_pages(2)` status queries on our own pages; we
//!   never ask objtier anything.
//! - **Query time is not loop time.** Workers stop for the once-a-second query, and `t` counts
//!   only time spent accessing, so a slow query cannot shrink the measured loop.
//! - **A phase change moves the hot set** (`--phase-after`): at that loop time the accesses go
//!   to K other objects instead, which were cold until then. No tick straddles the change, a
//!   `phase` event marks it, and every later tick measures the new hot set only, so a harness
//!   can time how long the tiering system takes to follow.
//! - **A stream of objects touched once** (`--stream`): at every tick a new object is allocated
//!   and written front to back, then never touched again; the oldest is freed once more than
//!   `--stream-keep` are live. Such data (input buffers, logs, results written once) is cold the
//!   moment it is written, so a tiering system should not let it crowd the hot set out of the
//!   fast tier. Streaming happens between ticks, outside loop time, and each tick reports how
//!   many of the live stream's bytes sit on fast nodes.
//!
//! Our own bookkeeping (page lists, counters) comes from Rust's allocator, which is also `malloc`;
//! it is tiny next to the objects and does not affect what is measured, only how fast.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::numa::{self, Topology};

/// Accesses between two looks at the clock: rare enough to be free, frequent enough (~1 ms)
/// that a one-second window ends on time.
const ACCESSES_PER_CLOCK_CHECK: u64 = 64 * 1024;
/// Length of one tick of the hot loop, in loop (access) time.
const TICK_SECONDS: f64 = 1.0;
/// A tick that ends this close before a phase change ends at it (deadlines are rounded to
/// nanoseconds), so no sliver of a tick is left before the change.
const PHASE_SLACK_SECONDS: f64 = 1e-6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FirstTouch {
    /// The thread's default policy: the local (normally fast) node first.
    Default,
    /// Prefer the slowest tier's first node, so every object starts slow.
    Slow,
}

impl FirstTouch {
    pub fn as_str(self) -> &'static str {
        match self {
            FirstTouch::Default => "default",
            FirstTouch::Slow => "slow",
        }
    }
}

/// The call paths to `malloc` the objects are allocated through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sites {
    /// One call site for every object.
    Shared,
    /// The cold objects through `allocate_cold_object`, the hot ones through
    /// `allocate_hot_object`.
    Distinct,
}

impl Sites {
    pub fn as_str(self) -> &'static str {
        match self {
            Sites::Shared => "shared",
            Sites::Distinct => "distinct",
        }
    }
}

/// Which objects become hot at a phase change (the hot set before it is always the last K).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseHot {
    /// The K objects allocated just before the last K.
    BeforeLast,
    /// The first K objects allocated.
    First,
    /// The K objects from this index (allocation order) on.
    From(usize),
    /// The K objects, outside the initial hot set, with the fewest bytes on fast nodes at the
    /// change (lowest index first among equals): wherever first touch and the tiering system
    /// left things, the new hot set starts as slow as it can.
    Slowest,
}

impl std::str::FromStr for PhaseHot {
    type Err = String;
    fn from_str(text: &str) -> Result<PhaseHot, String> {
        match text {
            "before-last" => Ok(PhaseHot::BeforeLast),
            "first" => Ok(PhaseHot::First),
            "slowest" => Ok(PhaseHot::Slowest),
            _ => text.parse().map(PhaseHot::From).map_err(|_| {
                format!("{text:?} is not before-last, first, slowest or an object index")
            }),
        }
    }
}

impl std::fmt::Display for PhaseHot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PhaseHot::BeforeLast => f.write_str("before-last"),
            PhaseHot::First => f.write_str("first"),
            PhaseHot::Slowest => f.write_str("slowest"),
            PhaseHot::From(first) => write!(f, "{first}"),
        }
    }
}

/// A phase change: after `after_seconds` of loop time the hot set moves to `hot`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    pub after_seconds: f64,
    pub hot: PhaseHot,
}

/// Indices of the hot objects before any phase change: the last `hot` of `objects`.
pub fn initial_hot_objects(objects: usize, hot: usize) -> std::ops::Range<usize> {
    objects - hot..objects
}

/// Checks that `which` can name `hot` objects outside the initial hot set: `objects` must hold
/// two disjoint sets of `hot`, and objects from an explicit index must end before the initial
/// hot set.
pub fn check_phase_hot(objects: usize, hot: usize, which: PhaseHot) -> Result<(), String> {
    if hot.checked_mul(2).is_none_or(|both| both > objects) {
        return Err(format!(
            "a phase change needs two disjoint hot sets: --objects {objects} is fewer than \
             2 x --hot {hot}"
        ));
    }
    match which {
        PhaseHot::From(first) if first > objects - 2 * hot => Err(format!(
            "--phase-hot {first}: objects {first}..{} are not all before the initial hot set \
             (the last {hot}, from {})",
            first.saturating_add(hot),
            objects - hot
        )),
        _ => Ok(()),
    }
}

/// Indices (ascending) of the objects hot after a phase change, for a `which` that
/// [`check_phase_hot`] accepted. `fast_bytes_by_object` (each object's bytes on fast nodes at
/// the change) is read only for [`PhaseHot::Slowest`].
pub fn phase_hot_objects(
    objects: usize,
    hot: usize,
    which: PhaseHot,
    fast_bytes_by_object: &[u64],
) -> Vec<usize> {
    let first = match which {
        PhaseHot::BeforeLast => objects - 2 * hot,
        PhaseHot::First => 0,
        PhaseHot::From(first) => first,
        PhaseHot::Slowest => {
            let mut candidates: Vec<usize> = (0..objects - hot).collect();
            candidates.sort_by_key(|&index| (fast_bytes_by_object[index], index));
            candidates.truncate(hot);
            candidates.sort_unstable();
            return candidates;
        }
    };
    (first..first + hot).collect()
}

/// Loop seconds the next tick may last: a whole tick, cut short by the end of the loop and by a
/// pending phase change (so no tick measures two hot sets).
pub fn tick_seconds(loop_seconds: f64, seconds: f64, pending_phase_at: Option<f64>) -> f64 {
    let end = pending_phase_at.map_or(seconds, |at| at.min(seconds));
    (end - loop_seconds).min(TICK_SECONDS)
}

#[derive(Debug, Clone)]
pub struct Config {
    pub objects: usize,
    pub object_size_bytes: usize,
    pub hot_objects: usize,
    pub seconds: f64,
    pub first_touch: FirstTouch,
    /// Whether hot and cold objects share one allocation site.
    pub sites: Sites,
    pub seed: u64,
    pub threads: usize,
    /// Move the hot set once, mid-run (None: the last K objects stay hot throughout).
    pub phase: Option<Phase>,
    /// Execute the oracle's window markers around the hot loop.
    pub oracle_window: bool,
    /// Objects touched once, one per tick (None: no stream).
    pub stream: Option<Stream>,
}

/// The stream of objects touched once: one object of `bytes` per tick, at most `keep` live.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stream {
    pub bytes: usize,
    pub keep: usize,
}

/// The evaluation oracle's window markers (bench/oracle/mark.c has the same bytes): 8-byte
/// NOPs, `nopl 0x6f72000N(%rax,%rax,1)`, N = 1 opens the window, 2 closes it.
fn oracle_mark(open: bool) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a NOP: no registers or memory change.
    unsafe {
        if open {
            std::arch::asm!(
                ".byte 0x0f, 0x1f, 0x84, 0x00, 0x01, 0x00, 0x72, 0x6f",
                options(nostack, preserves_flags)
            );
        } else {
            std::arch::asm!(
                ".byte 0x0f, 0x1f, 0x84, 0x00, 0x02, 0x00, 0x72, 0x6f",
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = open;
}

/// One line of output.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    Setup {
        objects: usize,
        size_bytes: usize,
        hot: usize,
        fast_nodes: Vec<u32>,
        slow_node: u32,
        first_touch: FirstTouch,
        /// `shared` or `distinct` (`--sites`).
        sites: Sites,
        threads: usize,
        seed: u64,
        setup_seconds: f64,
        hot_fast_bytes: u64,
        all_fast_bytes: u64,
        /// Start address of each object, in allocation order (hex), so a harness can tell which
        /// of a tiering system's records are the hot ones.
        addresses: Vec<String>,
        /// Loop time of the phase change, and `--phase-hot` (only with a phase change).
        #[serde(skip_serializing_if = "Option::is_none")]
        phase_after: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        phase_hot: Option<String>,
    },
    /// The hot set just moved: ticks from here on measure `objects` (indices in allocation
    /// order). `t` is the loop time of the change, on the ticks' clock.
    Phase {
        t: f64,
        objects: Vec<usize>,
        /// Bytes of the new hot set on fast nodes at the change.
        hot_fast_bytes: u64,
    },
    Tick {
        t: f64,
        accesses: u64,
        /// `None` (JSON null) only if no access happened in the tick.
        fast_share: Option<f64>,
        hot_fast_bytes: u64,
        /// With a stream: bytes of the live stream objects on fast nodes, and of all of them.
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_fast_bytes: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_live_bytes: Option<u64>,
    },
    /// Totals over the whole loop; `hot_fast_bytes` is of the hot set at the end.
    Summary {
        seconds: f64,
        accesses: u64,
        fast_share: Option<f64>,
        fast_share_last: Option<f64>,
        hot_fast_bytes: u64,
        all_fast_bytes: u64,
        /// With a stream: the bytes written to stream objects over the loop.
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_bytes: Option<u64>,
    },
}

/// Runs the workload, handing each event to `emit` as it happens.
pub fn run(
    config: &Config,
    topology: &Topology,
    emit: &mut dyn FnMut(Event) -> Result<()>,
) -> Result<()> {
    let page_size_bytes = page_size_bytes()?;
    let setup_start = Instant::now();
    let objects = match config.first_touch {
        FirstTouch::Default => allocate_and_touch(config)?,
        FirstTouch::Slow => {
            // The policy covers malloc too: glibc writes a chunk header (faulting the first
            // page) inside malloc, before our touch loop sees the object.
            numa::set_preferred_node(Some(topology.slow_node))?;
            let objects = allocate_and_touch(config);
            numa::set_preferred_node(None)?;
            objects?
        }
    };
    let setup_seconds = setup_start.elapsed().as_secs_f64();

    let spans = objects.spans();
    let all_map = PageMap::new(&spans, page_size_bytes);
    let mut hot_map = PageMap::new(
        &spans[initial_hot_objects(config.objects, config.hot_objects)],
        page_size_bytes,
    );
    // The phase change still to come.
    let mut pending_phase = config.phase;
    if let Some(phase) = pending_phase {
        check_phase_hot(config.objects, config.hot_objects, phase.hot)
            .map_err(anyhow::Error::msg)?;
    }
    let mut status = Vec::new();
    let mut resident_fast_bytes = |map: &PageMap| -> Result<u64> {
        numa::query_page_nodes(&map.pages, &mut status)?;
        Ok(map.fast_bytes(&status, topology))
    };
    emit(Event::Setup {
        objects: config.objects,
        size_bytes: config.object_size_bytes,
        hot: config.hot_objects,
        fast_nodes: topology.fast_nodes.clone(),
        slow_node: topology.slow_node,
        first_touch: config.first_touch,
        sites: config.sites,
        threads: config.threads,
        seed: config.seed,
        setup_seconds,
        hot_fast_bytes: resident_fast_bytes(&hot_map)?,
        all_fast_bytes: resident_fast_bytes(&all_map)?,
        addresses: objects.addrs.iter().map(|a| format!("{a:#x}")).collect(),
        phase_after: config.phase.map(|phase| phase.after_seconds),
        phase_hot: config.phase.map(|phase| phase.hot.to_string()),
    })?;

    let mut workers: Vec<Worker> = (0..config.threads as u64)
        .map(|index| {
            Worker::new(
                config.seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                hot_map.pages.len(),
            )
        })
        .collect();
    let mut hot_status = Vec::new();
    let (mut loop_seconds, mut total_accesses, mut total_fast_accesses) = (0.0, 0u64, 0u64);
    let mut fast_share_last = None;
    let mut stream = config.stream.map(StreamObjects::new);
    let mut stream_status = Vec::new();
    if config.oracle_window {
        oracle_mark(true);
    }
    while loop_seconds < config.seconds {
        if let Some(phase) =
            pending_phase.take_if(|phase| loop_seconds + PHASE_SLACK_SECONDS >= phase.after_seconds)
        {
            let fast_bytes_by_object = if phase.hot == PhaseHot::Slowest {
                let mut all_status = Vec::new();
                numa::query_page_nodes(&all_map.pages, &mut all_status)?;
                all_map.fast_bytes_by_object(&all_status, topology)
            } else {
                Vec::new()
            };
            let objects = phase_hot_objects(
                config.objects,
                config.hot_objects,
                phase.hot,
                &fast_bytes_by_object,
            );
            let hot_spans: Vec<(usize, usize)> = objects.iter().map(|&i| spans[i]).collect();
            hot_map = PageMap::new(&hot_spans, page_size_bytes);
            for worker in &mut workers {
                worker.page_access_counts = vec![0; hot_map.pages.len()];
            }
            emit(Event::Phase {
                t: loop_seconds,
                objects,
                hot_fast_bytes: resident_fast_bytes(&hot_map)?,
            })?;
        }
        if let Some(stream) = stream.as_mut() {
            stream.step()?;
        }
        let tick_start = Instant::now();
        let tick = tick_seconds(
            loop_seconds,
            config.seconds,
            pending_phase.map(|phase| phase.after_seconds),
        );
        let deadline = tick_start + Duration::from_secs_f64(tick);
        let accesses: u64 = if let [worker] = workers.as_mut_slice() {
            worker.run_until(&hot_map, deadline)
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = workers
                    .iter_mut()
                    .map(|worker| scope.spawn(|| worker.run_until(&hot_map, deadline)))
                    .collect();
                handles
                    .into_iter()
                    .map(|handle| handle.join().expect("worker panicked"))
                    .sum()
            })
        };
        loop_seconds += tick_start.elapsed().as_secs_f64();

        numa::query_page_nodes(&hot_map.pages, &mut hot_status)?;
        let fast_accesses: u64 = workers
            .iter_mut()
            .map(|worker| {
                let fast = count_fast_accesses(&worker.page_access_counts, &hot_status, topology);
                worker.page_access_counts.fill(0);
                fast
            })
            .sum();
        total_accesses += accesses;
        total_fast_accesses += fast_accesses;
        fast_share_last = fast_share(fast_accesses, accesses);
        let (stream_fast_bytes, stream_live_bytes) = match &stream {
            Some(stream) => {
                let map = stream.page_map(page_size_bytes);
                numa::query_page_nodes(&map.pages, &mut stream_status)?;
                (
                    Some(map.fast_bytes(&stream_status, topology)),
                    Some(stream.live_bytes()),
                )
            }
            None => (None, None),
        };
        emit(Event::Tick {
            t: loop_seconds,
            accesses,
            fast_share: fast_share_last,
            hot_fast_bytes: hot_map.fast_bytes(&hot_status, topology),
            stream_fast_bytes,
            stream_live_bytes,
        })?;
    }
    if config.oracle_window {
        oracle_mark(false);
    }
    // Keeps the loads from being optimized away.
    std::hint::black_box(workers.iter().fold(0, |acc, worker| acc ^ worker.load_sink));

    emit(Event::Summary {
        seconds: config.seconds,
        accesses: total_accesses,
        fast_share: fast_share(total_fast_accesses, total_accesses),
        fast_share_last,
        hot_fast_bytes: resident_fast_bytes(&hot_map)?,
        all_fast_bytes: resident_fast_bytes(&all_map)?,
        stream_bytes: stream.as_ref().map(|stream| stream.written_bytes),
    })
}

/// The live objects of a stream, oldest first (at most `keep`, so removing the oldest from the
/// front is cheap).
struct StreamObjects {
    keep: usize,
    live: Objects,
    written_bytes: u64,
}

impl StreamObjects {
    fn new(stream: Stream) -> StreamObjects {
        StreamObjects {
            keep: stream.keep,
            live: Objects {
                addrs: Vec::with_capacity(stream.keep + 1),
                size_bytes: stream.bytes,
            },
            written_bytes: 0,
        }
    }

    /// One object more, written once; the oldest freed if more than `keep` are live.
    fn step(&mut self) -> Result<()> {
        let bytes = self.live.size_bytes;
        // SAFETY: malloc has no preconditions; the result is checked for NULL below.
        let addr = unsafe { libc::malloc(bytes) } as usize;
        if addr == 0 {
            bail!("malloc({bytes}) returned NULL for a stream object: out of memory; lower --stream or --stream-keep");
        }
        self.live.addrs.push(addr);
        // SAFETY: [addr, addr + bytes) is an allocation we own and nobody else uses.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0x5a, bytes) };
        self.written_bytes += bytes as u64;
        if self.live.addrs.len() > self.keep {
            let oldest = self.live.addrs.remove(0);
            // SAFETY: from libc::malloc above, removed from `live`, so freed exactly once.
            unsafe { libc::free(oldest as *mut libc::c_void) };
        }
        Ok(())
    }

    fn live_bytes(&self) -> u64 {
        (self.live.addrs.len() * self.live.size_bytes) as u64
    }

    fn page_map(&self, page_size_bytes: usize) -> PageMap {
        PageMap::new(&self.live.spans(), page_size_bytes)
    }
}

fn page_size_bytes() -> Result<usize> {
    // SAFETY: sysconf reads a constant; no memory is passed.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page_size <= 0 || (page_size as usize).count_ones() != 1 {
        bail!("sysconf(_SC_PAGESIZE) returned {page_size}: cannot lay out pages");
    }
    Ok(page_size as usize)
}

/// The objects, freed with `libc::free` on drop (so also on every error path).
struct Objects {
    addrs: Vec<usize>,
    size_bytes: usize,
}

impl Objects {
    /// (start, length) of each object, in allocation order.
    fn spans(&self) -> Vec<(usize, usize)> {
        self.addrs
            .iter()
            .map(|&addr| (addr, self.size_bytes))
            .collect()
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        for &addr in &self.addrs {
            // SAFETY: every address came from libc::malloc and is freed exactly once, here.
            unsafe { libc::free(addr as *mut libc::c_void) };
        }
    }
}

/// Allocates every object, then writes all of each, in allocation order (so hot objects last).
fn allocate_and_touch(config: &Config) -> Result<Objects> {
    let mut objects = Objects {
        addrs: Vec::with_capacity(config.objects),
        size_bytes: config.object_size_bytes,
    };
    let first_hot = initial_hot_objects(config.objects, config.hot_objects).start;
    for index in 0..config.objects {
        let addr = match config.sites {
            // SAFETY: malloc has no preconditions; the result is checked for NULL below.
            Sites::Shared => unsafe { libc::malloc(config.object_size_bytes) as usize },
            Sites::Distinct if index < first_hot => allocate_cold_object(config.object_size_bytes),
            Sites::Distinct => allocate_hot_object(config.object_size_bytes),
        };
        if addr == 0 {
            bail!(
                "malloc({}) returned NULL for object {index} of {}: out of memory; \
                 lower --objects or --size",
                config.object_size_bytes,
                config.objects
            );
        }
        objects.addrs.push(addr);
        if !addr.is_multiple_of(8) {
            bail!(
                "malloc returned {addr:#x}, not 8-byte aligned: the allocator under test is broken"
            );
        }
    }
    for &start in &objects.addrs {
        // Filling every byte (not one per page) also initializes what the hot loop will load.
        // SAFETY: [start, start + size_bytes) is an allocation we own and nobody else uses.
        unsafe { std::ptr::write_bytes(start as *mut u8, 0xa5, objects.size_bytes) };
    }
    Ok(objects)
}

/// Objects allocated by [`allocate_cold_object`] and [`allocate_hot_object`] so far (NULLs
/// included). Their one use is to be a side effect that differs between the two functions.
static COLD_OBJECTS_ALLOCATED: AtomicU64 = AtomicU64::new(0);
static HOT_OBJECTS_ALLOCATED: AtomicU64 = AtomicU64::new(0);

// The cold and the hot allocation site of `--sites distinct`: what matters is that malloc
// returns into a different function for each, so that an unwinder walking from malloc sees two
// call paths. Hence `inline(never)`; `black_box` on the result, so the call to malloc is not a
// tail call (a `jmp malloc` would leave the caller's return address, the same for both); and a
// counter of its own in each, after the call, so that the two bodies differ and LLVM's
// function merging cannot fold one into the other.

/// Allocates one cold object with `libc::malloc` (0 for NULL).
#[inline(never)]
fn allocate_cold_object(size_bytes: usize) -> usize {
    // SAFETY: malloc has no preconditions; the caller checks the result for NULL.
    let addr = std::hint::black_box(unsafe { libc::malloc(size_bytes) }) as usize;
    COLD_OBJECTS_ALLOCATED.fetch_add(1, Ordering::Relaxed);
    addr
}

/// Allocates one hot object with `libc::malloc` (0 for NULL).
#[inline(never)]
fn allocate_hot_object(size_bytes: usize) -> usize {
    // SAFETY: malloc has no preconditions; the caller checks the result for NULL.
    let addr = std::hint::black_box(unsafe { libc::malloc(size_bytes) }) as usize;
    HOT_OBJECTS_ALLOCATED.fetch_add(1, Ordering::Relaxed);
    addr
}

/// The pages a set of objects span, in object order, with each object's slot in that list.
/// Neighbouring small objects may share a page; it then appears once per object, which only
/// costs a duplicate query.
pub struct PageMap {
    page_shift: u32,
    spans: Vec<ObjectSpan>,
    /// Page-aligned addresses: the `move_pages` query list, and the counter index.
    pub pages: Vec<usize>,
}

struct ObjectSpan {
    start: usize,
    len_bytes: usize,
    first_page_slot: usize,
}

impl PageMap {
    pub fn new(objects: &[(usize, usize)], page_size_bytes: usize) -> PageMap {
        let page_shift = page_size_bytes.trailing_zeros();
        let mut map = PageMap {
            page_shift,
            spans: Vec::with_capacity(objects.len()),
            pages: Vec::new(),
        };
        for &(start, len_bytes) in objects {
            map.spans.push(ObjectSpan {
                start,
                len_bytes,
                first_page_slot: map.pages.len(),
            });
            let (first_page, last_page) =
                (start >> page_shift, (start + len_bytes - 1) >> page_shift);
            map.pages
                .extend((first_page..=last_page).map(|page| page << page_shift));
        }
        map
    }

    /// Bytes of the objects that sit on fast nodes, given `status[slot]` for each page.
    pub fn fast_bytes(&self, status: &[i32], topology: &Topology) -> u64 {
        self.fast_bytes_by_object(status, topology).iter().sum()
    }

    /// Bytes of each object (in map order) that sit on fast nodes.
    pub fn fast_bytes_by_object(&self, status: &[i32], topology: &Topology) -> Vec<u64> {
        let page_size_bytes = 1usize << self.page_shift;
        self.spans
            .iter()
            .map(|span| {
                let end = span.start + span.len_bytes;
                let page_count =
                    ((end - 1) >> self.page_shift) - (span.start >> self.page_shift) + 1;
                let slots = span.first_page_slot..span.first_page_slot + page_count;
                let mut fast_bytes = 0;
                for (&page, &node) in self.pages[slots.clone()].iter().zip(&status[slots]) {
                    if topology.is_fast(node) {
                        fast_bytes +=
                            ((page + page_size_bytes).min(end) - page.max(span.start)) as u64;
                    }
                }
                fast_bytes
            })
            .collect()
    }
}

/// Accesses (summed from per-page counts) that hit pages on fast nodes.
pub fn count_fast_accesses(page_access_counts: &[u32], status: &[i32], topology: &Topology) -> u64 {
    page_access_counts
        .iter()
        .zip(status)
        .filter(|&(_, &node)| topology.is_fast(node))
        .map(|(&count, _)| u64::from(count))
        .sum()
}

pub fn fast_share(fast_accesses: u64, accesses: u64) -> Option<f64> {
    (accesses > 0).then(|| fast_accesses as f64 / accesses as f64)
}

/// One access thread's state; it lives across ticks so the random stream continues.
struct Worker {
    rng_state: u64,
    page_access_counts: Vec<u32>,
    load_sink: u64,
}

impl Worker {
    fn new(seed: u64, hot_page_count: usize) -> Worker {
        Worker {
            rng_state: seed,
            page_access_counts: vec![0; hot_page_count],
            load_sink: 0,
        }
    }

    /// splitmix64: one add and three multiply-xorshifts, good enough to scatter accesses.
    fn next_random(&mut self) -> u64 {
        self.rng_state = self.rng_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Random 8-byte accesses (7 loads to 1 store), uniform over the hot bytes, until `deadline`.
    fn run_until(&mut self, hot_map: &PageMap, deadline: Instant) -> u64 {
        let words_per_object = (hot_map.spans[0].len_bytes / 8) as u64;
        let object_count = hot_map.spans.len() as u64;
        let mut accesses = 0;
        loop {
            for _ in 0..ACCESSES_PER_CLOCK_CHECK {
                let random = self.next_random();
                let span = &hot_map.spans[uniform_below(random, object_count)];
                let addr = span.start + 8 * uniform_below(self.next_random(), words_per_object);
                let slot = span.first_page_slot + (addr >> hot_map.page_shift)
                    - (span.start >> hot_map.page_shift);
                self.page_access_counts[slot] += 1;
                // SAFETY: `addr` is 8-byte aligned (malloc alignment plus a multiple of 8) and
                // its 8 bytes lie inside a live hot object, which outlives the hot loop. Atomic
                // access keeps concurrent workers free of data races; Relaxed is a plain mov.
                let word = unsafe { &*(addr as *const AtomicU64) };
                if random & 7 == 0 {
                    word.store(random, Ordering::Relaxed);
                } else {
                    self.load_sink ^= word.load(Ordering::Relaxed);
                }
            }
            accesses += ACCESSES_PER_CLOCK_CHECK;
            if Instant::now() >= deadline {
                return accesses;
            }
        }
    }
}

/// Maps a uniform 64-bit random number to [0, bound) without division (Lemire's multiply-shift).
fn uniform_below(random: u64, bound: u64) -> usize {
    ((u128::from(random) * u128::from(bound)) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology() -> Topology {
        Topology {
            fast_nodes: vec![0],
            slow_node: 1,
        }
    }

    #[test]
    fn a_stream_keeps_its_newest_objects_and_counts_what_it_wrote() {
        let mut stream = StreamObjects::new(Stream {
            bytes: 3 * 4096 + 10,
            keep: 2,
        });
        for _ in 0..5 {
            stream.step().unwrap();
        }
        assert_eq!(stream.live.addrs.len(), 2);
        assert_eq!(stream.live_bytes(), 2 * (3 * 4096 + 10));
        assert_eq!(stream.written_bytes, 5 * (3 * 4096 + 10));
        let newest = *stream.live.addrs.last().unwrap();
        // SAFETY: the newest object is live and was written whole.
        let last = unsafe { *((newest + 3 * 4096 + 9) as *const u8) };
        assert_eq!(last, 0x5a);
        // Four or five pages per object, however malloc aligned it.
        let pages = stream.page_map(4096).pages.len();
        assert!((8..=10).contains(&pages), "{pages}");
    }

    #[test]
    fn distinct_sites_allocate_the_cold_objects_then_the_hot_ones_through_their_own_functions() {
        let config = |sites| Config {
            objects: 5,
            object_size_bytes: 4096 + 8,
            hot_objects: 2,
            seconds: 1.0,
            first_touch: FirstTouch::Default,
            sites,
            seed: 1,
            threads: 1,
            phase: None,
            oracle_window: false,
            stream: None,
        };
        // The only test that allocates through the two functions, so the counts are exact.
        let counts = || {
            (
                COLD_OBJECTS_ALLOCATED.load(Ordering::Relaxed),
                HOT_OBJECTS_ALLOCATED.load(Ordering::Relaxed),
            )
        };
        let before = counts();
        let shared = allocate_and_touch(&config(Sites::Shared)).unwrap();
        assert_eq!(shared.addrs.len(), 5);
        assert_eq!(counts(), before);
        let distinct = allocate_and_touch(&config(Sites::Distinct)).unwrap();
        assert_eq!(distinct.addrs.len(), 5);
        assert_eq!(counts(), (before.0 + 3, before.1 + 2));
        for &addr in &distinct.addrs {
            // SAFETY: each object is live and was written whole.
            let last = unsafe { *((addr + 4096 + 7) as *const u8) };
            assert_eq!(last, 0xa5);
        }
    }

    #[test]
    fn fast_share_weights_accesses_by_page_node() {
        let counts = [10, 30, 0, 60];
        let status = [0, 1, 0, -libc::ENOENT];
        assert_eq!(count_fast_accesses(&counts, &status, &topology()), 10);
        assert_eq!(fast_share(10, 100), Some(0.1));
        assert_eq!(fast_share(0, 0), None);
    }

    #[test]
    fn page_map_counts_partial_pages() {
        // Object A: 100 bytes into page 1, 2 pages + 100 bytes long -> spans pages 1..=3.
        // Object B: shares page 3 with A.
        let a = (4096 + 100, 2 * 4096 + 100);
        let b = (3 * 4096 + 1000, 100);
        let map = PageMap::new(&[a, b], 4096);
        assert_eq!(map.pages, vec![4096, 8192, 12288, 12288]);
        // Pages 1 and 3 fast, page 2 slow.
        let status = [0, 1, 0, 0];
        let a_fast = (4096 - 100) + (a.0 + a.1 - 12288);
        assert_eq!(map.fast_bytes(&status, &topology()), (a_fast + 100) as u64);
        assert_eq!(map.fast_bytes(&[0; 4], &topology()), (a.1 + b.1) as u64);
    }

    #[test]
    fn accesses_stay_inside_hot_objects() {
        let mut object = vec![0u64; 3 * 512 + 1]; // 3 pages and a bit, 8-byte aligned
        let span = (object.as_mut_ptr() as usize, object.len() * 8);
        let map = PageMap::new(&[span], 4096);
        let mut worker = Worker::new(7, map.pages.len());
        let accesses = worker.run_until(&map, Instant::now());
        assert_eq!(accesses, ACCESSES_PER_CLOCK_CHECK);
        let counted: u64 = worker
            .page_access_counts
            .iter()
            .map(|&c| u64::from(c))
            .sum();
        assert_eq!(counted, accesses);
        assert!(
            worker.page_access_counts.iter().all(|&c| c > 0),
            "{:?}",
            worker.page_access_counts
        );
    }

    #[test]
    fn hot_sets_before_and_after_a_phase_change() {
        let pick = |objects, hot, which| {
            check_phase_hot(objects, hot, which)?;
            Ok::<_, String>(phase_hot_objects(objects, hot, which, &[]))
        };
        assert_eq!(initial_hot_objects(12, 2), 10..12);
        assert_eq!(pick(12, 2, PhaseHot::BeforeLast), Ok(vec![8, 9]));
        assert_eq!(pick(12, 2, PhaseHot::First), Ok(vec![0, 1]));
        assert_eq!(pick(12, 2, PhaseHot::From(5)), Ok(vec![5, 6]));
        assert_eq!(pick(12, 2, PhaseHot::From(8)), Ok(vec![8, 9]));
        assert!(pick(12, 2, PhaseHot::From(9))
            .unwrap_err()
            .contains("not all before the initial hot set"));
        assert!(pick(12, 2, PhaseHot::From(usize::MAX)).is_err());
        // Exactly two sets fit: they touch but do not overlap.
        assert_eq!(pick(4, 2, PhaseHot::BeforeLast), Ok(vec![0, 1]));
        assert_eq!(pick(4, 2, PhaseHot::First), Ok(vec![0, 1]));
        for which in [
            PhaseHot::BeforeLast,
            PhaseHot::First,
            PhaseHot::From(0),
            PhaseHot::Slowest,
        ] {
            assert!(check_phase_hot(3, 2, which).is_err());
            assert!(check_phase_hot(usize::MAX, usize::MAX / 2 + 1, which).is_err());
            let next = phase_hot_objects(9, 3, which, &[0; 9]);
            let first = initial_hot_objects(9, 3);
            assert_eq!(next.len(), 3);
            assert!(
                next.iter().all(|index| !first.contains(index)),
                "{next:?} overlaps {first:?}"
            );
        }
    }

    #[test]
    fn slowest_picks_the_objects_with_the_fewest_fast_bytes() {
        // Objects 6 and 7 are the initial hot set: never picked, however slow.
        let fast = [100, 0, 50, 0, 100, 10, 0, 0];
        assert_eq!(
            phase_hot_objects(8, 2, PhaseHot::Slowest, &fast),
            vec![1, 3]
        );
        // With 3 hot, object 5 (10 bytes fast) is in the initial hot set; 2 (50) is next.
        assert_eq!(
            phase_hot_objects(8, 3, PhaseHot::Slowest, &fast),
            vec![1, 2, 3]
        );
        // All equally slow: the lowest indices.
        assert_eq!(
            phase_hot_objects(8, 2, PhaseHot::Slowest, &[0; 8]),
            vec![0, 1]
        );
    }

    #[test]
    fn phase_hot_parses_and_prints() {
        for (text, which) in [
            ("before-last", PhaseHot::BeforeLast),
            ("first", PhaseHot::First),
            ("slowest", PhaseHot::Slowest),
            ("16", PhaseHot::From(16)),
        ] {
            assert_eq!(text.parse(), Ok(which));
            assert_eq!(which.to_string(), text);
        }
        for bad in ["", "last", "-1", "1.5", "First"] {
            assert!(
                bad.parse::<PhaseHot>().is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn ticks_stop_at_the_phase_change_and_the_end() {
        assert_eq!(tick_seconds(0.0, 10.0, None), 1.0);
        assert_eq!(tick_seconds(9.5, 10.0, None), 0.5);
        assert_eq!(tick_seconds(0.0, 10.0, Some(4.0)), 1.0);
        assert_eq!(tick_seconds(3.75, 10.0, Some(4.0)), 0.25);
        // A change past the end is never reached.
        assert_eq!(tick_seconds(9.5, 10.0, Some(12.0)), 0.5);
    }

    #[test]
    fn uniform_below_covers_range() {
        assert_eq!(uniform_below(0, 10), 0);
        assert_eq!(uniform_below(u64::MAX, 10), 9);
    }
}
