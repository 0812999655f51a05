//! The interval as a whole, through a [`Daemon`] with a recording fake kernel (the pure plan's
//! tests are beside it, in `plan.rs` and the policy crate).

use crate::config::DaemonConfig;
use crate::daemon::Daemon;
use crate::process::tests::{process, push};
use crate::source::AccessSource;
use objtier_sys::pages::{RecordedCall, RecordingPageMover};
use objtier_sys::topology::Topology;
use objtier_wire::{event_flags, EventKind};
use std::sync::{Arc, Mutex};

const MIB: u64 = 1 << 20;

fn two_tiers(fast_total: u64, fast_free: u64) -> Topology {
    Topology::two_tiers(fast_total, fast_free, 100 * fast_total)
}

/// A daemon with one process, a synthetic topology, no access source, and `fake` as its
/// kernel; sysfs is an empty directory, so free memory stays as the topology says.
fn daemon_with(
    topology: Topology,
    process: crate::process::Process,
    fake: &Arc<Mutex<RecordingPageMover>>,
    sys: &tempfile::TempDir,
) -> Daemon {
    let mut config = DaemonConfig::new(sys.path().join("sock"));
    config.sys_root = sys.path().to_owned();
    let policy = crate::config::builtin_policy(&config);
    let source = AccessSource::none("test");
    let mut daemon = Daemon::new(config, topology, source, Box::new(fake.clone()), policy);
    daemon.processes.insert(process.id, process);
    daemon
}

/// Announces a live object of `p` at `[start, start + len)` and puts its pages on `node` of
/// `fake`.
fn object_on(
    p: &crate::process::Process,
    fake: &Arc<Mutex<RecordingPageMover>>,
    start: u64,
    len: u64,
    node: u32,
) {
    push(p, EventKind::Alloc, start, len, event_flags::SNAPSHOT);
    fake.lock().unwrap().place(p.pid, start, len, node);
}

/// Nine cold 1 MiB objects filling a 10 MiB fast tier to its 0.9 fill (the 1 MiB reserve
/// free) and a hot 2 MiB object in the slow tier, placed in `fake`. Returns the daemon and
/// the hot object.
fn hot_object_behind_a_full_fast_tier(
    fake: &Arc<Mutex<RecordingPageMover>>,
    sys: &tempfile::TempDir,
) -> (Daemon, u64) {
    let (mut p, _peer) = process();
    let base = 0x7000_0000_0000u64;
    for i in 0..9 {
        let start = base + i * MIB;
        object_on(&p, fake, start, MIB, 0);
    }
    let hot = base + 64 * MIB;
    object_on(&p, fake, hot, 2 * MIB, 1);
    p.drain();
    p.records_mut().get_mut(hot).unwrap().interval_accesses = 100.0;
    (daemon_with(two_tiers(10 * MIB, MIB), p, fake, sys), hot)
}

/// Records are a 32nd of the fast tier at most (64 MiB beside a large one), a fast-tier cap
/// counts as its size, and `--split` overrides both.
#[test]
fn the_split_follows_the_fast_tier_unless_given() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (p, _peer) = process();
    let mut daemon = daemon_with(two_tiers(92_000_000, 0), p, &fake, &sys);
    assert_eq!(daemon.split_bytes(), 2 * MIB);
    daemon.topology = two_tiers(8 << 30, 0);
    assert_eq!(daemon.split_bytes(), 64 * MIB);
    daemon.config.fast_capacity_bytes = Some(512 * MIB);
    assert_eq!(daemon.split_bytes(), 16 * MIB);
    daemon.config.split_bytes = Some(128 * MIB);
    assert_eq!(daemon.split_bytes(), 128 * MIB);
}

/// The access source's ranges are derived again when, and only when, records come or go.
#[test]
fn intervals_are_short_while_a_process_is_young() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (p, _peer) = process();
    let id = p.id;
    let mut daemon = daemon_with(two_tiers(64 * MIB, 64 * MIB), p, &fake, &sys);
    let long = daemon.config.interval;
    daemon.processes.get_mut(&id).unwrap().attached_ns = crate::clock::monotonic_ns();
    assert_eq!(daemon.config.startup_interval, None, "off by default");
    assert_eq!(daemon.next_interval_length(), long, "turned off");
    let short = Some(std::time::Duration::from_millis(
        objtier_policy::DEFAULT_STARTUP_INTERVAL_MS,
    ));
    daemon.config.startup_interval = short;
    assert_eq!(Some(daemon.next_interval_length()), short, "just attached");
    daemon.processes.get_mut(&id).unwrap().planned = true;
    assert_eq!(daemon.next_interval_length(), long, "planned once already");
    daemon.processes.get_mut(&id).unwrap().planned = false;
    let window = daemon.config.startup_window.as_nanos() as u64;
    daemon.processes.get_mut(&id).unwrap().attached_ns =
        crate::clock::monotonic_ns().saturating_sub(window + 1);
    assert_eq!(daemon.next_interval_length(), long, "grown up");
    daemon.processes.clear();
    assert_eq!(daemon.next_interval_length(), long, "nobody attached");
}

#[test]
fn source_ranges_follow_the_records() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (p, _peer) = process();
    let id = p.id;
    let base = 0x7000_0000_0000u64;
    push(&p, EventKind::Alloc, base, MIB, event_flags::SNAPSHOT);
    push(
        &p,
        EventKind::Alloc,
        base + 4 * MIB,
        MIB,
        event_flags::SNAPSHOT,
    );
    let mut daemon = daemon_with(two_tiers(64 * MIB, 64 * MIB), p, &fake, &sys);
    daemon.processes.get_mut(&id).unwrap().drain();
    daemon.interval();
    let p = &daemon.processes[&id];
    let generation = p.objects.generation();
    assert_eq!(
        p.source_ranges,
        (
            generation,
            vec![(base, base + MIB), (base + 4 * MIB, base + 5 * MIB)]
        )
    );
    daemon.interval();
    assert_eq!(
        daemon.processes[&id].objects.generation(),
        generation,
        "nothing changed"
    );
    let p = daemon.processes.get_mut(&id).unwrap();
    push(p, EventKind::Free, base, 0, 0);
    p.drain();
    daemon.interval();
    let p = &daemon.processes[&id];
    assert!(p.objects.generation() > generation);
    assert_eq!(
        p.source_ranges,
        (
            p.objects.generation(),
            vec![(base + 4 * MIB, base + 5 * MIB)]
        )
    );
}

#[test]
fn a_quarter_of_the_records_is_located_between_the_bounds() {
    let mib = |m: u64| m * 256; // pages
    assert_eq!(
        super::snapshot::locate_pages_per_interval(mib(10)),
        mib(64),
        "small jobs: all of it"
    );
    assert_eq!(
        super::snapshot::locate_pages_per_interval(mib(200)),
        mib(64)
    );
    assert_eq!(
        super::snapshot::locate_pages_per_interval(mib(2048)),
        mib(512),
        "a quarter"
    );
    assert_eq!(
        super::snapshot::locate_pages_per_interval(mib(100 << 10)),
        mib(1024),
        "at most 1 GiB"
    );
}

/// With more record pages than one interval locates, each interval locates a rotating share
/// of the records plus those whose location is unknown (new, or moved by the last step),
/// and counts the others where they were last seen.
#[test]
fn many_records_are_located_a_share_at_a_time() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut p, _peer) = process();
    let base = 0x7000_0000_0000u64;
    // 32 cold objects of 64 MiB in the slow tier: 2^19 pages, four times what one interval
    // locates (a quarter of them).
    for i in 0..32 {
        let start = base + i * 64 * MIB;
        object_on(&p, &fake, start, 64 * MIB, 1);
    }
    p.drain();
    let id = p.id;
    let mut daemon = daemon_with(two_tiers(4096 * MIB, 4096 * MIB), p, &fake, &sys);
    let queried = || {
        let mut fake = fake.lock().unwrap();
        let pages = fake.queried_pages();
        fake.calls.clear();
        pages
    };
    let all = 32 * 64 * MIB / 4096;
    daemon.interval();
    assert_eq!(queried(), all, "nothing known yet: every record is located");
    let turns: Vec<u64> = (0..4)
        .map(|_| {
            daemon.interval();
            queried()
        })
        .collect();
    assert!(turns.iter().all(|&t| t > 0), "{turns:?}");
    assert_eq!(
        turns.iter().sum::<u64>(),
        all,
        "four turns locate each record once"
    );
    assert!(
        turns.iter().all(|t| t % (64 * MIB / 4096) == 0),
        "whole records only"
    );
    let process = &daemon.processes[&id];
    assert!(process.records().values().all(|r| r.resident.known()));
    assert_eq!(process.resident_bytes_by_tier, vec![0, 32 * 64 * MIB]);

    // A record turns hot: it moves up, is unknown until located again, and is located at
    // the next interval whatever the turn.
    let hot = base + 5 * 64 * MIB;
    let record = daemon
        .processes
        .get_mut(&id)
        .unwrap()
        .records_mut()
        .get_mut(hot)
        .unwrap();
    record.interval_accesses = 100.0;
    daemon.interval();
    assert_eq!(
        daemon.last_interval.as_ref().unwrap().promoted_pages,
        64 * MIB / 4096
    );
    assert!(!daemon.processes[&id].records()[&hot].resident.known());
    queried();
    daemon.interval();
    let record = &daemon.processes[&id].records()[&hot];
    assert_eq!(record.resident.pages(0), 64 * MIB / 4096);
    assert_eq!(
        daemon.processes[&id].resident_bytes_by_tier,
        vec![64 * MIB, 31 * 64 * MIB]
    );
    assert_eq!(daemon.last_interval.as_ref().unwrap().promoted_pages, 0);
}

#[test]
fn the_rate_limit_holds_back_what_does_not_fit_the_interval() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, _hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    // 3 MiB per 2 s interval: the 2 MiB demotion fits, the 2 MiB promotion after it does not.
    daemon.config.rate_limit_bytes_per_second = Some(3 * MIB / 2);
    daemon.interval();
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!(report.demoted_pages, 512);
    assert_eq!(report.promoted_pages, 0);
    assert_eq!(report.rate_limited_pages, 512);
    assert_eq!(
        report.deferred_pages, 0,
        "held back for the next interval, not re-planned"
    );
    assert_eq!(fake.lock().unwrap().moves().len(), 1);
}

/// Nine cold objects of 1 MiB share five huge pages: making room for a hot object demotes
/// two of them, and must not carry their neighbours along (which the next step would bring
/// back, and so on at every other step).
#[test]
fn demotions_leave_the_rest_of_a_huge_page_in_place() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    let base = 0x7000_0000_0000u64;
    let pid = daemon.processes.values().next().unwrap().pid;
    {
        let mut fake = fake.lock().unwrap();
        fake.huge_page_size = Some(2 * MIB);
        fake.huge_pages
            .extend((0..5).map(|i| (pid, base + i * 2 * MIB)));
        fake.huge_pages.insert((pid, hot));
    }
    daemon.interval();
    let report = daemon.last_interval.clone().unwrap();
    assert_eq!((report.demoted_pages, report.promoted_pages), (512, 512));
    let fake_now = fake.lock().unwrap();
    assert_eq!(
        fake_now.pages_on(0) as u64,
        9 * MIB / 4096,
        "exactly the planned pages left the fast tier"
    );
    assert!(
        (0..2 * MIB)
            .step_by(4096)
            .all(|o| fake_now.placement[&(pid, hot + o)] == 0),
        "the hot object is in the fast tier"
    );
    let splits: Vec<_> = fake_now
        .calls
        .iter()
        .filter(|c| matches!(c, RecordedCall::SplitHuge { .. }))
        .collect();
    assert!(
        report.huge_page_splits >= 1 && splits.len() == 1,
        "the blocks moved in part were split, in one call: {splits:?}"
    );
    drop(fake_now);
    let id = *daemon.processes.keys().next().unwrap();
    let record = daemon
        .processes
        .get_mut(&id)
        .unwrap()
        .records_mut()
        .get_mut(hot);
    record.unwrap().interval_accesses = 50.0;
    daemon.interval();
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!(
        (report.promoted_pages, report.demoted_pages),
        (0, 0),
        "nothing to move back"
    );
}

/// First touch filled the fast tier past its fill (nothing free, as the kernel leaves a
/// node at its watermark): the plan gives the reserve back, and the demotions that free it
/// come before the promotion, so the promotion never meets a full node.
#[test]
fn a_tier_filled_past_its_reserve_gives_the_reserve_back_first() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    daemon.topology = two_tiers(10 * MIB, 0);
    daemon.interval();

    let fake = fake.lock().unwrap();
    let moves = fake.moves();
    let promotion = moves.iter().position(|(node, _)| *node == 0).unwrap();
    let demoted_before: usize = moves[..promotion].iter().map(|(_, p)| p.len()).sum();
    assert_eq!(
        demoted_before as u64,
        3 * MIB / 4096,
        "the hot object's room and the reserve, before it moves: {moves:?}"
    );
    assert!(moves[promotion]
        .1
        .iter()
        .all(|&a| a >= hot && a < hot + 2 * MIB));
    assert_eq!(fake.pages_on(0) as u64, 8 * MIB / 4096, "1 MiB free again");
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!((report.demoted_pages, report.promoted_pages), (768, 512));
}

/// The fast node is fuller than the kernel said (its free memory went to someone else):
/// the first promotion batch meets ENOMEM, and the others are not tried, since each page
/// would fail the same way after the kernel tried to reclaim for it. They are planned
/// again at the next interval, not at once (unlike pages the step's time ran out for).
#[test]
fn a_tier_that_refused_a_promotion_gets_no_more_until_a_demotion() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut p, _peer) = process();
    let base = 0x7000_0000_0000u64;
    for i in 0..4 {
        let start = base + i * 4 * MIB;
        object_on(&p, &fake, start, 4 * MIB, 1);
    }
    p.drain();
    for (_, record) in p.records_mut().iter_mut() {
        record.interval_accesses = 100.0;
    }
    fake.lock().unwrap().node_capacity_pages.insert(0, 100);
    let mut daemon = daemon_with(two_tiers(64 * MIB, 40 * MIB), p, &fake, &sys);
    daemon.interval();

    let report = daemon.last_interval.clone().unwrap();
    let fake = fake.lock().unwrap();
    let promotions: Vec<_> = fake.moves().into_iter().filter(|(n, _)| *n == 0).collect();
    assert_eq!(promotions.len(), 1, "one batch tried: {:?}", report);
    assert_eq!(report.promoted_pages, 100);
    assert_eq!(report.failures.get("promote ENOMEM"), Some(&(1024 - 100)));
    assert_eq!(report.full_tier_pages, 3 * 1024, "the other three batches");
    assert_eq!(report.deferred_pages, 0, "not re-planned at once");
}

/// The whole interval against a recording fake kernel: a hot object in the slow tier and a
/// fast tier full of cold ones. Exactly enough cold pages are demoted, before the hot object
/// is promoted, and nothing else moves.
#[test]
fn interval_demotes_then_promotes_through_the_page_mover() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    let base = 0x7000_0000_0000u64;
    daemon.interval();

    let fake = fake.lock().unwrap();
    let moves = fake.moves();
    assert_eq!(
        moves.len(),
        2,
        "one demotion batch, one promotion batch: {moves:?}"
    );
    let (demote_node, demoted) = &moves[0];
    let (promote_node, promoted) = &moves[1];
    assert_eq!(*demote_node, 1, "demotions come first");
    assert_eq!(
        demoted.len() as u64,
        2 * MIB / 4096,
        "2 MiB of cold pages make room"
    );
    assert!(demoted.iter().all(|&a| a >= base && a < base + 9 * MIB));
    assert_eq!(*promote_node, 0);
    assert_eq!(promoted.len() as u64, 2 * MIB / 4096);
    assert!(promoted.iter().all(|&a| a >= hot && a < hot + 2 * MIB));
    assert!(matches!(fake.calls[0], RecordedCall::Query { .. }));
    let mut every_page: Vec<u64> = moves.iter().flat_map(|(_, pages)| pages.clone()).collect();
    let moved = every_page.len();
    every_page.sort_unstable();
    every_page.dedup();
    assert_eq!(every_page.len(), moved, "no page moves twice in one plan");
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!(report.demoted_pages, 512);
    assert_eq!(report.promoted_pages, 512);
    assert_eq!(
        fake.pages_on(0) as u64,
        9 * MIB / 4096,
        "the fast tier stays at 90 %"
    );
    drop(fake);

    // Steady state: a second interval moves nothing (the hot object was seen again).
    let id = *daemon.processes.keys().next().unwrap();
    daemon
        .processes
        .get_mut(&id)
        .unwrap()
        .records_mut()
        .get_mut(hot)
        .unwrap()
        .interval_accesses = 50.0;
    daemon.interval();
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!((report.promoted_pages, report.demoted_pages), (0, 0));
}

/// Where `LargeHotRecord` puts its object.
const LARGE_HOT: u64 = 0x7000_0000_0000;

/// A daemon over two tiers of `fast_bytes` free fast memory each way, whose one process
/// holds a 48 MiB object at `LARGE_HOT` in the slow tier, with record parts as
/// `record_parts` and the page mover's huge pages of `huge` bytes.
struct LargeHotRecord {
    daemon: Daemon,
    fake: Arc<Mutex<RecordingPageMover>>,
    pid: u32,
    id: u64,
    // Kept for the daemon's life: the library's end of the socket, and the sysfs stand-in.
    _peer: std::os::unix::net::UnixStream,
    _sys: tempfile::TempDir,
}

impl LargeHotRecord {
    fn new(fast_bytes: u64, record_parts: bool, huge: Option<u64>) -> Self {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        fake.lock().unwrap().huge_page_size = huge;
        let (mut p, peer) = process();
        let (pid, id) = (p.pid, p.id);
        object_on(&p, &fake, LARGE_HOT, 48 * MIB, 1);
        p.drain();
        let mut daemon = daemon_with(two_tiers(fast_bytes, fast_bytes), p, &fake, &sys);
        daemon.config.record_parts = record_parts;
        daemon.policy = crate::config::builtin_policy(&daemon.config);
        Self {
            daemon,
            fake,
            pid,
            id,
            _peer: peer,
            _sys: sys,
        }
    }

    /// Marks the object hot, runs an interval, and returns its pages in the fast tier.
    fn interval(&mut self) -> Vec<u64> {
        let p = self.daemon.processes.get_mut(&self.id).unwrap();
        p.records_mut()
            .get_mut(LARGE_HOT)
            .unwrap()
            .interval_accesses = 100.0;
        self.daemon.interval();
        (LARGE_HOT..LARGE_HOT + 48 * MIB)
            .step_by(4096)
            .filter(|&a| self.fake.lock().unwrap().placement.get(&(self.pid, a)) == Some(&0))
            .collect()
    }
}

/// A hot record larger than the fast tier's budget: the part that fits is promoted (its
/// first pages); a budget that shrinks within the slack moves nothing; one that shrinks
/// more demotes the end of the part. With whole records nothing of it moves.
#[test]
fn a_hot_record_larger_than_the_budget_gets_the_part_that_fits() {
    let run = |record_parts: bool| {
        let mut setup = LargeHotRecord::new(40 * MIB, record_parts, None);
        let mut interval = |fast_cap: Option<u64>| {
            setup.daemon.config.fast_capacity_bytes = fast_cap;
            let fast = setup.interval();
            let report = setup.daemon.last_interval.clone().unwrap();
            let parts = (report.record_parts, report.record_part_bytes);
            assert_eq!(parts.0, usize::from(record_parts), "{parts:?}");
            (fast, report.promoted_pages, report.demoted_pages)
        };
        (
            interval(None),
            interval(Some(39 * MIB + 512 * 1024)),
            interval(Some(30 * MIB)),
        )
    };
    let page = |mib: u64| mib * MIB / 4096;
    let (first, within, beyond) = run(true);
    // 90 % of 40 MiB: a 36 MiB part, the record's first 36 MiB.
    let first_36: Vec<u64> = (0x7000_0000_0000u64..)
        .step_by(4096)
        .take(page(36) as usize)
        .collect();
    assert_eq!(first, (first_36.clone(), page(36), 0));
    // 90 % of 39.5 MiB is 35.55 MiB: within the 2 % slack of the 36 MiB held.
    assert_eq!(within, (first_36.clone(), 0, 0));
    // 90 % of 30 MiB: 27 MiB stay, the part's last 9 MiB go.
    assert_eq!(beyond, (first_36[..page(27) as usize].to_vec(), 0, page(9)));
    let (first, _, _) = run(false);
    assert_eq!(first, (vec![], 0, 0), "whole records: 48 MiB never fits");
}

/// With transparent huge pages, a part ends on a huge page boundary: a fast tier of 41 MiB
/// has room for 36.9 MiB of a hot 48 MiB record, and the part promoted is its first 36 MiB,
/// so no huge page is split; without them, the 36.9 MiB, to the page.
#[test]
fn a_part_ends_on_a_huge_page_boundary() {
    let run = |huge: Option<u64>| {
        let mut setup = LargeHotRecord::new(41 * MIB, true, huge);
        let fast = setup.interval().len() as u64;
        let report = setup.daemon.last_interval.clone().unwrap();
        (fast, report.promoted_pages, report.huge_page_splits)
    };
    let page = |bytes: u64| bytes / 4096;
    assert_eq!(run(Some(2 * MIB)), (page(36 * MIB), page(36 * MIB), 0));
    let part = page((41 * MIB) * 9 / 10);
    assert_eq!(run(None), (part, part, 0));
}

/// A fast tier with no free memory but 20 MiB of cold file cache: by default the cache is
/// room (the kernel reclaims it as pages move in), so a hot 8 MiB object is promoted; with
/// `reclaim_cache` off the budget is free memory only, and nothing moves. What hpcc met in
/// the evaluation: the libraries it had just read filled the fast node with file cache.
#[test]
fn cold_file_cache_in_the_fast_tier_is_room() {
    let run = |reclaim_cache: bool| {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut p, _peer) = process();
        let hot = 0x7000_0000_0000u64;
        object_on(&p, &fake, hot, 8 * MIB, 1);
        p.drain();
        let id = p.id;
        let mut topology = two_tiers(40 * MIB, 0);
        topology.nodes[0].cold_cache_bytes = 20 * MIB;
        let mut daemon = daemon_with(topology, p, &fake, &sys);
        daemon.config.reclaim_cache = reclaim_cache;
        let p = daemon.processes.get_mut(&id).unwrap();
        p.records_mut().get_mut(hot).unwrap().interval_accesses = 100.0;
        daemon.interval();
        let report = daemon.last_interval.clone().unwrap();
        (report.budget_bytes_by_tier[0], report.promoted_pages)
    };
    // 20 MiB of cache less the 4 MiB reserve the 90 % fill keeps.
    assert_eq!(run(true), (16 * MIB, 8 * MIB / 4096));
    assert_eq!(run(false), (0, 0));
}

/// A process capped at 80 MiB of the fast tier with two hot 48 MiB records in the slow
/// one: one is promoted whole and the first 32 MiB of the other (the cap's part).
#[test]
fn a_capped_process_gets_the_part_its_cap_allows() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut p, _peer) = process();
    let (a, b) = (0x7000_0000_0000u64, 0x7000_1000_0000u64);
    for start in [a, b] {
        object_on(&p, &fake, start, 48 * MIB, 1);
    }
    p.drain();
    p.fast_capacity_bytes = Some(80 * MIB);
    let id = p.id;
    let mut daemon = daemon_with(two_tiers(2048 * MIB, 2000 * MIB), p, &fake, &sys);
    for _ in 0..3 {
        let p = daemon.processes.get_mut(&id).unwrap();
        for start in [a, b] {
            p.records_mut().get_mut(start).unwrap().interval_accesses = 1000.0;
        }
        daemon.interval();
    }
    let fake = fake.lock().unwrap();
    assert_eq!(fake.pages_on(0) as u64, 80 * MIB / 4096, "48 + 32 MiB fast");
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!((report.promoted_pages, report.demoted_pages), (0, 0));
}

/// A source that delivers the observations it is given, one list per interval, and keeps
/// the targets it was last asked to follow.
struct Scripted {
    observations: std::collections::VecDeque<Vec<crate::source::Observation>>,
    targets: Arc<Mutex<Vec<crate::source::Target>>>,
}

impl Scripted {
    fn new(observations: Vec<Vec<crate::source::Observation>>) -> Scripted {
        Scripted {
            observations: observations.into(),
            targets: Arc::default(),
        }
    }
}

impl crate::source::Source for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn describe(&self) -> String {
        "scripted".into()
    }
    fn follow(&mut self, targets: &[crate::source::Target]) -> anyhow::Result<()> {
        *self.targets.lock().unwrap() = targets.to_vec();
        Ok(())
    }
    fn observe(&mut self) -> anyhow::Result<Vec<crate::source::Observation>> {
        Ok(self.observations.pop_front().unwrap_or_default())
    }
}

/// A new object is planned at the end of the interval in which it was sampled. Allocated in
/// the first half, it becomes a record halfway through (`follow_new_objects`, as `serve`
/// calls it) and the source follows its range; allocated later, it is still pending when
/// the interval ends, and becomes a record before the interval's samples are attributed,
/// so those that fell in its range (DAMON follows a freed predecessor's range, which the
/// allocator reuses) count for it. One freed before the end takes nothing.
#[test]
fn a_new_object_is_planned_at_the_end_of_the_interval_it_was_sampled_in() {
    for (mid_interval, freed) in [(true, false), (false, false), (false, true)] {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, _) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        daemon.interval(); // the fixture's hot object moves up; nothing else is hot
        let id = *daemon.processes.keys().next().unwrap();
        let pid = daemon.processes[&id].pid;
        let new = 0x7000_0000_0000u64 + 128 * MIB;
        fake.lock().unwrap().place(pid, new, MIB, 1);
        let p = daemon.processes.get_mut(&id).unwrap();
        push(p, EventKind::Alloc, new, MIB, 0);
        p.drain();
        assert!(
            p.records_mut().get_mut(new).is_none(),
            "pending until committed"
        );
        let seen = crate::source::Observation {
            latency: None,
            data_source: None,
            pid,
            start: new,
            end: new + MIB,
            weight: 1000.0,
            kind: crate::source::AccessKind::Any,
            time_ns: 1,
        };
        let source = Scripted::new(vec![vec![seen]]);
        let targets = source.targets.clone();
        daemon.source = AccessSource::new(Box::new(source));
        if mid_interval {
            daemon.follow_new_objects().unwrap();
            let followed = targets.lock().unwrap().clone();
            assert!(
                followed
                    .iter()
                    .any(|t| t.pid == pid && t.ranges.contains(&(new, new + MIB))),
                "{followed:?}"
            );
        }
        if freed {
            let p = daemon.processes.get_mut(&id).unwrap();
            push(p, EventKind::Free, new, 0, 0);
            p.drain();
        }
        daemon.interval();
        let report = daemon.last_interval.clone().unwrap();
        let promoted = if freed { 0 } else { 256 };
        assert_eq!(report.promoted_pages, promoted, "{report:?}");
        let attributed = report.attributed_share.unwrap();
        assert_eq!(attributed, if freed { 0.0 } else { 1.0 }, "{report:?}");
    }
}

/// Accesses sampled in the interval in which the daemon moved a record are no evidence
/// against its site's placement (pages can look accessed as they move); accesses of a
/// record it did not move are.
#[test]
fn a_record_seen_accessed_as_it_moves_does_not_disprove_its_sites_placement() {
    use crate::process::Evidence;
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    let id = *daemon.processes.keys().next().unwrap();
    let site = 0x5173;
    let p = daemon.processes.get_mut(&id).unwrap();
    let cold: Vec<u64> = p
        .records()
        .iter()
        .map(|(s, _)| s)
        .filter(|&s| s != hot)
        .collect();
    for (_, r) in p.records_mut().iter_mut() {
        r.created_ns = 1; // old: no birth interval in sight
    }
    for &start in &cold {
        p.records_mut().get_mut(start).unwrap().site = site;
    }
    assert!(p.place_site_auto(site, Some(1)));
    // The hot object comes up; cold ones of the watched site make its room.
    daemon.interval();
    let p = &daemon.processes[&id];
    let moved: Vec<u64> = p.placements.moved_records().copied().collect();
    assert!(!moved.is_empty(), "{:?}", daemon.last_interval);
    let still = *cold.iter().find(|s| !moved.contains(s)).unwrap();
    let pid = p.pid;
    let seen = |start: u64| crate::source::Observation {
        latency: None,
        data_source: None,
        pid,
        start,
        end: start + MIB,
        weight: 100.0,
        kind: crate::source::AccessKind::Any,
        time_ns: 1,
    };
    daemon.source = AccessSource::new(Box::new(Scripted::new(vec![
        moved.iter().map(|&s| seen(s)).collect(),
        vec![seen(still)],
    ])));
    daemon.interval();
    let evidence = |d: &Daemon| d.processes[&id].placements.evidence(site).unwrap();
    assert_eq!(evidence(&daemon), Evidence::Quiet(1), "seen as it moved");
    daemon.interval();
    assert_eq!(
        evidence(&daemon),
        Evidence::Disproved,
        "seen where it stayed"
    );
}

/// A trigger that fires before the source has seen any access waits for the first samples
/// (DAMON's first interval has none), keeping what it counted, instead of planning blind.
#[test]
fn triggers_wait_for_the_first_samples() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    let pid = daemon.processes.values().next().unwrap().pid;
    let seen = crate::source::Observation {
        latency: None,
        data_source: None,
        pid,
        start: hot,
        end: hot + 2 * MIB,
        weight: 100.0,
        kind: crate::source::AccessKind::Any,
        time_ns: 1,
    };
    daemon.source = AccessSource::new(Box::new(Scripted::new(vec![vec![], vec![seen]])));
    // Just attached: the daemon runs short intervals until the first informed plan.
    let id = *daemon.processes.keys().next().unwrap();
    daemon.processes.get_mut(&id).unwrap().attached_ns = crate::clock::monotonic_ns();
    let short = Some(std::time::Duration::from_millis(500));
    daemon.config.startup_interval = short;
    daemon.interval();
    let report = daemon.last_interval.clone().unwrap();
    assert!(!report.enforced && report.promoted_pages == 0, "{report:?}");
    assert_eq!(
        Some(daemon.next_interval_length()),
        short,
        "nothing sampled yet"
    );
    daemon.interval();
    let report = daemon.last_interval.clone().unwrap();
    assert!(report.enforced, "{report:?}");
    assert_eq!(report.promoted_pages, 512, "the hot object, once seen");
    assert_eq!(
        daemon.next_interval_length(),
        daemon.config.interval,
        "planned with samples: back to the long interval"
    );
}

/// With `time:3` nothing moves until the third interval; with `alloc:SIZE` nothing moves
/// until that much was allocated, however the program's first interval went. Priorities
/// re-plan when programs of different priority come or go.
#[test]
fn triggers_gate_enforcement() {
    use objtier_policy::TriggerSpec;
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    daemon.policy = objtier_policy::Policy::builtin(
        0.1,
        objtier_policy::Prioritization::Apb,
        &[TriggerSpec::Time(3)],
        Default::default(),
    );
    let id = *daemon.processes.keys().next().unwrap();
    let heat = |d: &mut Daemon| {
        d.processes
            .get_mut(&id)
            .unwrap()
            .records_mut()
            .get_mut(hot)
            .unwrap()
            .interval_accesses = 100.0;
    };
    for expected in [false, false, true] {
        heat(&mut daemon);
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!(report.enforced, expected, "{report:?}");
        assert_eq!(report.promoted_pages > 0, expected);
    }
    assert_eq!(daemon.totals.enforcements, 1);
    assert!(daemon.last_interval.as_ref().unwrap().trigger_reasons[0].contains("3 interval"));

    // Allocation trigger: 2 MiB allocated against a 4 MiB threshold, then 2 more.
    daemon.policy.triggers = vec![TriggerSpec::Allocation(4 * MIB).build()];
    let p = daemon.processes.get_mut(&id).unwrap();
    push(p, EventKind::Alloc, 0x7100_0000_0000, 2 * MIB, 0);
    p.drain();
    daemon.interval();
    assert!(!daemon.last_interval.as_ref().unwrap().enforced);
    let p = daemon.processes.get_mut(&id).unwrap();
    push(p, EventKind::Alloc, 0x7200_0000_0000, 2 * MIB, 0);
    p.drain();
    daemon.interval();
    let report = daemon.last_interval.as_ref().unwrap();
    assert!(report.enforced);
    assert!(
        report.trigger_reasons[0].contains("4M allocated"),
        "{report:?}"
    );

    // A lone program's priority has nobody to compete with...
    daemon.processes.get_mut(&id).unwrap().priority = 5;
    daemon.interval();
    assert!(!daemon.last_interval.as_ref().unwrap().enforced);
    // ...a second program of another priority re-plans, and so does its leaving.
    let (other, _peer) = crate::process::Process::synthetic(2, 2, 64, 64 << 20).unwrap();
    daemon.processes.insert(other.id, other);
    daemon.interval();
    let report = daemon.last_interval.as_ref().unwrap();
    assert!(report.enforced);
    assert!(report.trigger_reasons[0].contains("priorities changed"));
    daemon.processes.remove(&2);
    daemon.interval();
    let report = daemon.last_interval.as_ref().unwrap();
    assert!(report.enforced && report.trigger_reasons[0].contains("priorities changed"));
    daemon.interval();
    assert!(!daemon.last_interval.as_ref().unwrap().enforced);
}

/// A process whose pidfd says it exited is never queried nor moved, even if the fake
/// kernel still answers for its pid (as it would for another program reusing the pid).
#[test]
fn an_exited_process_is_never_touched_even_if_its_pid_answers() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut daemon, _hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pidfd = objtier_sys::socket::pidfd_open(child.id());
    child.wait().unwrap();
    let Ok(pidfd) = pidfd else {
        return; // a kernel without pidfds: nothing to test
    };
    let id = *daemon.processes.keys().next().unwrap();
    daemon.processes.get_mut(&id).unwrap().pidfd = Some(pidfd);
    fake.lock().unwrap().calls.clear();
    daemon.interval();
    assert!(fake.lock().unwrap().calls.is_empty());
    let report = daemon.last_interval.as_ref().unwrap();
    assert_eq!(report.promoted_pages + report.demoted_pages, 0);
}

/// An EMA decayed below the smallest normal `f32` becomes 0, not a subnormal that would
/// never leave (0.9 times the smallest subnormal rounds back to it).
#[test]
fn a_vanishing_ema_becomes_zero() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x10_0000, MIB, event_flags::SNAPSHOT);
    push(&p, EventKind::Alloc, 0x20_0000, MIB, event_flags::SNAPSHOT);
    p.drain();
    p.records_mut().get_mut(0x10_0000).unwrap().ema_accesses = f32::MIN_POSITIVE;
    p.records_mut().get_mut(0x20_0000).unwrap().ema_accesses = 2.0 * f32::MIN_POSITIVE;
    let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
    daemon.interval();
    let records = &daemon.processes.values().next().unwrap().records();
    assert_eq!(records[&0x10_0000].ema_accesses, 0.0);
    assert_eq!(records[&0x20_0000].ema_accesses, 1.8 * f32::MIN_POSITIVE);
}

/// A process that vanishes mid-migration is skipped without disturbing the daemon.
#[test]
fn a_vanished_process_is_skipped() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x10_0000, MIB, event_flags::SNAPSHOT);
    p.drain();
    fake.lock().unwrap().gone.push(p.pid);
    let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
    daemon.interval();
    assert_eq!(daemon.totals.intervals, 1);
    assert!(fake.lock().unwrap().moves().is_empty());
}

/// Describes a site to `p` as the library would: its frames, one event each.
fn describe_site(p: &crate::process::Process, ips: &[u64]) -> u64 {
    let site = objtier_wire::site_id::of(ips);
    for (i, &ip) in ips.iter().enumerate() {
        assert!(p.ring.header().push(&objtier_wire::Event {
            kind: EventKind::SiteFrame as u32,
            addr: ip,
            len: (i as u64) << 32 | ips.len() as u64,
            site,
            ..Default::default()
        }));
    }
    site
}

/// A memory map with the program at `app` and libc at `libc` (None: not loaded yet).
fn maps(app: u64, libc: Option<u64>) -> objtier_sys::maps::Maps {
    objtier_sys::maps::Maps::parse(&maps_text(app, libc))
}

/// [`maps`] as `/proc/PID/maps` reads.
fn maps_text(app: u64, libc: Option<u64>) -> String {
    let mut text = format!(
        "{:x}-{:x} r-xp 00001000 fe:00 7 /usr/bin/app\n",
        app + 0x1000,
        app + 0x3000
    );
    if let Some(libc) = libc {
        text += &format!(
            "{:x}-{:x} r-xp 00028000 fe:00 9 /usr/lib/libc.so.6\n",
            libc + 0x28000,
            libc + 0x1a0000
        );
    }
    text
}

/// The daemon reads a process's memory map under its proc root (`/proc` but for tests, which
/// point it at captured text) to name the sites the library describes.
#[test]
fn sites_are_named_with_the_memory_map_under_the_proc_root() {
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (p, _peer) = process();
    let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
    let site = describe_site(&p, &[app + 0x1234, libc + 0x29d90]);
    let pid = p.pid;
    let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
    let proc_root = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc_root.path().join(pid.to_string())).unwrap();
    std::fs::write(
        proc_root.path().join(pid.to_string()).join("maps"),
        maps_text(app, Some(libc)),
    )
    .unwrap();
    daemon.config.proc_root = proc_root.path().to_owned();
    daemon.processes.values_mut().for_each(|p| {
        p.drain();
    });
    daemon.interval();
    let p = daemon.processes.values().next().unwrap();
    assert_eq!(
        p.sites[&site].names.as_deref(),
        Some(
            &[
                "/usr/bin/app+0x1234".to_string(),
                "/usr/lib/libc.so.6+0x29d90".to_string()
            ][..]
        )
    );
}

/// The site store hears of a proactive placement only once two plans after it saw none of
/// its site's records accessed, and forgets the site as soon as one does, also after that.
#[test]
fn a_placement_is_remembered_only_while_its_objects_stay_unaccessed() {
    use crate::process::tests::process;
    use crate::sitestore::Learnt;
    let (mut p, _peer) = process();
    let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
    let site = |offset: u64| [app + offset, libc + 0x29d90];
    let cold = describe_site(&p, &site(0x1234));
    let late_busy = describe_site(&p, &site(0x1300));
    let early_busy = describe_site(&p, &site(0x1400));
    p.drain();
    assert!(p.name_sites(&maps(app, Some(libc))).is_empty());
    for s in [cold, late_busy, early_busy] {
        assert!(p.place_site_auto(s, Some(1)));
    }
    let remembered = |p: &crate::process::Process| {
        let mut seen: Vec<(String, Option<(u32, Learnt)>)> = p
            .seen_sites(crate::clock::monotonic_ns())
            .into_iter()
            .map(|seen| (seen.frames[0].clone(), seen.placed))
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        seen
    };
    let name = |offset: u64| format!("/usr/bin/app+{offset:#x}");
    assert!(
        remembered(&p).is_empty(),
        "nothing confirmed yet: the store keeps its own"
    );
    p.placement_plans_ended(|s| s == early_busy);
    assert_eq!(
        remembered(&p),
        [(name(0x1400), None)],
        "disproved: forgotten"
    );
    p.placement_plans_ended(|_| false);
    let confirmed = Some((1, Learnt::Proactive));
    assert_eq!(
        remembered(&p),
        [
            (name(0x1234), confirmed),
            (name(0x1300), confirmed),
            (name(0x1400), None)
        ]
    );
    // Seen accessed after it was confirmed (and saved): forgotten again.
    p.placement_plans_ended(|s| s == late_busy);
    p.placement_plans_ended(|_| false);
    assert_eq!(
        remembered(&p),
        [
            (name(0x1234), confirmed),
            (name(0x1300), None),
            (name(0x1400), None)
        ]
    );
}

/// The program of the warm-start tests' process.
fn app_program() -> crate::sitestore::Program {
    crate::sitestore::Program {
        exe: "/usr/bin/app".into(),
        uid: 0,
        exe_size: 8192,
        exe_mtime_ns: 1,
    }
}

/// Warm start end to end through the daemon: a placement learnt in one run is saved (at
/// the interval, and at detach) and applied in the next run of the same program, whose
/// addresses and site ids ASLR changed, at attach when the call path's modules are mapped,
/// else once the library describes the site; the live policy can undo it, and the store
/// forgets it then.
#[test]
fn a_learnt_placement_is_saved_and_applied_in_the_next_run() {
    use crate::process::PlacedBy;
    use crate::sitestore::{Learnt, SiteStore};
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let program = app_program();
    let store_dir = sys.path().join("sites");
    // The cold site's call path: app+0x1234 called from libc+0x29d90, and a hot one.
    let path_at = |app: u64, libc: u64| vec![app + 0x1234, libc + 0x29d90];
    let cold_names = vec![
        "/usr/bin/app+0x1234".to_string(),
        "/usr/lib/libc.so.6+0x29d90".to_string(),
    ];
    let run = |app: u64, libc: u64, mapped_at_attach: bool| {
        let (p, peer) = process();
        let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
        daemon.site_store = Some(SiteStore::new(store_dir.clone()));
        let at_attach = maps(app, mapped_at_attach.then_some(libc));
        daemon.warm_start(1, program.clone(), |_| Some(at_attach));
        (daemon, peer)
    };

    // Run 1 learns that the cold site starts in tier 1.
    let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
    let (mut daemon, _peer) = run(app, libc, true);
    let p = daemon.processes.get_mut(&1).unwrap();
    assert!(p.placements.is_empty(), "nothing remembered yet");
    let cold = describe_site(p, &path_at(app, libc));
    let other = describe_site(p, &[app + 0x1300, libc + 0x29d90]);
    let late = describe_site(p, &[app + 0x1400, libc + 0x29d90]);
    let busy = describe_site(p, &[app + 0x1500, libc + 0x29d90]);
    p.drain();
    assert!(p.name_sites(&maps(app, Some(libc))).is_empty());
    assert_eq!(p.sites[&cold].names.as_ref(), Some(&cold_names));
    assert!(
        p.place_site_auto(cold, Some(1)),
        "as the proactive policy does"
    );
    // Placed too, but its records stay accessed (they lost the fast tier's budget): the
    // placement is not confirmed, whatever the live policy keeps.
    assert!(p.place_site_auto(busy, Some(1)));
    let file = daemon.site_store.as_ref().unwrap().file_of(&program);
    assert!(!file.exists());
    daemon.interval();
    assert!(!file.exists(), "no plan has kept the placement yet");
    // The next plan keeps it (this test's source samples nothing, so the plans that would
    // call this do not run); a detach now would not save it either.
    let p = daemon.processes.get_mut(&1).unwrap();
    p.placement_plans_ended(|site| site == busy);
    daemon.interval();
    assert!(!file.exists(), "one plan kept it: not yet");
    let p = daemon.processes.get_mut(&1).unwrap();
    p.placement_plans_ended(|site| site == busy);
    daemon.interval();
    assert!(
        file.exists(),
        "saved at the interval of the second plan that kept it"
    );
    let stored = SiteStore::new(store_dir.clone()).load(&program);
    assert_eq!(
        stored.len(),
        1,
        "the other site has no placement to remember, the busy one no confirmed one"
    );
    assert_eq!(
        (&stored[0].frames, stored[0].tier, stored[0].learnt),
        (&cold_names, Some(1), Some(Learnt::Proactive))
    );
    // A placement by hand after the last interval is saved when the process detaches; a
    // proactive one no plan has kept is not (the program's last seconds, unchecked).
    let p = daemon.processes.get_mut(&1).unwrap();
    assert!(p.place_site(other, Some(0)));
    assert!(p.place_site_auto(late, Some(1)));
    daemon.detach(1);
    let stored = SiteStore::new(store_dir.clone()).load(&program);
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(
        (&stored[1].frames[0], stored[1].tier, stored[1].learnt),
        (
            &"/usr/bin/app+0x1300".to_string(),
            Some(0),
            Some(Learnt::Hand)
        )
    );

    // Run 2, another ASLR layout: the same call path has other addresses and another id,
    // and is placed at attach, before the library describes it.
    let (app, libc) = (0x5611_0000_0000, 0x7f11_0000_0000);
    let (mut daemon, _peer) = run(app, libc, true);
    let cold2 = objtier_wire::site_id::of(&path_at(app, libc));
    assert_ne!(cold2, cold);
    let p = daemon.processes.get_mut(&1).unwrap();
    assert_eq!(p.ring.control().site_tier(cold2), Some(1));
    assert_eq!(p.placements.get(&cold2), Some(&(1, PlacedBy::WarmStart)));
    let status = crate::status::status_json(&daemon, None);
    let sites = status["processes"][0]["sites"].as_array().unwrap();
    let site = sites
        .iter()
        .find(|s| s["site"] == format!("{cold2:#018x}"))
        .unwrap();
    assert_eq!(site["placed_by"], "warm start");
    assert_eq!(site["start_tier"], 1);
    assert_eq!(
        site["frames"][0], "/usr/bin/app+0x1234",
        "remembered frames"
    );
    assert_eq!(status["processes"][0]["warm_start"]["placed_at_attach"], 2);
    // Described later, it keeps the placement (named, nothing new to place).
    let p = daemon.processes.get_mut(&1).unwrap();
    assert_eq!(describe_site(p, &path_at(app, libc)), cold2);
    p.drain();
    assert!(p.name_sites(&maps(app, Some(libc))).is_empty());
    assert_eq!(p.placements.get(&cold2), Some(&(1, PlacedBy::WarmStart)));
    // Nothing learnt: detaching writes nothing.
    let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
    daemon.detach(1);
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        modified
    );

    // Run 3: libc is not mapped at attach, so the site is placed when it is named.
    let (app, libc) = (0x5622_0000_0000, 0x7f22_0000_0000);
    let (mut daemon, _peer) = run(app, libc, false);
    let p = daemon.processes.get_mut(&1).unwrap();
    assert!(p.placements.is_empty());
    let cold3 = describe_site(p, &path_at(app, libc));
    p.drain();
    assert_eq!(
        p.name_sites(&maps(app, Some(libc))),
        vec![(cold3, crate::process::Warmed::Placed(1))]
    );
    assert_eq!(p.ring.control().site_tier(cold3), Some(1));
    assert_eq!(p.placements.get(&cold3), Some(&(1, PlacedBy::WarmStart)));
    // The live policy overrides it (the site's objects turned out hot); the store forgets it
    // and keeps what this run did not see.
    assert!(p.place_site_auto(cold3, None));
    assert_eq!(p.ring.control().site_tier(cold3), None);
    daemon.detach(1);
    let stored = SiteStore::new(store_dir).load(&program);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].frames[0], "/usr/bin/app+0x1300");
}

/// Warm start of short-lived sites: a run shorter than an interval, whose sites were never
/// named by an interval nor judged live, still leaves its short-lived site in the store
/// (named with the map read at attach, judged over the whole run); the next run samples
/// the site from its attach, and a sample that lives long unmarks it and makes the store
/// forget it.
#[test]
fn a_short_lived_site_is_remembered_and_sampled_from_the_next_runs_start() {
    use crate::process::tests::{churn, push_at};
    use crate::sitestore::SiteStore;
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let program = app_program();
    let store_dir = sys.path().join("sites");
    let temp_at = |app: u64, libc: u64| vec![app + 0x1234, libc + 0x29d90];
    let kept_at = |app: u64, libc: u64| vec![app + 0x1300, libc + 0x29d90];
    let run = |app: u64, libc: u64| {
        let (p, peer) = process();
        let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
        daemon.site_store = Some(SiteStore::new(store_dir.clone()));
        let p = daemon.processes.get_mut(&1).unwrap();
        // As attach sets them (the test's young age is short, so churn() dies young).
        p.lifetimes.set_interval_ns(2_000_000_000);
        p.lifetimes.set_young_ns(Some(1_000_000));
        p.attached_ns = crate::clock::monotonic_ns();
        daemon.warm_start(1, program.clone(), |_| Some(maps(app, Some(libc))));
        (daemon, peer)
    };

    // Run 1: half a second, no interval; 20,000 temporaries at one site, and a few at
    // another whose objects are kept.
    let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
    let (mut daemon, _peer) = run(app, libc);
    let p = daemon.processes.get_mut(&1).unwrap();
    let temp = describe_site(p, &temp_at(app, libc));
    let kept = describe_site(p, &kept_at(app, libc));
    p.drain();
    churn(p, temp, 20_000, 0);
    push_at(p, EventKind::Alloc, 0x5000_0000, 0, kept, 0);
    p.drain();
    p.commit_pending(10_000_000);
    assert!(
        p.short_lived_sites().is_empty(),
        "not judged live: no interval"
    );
    daemon.detach(1);
    let stored = SiteStore::new(store_dir.clone()).load(&program);
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].frames[0], "/usr/bin/app+0x1234");
    assert!(stored[0].short_lived && stored[0].placed().is_none());

    // Run 2, another layout: the site is marked at attach, before its first object.
    let (app, libc) = (0x5611_0000_0000, 0x7f11_0000_0000);
    let (mut daemon, _peer) = run(app, libc);
    let temp2 = objtier_wire::site_id::of(&temp_at(app, libc));
    let p = daemon.processes.get_mut(&1).unwrap();
    assert!(p.ring.control().site_advice(temp2).short_lived);
    assert_eq!(p.short_lived_sites(), [temp2]);
    let status = crate::status::status_json(&daemon, None);
    assert_eq!(status["processes"][0]["warm_start"]["placed_at_attach"], 1);
    assert_eq!(
        status["processes"][0]["short_lived_sites"][0]["remembered"],
        true
    );
    // Samples that die young keep it so, across intervals.
    let p = daemon.processes.get_mut(&1).unwrap();
    assert_eq!(describe_site(p, &temp_at(app, libc)), temp2);
    p.drain();
    // (As the interval does, from /proc, which has no map for this test's process.)
    assert!(
        p.name_sites(&maps(app, Some(libc))).is_empty(),
        "marked already"
    );
    push_at(
        p,
        EventKind::Alloc,
        0x6000_0000,
        0,
        temp2,
        event_flags::SAMPLED,
    );
    push_at(p, EventKind::Free, 0x6000_0000, 5, 0, 0);
    p.drain();
    daemon.interval();
    let p = daemon.processes.get_mut(&1).unwrap();
    assert_eq!(p.short_lived_sites(), [temp2], "still short-lived");
    // A sample lives long: the site is unmarked, and the store forgets it at once.
    push_at(
        p,
        EventKind::Alloc,
        0x6001_0000,
        0,
        temp2,
        event_flags::SAMPLED,
    );
    p.drain();
    p.commit_pending(2_000_000);
    daemon.interval();
    let p = daemon.processes.get_mut(&1).unwrap();
    assert!(!p.ring.control().site_advice(temp2).short_lived);
    let stored = SiteStore::new(store_dir.clone()).load(&program);
    assert!(stored.is_empty(), "saved at the interval: {stored:?}");
    daemon.detach(1);
    assert!(SiteStore::new(store_dir).load(&program).is_empty());
}

/// A profiled process's pages are followed from look to look: pages the kernel moved count as
/// promoted or demoted in the interval they were found moved, those moved before as ping-pong;
/// a sample of a page is counted in the tier the page was found in.
#[test]
fn a_profiled_process_s_page_moves_and_sampled_tiers_are_recorded() {
    use crate::recorder::{Footprint, Recorder};
    use objtier_sys::perf::datasrc::{DataSource, MemLevel};
    let sys = tempfile::tempdir().unwrap();
    let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
    let (mut p, _peer) = process();
    let base = 0x7000_0000_0000u64;
    object_on(&p, &fake, base, 4 * 4096, 1);
    p.drain();
    // Profiled, observe-only: the daemon moves nothing of it; the "kernel" does.
    p.recorder = Some(Recorder::new(1, Arc::new(Footprint::default())));
    p.no_migrate = true;
    let (pid, id) = (p.pid, p.id);
    let mut daemon = daemon_with(two_tiers(64 * MIB, 64 * MIB), p, &fake, &sys);
    let look = |daemon: &mut Daemon, interval: usize| {
        let snapshot = daemon.snapshot();
        daemon.buffers = snapshot.into_buffers();
        let p = daemon.processes.get_mut(&id).unwrap();
        let recorder = p.recorder.as_mut().unwrap();
        recorder.end_interval(interval, &Default::default());
    };
    look(&mut daemon, 0);
    // NUMA balancing promotes the first two pages...
    fake.lock().unwrap().place(pid, base, 2 * 4096, 0);
    look(&mut daemon, 1);
    // ... reclaim demotes the first again, and NUMA balancing promotes the fourth.
    fake.lock().unwrap().place(pid, base, 4096, 1);
    fake.lock().unwrap().place(pid, base + 3 * 4096, 4096, 0);
    look(&mut daemon, 2);
    // A PEBS sample of the second page (in tier 0) from DRAM.
    let p = daemon.processes.get_mut(&id).unwrap();
    let sample = crate::source::Observation {
        pid,
        start: base + 4096,
        end: base + 2 * 4096,
        weight: 1.0,
        kind: crate::source::AccessKind::Load,
        latency: Some(300.0),
        data_source: Some(DataSource {
            level: MemLevel::Ram,
            ..DataSource::default()
        }),
        time_ns: 1,
    };
    assert_eq!(p.attribute_observed(&sample), 1.0);
    let done = p.recorder.take().unwrap().finish(
        |_| Some(vec!["/bin/app+0x10".into()]),
        std::iter::empty(),
        Some(3),
    );
    let site = &done.sites[0];
    // Its object was live before the recorder began (not announced to it): the site's rows
    // begin with its first moves.
    assert_eq!(site.series.interval, [1, 2, 3]);
    assert_eq!(site.series.promoted_pages, Some(vec![2, 1, 0]));
    assert_eq!(site.series.demoted_pages, Some(vec![0, 1, 0]));
    // The first page had moved before; the fourth had not.
    assert_eq!(site.series.ping_pong_pages, Some(vec![0, 1, 0]));
    assert_eq!(site.memory_levels_by_tier.len(), 1, "tier 0 only");
    assert_eq!(site.memory_levels_by_tier[0]["ram"].weight, 300.0);
    assert_eq!(done.page_moves.unwrap().pages_not_followed, 0);
}
