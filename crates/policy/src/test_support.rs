//! Helpers the unit tests of several modules share.

use crate::{Candidate, FillFastestFirst, TierBudget, TierBytes};

pub(crate) const MIB: u64 = 1 << 20;

/// A deterministic stream of pseudo-random words (xorshift64) from a nonzero `state`.
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// Records moved whole (the paper's enforcement), as most tests below expect.
pub(crate) const WHOLE: FillFastestFirst = FillFastestFirst {
    fast_reserve_bytes: None,
    record_parts: false,
};

pub(crate) fn reserve(bytes: u64) -> FillFastestFirst {
    FillFastestFirst {
        fast_reserve_bytes: Some(bytes),
        ..WHOLE
    }
}

/// A fast tier with `fast_bytes` of budget, and a slow one that takes the rest.
pub(crate) fn fast_and_slow(fast_bytes: u64) -> [TierBudget; 2] {
    [
        TierBudget {
            budget_bytes: fast_bytes,
        },
        TierBudget {
            budget_bytes: u64::MAX,
        },
    ]
}

pub(crate) fn cand(id: usize, len: u64, ema: f64, tiers: [u64; 2]) -> Candidate {
    Candidate {
        id,
        process: 0,
        len_bytes: len,
        created_ns: id as u64,
        last_access_ns: if ema > 0.0 { 100 } else { 0 },
        ema_accesses: ema,
        recent_accesses: ema,
        previous_accesses: ema,
        resident_bytes_by_tier: TierBytes::from_slice(&tiers),
        advice: 0,
    }
}
