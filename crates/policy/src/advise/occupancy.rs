//! What a tier holds over a profile's timeline, so that sites live at different times share
//! its room.
//!
//! A capacity bounds the bytes live *at once*. Summing the sites' peaks treats them as all
//! live together, which a program of phases never has them: hpcc allocates each RandomAccess
//! variant's table when that variant starts and frees it when it ends, and three 16 MiB tables
//! that never meet fit a tier of 18 MiB one after the other, where their peaks' sum (48 MiB)
//! fits one. So a tier counts, per interval of the timeline, the bytes its sites have live then
//! (their series' `live_bytes`: the interval's peak, so two sites that follow each other within
//! one interval both count in it, which errs on the safe side), and a site fits where each
//! interval it is live in has room for it. A site without a series (a profile without time
//! series, a hand-made one) counts its peak in every interval, as summed peaks would.
//!
//! A site held in part (a budget: at most `b` of its bytes live in the tier at once, as the
//! library enforces it) takes `min(live, b)` in each interval.

use super::SiteDemand;

/// One tier's bytes over the timeline.
#[derive(Clone, Debug)]
pub(crate) struct Occupancy {
    capacity: u64,
    /// Bytes per interval of the sites with series.
    used: Vec<u64>,
    /// Bytes of the sites without: in every interval.
    always: u64,
}

impl Occupancy {
    /// An empty tier of `capacity` bytes over a timeline of `intervals` intervals.
    pub fn new(capacity: u64, intervals: usize) -> Occupancy {
        Occupancy {
            capacity,
            used: vec![0; intervals],
            always: 0,
        }
    }

    /// The timeline's length the sites' series need.
    pub fn intervals_of(sites: &[SiteDemand]) -> usize {
        sites
            .iter()
            .filter_map(|s| s.series.iter().map(|row| row.interval).max())
            .max()
            .map_or(0, |last| last + 1)
    }

    fn free_in(&self, interval: usize) -> u64 {
        self.capacity
            .saturating_sub(self.always)
            .saturating_sub(self.used.get(interval).copied().unwrap_or(0))
    }

    fn free_everywhere(&self) -> u64 {
        let busiest = self.used.iter().copied().max().unwrap_or(0);
        self.capacity
            .saturating_sub(self.always)
            .saturating_sub(busiest)
    }

    /// The most of `site`'s bytes this tier can hold at once: all of them (its `bytes`) when it
    /// fits in every interval it is live, else the least room of an interval it needs more than
    /// that in.
    pub fn room_for(&self, site: &SiteDemand, bytes: u64) -> u64 {
        if site.series.is_empty() {
            return bytes.min(self.free_everywhere());
        }
        site.series
            .iter()
            .map(|row| {
                let free = self.free_in(row.interval);
                if row.live_bytes.min(bytes) <= free {
                    bytes
                } else {
                    free
                }
            })
            .min()
            .unwrap_or(bytes)
            .min(bytes)
    }

    /// Takes `site` into the tier, at most `budget` of its bytes live at once.
    pub fn take(&mut self, site: &SiteDemand, budget: u64) {
        if site.series.is_empty() {
            self.always = self.always.saturating_add(budget.min(site.bytes));
            return;
        }
        for row in &site.series {
            if let Some(used) = self.used.get_mut(row.interval) {
                *used = used.saturating_add(row.live_bytes.min(budget));
            }
        }
    }

    /// Takes what of `site` a tier above holds beyond `budget` (the rest of a spilled site).
    pub fn take_rest(&mut self, site: &SiteDemand, budget: u64) {
        if site.series.is_empty() {
            self.always = self
                .always
                .saturating_add(site.bytes.saturating_sub(budget));
            return;
        }
        for row in &site.series {
            if let Some(used) = self.used.get_mut(row.interval) {
                *used = used.saturating_add(row.live_bytes.saturating_sub(budget));
            }
        }
    }

    /// Whether the rest of `site` beyond `budget` fits this tier.
    pub fn room_for_rest(&self, site: &SiteDemand, budget: u64) -> bool {
        if site.series.is_empty() {
            return site.bytes.saturating_sub(budget) <= self.free_everywhere();
        }
        site.series
            .iter()
            .all(|row| row.live_bytes.saturating_sub(budget) <= self.free_in(row.interval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::IntervalDemand;

    fn live_in(intervals: &[(usize, u64)]) -> SiteDemand {
        SiteDemand {
            bytes: intervals.iter().map(|&(_, b)| b).max().unwrap_or(0),
            accesses: 1.0,
            series: intervals
                .iter()
                .map(|&(interval, live_bytes)| IntervalDemand {
                    interval,
                    live_bytes,
                    ..IntervalDemand::default()
                })
                .collect(),
            ..SiteDemand::default()
        }
    }

    #[test]
    fn sites_that_never_meet_share_the_room() {
        let (a, b, c) = (
            live_in(&[(0, 16)]),
            live_in(&[(1, 16)]),
            live_in(&[(1, 4), (2, 16)]),
        );
        let mut tier = Occupancy::new(18, 3);
        assert_eq!(tier.room_for(&a, 16), 16);
        tier.take(&a, 16);
        assert_eq!(tier.room_for(&b, 16), 16, "b is live when a is not");
        tier.take(&b, 16);
        assert_eq!(
            tier.room_for(&c, 16),
            2,
            "c meets b in interval 1, where 2 are left"
        );
        tier.take(&c, 2);
        assert_eq!(tier.used, vec![16, 18, 2]);
        let mut below = Occupancy::new(100, 3);
        assert!(below.room_for_rest(&c, 2));
        below.take_rest(&c, 2);
        assert_eq!(below.used, vec![0, 2, 14]);
    }

    #[test]
    fn a_site_without_a_series_is_live_throughout() {
        let plain = SiteDemand {
            bytes: 10,
            accesses: 1.0,
            ..SiteDemand::default()
        };
        let mut tier = Occupancy::new(25, 2);
        tier.take(&live_in(&[(1, 10)]), 10);
        assert_eq!(tier.room_for(&plain, 10), 10);
        tier.take(&plain, 10);
        assert_eq!(
            tier.room_for(&plain, 10),
            5,
            "the busiest interval has 5 left"
        );
        assert_eq!(Occupancy::new(7, 0).room_for(&plain, 10), 7);
        assert_eq!(Occupancy::intervals_of(&[plain, live_in(&[(4, 1)])]), 5);
    }
}
