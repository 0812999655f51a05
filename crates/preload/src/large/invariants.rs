//! The allocator's internal invariants (feature `invariants`): boundary tags tile every chunk,
//! the free sets match the tags, the dirty-byte count is exact; checked after every 64th change.

use super::*;

#[cfg(feature = "invariants")]
pub(super) static CHANGES: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

impl State {
    /// Called under the lock after every allocation and free: with the `invariants` feature,
    /// checks the whole state every 64th time.
    #[inline]
    pub(super) fn after_change(&self) {
        #[cfg(feature = "invariants")]
        if CHANGES.fetch_add(1, Ordering::Relaxed).is_multiple_of(64) {
            if let Err(why) = self.check() {
                crate::write_stderr(format_args!("objtier: allocator invariant broken: {why}"));
                // SAFETY: abort has no preconditions; a broken allocator must not go on.
                unsafe { libc::abort() };
            }
        }
    }

    /// Verifies the allocator's invariants; the first violation, described.
    #[cfg(any(test, feature = "invariants"))]
    pub(super) fn check(&self) -> Result<(), alloc::string::String> {
        use alloc::format;
        let mut dirty_bytes = 0;
        let (mut free_seen, mut dirty_seen, mut quick_seen) = (0, 0, 0);
        for (index, c) in self.chunks.iter().enumerate() {
            let mut page = 0;
            let mut previous_clean_free = false;
            while page < c.bump {
                let tag = c.tag(page);
                let pages = (tag >> TAG_PAGES_SHIFT) as usize;
                if pages == 0 || page + pages > c.bump || tag & TAG_TAIL != 0 {
                    return Err(format!(
                        "chunk {index} page {page}: tag {tag:#x} is not an extent head within bump {}",
                        c.bump
                    ));
                }
                if pages > 1 && c.tag(page + pages - 1) != tag | TAG_TAIL {
                    return Err(format!(
                        "chunk {index} page {page}: tail tag {:#x} does not match head {tag:#x}",
                        c.tag(page + pages - 1)
                    ));
                }
                let key = free_key(index, page, pages);
                let clean_free = tag & (TAG_ALLOCATED | TAG_DIRTY) == 0;
                if tag & TAG_QUICK == TAG_QUICK {
                    dirty_bytes += pages * PAGE_SIZE;
                    quick_seen += 1;
                    if !self.quick.contains(index, page, pages) {
                        return Err(format!("quick extent {key:?} missing from the quick lists"));
                    }
                } else if tag & TAG_ALLOCATED == 0 {
                    if tag & TAG_DIRTY != 0 {
                        dirty_bytes += pages * PAGE_SIZE;
                        dirty_seen += 1;
                        if !self.dirty.contains(key) {
                            return Err(format!("dirty extent {key:?} missing from the dirty set"));
                        }
                    } else {
                        free_seen += 1;
                        if !self.free.contains(key) {
                            return Err(format!("free extent {key:?} missing from the free set"));
                        }
                        if previous_clean_free {
                            return Err(format!(
                                "clean free extent {key:?} follows another unmerged"
                            ));
                        }
                    }
                }
                previous_clean_free = clean_free;
                page += pages;
            }
        }
        if quick_seen != self.quick.count() {
            return Err(format!(
                "quick lists hold {} extents, the tags {quick_seen}",
                self.quick.count()
            ));
        }
        if free_seen != self.free.len() || dirty_seen != self.dirty.len() {
            return Err(format!(
                "sets hold {} free and {} dirty extents, the tags {free_seen} and {dirty_seen}",
                self.free.len(),
                self.dirty.len()
            ));
        }
        // Every extent is in its set; now every member of a set, reached as lookups reach it
        // (through the indexes' summaries), must be an extent of that kind: then lookups see
        // exactly the free extents.
        for (name, set, flags) in [("free", &self.free, 0), ("dirty", &self.dirty, TAG_DIRTY)] {
            let mut stray = None;
            set.for_each(|key| {
                let head = (key.pages << TAG_PAGES_SHIFT) | flags;
                let is_extent = self.chunks.get(key.chunk as usize).is_some_and(|c| {
                    (key.start as usize) < c.bump && c.tag(key.start as usize) == head
                });
                if !is_extent && stray.is_none() {
                    stray = Some(key);
                }
            })
            .map_err(|why| format!("{name} set: {why}"))?;
            if let Some(key) = stray {
                return Err(format!(
                    "{name} set holds {key:?}, not a {name} extent by the tags"
                ));
            }
        }
        if dirty_bytes != self.dirty_bytes {
            return Err(format!(
                "dirty_bytes says {}, the tags {dirty_bytes}",
                self.dirty_bytes
            ));
        }
        Ok(())
    }
}
