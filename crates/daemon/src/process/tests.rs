//! The process's parts together, fed through a real ring as the library would.
use super::events::MAX_OBJECT_BYTES;
use objtier_wire::{advice, event_flags, EventKind, PAGE_SIZE};
use std::sync::atomic::Ordering;

use super::*;
use objtier_wire::Event;

/// A process with a real ring and socket pair, as the daemon would have after a hello.
pub(crate) fn process() -> (Process, UnixStream) {
    Process::synthetic(1, 1, 64, 64 << 20).unwrap()
}

/// Describes `site` as the library does, one `SiteFrame` event per return address.
pub(crate) fn push_site(p: &Process, site: u64, ips: &[u64]) {
    for (i, &ip) in ips.iter().enumerate() {
        assert!(p.ring.header().push(&Event {
            kind: EventKind::SiteFrame as u32,
            flags: 0,
            addr: ip,
            len: (i as u64) << 32 | ips.len() as u64,
            time_ns: 5,
            site,
        }));
    }
}

pub(crate) fn push(p: &Process, kind: EventKind, addr: u64, len: u64, flags: u32) {
    assert!(p.ring.header().push(&Event {
        kind: kind as u32,
        flags,
        addr,
        len,
        time_ns: 5,
        site: 9,
    }));
}

/// Small-object blocks become records at once, split like objects; a resync (which only
/// re-announces objects) does not forget them; an unmap does.
#[test]
fn small_object_blocks_are_tracked_and_survive_resyncs() {
    let (mut p, _peer) = process();
    let arena = 0x7f00_0000_0000u64;
    push(&p, EventKind::BlockMap, arena, 1 << 30, 0);
    push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
    p.drain();
    assert_eq!(
        p.records().len(),
        17,
        "1 GiB at the 64 MiB split, and the object"
    );
    assert_eq!(p.objects.blocks().len(), 1);
    // A resync step over the whole address space that announces nothing.
    p.resync.set_state(Resync::Requested {
        request: 1,
        dropped_at_request: 0,
    });
    push(&p, EventKind::ResyncBegin, 0, 1, 0);
    push(&p, EventKind::ResyncEnd, !0xfff, 1, 0);
    p.drain();
    assert_eq!(
        p.stats.resync_forgotten_objects, 1,
        "the step ran: the object is gone"
    );
    assert_eq!(
        p.records().len(),
        16,
        "blocks are not forgotten by a resync"
    );
    push(&p, EventKind::BlockUnmap, arena, 0, 0);
    p.drain();
    assert!(p.records().is_empty() && p.objects.blocks().is_empty());
}

#[test]
fn allocations_taken_back_are_never_seen_but_count_as_allocated() {
    let (mut p, _peer) = process();
    let alloc = |addr| Event {
        kind: EventKind::Alloc as u32,
        addr,
        len: 8192,
        ..Event::default()
    };
    let header = p.ring.header();
    let taken_back = header.push_at(&alloc(0x10000)).unwrap();
    assert!(header.push(&alloc(0x20000)));
    // The library frees the first object before the daemon looks: it takes the report
    // back and sends no free.
    assert!(header.cancel(taken_back));
    assert_eq!(p.drain(), 1);
    p.commit_pending(0);
    assert_eq!(
        p.objects.objects().keys().copied().collect::<Vec<_>>(),
        [0x20000]
    );
    assert_eq!(p.stats.cancelled_allocations, 1);
    assert_eq!(
        p.stats.allocated_bytes,
        2 * 8192,
        "for the allocation trigger"
    );
    assert_eq!(p.allocated_unclaimed, 2 * 8192);
    assert_eq!(p.stats.invalid_events + p.stats.frees_of_unknown, 0);
}

#[test]
fn a_ring_capacity_changed_after_the_attach_is_not_believed() {
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x10000, 4096, 0);
    // SAFETY: the test plays a hostile library scribbling on its own ring header, in the
    // shared mapping.
    unsafe { (*p.ring.as_ptr()).capacity = objtier_wire::MAX_RING_CAPACITY };
    assert_eq!(p.drain(), 1, "the capacity validated at the attach is used");
    p.ring.control().set_site_tier(5, Some(1));
    assert_eq!(p.ring.control().site_tier(5), Some(1));
}

/// Pushes a `kind` event of `site` at `time_ns`, draining first if the ring is full.
pub(crate) fn push_at(
    p: &mut Process,
    kind: EventKind,
    addr: u64,
    time_ns: u64,
    site: u64,
    flags: u32,
) {
    let event = Event {
        kind: kind as u32,
        flags,
        addr,
        len: if kind == EventKind::Alloc { 8192 } else { 0 },
        time_ns,
        site,
    };
    // Drained before the ring (of 64 slots) fills: a refused push counts as a drop.
    if p.ring.header().backlog() >= 60 {
        p.drain();
    }
    assert!(p.ring.header().push(&event));
}

/// `n` objects of `site`, each freed 10 ns after its allocation, from `t` on.
pub(crate) fn churn(p: &mut Process, site: u64, n: u64, t: u64) {
    for i in 0..n {
        let addr = 0x1000_0000 + (i % 50) * 0x10000;
        push_at(p, EventKind::Alloc, addr, t + i, site, 0);
        push_at(p, EventKind::Free, addr, t + i + 10, 0, 0);
    }
    p.drain();
}

#[test]
fn a_site_whose_objects_all_die_young_is_short_lived_until_a_sample_lives_long() {
    let (mut p, _peer) = process();
    let young_ns = 1_000_000;
    p.lifetimes.set_young_ns(Some(young_ns));
    let (churning, keeping, placed) = (0x7007, 0x8008, 0x9009);
    p.place_site(placed, Some(1));
    for interval in 0..2 {
        let t = interval * 10 * young_ns;
        churn(&mut p, churning, 6_000, t);
        churn(&mut p, placed, 6_000, t);
        // The keeping site churns as much, but one of its objects lives long.
        churn(&mut p, keeping, 6_000, t);
        let kept = 0x5000_0000 + interval * 0x10000;
        push_at(&mut p, EventKind::Alloc, kept, t, keeping, 0);
        p.drain();
        p.commit_pending(t + 2 * young_ns);
        let judged = p.judge_sites();
        if interval == 0 {
            assert!(judged.is_empty(), "one interval is not enough: {judged:?}");
        } else {
            assert_eq!(judged, [(churning, true)]);
        }
    }
    let control = p.ring.control();
    assert!(control.site_advice(churning).short_lived);
    assert!(!control.site_advice(keeping).short_lived);
    assert_eq!(
        control.site_advice(placed),
        objtier_wire::SiteAdvice {
            tier: Some(1),
            short_lived: false,
            budget_pages: 0,
        },
        "a placed site keeps its placement"
    );
    assert_eq!(p.short_lived_sites(), [churning]);
    // The library now sends one sample in 64; a quiet interval or a young sample keeps the
    // mark, a sample that lives long ends it.
    assert!(p.judge_sites().is_empty());
    let t = 100 * young_ns;
    push_at(
        &mut p,
        EventKind::Alloc,
        0x6000_0000,
        t,
        churning,
        event_flags::SAMPLED,
    );
    push_at(&mut p, EventKind::Free, 0x6000_0000, t + 5, 0, 0);
    push_at(
        &mut p,
        EventKind::Alloc,
        0x6001_0000,
        t,
        churning,
        event_flags::SAMPLED,
    );
    p.drain();
    p.commit_pending(t + young_ns / 2);
    assert!(p.judge_sites().is_empty(), "still young at the commit");
    assert_eq!(p.stats.sampled_allocations, 2);
    // Never freed: the next commit finds it old.
    p.commit_pending(t + young_ns);
    assert_eq!(p.judge_sites(), [(churning, false)], "lived on");
    assert!(!p.ring.control().site_advice(churning).short_lived);
    assert!(p.short_lived_sites().is_empty());
    // Its objects allocated unreported meanwhile may live: the library is asked to
    // re-announce every live object.
    assert_eq!(p.stats.resyncs, 0, "no drops");
    assert_eq!(p.ring.control().resync_request.load(Ordering::Relaxed), 0);
    p.drain();
    assert_eq!(p.ring.control().resync_request.load(Ordering::Relaxed), 1);
    assert!(!p.resync.wanted());
}

/// A busy site of temporaries is marked between intervals, once it has been watched long
/// enough for its objects' lives to be a small part of the watch; a site that keeps one
/// object, or a placed one, is not; an object live at the mark that lives on unmarks it.
#[test]
fn a_busy_site_of_temporaries_is_short_lived_before_its_window() {
    let (mut p, _peer) = process();
    let ms = 1_000_000;
    let young_ns = 1_000 * ms;
    p.lifetimes.set_young_ns(Some(young_ns));
    let (churning, keeping, placed) = (0x7007, 0x8008, 0x9009);
    p.place_site(placed, Some(1));
    let t = 5_000 * ms;
    churn(&mut p, churning, 20_000, t);
    churn(&mut p, placed, 20_000, t);
    churn(&mut p, keeping, 20_000, t);
    push_at(&mut p, EventKind::Alloc, 0x5000_0000, t, keeping, 0);
    // An object of the churning site still live, allocated late in the watch.
    push_at(
        &mut p,
        EventKind::Alloc,
        0x6000_0000,
        t + 250 * ms,
        churning,
        0,
    );
    p.drain();
    // Both live objects become records, still young: the early judgement finds them there.
    p.commit_pending(t + 260 * ms);
    assert_eq!(p.lifetimes.young_records().len(), 2);
    assert!(
        p.judge_early(t + 200 * ms).is_empty(),
        "watched for less than a quarter of young_ns"
    );
    assert!(
        p.judge_early(t + 300 * ms).is_empty(),
        "not candidates again yet"
    );
    churn(&mut p, churning, 4_096, t + 300 * ms);
    churn(&mut p, keeping, 4_096, t + 300 * ms);
    churn(&mut p, placed, 4_096, t + 300 * ms);
    assert_eq!(p.judge_early(t + 300 * ms), [churning]);
    let control = p.ring.control();
    assert!(control.site_advice(churning).short_lived);
    assert!(
        !control.site_advice(keeping).short_lived,
        "its object is as old as the watch"
    );
    assert_eq!(control.site_advice(placed).tier, Some(1));
    assert!(!control.site_advice(placed).short_lived);
    assert!(!p.lifetimes.get(churning).unwrap().remembered);
    // The interval's own judgement keeps the mark.
    p.commit_pending(t + 400 * ms);
    assert!(p.judge_sites().is_empty());
    // The object live at the mark lives on: the site is unmarked, and a resync asked.
    p.commit_pending(t + 1_300 * ms);
    assert_eq!(p.judge_sites(), [(churning, false)]);
    assert!(p.resync.wanted());
}

/// A site's counts last the run (for the store's verdict), but a site quiet for a whole
/// window is judged on two intervals of its objects again when it is busy again.
#[test]
fn a_site_busy_again_after_a_quiet_window_waits_for_a_full_window() {
    let (mut p, _peer) = process();
    let young_ns = 1_000_000;
    p.lifetimes.set_young_ns(Some(young_ns));
    let site = 0x7007;
    churn(&mut p, site, 100, 0);
    p.commit_pending(2 * young_ns);
    for _ in 0..3 {
        assert!(p.judge_sites().is_empty(), "too few, then quiet");
    }
    let t = 100 * young_ns;
    churn(&mut p, site, 20_000, t);
    p.commit_pending(t + 2 * young_ns);
    assert!(
        p.judge_sites().is_empty(),
        "one busy interval is not a window"
    );
    churn(&mut p, site, 20_000, t + 10 * young_ns);
    p.commit_pending(t + 12 * young_ns);
    assert_eq!(p.judge_sites(), [(site, true)]);
    assert_eq!(
        p.lifetimes.get(site).unwrap().run.young,
        40_100,
        "counted over the run"
    );
}

#[test]
fn without_young_ns_no_site_is_judged() {
    let (mut p, _peer) = process();
    churn(&mut p, 0x7007, 20_000, 0);
    p.commit_pending(0);
    assert!(p.judge_sites().is_empty());
    assert!(p.lifetimes.is_empty(), "nothing counted");
}

#[test]
fn ephemeral_objects_never_become_records() {
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x10000, 8192, 0);
    push(&p, EventKind::Alloc, 0x20000, 4096, 0);
    push(&p, EventKind::Free, 0x10000, 0, 0);
    assert_eq!(p.drain(), 3);
    p.commit_pending(0);
    assert_eq!(p.records().len(), 1);
    assert_eq!(p.stats.ephemeral_objects, 1);
    push(&p, EventKind::Free, 0x20000, 0, 0);
    push(&p, EventKind::Free, 0x30000, 0, 0);
    p.drain();
    assert!(p.records().is_empty());
    assert_eq!(p.stats.frees_of_unknown, 1);
}

#[test]
fn large_objects_split_and_snapshots_are_immediate() {
    let (mut p, _peer) = process();
    push(
        &p,
        EventKind::Alloc,
        0x4000_0000,
        96 << 20,
        event_flags::SNAPSHOT,
    );
    p.drain();
    assert_eq!(p.records().len(), 2, "96 MiB at 64 MiB split = 2 records");
    assert_eq!(
        p.objects.object_start_of(0x4000_0000 + (64 << 20)),
        0x4000_0000
    );
    // Accesses over the second half land on the second record only.
    let second = 0x4000_0000 + (64 << 20);
    let got = p.attribute(second, second + (32 << 20), 10.0, 7_000);
    assert!((got - 10.0).abs() < 1e-9);
    assert_eq!(p.records()[&second].interval_accesses, 10.0);
    assert_eq!(p.records()[&0x4000_0000].interval_accesses, 0.0);
    // The last access is the observation's time, the latest when several fall on it.
    assert_eq!(p.records()[&second].last_access_ns, 7_000);
    assert_eq!(p.records()[&0x4000_0000].last_access_ns, 0);
    // A region half outside every record attributes half.
    let half = p.attribute(second - 4096 * 4, second - 4096 * 2, 2.0, 5_000);
    assert!((half - 2.0).abs() < 1e-9);
    assert_eq!(p.records()[&0x4000_0000].last_access_ns, 5_000);
    p.attribute(second, second + 4096, 1.0, 6_000);
    assert_eq!(
        p.records()[&second].last_access_ns,
        7_000,
        "an older one changes nothing"
    );
    assert_eq!(p.attribute(0x1000, 0x2000, 1.0, 1), 0.0);
}

/// The record layout docs/architecture.md describes: at most 64 bytes with its key.
#[test]
fn a_record_is_56_bytes_and_64_with_its_key() {
    assert_eq!(std::mem::size_of::<Record>(), 56);
    assert_eq!(std::mem::size_of::<(u64, Record)>(), 64);
}

#[test]
fn resident_pages_pack_three_tiers_or_say_unknown() {
    let r = ResidentPages::pack(&[5, 0, (1 << 21) - 1]);
    assert!(r.known());
    assert_eq!(
        (r.pages(0), r.pages(1), r.pages(2), r.pages(3)),
        (5, 0, (1 << 21) - 1, 0)
    );
    assert_eq!(ResidentPages::pack(&[1, 2]).pages(1), 2);
    assert!(!ResidentPages::pack(&[0, 1 << 21]).known());
    assert!(!ResidentPages::pack(&[0, 0, 0, 0]).known());
    assert!(ResidentPages::pack(&[]).known());
    let bytes = ResidentPages::from_bytes(&[2 * 4096, 4096]).bytes(2);
    assert_eq!(bytes.as_slice(), [2 * 4096, 4096]);
}

/// `f32` counters: a region as large as the address space, sampled as often as DAMON can,
/// neither overflows a record nor rounds a one-page share of a single access to zero.
#[test]
fn f32_counters_keep_huge_weights_and_tiny_shares() {
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
    p.drain();
    let (start, end) = (0x10000u64, 0x10000u64 + MAX_OBJECT_BYTES);
    let pages = (MAX_OBJECT_BYTES / PAGE_SIZE as u64) as f64;
    p.attribute(start, end, 1.0, 1);
    let tiny = p.records()[&0x10000].interval_accesses;
    assert!(tiny > 0.0 && (tiny as f64 - 1.0 / pages).abs() < 1e-6 / pages);
    p.records_mut().get_mut(0x10000).unwrap().interval_accesses = 0.0;
    p.attribute(0x10000, 0x11000, 1000.0 * pages, 1);
    let huge = p.records()[&0x10000].interval_accesses;
    assert!(huge.is_finite() && (huge as f64 / (1000.0 * pages) - 1.0).abs() < 1e-7);
}

/// The daemon's objects (this interval's, pending, and the committed ones) are exactly the
/// library's live objects after any stream of allocations, frees and moves, whatever the
/// commits in between: a model of the library's heap against `drain`.
#[test]
fn the_objects_follow_the_librarys_heap_through_any_stream_of_events() {
    use std::collections::BTreeMap as Model;
    const PAGES: u64 = 256;
    let page = PAGE_SIZE as u64;
    let base = 0x7f00_0000_0000u64;
    let (mut p, _peer) = process();
    let mut live: Model<u64, u64> = Model::new();
    let mut x = 0x9e37_79b9u64;
    let mut random = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    // A free run of `pages` pages starting at a random page, if there is one there.
    let free_at = |live: &Model<u64, u64>, first: u64, pages: u64| -> Option<u64> {
        let start = base + first * page;
        let end = start + pages * page;
        let clear = first + pages <= PAGES
            && live
                .range(..end)
                .next_back()
                .is_none_or(|(&s, &len)| s + len <= start);
        clear.then_some(start)
    };
    for step in 0..20_000u64 {
        let pages = 1 + random(4);
        match random(8) {
            0..=3 => {
                if let Some(start) = free_at(&live, random(PAGES), pages) {
                    push(&p, EventKind::Alloc, start, pages * page, 0);
                    live.insert(start, pages * page);
                }
            }
            4 | 5 => {
                if let Some((&start, _)) = live.iter().nth(random(live.len() as u64 + 1) as usize) {
                    push(&p, EventKind::Free, start, 0, 0);
                    live.remove(&start);
                }
            }
            _ => {
                let Some((&from, &len)) = live.iter().nth(random(live.len() as u64 + 1) as usize)
                else {
                    continue;
                };
                // The new extent is taken while the old one is still held, as `realloc`
                // does; with none free, the object stays where it is.
                let to = free_at(&live, random(PAGES), pages).unwrap_or(from);
                let len = if to == from { len } else { pages * page };
                live.remove(&from);
                push_event(&p, moved(from, to, len));
                live.insert(to, len);
            }
        }
        if step % 16 == 0 {
            p.drain();
        }
        if step % 997 == 0 {
            p.commit_pending(0);
        }
        if step % 16 == 0 {
            let mut known: Model<u64, u64> = p
                .objects
                .objects()
                .iter()
                .map(|(&s, o)| (s, o.len))
                .collect();
            for start in p.objects.pending().keys() {
                let object = p.objects.pending().get(start).unwrap();
                assert!(
                    known.insert(*start, object.len).is_none(),
                    "pending and committed"
                );
            }
            assert_eq!(known, live, "after step {step}");
        }
    }
    assert_eq!(p.stats.invalid_events, 0);
}

#[test]
fn malformed_events_are_counted_not_trusted() {
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x1001, 4096, 0); // unaligned
    push(&p, EventKind::Alloc, u64::MAX - 4095, 8192, 0); // wraps
    push(&p, EventKind::Alloc, 0x1000, 0, 0); // empty
    push(&p, EventKind::Alloc, 0, 4096, 0); // at address 0
    push_event(
        &p,
        Event {
            kind: EventKind::Moved as u32,
            addr: 0,
            len: 4096,
            site: 0x10000,
            ..Event::default()
        },
    ); // to address 0
    assert!(p.ring.header().push(&Event {
        kind: 77,
        ..Event::default()
    }));
    p.drain();
    p.commit_pending(0);
    assert_eq!(p.stats.invalid_events, 6);
    assert!(p.records().is_empty());
}

fn push_event(p: &Process, event: Event) {
    assert!(p.ring.header().push(&event));
}

fn moved(from: u64, start: u64, len: u64) -> Event {
    Event {
        kind: EventKind::Moved as u32,
        addr: start,
        len,
        time_ns: 7,
        site: from,
        ..Event::default()
    }
}

/// A moved object keeps its site, age, history and advice; a record of a split object takes
/// the history of the old records over the same offsets, so a new tail starts with none.
#[test]
fn a_moved_object_carries_its_history_over_by_offset() {
    const MIB: u64 = 1 << 20;
    let (mut p, _peer) = Process::synthetic(1, 1, 64, 4 * MIB).unwrap();
    push(
        &p,
        EventKind::Alloc,
        0x100_0000,
        8 * MIB,
        event_flags::SNAPSHOT,
    );
    p.drain();
    p.advise(0x100_0000 + MIB, MIB, advice::HOT);
    for (i, start) in [0x100_0000, 0x100_0000 + 4 * MIB].into_iter().enumerate() {
        let record = p.records_mut().get_mut(start).unwrap();
        record.ema_accesses = 10.0 * (i + 1) as f32;
        record.recent_accesses = 4.0;
        record.last_access_ns = 3;
    }
    // Doubled to a new place: 16 MiB in four 4 MiB records.
    push_event(&p, moved(0x100_0000, 0x800_0000, 16 * MIB));
    p.drain();
    assert_eq!(p.stats.moved_objects, 1);
    assert!(!p.objects.objects().contains_key(&0x100_0000));
    assert!(
        p.objects.pending().is_empty(),
        "a record at once, not an allocation of the interval"
    );
    assert_eq!(
        p.objects.objects().get(&0x800_0000),
        Some(&Object {
            len: 16 * MIB,
            site: 9,
            created_ns: 5
        })
    );
    let emas: Vec<f32> = p
        .records()
        .range(0x800_0000..0x800_0000 + 16 * MIB)
        .map(|(_, r)| r.ema_accesses)
        .collect();
    assert_eq!(emas, [10.0, 20.0, 0.0, 0.0]);
    let first = p.records().get(0x800_0000).unwrap();
    assert_eq!(
        (first.recent_accesses, first.last_access_ns, first.site),
        (4.0, 3, 9)
    );
    assert_eq!(p.advice_for(0x800_0000 + MIB, MIB), advice::HOT);
    assert_eq!(p.advice_for(0x100_0000, 8 * MIB), 0);
    assert_eq!(p.stats.allocated_bytes, 16 * MIB);

    // Grown in place by 2 MiB: the records over the old bytes keep theirs.
    p.records_mut()
        .get_mut(0x800_0000 + 12 * MIB)
        .unwrap()
        .ema_accesses = 8.0;
    push_event(&p, moved(0x800_0000, 0x800_0000, 18 * MIB));
    p.drain();
    let emas: Vec<f32> = p
        .records()
        .range(0x800_0000..0x800_0000 + 18 * MIB)
        .map(|(_, r)| r.ema_accesses)
        .collect();
    assert_eq!(emas, [10.0, 20.0, 0.0, 8.0, 0.0]);
    assert_eq!(
        p.stats.allocated_bytes,
        18 * MIB,
        "in place, only the growth is new"
    );

    // Shrunk and moved: the new record covers half of the first old one, and takes half.
    push_event(&p, moved(0x800_0000, 0x400_0000, 2 * MIB));
    p.drain();
    assert_eq!(p.records().len(), 1);
    assert_eq!(p.records().get(0x400_0000).unwrap().ema_accesses, 5.0);
}

/// An allocation of this interval that moves stays one (with its site); a move from a start
/// the daemon never heard of (a dropped allocation) is an allocation of no known site.
/// A record still young when `realloc` moves or grows it is looked at again by the next
/// commits under its new start and length, and counted old for its site once it is.
#[test]
fn a_young_record_moved_is_still_counted_for_its_site() {
    let (mut p, _peer) = process();
    let young_ns = 1_000;
    p.lifetimes.set_young_ns(Some(young_ns));
    let site = 0x7007;
    push_at(&mut p, EventKind::Alloc, 0x10000, 0, site, 0);
    push_at(&mut p, EventKind::Alloc, 0x30000, 0, site, 0);
    p.drain();
    p.commit_pending(500);
    assert_eq!(p.lifetimes.young_records().len(), 2);
    // One moves (its time: 7 ns), the other grows in place.
    push_event(&p, moved(0x10000, 0x40000, 16384));
    push_event(&p, moved(0x30000, 0x30000, 16384));
    p.drain();
    p.commit_pending(2_000);
    assert_eq!(
        p.lifetimes.get(site).unwrap().current.old,
        2,
        "both lived on"
    );
    assert!(p.lifetimes.young_records().is_empty());
}

#[test]
fn a_moved_new_or_unknown_object_is_an_allocation() {
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x10000, 8192, 0);
    push_event(&p, moved(0x10000, 0x40000, 16384));
    push_event(&p, moved(0x90000, 0xa0000, 4096));
    // Malformed: the old start is not page-aligned.
    push_event(&p, moved(0x10001, 0xb0000, 4096));
    p.drain();
    assert_eq!(p.stats.invalid_events, 1);
    assert_eq!(p.stats.moved_objects, 1);
    assert_eq!(
        p.objects.pending().get(&0x40000).map(|o| (o.len, o.site)),
        Some((16384, 9))
    );
    assert_eq!(p.objects.pending().get(&0xa0000).map(|o| o.site), Some(0));
    assert!(!p.objects.pending().contains_key(&0x10000));
    p.commit_pending(0);
    assert_eq!(p.records().len(), 2);
}

fn marker(kind: EventKind, addr: u64, request: u32) -> Event {
    Event {
        kind: kind as u32,
        addr,
        len: request as u64,
        ..Event::default()
    }
}

#[test]
fn resync_learns_lost_allocations_and_forgets_lost_frees_keeping_history() {
    let (mut p, _peer) = process();
    // Known objects at 0x10000 (live) and 0x20000 (its free will be "lost").
    push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
    push(&p, EventKind::Alloc, 0x20000, 4096, event_flags::SNAPSHOT);
    p.drain();
    p.records_mut().get_mut(0x10000).unwrap().ema_accesses = 3.0;
    // The ring overflowed: the daemon notices and asks.
    p.ring.header().dropped.fetch_add(5, Ordering::Relaxed);
    p.drain();
    let request = p.ring.control().resync_request.load(Ordering::Relaxed);
    assert_eq!(request, 1, "a resync is requested once drops are seen");
    // Step 1 covers [0, 0x18000): 0x10000 is still live.
    push_event(&p, marker(EventKind::ResyncBegin, 0, request));
    push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
    push_event(&p, marker(EventKind::ResyncEnd, 0x18000, request));
    // Step 2 covers [0x18000, 0x100000): 0x20000 is gone, 0x30000 is new (lost alloc).
    push_event(&p, marker(EventKind::ResyncBegin, 0x18000, request));
    push(&p, EventKind::Alloc, 0x30000, 8192, event_flags::SNAPSHOT);
    push_event(&p, marker(EventKind::ResyncEnd, 0x100000, request));
    p.drain();
    assert!(p.objects.objects().contains_key(&0x10000));
    assert!(
        !p.objects.objects().contains_key(&0x20000),
        "lost free reconciled"
    );
    assert!(
        p.objects.objects().contains_key(&0x30000),
        "lost alloc reconciled"
    );
    assert_eq!(
        p.records()[&0x10000].ema_accesses,
        3.0,
        "a known object keeps its access history"
    );
    assert_eq!(p.stats.resync_forgotten_objects, 1);
    assert_eq!(p.stats.resync_learnt_objects, 1);
    assert_eq!(p.stats.resyncs, 0, "not done until the library says so");
    p.ring
        .control()
        .resync_served
        .store(request, Ordering::Relaxed);
    p.drain();
    assert_eq!(p.stats.resyncs, 1);
    assert!(matches!(p.resync.state(), Resync::Idle));
    assert_eq!(p.ring.control().resync_request.load(Ordering::Relaxed), 1);
}

#[test]
fn a_resync_step_that_lost_events_forgets_nothing() {
    let (mut p, _peer) = process();
    push(&p, EventKind::Alloc, 0x20000, 4096, event_flags::SNAPSHOT);
    p.drain();
    p.ring.header().dropped.fetch_add(1, Ordering::Relaxed);
    p.drain();
    let request = p.ring.control().resync_request.load(Ordering::Relaxed);
    push_event(&p, marker(EventKind::ResyncBegin, 0, request));
    p.drain();
    p.ring.header().dropped.fetch_add(1, Ordering::Relaxed); // lost inside the step
    push_event(&p, marker(EventKind::ResyncEnd, 0x100000, request));
    p.ring
        .control()
        .resync_served
        .store(request, Ordering::Relaxed);
    p.drain();
    assert!(
        p.objects.objects().contains_key(&0x20000),
        "an incomplete step proves nothing"
    );
    assert_eq!(
        p.ring.control().resync_request.load(Ordering::Relaxed),
        request + 1,
        "drops since the request ask for another"
    );
}

#[test]
fn sites_advice_priority_and_placement() {
    let (mut p, _peer) = process();
    for (i, ip) in [0x401000u64, 0x402000].into_iter().enumerate() {
        push_event(
            &p,
            Event {
                kind: EventKind::SiteFrame as u32,
                addr: ip,
                len: (i as u64) << 32 | 2,
                site: 77,
                ..Event::default()
            },
        );
    }
    push_event(
        &p,
        Event {
            kind: EventKind::Priority as u32,
            addr: 7,
            ..Event::default()
        },
    );
    push_event(
        &p,
        Event {
            kind: EventKind::Priority as u32,
            addr: 1 << 40, // out of range: refused
            ..Event::default()
        },
    );
    push(
        &p,
        EventKind::Alloc,
        0x10000,
        3 * 4096,
        event_flags::SNAPSHOT,
    );
    push(&p, EventKind::Advise, 0x11000, 4096, advice::HOT);
    push(&p, EventKind::Advise, 0x50000, 4096, 1 << 31); // unknown bit: refused
    p.drain();
    assert!(p.sites[&77].complete());
    assert_eq!(p.sites[&77].ips, vec![0x401000, 0x402000]);
    assert_eq!(p.priority, 7);
    assert_eq!(p.stats.invalid_events, 2);
    assert_eq!(p.advice_for(0x10000, 3 * 4096), advice::HOT);
    assert_eq!(p.advice_for(0x12000, 4096), 0);
    let maps = objtier_sys::maps::Maps::parse("400000-403000 r-xp 00000000 fe:00 1 /usr/bin/app\n");
    p.name_sites(&maps);
    assert_eq!(
        p.sites[&77].names.as_deref(),
        Some(
            &[
                "/usr/bin/app+0x1000".to_string(),
                "/usr/bin/app+0x2000".to_string()
            ][..]
        )
    );
    assert!(p.place_site(77, Some(1)));
    assert_eq!(p.ring.control().site_tier(77), Some(1));
    assert!(p.place_site(77, None));
    assert_eq!(p.ring.control().site_tier(77), None);
    // Freeing the object drops the advice about its memory.
    push(&p, EventKind::Free, 0x10000, 0, 0);
    p.drain();
    assert!(p.objects.advice().is_empty());
}

/// A process describing a million site frames is kept to the bound, told once in the log, and
/// its sites described before the bound keep their names.
#[test]
fn site_frames_are_bounded_per_process() {
    let (mut p, _peer) = Process::synthetic(1, 1, 1 << 12, 64 << 20).unwrap();
    let frames = 16u64;
    let mut site = 1;
    let mut pushed = 0u64;
    while pushed < 1_000_000 {
        for i in 0..frames {
            if !p.ring.header().push(&Event {
                kind: EventKind::SiteFrame as u32,
                addr: 0x400000 + i,
                len: i << 32 | frames,
                site,
                ..Event::default()
            }) {
                p.drain();
                assert!(p.ring.header().push(&Event {
                    kind: EventKind::SiteFrame as u32,
                    addr: 0x400000 + i,
                    len: i << 32 | frames,
                    site,
                    ..Event::default()
                }));
            }
            pushed += 1;
        }
        site += 1;
    }
    p.drain();
    assert!(p.stats.site_frames <= sites::MAX_FRAMES_PER_PROCESS);
    let kept: usize = p.sites.values().map(|f| f.ips.len()).sum();
    assert_eq!(kept as u64, p.stats.site_frames);
    assert!(p.stats.sites_refused > 0);
    assert_eq!(p.sites[&1].ips.len(), frames as usize);
}

/// An object announced as 9 TiB (found by the ring fuzzer: it took the daemon 2 to 4 s and
/// 330 to 590 MiB for one event) becomes at most `MAX_RECORDS_PER_OBJECT` records, covering it
/// whole, and is forgotten whole when freed.
#[test]
fn a_huge_object_is_split_into_a_bounded_number_of_records() {
    let (mut p, _peer) = Process::synthetic(1, 1, 64, 1 << 20).unwrap();
    let len = 0x900_0000_3000u64;
    push(&p, EventKind::Alloc, 0x10000, len, 0);
    p.drain();
    p.commit_pending(1 << 40);
    let records = p.records();
    let n = records.len() as u64;
    assert!(n <= objects::MAX_RECORDS_PER_OBJECT && n > objects::MAX_RECORDS_PER_OBJECT / 2);
    let covered: u64 = records.iter().map(|(_, r)| r.len).sum();
    assert_eq!(covered, len);
    push(&p, EventKind::Free, 0x10000, 0, 0);
    p.drain();
    assert_eq!(p.records().len(), 0);
}
