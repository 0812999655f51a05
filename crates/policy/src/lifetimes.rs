//! Short-lived sites: allocation sites whose objects die before the daemon could ever tier them.
//!
//! An object that dies within an interval never becomes a record (paper §3.2.1), so for a site
//! whose objects all die young the reports of every allocation and free buy nothing: they cost
//! the program its share of the ring and the daemon its reading (bench/alloc `cleaner`, which
//! reports about two million objects that live for milliseconds each: a tenth of its time). The
//! daemon learns which sites those are from how long their objects lived, and the library then
//! reports one in `SHORT_LIVED_SAMPLE` of their new objects and allocates the others (on pages
//! of their own, as before) unreported: a sample, so that the daemon sees when a site starts to
//! keep its objects, and stops calling it short-lived.
//!
//! Conservative on purpose: one object of the site seen to live long, in the last two
//! intervals, keeps it reported. A site that makes mostly temporary buffers and now and then a
//! structure that stays is not short-lived.
//!
//! The window of two intervals is four seconds at the default interval, longer than many runs
//! (every workload of bench/alloc): [`short_lived_early`] judges a busy site before its window
//! is complete, by the same proportion scaled down to the time it has been watched.

/// How one site's objects lived in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifetimes {
    /// Objects that died younger than [`young_ns`] (freed, or their allocation taken back).
    pub young: u64,
    /// Objects seen at least [`young_ns`] old: freed that old, or still live at that age when
    /// the interval ended.
    pub old: u64,
    /// The longest life among the young deaths, in nanoseconds.
    pub longest_young_ns: u64,
}

impl Lifetimes {
    pub fn add(&mut self, other: Lifetimes) {
        self.young += other.young;
        self.old += other.old;
        self.longest_young_ns = self.longest_young_ns.max(other.longest_young_ns);
    }
}

/// Intervals a site is judged over: its lifetimes in each must agree.
pub const SHORT_LIVED_WINDOW: usize = 2;

/// Objects of a site that must die young over [`SHORT_LIVED_WINDOW`] intervals, none living
/// long, before it is short-lived: 2,500 a second at the default 2 s interval. Below such rates
/// the reports cost next to nothing (bench/alloc `cleaner`'s site makes 800,000 a second).
pub const SHORT_LIVED_MIN_YOUNG: u64 = 10_000;

/// The age that makes an object old: half an interval. Objects live for longer than that
/// would be alive, hence records, at some interval's end, and could be tiered.
pub fn young_ns(interval_ns: u64) -> u64 {
    interval_ns / 2
}

/// Whether a site should be short-lived now, given whether it is (`short_lived`) and its
/// lifetimes in the last intervals, the latest last (at most [`SHORT_LIVED_WINDOW`] are read).
/// A site becomes short-lived when it has been seen for the whole window, with at least
/// [`SHORT_LIVED_MIN_YOUNG`] of its objects dying young and none old; it stops being one as
/// soon as one of its (sampled) objects is old.
pub fn short_lived(short_lived: bool, window: &[Lifetimes]) -> bool {
    let window = &window[window.len().saturating_sub(SHORT_LIVED_WINDOW)..];
    let mut total = Lifetimes::default();
    for interval in window {
        total.add(*interval);
    }
    if total.old > 0 {
        return false;
    }
    short_lived || (window.len() == SHORT_LIVED_WINDOW && total.young >= SHORT_LIVED_MIN_YOUNG)
}

/// The share of its watched time that every object of a site must die within, for
/// [`short_lived_early`]: the window's own proportion (objects dead within half an interval,
/// over two intervals).
pub const EARLY_SHARE: u64 = (SHORT_LIVED_WINDOW as u64) * 2;

/// Whether a site watched for `watched_ns` is still in its first window, where
/// [`short_lived_early`] may judge it between intervals; after that, the window's rule judges it
/// at each interval's end, on a window's worth of objects. `young_ns`: [`young_ns`].
pub fn early_judgement_applies(watched_ns: u64, young_ns: u64) -> bool {
    watched_ns < young_ns.saturating_mul(EARLY_SHARE)
}

/// Whether a site that is not short-lived may be marked so now, before its window is complete.
/// `window`: its lifetimes over the intervals of its window so far and this one; `watched_ns`:
/// how long ago the first of those objects was allocated; `oldest_live_ns`: the age of its
/// oldest object still live (0 if none); `young_ns`: [`young_ns`].
///
/// The window's rule asks that objects die within half an interval over two intervals: within
/// an [`EARLY_SHARE`]th of the time watched. This asks the same of the time watched so far: at
/// least [`SHORT_LIVED_MIN_YOUNG`] young deaths, none old, every death and every live object
/// younger than an [`EARLY_SHARE`]th of the watch, and at least a quarter of `young_ns` (an
/// eighth of an interval) watched; only in the first window
/// ([`early_judgement_applies`]). So a site whose objects live for milliseconds, at a high
/// rate, is marked within a fraction of a second instead of four (bench/alloc `xthreads`'s
/// blocks, a JVM's direct buffers); one that keeps any object (`fragmentation`'s one in
/// sixteen) never is, since that object is as old as the watch, nor one whose objects live
/// for a good part of the run (`cleaner`'s buffers, up to 0.9 s). Objects live when the site
/// is marked stay reported: one that lives on unmarks the site, as a sampled one would.
pub fn short_lived_early(
    window: Lifetimes,
    watched_ns: u64,
    oldest_live_ns: u64,
    young_ns: u64,
) -> bool {
    let bound = watched_ns / EARLY_SHARE;
    early_judgement_applies(watched_ns, young_ns)
        && window.old == 0
        && window.young >= SHORT_LIVED_MIN_YOUNG
        && watched_ns >= young_ns / 4
        && window.longest_young_ns <= bound
        && oldest_live_ns <= bound
}

/// What a whole run says of a site, for the next runs of the program (the daemon's site
/// store): whether it is short-lived, or None if the run cannot tell. `short_lived`: marked at
/// the end of the run; `run`: its objects' lifetimes over the run; `run_ns`: how long the run
/// was watched; `interval_ns`: the daemon's interval.
///
/// A site marked at the end is short-lived, and one with an object seen old is not. A site
/// never marked is judged over the run as [`short_lived`] judges a window: at least
/// [`SHORT_LIVED_MIN_YOUNG`] young deaths for each [`SHORT_LIVED_WINDOW`] intervals watched
/// (the same rate), none old. This judges runs shorter than the window, which the live policy
/// never marks; a long run at a lower rate, or with too few objects to say, gives no verdict.
pub fn run_verdict(
    short_lived: bool,
    run: Lifetimes,
    run_ns: u64,
    interval_ns: u64,
) -> Option<bool> {
    if short_lived {
        return Some(true);
    }
    if run.old > 0 {
        return Some(false);
    }
    let window_ns = (SHORT_LIVED_WINDOW as u64)
        .saturating_mul(interval_ns)
        .max(1);
    let windows = run_ns.div_ceil(window_ns).max(1);
    (run.young >= SHORT_LIVED_MIN_YOUNG.saturating_mul(windows)).then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lived(young: u64, old: u64) -> Lifetimes {
        Lifetimes {
            young,
            old,
            longest_young_ns: 0,
        }
    }

    const MS: u64 = 1_000_000;

    /// 400,000 young deaths, none old, the longest life `longest_ms`.
    fn temporaries(longest_ms: u64) -> Lifetimes {
        Lifetimes {
            young: 400_000,
            old: 0,
            longest_young_ns: longest_ms * MS,
        }
    }

    #[test]
    fn a_busy_site_of_temporaries_is_short_lived_before_its_window() {
        let young = young_ns(2_000 * MS);
        let temporaries = temporaries(120);
        // Objects that live up to 120 ms, half a second into the watch: deaths and the oldest
        // live object within a quarter of it.
        assert!(short_lived_early(temporaries, 500 * MS, 110 * MS, young));
        // Too soon: the oldest live object is as old as a third of the watch.
        assert!(!short_lived_early(temporaries, 300 * MS, 110 * MS, young));
        // Too soon in any case: under an eighth of an interval watched.
        let instant = Lifetimes {
            longest_young_ns: MS,
            ..temporaries
        };
        assert!(!short_lived_early(instant, 200 * MS, MS, young));
        assert!(short_lived_early(instant, 250 * MS, MS, young));
    }

    #[test]
    fn a_site_that_keeps_objects_or_makes_few_is_not_short_lived_early() {
        let young = young_ns(2_000 * MS);
        let temporaries = temporaries(5);
        // fragmentation: one object in sixteen lives to the end, as old as the watch.
        assert!(!short_lived_early(temporaries, 900 * MS, 890 * MS, young));
        // One object seen old, or one death late in the watch.
        assert!(!short_lived_early(
            Lifetimes {
                old: 1,
                ..temporaries
            },
            900 * MS,
            0,
            young
        ));
        assert!(!short_lived_early(
            Lifetimes {
                longest_young_ns: 300 * MS,
                ..temporaries
            },
            900 * MS,
            0,
            young
        ));
        // Below the rate.
        assert!(!short_lived_early(lived(9_999, 0), 900 * MS, 0, young));
        // After the first window, the window's rule judges, at the intervals' ends.
        assert!(short_lived_early(temporaries, 3_999 * MS, 900 * MS, young));
        assert!(!early_judgement_applies(4_000 * MS, young));
        assert!(!short_lived_early(temporaries, 4_000 * MS, 0, young));
    }

    #[test]
    fn a_site_whose_objects_all_die_young_is_short_lived_after_the_window() {
        assert!(!short_lived(false, &[]), "nothing seen");
        assert!(
            !short_lived(false, &[lived(50_000, 0)]),
            "one interval is not the window"
        );
        assert!(short_lived(false, &[lived(6_000, 0), lived(6_000, 0)]));
        assert!(
            short_lived(false, &[lived(0, 5), lived(6_000, 0), lived(6_000, 0)]),
            "only the last intervals count"
        );
    }

    #[test]
    fn few_young_deaths_or_one_old_object_keep_a_site_tracked() {
        assert!(
            !short_lived(false, &[lived(4_000, 0), lived(5_999, 0)]),
            "below the rate"
        );
        assert!(
            !short_lived(false, &[lived(100_000, 1), lived(100_000, 0)]),
            "one object lived long"
        );
    }

    #[test]
    fn a_short_lived_site_stays_so_until_a_sample_lives_long() {
        // Once short-lived, only one in SHORT_LIVED_SAMPLE objects is seen: few young deaths.
        assert!(short_lived(true, &[lived(3, 0)]));
        assert!(short_lived(true, &[]));
        assert!(!short_lived(true, &[lived(3, 0), lived(0, 1)]));
    }

    #[test]
    fn a_run_says_short_lived_only_at_the_live_rate() {
        let s = 1_000_000_000;
        // Marked at its end, or one object seen old: the run knows.
        assert_eq!(run_verdict(true, lived(3, 0), 60 * s, 2 * s), Some(true));
        assert_eq!(run_verdict(false, lived(900_000, 1), s, 2 * s), Some(false));
        // A one-second run (shorter than the window) whose site made 800,000 temporaries.
        assert_eq!(run_verdict(false, lived(800_000, 0), s, 2 * s), Some(true));
        // Too few to say, and a long run below the rate.
        assert_eq!(run_verdict(false, lived(9_999, 0), s, 2 * s), None);
        assert_eq!(run_verdict(false, lived(50_000, 0), 60 * s, 2 * s), None);
        assert_eq!(
            run_verdict(false, lived(150_000, 0), 60 * s, 2 * s),
            Some(true)
        );
        assert_eq!(
            run_verdict(false, lived(0, 0), 0, 0),
            None,
            "no interval: no panic"
        );
    }

    #[test]
    fn old_means_half_an_interval() {
        assert_eq!(young_ns(2_000_000_000), 1_000_000_000);
    }
}
