//! Lost events and the resyncs that recover from them.
//!
//! A full ring drops events (the library never blocks). When the drop counter moves, the daemon
//! asks the library for a resync through the control area; the library re-announces every live
//! object between `ResyncBegin` and `ResyncEnd`, under its allocator lock, so the bracket holds
//! exactly the live set: objects missing from it were freed (their frees were lost) and are
//! forgotten; objects already known keep their access history. If events were dropped during
//! the resync itself, another is requested.

use objtier_sys::ring::RingMapping;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// Progress of a resync (see the module doc).
#[derive(Debug, Default)]
pub enum Resync {
    #[default]
    Idle,
    /// Asked for `request` when the drop counter read `dropped_at_request`.
    Requested {
        request: u32,
        dropped_at_request: u64,
    },
    /// Inside one step (between its ResyncBegin and ResyncEnd), covering addresses from `lo`.
    Receiving {
        request: u32,
        dropped_at_request: u64,
        lo: u64,
        dropped_at_begin: u64,
        seen: HashSet<u64>,
    },
}

/// How a resync step ended ([`ResyncState::end`]).
pub(super) enum StepEnd {
    /// Not a step of the resync under way: an invalid event.
    Invalid,
    /// The step lost events, so it is not the whole truth about its range.
    Incomplete,
    /// The objects starting in `[lo, hi)` that the step did not re-announce (`seen`) are gone.
    Complete { lo: u64, seen: HashSet<u64> },
}

/// A process's resync state (see the module doc).
#[derive(Debug, Default)]
pub struct ResyncState {
    state: Resync,
    /// Drop counter value the daemon has accounted for.
    dropped_seen: u64,
    /// Ask for a resync at the next drain, drops or not: a site is no longer short-lived, and
    /// objects of it the library allocated unreported may still live.
    wanted: bool,
}

impl ResyncState {
    pub fn state(&self) -> &Resync {
        &self.state
    }

    /// Puts the resync in `state` (tests play a library in the middle of one).
    #[cfg(test)]
    pub(crate) fn set_state(&mut self, state: Resync) {
        self.state = state;
    }

    /// Whether a resync will be asked for at the next drain, drops or not.
    pub fn wanted(&self) -> bool {
        self.wanted
    }

    /// Asks for a resync at the next drain.
    pub fn want(&mut self) {
        self.wanted = true;
    }

    /// Notices a finished resync (the library had served it when `served` was read, before the
    /// drain), and asks for one when events were dropped since the last. True when a resync
    /// finished.
    pub(super) fn request_if_dropped(&mut self, ring: &RingMapping, served: u32) -> bool {
        let control = ring.control();
        let mut finished = false;
        if let Resync::Requested {
            request,
            dropped_at_request,
        } = self.state
        {
            if served == request {
                finished = true;
                self.dropped_seen = dropped_at_request;
                self.state = Resync::Idle;
            }
        }
        let dropped = ring.header().dropped.load(Ordering::Relaxed);
        if (dropped == self.dropped_seen && !self.wanted) || !matches!(self.state, Resync::Idle) {
            return finished;
        }
        self.wanted = false;
        let request = control
            .resync_served
            .load(Ordering::Acquire)
            .wrapping_add(1);
        control.resync_request.store(request, Ordering::Release);
        self.state = Resync::Requested {
            request,
            dropped_at_request: dropped,
        };
        finished
    }

    /// A step of resync `request` begins, covering addresses from `lo`, with the drop counter at
    /// `dropped_now`. False if it belongs to no resync under way.
    pub(super) fn begin(&mut self, lo: u64, request: u64, dropped_now: u64) -> bool {
        match self.state {
            // A Begin while Receiving means the previous step's End was dropped: start over.
            Resync::Requested {
                request: r,
                dropped_at_request,
            }
            | Resync::Receiving {
                request: r,
                dropped_at_request,
                ..
            } if r as u64 == request => {
                self.state = Resync::Receiving {
                    request: r,
                    dropped_at_request,
                    lo,
                    dropped_at_begin: dropped_now,
                    seen: HashSet::new(),
                };
                true
            }
            _ => false,
        }
    }

    /// An object at `start` was re-announced: true if a step is under way (it counts as seen).
    pub(super) fn saw(&mut self, start: u64) -> bool {
        match &mut self.state {
            Resync::Receiving { seen, .. } => {
                seen.insert(start);
                true
            }
            _ => false,
        }
    }

    /// Ends a step of resync `request` at `hi`, with the drop counter at `dropped_now`.
    pub(super) fn end(&mut self, hi: u64, request: u64, dropped_now: u64) -> StepEnd {
        let state = std::mem::take(&mut self.state);
        let Resync::Receiving {
            request: r,
            dropped_at_request,
            lo,
            dropped_at_begin,
            seen,
        } = state
        else {
            // An End without its Begin (the Begin was dropped): the step proves nothing.
            self.state = state;
            return StepEnd::Invalid;
        };
        self.state = Resync::Requested {
            request: r,
            dropped_at_request,
        };
        if r as u64 != request || hi < lo {
            return StepEnd::Invalid;
        }
        if dropped_now != dropped_at_begin {
            // The drop counter moved, so another resync follows this one.
            return StepEnd::Incomplete;
        }
        StepEnd::Complete { lo, seen }
    }
}
