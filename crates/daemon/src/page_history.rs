//! Each page's tier from one look to the next, for a profiled process: which pages were
//! promoted or demoted between two looks, and which of them had changed tier before (moved
//! more than once: ping-pong), whoever moved them (objtier, or the kernel's NUMA balancing and
//! demotion in reclaim). It also says which tier a sampled page was in, for the profile's
//! data sources by tier.
//!
//! A byte per page of every record located, kept by record start: the tier plus one (0: never
//! seen present) in the low seven bits, "has moved before" in the high one. The bytes are
//! bounded per process ([`PageHistory::new`]); a record that finds no room is not followed,
//! and the profile says how many pages that left out.

use objtier_profile::profile::{PageMoves, PageMovesFollowed};
use std::collections::HashMap;

/// What a record's entry costs besides its bytes (the map's slot and the vector's header).
const RECORD_OVERHEAD_BYTES: u64 = 64;
const MOVED_BEFORE: u8 = 0x80;
const TIER_BITS: u8 = 0x7f;

#[derive(Clone, Debug)]
pub struct PageHistory {
    records: HashMap<u64, Vec<u8>>,
    bytes: u64,
    max_bytes: u64,
    /// Pages not followed at the look under way, and the most at one look.
    not_followed_now: u64,
    not_followed_max: u64,
}

impl PageHistory {
    /// A history of at most `max_bytes` (a byte per page, and 64 per record).
    pub fn new(max_bytes: u64) -> PageHistory {
        PageHistory {
            records: HashMap::new(),
            bytes: 0,
            max_bytes,
            not_followed_now: 0,
            not_followed_max: 0,
        }
    }

    /// The record at `start` was located: `tiers` gives its pages' tiers in order (`None`: not
    /// present, which keeps what the page was). Returns the moves since its last look.
    pub fn located(
        &mut self,
        start: u64,
        tiers: impl ExactSizeIterator<Item = Option<usize>>,
    ) -> PageMoves {
        let pages = tiers.len();
        let mut moves = PageMoves::default();
        let entry = match self.records.get_mut(&start) {
            Some(entry) => entry,
            None => {
                let cost = pages as u64 + RECORD_OVERHEAD_BYTES;
                if self.bytes + cost > self.max_bytes {
                    self.not_followed_now += pages as u64;
                    return moves;
                }
                self.bytes += cost;
                self.records.entry(start).or_insert_with(|| vec![0; pages])
            }
        };
        if entry.len() != pages {
            // The record was replaced by one of another length at the same address.
            self.bytes = self.bytes - entry.len() as u64 + pages as u64;
            entry.clear();
            entry.resize(pages, 0);
        }
        for (slot, tier) in entry.iter_mut().zip(tiers) {
            let Some(tier) = tier else { continue };
            let now = (tier.min(TIER_BITS as usize - 1) + 1) as u8;
            let was = *slot & TIER_BITS;
            if was != 0 && was != now {
                if now < was {
                    moves.promoted += 1;
                } else {
                    moves.demoted += 1;
                }
                if *slot & MOVED_BEFORE != 0 {
                    moves.ping_pong += 1;
                }
                *slot = now | MOVED_BEFORE;
            } else {
                *slot = now | (*slot & MOVED_BEFORE);
            }
        }
        moves
    }

    /// The tier the page at `addr` of the record at `start` was in at its last look.
    pub fn tier_of(&self, start: u64, addr: u64) -> Option<usize> {
        let page = addr.checked_sub(start)? as usize / objtier_wire::PAGE_SIZE;
        let tier = *self.records.get(&start)?.get(page)? & TIER_BITS;
        (tier != 0).then(|| tier as usize - 1)
    }

    /// A look at the process is over: records for which `alive` says no are forgotten (freed,
    /// or replaced), and the pages not followed at it counted.
    pub fn look_done(&mut self, alive: impl Fn(u64, usize) -> bool) {
        let mut freed = 0u64;
        self.records.retain(|&start, pages| {
            let keep = alive(start, pages.len());
            if !keep {
                freed += pages.len() as u64 + RECORD_OVERHEAD_BYTES;
            }
            keep
        });
        self.bytes -= freed;
        self.not_followed_max = self.not_followed_max.max(self.not_followed_now);
        self.not_followed_now = 0;
    }

    /// What bounded the history, for the profile.
    pub fn followed(&self) -> PageMovesFollowed {
        PageMovesFollowed {
            history_bytes_max: self.max_bytes,
            pages_not_followed: self.not_followed_max.max(self.not_followed_now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = objtier_wire::PAGE_SIZE as u64;

    #[test]
    fn moves_and_ping_pong_are_counted_per_look() {
        let mut h = PageHistory::new(1 << 20);
        // Three pages born in tier 1; one not present yet.
        let first = h.located(0, [Some(1), Some(1), None].into_iter());
        assert_eq!(first, PageMoves::default(), "a first look moves nothing");
        // Two promoted; the third appears in tier 0 (a first touch, not a move).
        let up = h.located(0, [Some(0), Some(0), Some(0)].into_iter());
        assert_eq!(
            up,
            PageMoves {
                promoted: 2,
                demoted: 0,
                ping_pong: 0
            }
        );
        assert_eq!(h.tier_of(0, PAGE + 5), Some(0));
        // Page 0 demoted again: it moved before, so it ping-pongs; page 2 moves for the
        // first time; page 1 is swapped out (not present) and keeps its place.
        let down = h.located(0, [Some(1), None, Some(1)].into_iter());
        assert_eq!(
            down,
            PageMoves {
                promoted: 0,
                demoted: 2,
                ping_pong: 1
            }
        );
        assert_eq!(h.tier_of(0, PAGE), Some(0));
        // Back up: both have moved before.
        let back = h.located(0, [Some(0), Some(0), Some(0)].into_iter());
        assert_eq!(
            back,
            PageMoves {
                promoted: 2,
                demoted: 0,
                ping_pong: 2
            }
        );
        // Three tiers: 2 to 1 is a demotion only if it goes slower.
        let mut three = PageHistory::new(1 << 20);
        three.located(0, [Some(2)].into_iter());
        assert_eq!(three.located(0, [Some(1)].into_iter()).promoted, 1);
        assert_eq!(three.tier_of(0, 3 * PAGE), None, "past the record");
        assert_eq!(three.tier_of(PAGE, PAGE), None, "no such record");
    }

    #[test]
    fn the_history_is_bounded_and_forgets_freed_records() {
        // Room for one record of 4 pages, not two.
        let mut h = PageHistory::new(4 + RECORD_OVERHEAD_BYTES + 10);
        h.located(0, [Some(0); 4].into_iter());
        let not = h.located(1 << 20, [Some(1); 4].into_iter());
        assert_eq!(not, PageMoves::default());
        h.look_done(|_, _| true);
        assert_eq!(h.followed().pages_not_followed, 4);
        // The first record freed: the second now fits.
        h.look_done(|start, _| start != 0);
        h.located(1 << 20, [Some(1); 4].into_iter());
        assert_eq!(h.located(1 << 20, [Some(0); 4].into_iter()).promoted, 4);
        assert_eq!(h.tier_of(0, 0), None);
        assert_eq!(
            h.followed().history_bytes_max,
            4 + RECORD_OVERHEAD_BYTES + 10
        );
        // A record replaced by a longer one at the same address starts afresh.
        let mut r = PageHistory::new(1 << 20);
        r.located(0, [Some(1)].into_iter());
        assert_eq!(r.located(0, [Some(0), Some(0)].into_iter()).promoted, 0);
    }
}
