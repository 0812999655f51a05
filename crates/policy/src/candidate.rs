//! What the planner knows about one object record.

use crate::RANK_STICKINESS;
use objtier_wire::advice;

/// Bytes per tier, fastest first. Up to three tiers are kept inline, so a million candidates
/// do not cost a million small allocations; more spill to the heap.
pub type TierBytes = smallvec::SmallVec<[u64; 3]>;

/// What the planner knows about one object record.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The caller's handle for this record.
    pub id: usize,
    /// Owning process's handle, for per-process fast-tier caps.
    pub process: usize,
    pub len_bytes: u64,
    pub created_ns: u64,
    /// Time of the last interval in which accesses were observed; 0 if never.
    pub last_access_ns: u64,
    /// EMA of sampled accesses per interval.
    pub ema_accesses: f64,
    /// Sampled accesses in the latest interval alone.
    pub recent_accesses: f64,
    /// Sampled accesses in the interval before the latest.
    pub previous_accesses: f64,
    /// Resident bytes on each tier now (index 0 = fastest).
    pub resident_bytes_by_tier: TierBytes,
    /// What the program advised about this memory (`objtier_wire::advice` bits; 0 for none).
    pub advice: u32,
}

impl Candidate {
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes_by_tier.iter().sum()
    }

    /// The tier holding most of this record's resident bytes (the slowest on a tie).
    pub fn main_tier(&self) -> Option<usize> {
        let (tier, bytes) = self
            .resident_bytes_by_tier
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)))?;
        (*bytes > 0).then_some(tier)
    }

    /// Seen accessed in the latest interval. Only such records are moved up: a record whose
    /// EMA is merely still decaying from an old burst is not worth the bandwidth, and letting it
    /// climb would make cold records bounce at the budget's edge.
    pub(crate) fn observed(&self) -> bool {
        self.recent_accesses > 0.0
    }

    /// Accesses per resident byte: untouched pages are neither accessed nor cost memory, so a
    /// sparse record (a small-object arena, a huge array touched at one end) is judged by what
    /// it holds. A record with nothing resident falls back to its length.
    pub(crate) fn accesses_per_byte(&self) -> f64 {
        let bytes = match self.resident_bytes() {
            0 => self.len_bytes,
            resident => resident,
        };
        self.ema_accesses / bytes.max(1) as f64
    }

    /// APB's ranking key: accesses per byte, raised by up to [`RANK_STICKINESS`] for the share
    /// of the record already in the fastest tier. Two records of about the same heat then keep
    /// their places instead of trading them (and their pages) whenever sampling noise swaps
    /// their estimates; a record must be that much hotter per byte to displace one already fast.
    pub fn apb_rank(&self) -> f64 {
        let resident = self.resident_bytes();
        let fast = self.resident_bytes_by_tier.first().copied().unwrap_or(0);
        let fast_share = if resident == 0 {
            0.0
        } else {
            fast as f64 / resident as f64
        };
        self.accesses_per_byte() * (1.0 + RANK_STICKINESS * fast_share)
    }

    /// Where the program's advice puts this record in the walk, within its process priority.
    pub(crate) fn advice_class(&self) -> AdviceClass {
        let a = self.advice;
        if a & advice::REQUIRE_FAST != 0 {
            AdviceClass::RequireFast
        } else if a & (advice::PREFER_FAST | advice::LATENCY_SENSITIVE | advice::HOT) != 0 {
            AdviceClass::PreferFast
        } else if a & (advice::PREFER_SLOW | advice::COLD) != 0 {
            AdviceClass::PreferSlow
        } else {
            AdviceClass::None
        }
    }
}

/// Advice classes in walk order: required fast first, preferred slow last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AdviceClass {
    RequireFast,
    PreferFast,
    None,
    PreferSlow,
}
