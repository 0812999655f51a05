//! Placement budgets: how many pages of a site's live objects its tier may hold (a profile's
//! advice, `objtier run --placement`), the rest going one tier down.
//!
//! The daemon writes a site's budget beside its tier in the control area's site table; the
//! library counts the pages it has placed per site, in an array indexed like that table (a
//! site's slot never moves), and decides at each allocation: all of the object in the site's
//! tier, none (the tier's budget is spent: one tier down), or, for the object that crosses the
//! budget, its first pages in the tier and the rest bound one tier down (Moura et al. §7's
//! spill-over: a hot table larger than what is left still gets the part that fits). A free
//! gives back what its object was charged. The count is exact under any number of threads: each
//! allocation claims its pages with one atomic add.
//!
//! What an object was charged is kept with it ([`crate::large::alloc`]'s `kept`): the pages,
//! the slot, and the attach generation, since a new daemon means a new site table and counts
//! that start from zero (objects charged under the old one give nothing back to the new).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use objtier_wire::SITE_TABLE_SLOTS;

static USED_PAGES: [AtomicU64; SITE_TABLE_SLOTS] = [const { AtomicU64::new(0) }; SITE_TABLE_SLOTS];
/// Bumped at every attach; 12 bits of it are kept with each charged object.
static GENERATION: AtomicU32 = AtomicU32::new(0);

const PAGES_BITS: u32 = 32;
const SLOT_SHIFT: u32 = PAGES_BITS;
const SLOT_BITS: u32 = SITE_TABLE_SLOTS.trailing_zeros();
const GENERATION_SHIFT: u32 = SLOT_SHIFT + SLOT_BITS;
const GENERATION_MASK: u64 = 0xfff;

const _: () = assert!(GENERATION_SHIFT + 12 < 63, "the top bit is KEPT_REBOUND");

/// Where an object's pages go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    /// Pages at its start that go in the site's tier (all, none, or the part that fits).
    pub head_pages: usize,
    /// What to keep with the object, for [`refund`] (0: nothing was charged).
    pub kept: u64,
}

/// Charges an object of `pages` pages of the site in table slot `slot`, whose budget is
/// `budget_pages`.
pub fn charge(slot: usize, budget_pages: u64, pages: usize) -> Charge {
    let Some(used) = USED_PAGES.get(slot) else {
        return Charge {
            head_pages: pages,
            kept: 0,
        };
    };
    let before = used.fetch_add(pages as u64, Ordering::Relaxed);
    let head = budget_pages.saturating_sub(before).min(pages as u64);
    if head < pages as u64 {
        // Only the head is the tier's.
        used.fetch_sub(pages as u64 - head, Ordering::Relaxed);
    }
    let head = head as usize;
    let generation = GENERATION.load(Ordering::Relaxed) as u64 & GENERATION_MASK;
    Charge {
        head_pages: head,
        kept: if head == 0 {
            0
        } else {
            head as u64 | (slot as u64) << SLOT_SHIFT | generation << GENERATION_SHIFT
        },
    }
}

/// Gives back what an object was charged (`kept` as [`charge`] made it, with any flags the
/// allocator added above the fields).
pub fn refund(kept: u64) {
    let pages = kept & ((1 << PAGES_BITS) - 1);
    if pages == 0 {
        return;
    }
    let generation = (kept >> GENERATION_SHIFT) & GENERATION_MASK;
    if generation != GENERATION.load(Ordering::Relaxed) as u64 & GENERATION_MASK {
        return;
    }
    let slot = ((kept >> SLOT_SHIFT) & ((1 << SLOT_BITS) - 1)) as usize;
    let _ = USED_PAGES[slot].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
        Some(used.saturating_sub(pages))
    });
}

/// A new daemon, a new site table: every count starts from zero.
pub fn reset() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    for used in &USED_PAGES {
        used.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts are the process's: one test at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_object_that_crosses_the_budget_gets_the_part_that_fits() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        reset();
        let slot = 7;
        assert_eq!(charge(slot, 10, 4).head_pages, 4);
        let crossing = charge(slot, 10, 8);
        assert_eq!(crossing.head_pages, 6, "6 of the 10 pages were left");
        let beyond = charge(slot, 10, 3);
        assert_eq!(
            (beyond.head_pages, beyond.kept),
            (0, 0),
            "the budget is spent"
        );
        refund(crossing.kept);
        assert_eq!(
            charge(slot, 10, 8).head_pages,
            6,
            "what it was charged came back"
        );
        refund(beyond.kept);
        assert_eq!(USED_PAGES[slot].load(Ordering::Relaxed), 10);
    }

    #[test]
    fn a_new_daemon_starts_from_zero_and_old_objects_give_nothing_back() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        reset();
        let old = charge(9, 100, 50);
        reset();
        let new = charge(9, 100, 60);
        assert_eq!(new.head_pages, 60);
        refund(old.kept);
        assert_eq!(USED_PAGES[9].load(Ordering::Relaxed), 60);
        refund(new.kept | crate::large::KEPT_REBOUND);
        assert_eq!(
            USED_PAGES[9].load(Ordering::Relaxed),
            0,
            "flags above the fields are ignored"
        );
        assert_eq!(
            charge(SITE_TABLE_SLOTS, 1, 5).head_pages,
            5,
            "no slot: no budget"
        );
    }
}
