//! What the site store remembers of a process's program, as its warm start holds it.

use crate::sitestore::{Learnt, Program, StoredSite};
use std::collections::HashMap;

/// A process's warm start (`crate::sitestore`): what was remembered for its program, and
/// whether what it learnt since was saved.
#[derive(Debug)]
pub struct WarmStart {
    pub program: Program,
    /// The store file of the program (for status).
    pub file: std::path::PathBuf,
    /// Remembered sites by call path.
    pub remembered: HashMap<Vec<String>, Remembered>,
    /// Sites placed or marked short-lived at attach, from remembered call paths and the memory
    /// map, before the library described them: site id -> call path.
    pub predicted: HashMap<u64, Vec<String>>,
    /// Something the store records (a placement, a short-lived mark) changed since the last
    /// save.
    pub unsaved: bool,
}

/// What the store remembers of one call path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remembered {
    /// Its placement: tier, and who learnt it.
    pub placed: Option<(u32, Learnt)>,
    pub short_lived: bool,
}

/// What a warm start did to a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmed {
    /// Placed in this tier.
    Placed(u32),
    /// Marked short-lived.
    ShortLived,
}

impl WarmStart {
    /// Remembered `sites` of `program`; placements in a tier this machine does not have are
    /// dropped.
    pub fn new(
        program: Program,
        file: std::path::PathBuf,
        sites: Vec<StoredSite>,
        tiers: usize,
    ) -> WarmStart {
        WarmStart {
            program,
            file,
            remembered: sites
                .into_iter()
                .filter_map(|s| {
                    let remembered = Remembered {
                        placed: s.placed().filter(|&(tier, _)| (tier as usize) < tiers),
                        short_lived: s.short_lived,
                    };
                    (remembered != Remembered::default()).then_some((s.frames, remembered))
                })
                .collect(),
            predicted: HashMap::new(),
            unsaved: false,
        }
    }
}
