//! A process's allocation sites as the library describes them: return addresses, innermost
//! first, and their names once the daemon has the process's memory map.

use std::collections::HashMap;

/// A site as the library described it: return addresses, innermost first.
#[derive(Clone, Debug, Default)]
pub struct SiteFrames {
    pub ips: Vec<u64>,
    /// Frames announced; the description is complete when `ips` has them all.
    pub count: usize,
    /// The frames as `module+offset` (`?+0xADDR` where no file maps the address), once named.
    pub names: Option<Vec<String>>,
}

impl SiteFrames {
    pub fn complete(&self) -> bool {
        self.count > 0 && self.ips.len() == self.count
    }
}

/// Sites by id.
pub type Sites = HashMap<u64, SiteFrames>;
