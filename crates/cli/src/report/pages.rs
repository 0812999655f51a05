//! Pages (section 5): how many times each page was touched (1, 2, 3 or more: the seed's
//! Fig. 4) and, for pages touched exactly twice, the time between the two touches (Fig. 5:
//! why a reactive, page-level tiering that promotes on a second touch gains little).
//!
//! It needs every touch of every page, which only an emulated profile (`objtier profile
//! --source emulate`) records: its `pages` field gives per site the pages touched in one, two,
//! three or more intervals (a touch is an interval in which the page missed the modeled cache,
//! over one object's life) and the reuse gaps of those touched twice (`objtier_profile::pages`).
//! [`from_profile`] turns that into [`SitePages`]; perf, DAMON and proc profiles have none, and
//! the report says so and draws nothing.

use objtier_profile::{Profile, Source};
use serde::Serialize;

/// One page's touches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PageTouches {
    /// When it was touched, in seconds since the profile began, increasing.
    pub touches_s: Vec<f64>,
    /// The tier it was in at its last touch, where known.
    pub tier: Option<usize>,
}

/// The touched pages of one site.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SitePages {
    /// Index in the profile's `sites`.
    pub site: usize,
    pub pages: Vec<PageTouches>,
}

/// The profile's page detail, where it has some (see the module doc). A page touched twice
/// whose gap the profile did not keep (it keeps a sample) counts as touched twice with no gap.
pub fn from_profile(profile: &Profile) -> Option<Vec<SitePages>> {
    if profile.pages.is_empty() {
        return None;
    }
    let detail = profile
        .pages
        .iter()
        .filter_map(|p| {
            let site = profile
                .sites
                .iter()
                .position(|s| s.kind == p.kind && s.frames == p.frames)?;
            let touches = |t: Vec<f64>| PageTouches {
                touches_s: t,
                tier: None,
            };
            let mut pages = Vec::new();
            pages.extend((0..p.touched_once).map(|_| touches(vec![0.0])));
            let twice = p.touched_twice as usize;
            pages.extend(
                p.reuse_s
                    .iter()
                    .take(twice)
                    .map(|&gap| touches(vec![0.0, gap])),
            );
            pages.extend((p.reuse_s.len().min(twice)..twice).map(|_| touches(vec![0.0, f64::NAN])));
            pages.extend((0..p.touched_more).map(|_| touches(vec![0.0, 0.0, 0.0])));
            Some(SitePages { site, pages })
        })
        .collect();
    Some(detail)
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "detail", rename_all = "kebab-case")]
pub enum PagesFigure {
    /// No page detail: `why` says what would give it.
    Absent {
        source: &'static str,
        why: String,
    },
    Present(PageFigures),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PageFigures {
    pub pages: u64,
    /// Pages touched once, twice, three times or more (the seed's Fig. 4).
    pub touched_once: u64,
    pub touched_twice: u64,
    pub touched_more: u64,
    /// The site with the most touches in the slowest tier (the seed's object 0), where pages'
    /// tiers are known, else the site with the most touches; its pages touched twice and
    /// the time between their touches (Fig. 5).
    pub reuse_site: Option<usize>,
    pub reuse_s: Option<Quantiles>,
}

/// A distribution as the seed's Fig. 5 draws it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Quantiles {
    pub count: usize,
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub mean: f64,
    pub p75: f64,
    pub max: f64,
}

/// Quantiles of `values` (nearest rank); `None` for none.
pub fn quantiles(values: &[f64]) -> Option<Quantiles> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Quantiles {
        count: v.len(),
        min: v[0],
        p25: rank(0.25),
        median: rank(0.5),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p75: rank(0.75),
        max: v[v.len() - 1],
    })
}

/// The page figures of a profile measured by `source`, from its page detail if it has any.
pub fn figure(source: Source, detail: Option<&[SitePages]>) -> PagesFigure {
    let Some(detail) = detail.filter(|d| d.iter().any(|s| !s.pages.is_empty())) else {
        return PagesFigure::Absent {
            source: source.name(),
            why: format!(
                "this profile has no page detail (source {}); an emulated profile (objtier \
                 profile --source emulate) has",
                source.name()
            ),
        };
    };
    let mut counts = [0u64; 3];
    for page in detail.iter().flat_map(|s| &s.pages) {
        match page.touches_s.len() {
            0 => {}
            1 => counts[0] += 1,
            2 => counts[1] += 1,
            _ => counts[2] += 1,
        }
    }
    let slowest = detail
        .iter()
        .flat_map(|s| &s.pages)
        .filter_map(|p| p.tier)
        .max();
    let touches_in = |s: &SitePages, tier: Option<usize>| -> usize {
        s.pages
            .iter()
            .filter(|p| tier.is_none() || p.tier == tier)
            .map(|p| p.touches_s.len())
            .sum()
    };
    let reuse = detail
        .iter()
        .filter(|s| touches_in(s, slowest) > 0)
        .max_by(|a, b| {
            touches_in(a, slowest)
                .cmp(&touches_in(b, slowest))
                // The first of equals.
                .then(b.site.cmp(&a.site))
        });
    let reuse_s = reuse.and_then(|s| {
        let gaps: Vec<f64> = s
            .pages
            .iter()
            .filter(|p| p.touches_s.len() == 2)
            .map(|p| p.touches_s[1] - p.touches_s[0])
            .collect();
        quantiles(&gaps)
    });
    PagesFigure::Present(PageFigures {
        pages: counts.iter().sum(),
        touched_once: counts[0],
        touched_twice: counts[1],
        touched_more: counts[2],
        reuse_site: reuse.map(|s| s.site),
        reuse_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(touches: &[f64], tier: usize) -> PageTouches {
        PageTouches {
            touches_s: touches.to_vec(),
            tier: Some(tier),
        }
    }

    #[test]
    fn sampled_profiles_have_no_page_detail_and_say_so() {
        let p = crate::report::test_profiles::profile(2, 1);
        assert_eq!(from_profile(&p), None);
        match figure(Source::Damon, None) {
            PagesFigure::Absent { source, why } => {
                assert_eq!(source, "damon");
                assert!(why.contains("no page detail (source damon)"), "{why}");
                assert!(why.contains("--source emulate"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            figure(Source::Perf, Some(&[SitePages::default()])),
            PagesFigure::Absent { .. }
        ));
    }

    #[test]
    fn touches_per_page_and_reuse_of_pages_touched_twice() {
        let detail = [
            SitePages {
                site: 0,
                pages: vec![page(&[1.0], 0), page(&[1.0, 2.0, 3.0], 0)],
            },
            // The most touched in the slowest tier: its twice-touched pages' gaps.
            SitePages {
                site: 1,
                pages: vec![
                    page(&[0.0, 4.0], 1),
                    page(&[1.0, 2.0], 1),
                    page(&[5.0], 1),
                    page(&[2.0, 8.0], 1),
                ],
            },
        ];
        let PagesFigure::Present(f) = figure(Source::Emulate, Some(&detail)) else {
            panic!("page detail was given");
        };
        assert_eq!(f.pages, 6);
        assert_eq!((f.touched_once, f.touched_twice, f.touched_more), (2, 3, 1));
        assert_eq!(f.reuse_site, Some(1));
        let q = f.reuse_s.unwrap();
        assert_eq!(q.count, 3);
        assert_eq!((q.min, q.median, q.max), (1.0, 4.0, 6.0));
        assert!((q.mean - 11.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn an_emulated_profiles_pages_are_read() {
        use crate::report::test_profiles::{profile, site};
        let mut p = profile(2, 1);
        p.sites = vec![
            site("/bin/app+0x1", 4096, &[1.0]),
            site("/bin/app+0x2", 4096, &[1.0]),
        ];
        p.pages = vec![objtier_profile::pages::SitePages {
            kind: p.sites[1].kind,
            frames: p.sites[1].frames.clone(),
            touched_once: 2,
            touched_twice: 3,
            touched_more: 1,
            reuse_s: vec![4.0, 2.0],
        }];
        let detail = from_profile(&p).unwrap();
        assert_eq!(detail.len(), 1);
        assert_eq!((detail[0].site, detail[0].pages.len()), (1, 6));
        let PagesFigure::Present(f) = figure(Source::Emulate, Some(&detail)) else {
            panic!("page detail was given");
        };
        assert_eq!((f.touched_once, f.touched_twice, f.touched_more), (2, 3, 1));
        let q = f.reuse_s.unwrap();
        assert_eq!((q.count, q.min, q.max), (2, 2.0, 4.0));
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let q = quantiles(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            (q.min, q.p25, q.median, q.p75, q.max),
            (1.0, 1.0, 2.0, 3.0, 4.0)
        );
        assert_eq!(q.mean, 2.5);
        assert_eq!(quantiles(&[]), None);
        assert_eq!(quantiles(&[f64::NAN]), None);
    }
}
