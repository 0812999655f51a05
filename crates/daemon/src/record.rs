//! The plain data of one tracked object and of one record (an object, or a split part of one).
//!
//! Kept apart from `process` so that the stores (`records`, `pending`) and the interval read
//! them without depending on the process that holds them.

use objtier_wire::PAGE_SIZE;

/// A tracked object as the library announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Object {
    pub len: u64,
    pub site: u64,
    pub created_ns: u64,
}

/// What the daemon keeps per record (an object, or a split part of one), in
/// `Process::records` beside its start address: 56 bytes, 64 with the start
/// (docs/architecture.md lists the fields).
///
/// The access counters are `f32`: a DAMON region's weight is `nr_accesses` (at most the
/// aggregation interval over the sampling interval: 20 by default) times its pages, so even
/// 1,000 samples per aggregation over the largest object believed (2^35 pages) stay below
/// 10^14, far inside `f32`'s range (10^38); its 24-bit mantissa ranks records to a few parts in
/// 10^8, and any positive share of a region stays positive, which is what "accessed in this
/// interval" tests. The EMA itself is computed in `f64` and only stored as `f32`.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub len: u64,
    pub site: u64,
    pub created_ns: u64,
    /// Time of the last interval in which accesses were sampled; 0 if never.
    pub last_access_ns: u64,
    /// EMA of sampled accesses per interval (equation 1).
    pub ema_accesses: f32,
    /// Sampled accesses attributed during the current interval.
    pub interval_accesses: f32,
    /// Sampled accesses of the last completed interval.
    pub recent_accesses: f32,
    /// Sampled accesses of the interval before that.
    pub previous_accesses: f32,
    /// Where its pages were when last located (with many records the daemon locates a
    /// rotating share of them each interval; see `interval::snapshot`).
    pub resident: ResidentPages,
}

impl Record {
    /// A record of `len` bytes from `site`, created at `created_ns`, never sampled nor located.
    pub const fn new(len: u64, site: u64, created_ns: u64) -> Record {
        Record {
            len,
            site,
            created_ns,
            last_access_ns: 0,
            ema_accesses: 0.0,
            interval_accesses: 0.0,
            recent_accesses: 0.0,
            previous_accesses: 0.0,
            resident: ResidentPages::UNKNOWN,
        }
    }

    /// The policy's view of this record, the `id`th candidate, of the `process`th process.
    pub fn candidate(
        &self,
        id: usize,
        process: usize,
        resident_bytes_by_tier: objtier_policy::TierBytes,
        advice: u32,
    ) -> objtier_policy::Candidate {
        objtier_policy::Candidate {
            id,
            process,
            len_bytes: self.len,
            created_ns: self.created_ns,
            last_access_ns: self.last_access_ns,
            ema_accesses: self.ema_accesses as f64,
            recent_accesses: self.recent_accesses as f64,
            previous_accesses: self.previous_accesses as f64,
            resident_bytes_by_tier,
            advice,
        }
    }
}

/// A record's pages on each of the three fastest tiers, 21 bits each, packed into one word;
/// bit 63 set when not known (never located, or moved since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResidentPages(u64);

impl ResidentPages {
    pub const UNKNOWN: ResidentPages = ResidentPages(1 << 63);
    /// Marks a removed entry of the record store (`crate::records`); no location packs to it.
    pub(crate) const REMOVED: ResidentPages = ResidentPages(u64::MAX);
    const BITS: u32 = 21;
    const MASK: u64 = (1 << Self::BITS) - 1;

    /// Packs pages per tier; UNKNOWN if there are more than three tiers or more than 2^21 - 1
    /// pages (8 GiB) on one, which then are located at every interval.
    pub fn pack(pages_by_tier: &[u64]) -> ResidentPages {
        if pages_by_tier.len() > 3 || pages_by_tier.iter().any(|&p| p > Self::MASK) {
            return ResidentPages::UNKNOWN;
        }
        ResidentPages(
            pages_by_tier
                .iter()
                .enumerate()
                .fold(0, |acc, (tier, &pages)| {
                    acc | pages << (tier as u32 * Self::BITS)
                }),
        )
    }

    /// From bytes per tier (whole pages).
    pub fn from_bytes(bytes_by_tier: &[u64]) -> ResidentPages {
        let pages: objtier_policy::TierBytes =
            bytes_by_tier.iter().map(|b| b / PAGE_SIZE as u64).collect();
        ResidentPages::pack(&pages)
    }

    /// Bytes on each of `tiers` tiers; meaningful only when `known`.
    pub fn bytes(self, tiers: usize) -> objtier_policy::TierBytes {
        let mut bytes = objtier_policy::TierBytes::from_elem(0, tiers);
        for (tier, b) in bytes.iter_mut().enumerate().take(3) {
            *b = self.pages(tier) * PAGE_SIZE as u64;
        }
        bytes
    }

    pub fn known(self) -> bool {
        self != ResidentPages::UNKNOWN
    }

    /// Pages on `tier` (0 for tiers past the third); meaningful only when `known`.
    pub fn pages(self, tier: usize) -> u64 {
        if tier >= 3 {
            return 0;
        }
        (self.0 >> (tier as u32 * Self::BITS)) & Self::MASK
    }
}
