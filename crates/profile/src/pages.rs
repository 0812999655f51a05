//! Page detail: what each site's pages showed a page-level observer, where the source saw
//! every access (`emulate`). For `objtier report`'s page section (the seed's touches per page
//! and reuse times, `autonuma-characterization-graph.txt` Figs. 4 and 5).
//!
//! A page's *touches* are the intervals in which it missed the modeled cache, counted over one
//! object's life (a page reused by another object starts afresh): what a page-level tiering
//! that looks once an interval, as NUMA balancing's scans do, would see of it.

use crate::SiteKind;
use serde::{Deserialize, Serialize};

/// Reuse gaps kept per site at most.
pub const MAX_REUSE_SAMPLES: usize = 4096;

/// One site's pages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SitePages {
    /// The site, as in `sites[]` (kind and frames).
    #[serde(default)]
    pub kind: SiteKind,
    pub frames: Vec<String>,
    /// Pages touched in one interval, in two, in three or more.
    pub touched_once: u64,
    pub touched_twice: u64,
    pub touched_more: u64,
    /// For pages touched exactly twice: seconds between the first miss of each touch (all of
    /// them, or an evenly spread sample of at most 4,096).
    #[serde(default)]
    pub reuse_s: Vec<f64>,
}

/// Combines page detail of several profiles: counts added, reuse samples kept together
/// (thinned evenly to the bound).
pub fn merge<'a>(all: impl Iterator<Item = &'a [SitePages]>) -> Vec<SitePages> {
    let mut out: Vec<SitePages> = Vec::new();
    for pages in all {
        for p in pages {
            match out
                .iter_mut()
                .find(|o| o.kind == p.kind && o.frames == p.frames)
            {
                Some(o) => {
                    o.touched_once += p.touched_once;
                    o.touched_twice += p.touched_twice;
                    o.touched_more += p.touched_more;
                    o.reuse_s.extend_from_slice(&p.reuse_s);
                }
                None => out.push(p.clone()),
            }
        }
    }
    for o in &mut out {
        if o.reuse_s.len() > MAX_REUSE_SAMPLES {
            let step = o.reuse_s.len().div_ceil(MAX_REUSE_SAMPLES);
            o.reuse_s = o.reuse_s.iter().step_by(step).copied().collect();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_adds_by_site() {
        let a = SitePages {
            kind: SiteKind::Site,
            frames: vec!["/bin/x+0x1".into()],
            touched_once: 1,
            touched_twice: 2,
            touched_more: 3,
            reuse_s: vec![0.5; 3000],
        };
        let mut b = a.clone();
        b.frames = vec!["/bin/x+0x2".into()];
        let merged = merge([&[a.clone(), b][..], &[a][..]].into_iter());
        assert_eq!(merged.len(), 2);
        assert_eq!(
            (
                merged[0].touched_once,
                merged[0].touched_twice,
                merged[0].touched_more
            ),
            (2, 4, 6)
        );
        assert!(merged[0].reuse_s.len() <= MAX_REUSE_SAMPLES);
        assert_eq!(merged[1].touched_more, 3);
    }
}
