//! An enforcement's largest buffers, kept by the daemon from one enforcement to the next, and
//! what they hold per record.

use objtier_policy::Candidate;
use objtier_sys::pages::PageStatus;

/// Pages of one record, located in the per-process status list.
pub struct RecordPages {
    /// The process's index in the snapshot.
    pub process: usize,
    /// Address of the first page.
    pub start: u64,
    /// Index of its first page's status, or [`NOT_LOCATED`] when it was counted from its last
    /// location instead.
    pub first_page: usize,
    pub pages: usize,
    pub site: u64,
}

/// `RecordPages::first_page` of a record not located this interval.
pub const NOT_LOCATED: usize = usize::MAX;

/// An enforcement's per-record buffers, kept by the daemon from one enforcement to the next:
/// at 10^6 records they are about 150 MB, and fresh ones every interval cost more in page
/// faults than the work done in them (bench/alloc/results/LOG.md, "Keeping the interval's buffers").
#[derive(Default)]
pub(crate) struct IntervalBuffers {
    pub(super) candidates: Vec<Candidate>,
    pub(super) spans: Vec<RecordPages>,
    /// Per process, the statuses of its located pages.
    pub(super) statuses: Vec<Vec<PageStatus>>,
}

impl IntervalBuffers {
    /// Empties the buffers for an enforcement over `records` records of `processes` processes.
    pub(super) fn prepare(&mut self, records: usize, processes: usize) {
        self.candidates.clear();
        self.spans.clear();
        self.candidates.reserve(records);
        self.spans.reserve(records);
        self.statuses.resize_with(processes, Vec::new);
        self.statuses.iter_mut().for_each(Vec::clear);
    }

    /// Gives memory back when a buffer holds far more than this enforcement used (the records
    /// went away, or a first enforcement located every page).
    pub(super) fn trim(&mut self) {
        fn trim<T>(v: &mut Vec<T>) {
            if v.capacity() > 4 * v.len() + 65536 {
                v.shrink_to(2 * v.len());
            }
        }
        trim(&mut self.candidates);
        trim(&mut self.spans);
        self.statuses.iter_mut().for_each(trim);
    }
}
