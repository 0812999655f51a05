//! The memory level a sample's data came from, from its `PERF_SAMPLE_DATA_SRC` word
//! (`union perf_mem_data_src` in `linux/perf_event.h`): Intel PEBS fills it from the load
//! latency facility, and the kernel decodes AMD IBS and Arm SPE into the same word.
//!
//! The word has two ways of naming a level: the old `mem_lvl` bits (L1, LFB, L2, L3, local
//! and remote RAM, remote caches, I/O, uncached) and, since Linux 4.14, `mem_lvl_num` with
//! `mem_remote` (which also names PMEM, CXL, L4 and memory-side caches). The number is read
//! where the kernel set it, the bits otherwise. A level marked as missed (a store that missed
//! L1, say) does not say where the data came from, and is `Unknown`.

use perf_event_open_sys::bindings::{
    PERF_MEM_LVLNUM_ANY_CACHE, PERF_MEM_LVLNUM_CXL, PERF_MEM_LVLNUM_IO, PERF_MEM_LVLNUM_L0,
    PERF_MEM_LVLNUM_L1, PERF_MEM_LVLNUM_L2, PERF_MEM_LVLNUM_L2_MHB, PERF_MEM_LVLNUM_L3,
    PERF_MEM_LVLNUM_L4, PERF_MEM_LVLNUM_LFB, PERF_MEM_LVLNUM_MSC, PERF_MEM_LVLNUM_PMEM,
    PERF_MEM_LVLNUM_RAM, PERF_MEM_LVLNUM_SHIFT, PERF_MEM_LVLNUM_UNC, PERF_MEM_LVL_HIT,
    PERF_MEM_LVL_IO, PERF_MEM_LVL_L1, PERF_MEM_LVL_L2, PERF_MEM_LVL_L3, PERF_MEM_LVL_LFB,
    PERF_MEM_LVL_LOC_RAM, PERF_MEM_LVL_MISS, PERF_MEM_LVL_NA, PERF_MEM_LVL_REM_CCE1,
    PERF_MEM_LVL_REM_CCE2, PERF_MEM_LVL_REM_RAM1, PERF_MEM_LVL_REM_RAM2, PERF_MEM_LVL_SHIFT,
    PERF_MEM_LVL_UNC, PERF_MEM_REMOTE_SHIFT, PERF_MEM_SNOOP_HITM, PERF_MEM_SNOOP_SHIFT,
    PERF_MEM_TLB_MISS, PERF_MEM_TLB_SHIFT,
};

/// Where a sampled access was served from, nearest the core first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemLevel {
    L1,
    /// A line fill buffer: the line was already on its way after an earlier L1 miss.
    Lfb,
    L2,
    L3,
    /// L4, a memory-side cache, or a cache the kernel does not name.
    OtherCache,
    /// A cache of another socket.
    RemoteCache,
    /// Local DRAM.
    Ram,
    /// DRAM of another node: another socket's, or a CPU-less memory node's.
    RemoteRam,
    Cxl,
    Pmem,
    Io,
    Uncached,
    /// Not said, or said only where the access missed.
    #[default]
    Unknown,
}

impl MemLevel {
    /// Every level, nearest first (the order of a profile's level names).
    pub const ALL: [MemLevel; 13] = [
        MemLevel::L1,
        MemLevel::Lfb,
        MemLevel::L2,
        MemLevel::L3,
        MemLevel::OtherCache,
        MemLevel::RemoteCache,
        MemLevel::Ram,
        MemLevel::RemoteRam,
        MemLevel::Cxl,
        MemLevel::Pmem,
        MemLevel::Io,
        MemLevel::Uncached,
        MemLevel::Unknown,
    ];

    /// The level's name in profiles (`sites[].memory_levels`).
    pub fn name(self) -> &'static str {
        match self {
            MemLevel::L1 => "l1",
            MemLevel::Lfb => "lfb",
            MemLevel::L2 => "l2",
            MemLevel::L3 => "l3",
            MemLevel::OtherCache => "other-cache",
            MemLevel::RemoteCache => "remote-cache",
            MemLevel::Ram => "ram",
            MemLevel::RemoteRam => "remote-ram",
            MemLevel::Cxl => "cxl",
            MemLevel::Pmem => "pmem",
            MemLevel::Io => "io",
            MemLevel::Uncached => "uncached",
            MemLevel::Unknown => "unknown",
        }
    }

    /// Its index in [`MemLevel::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What a sample's data source says: the level that served it, whether its address
/// translation missed the TLB, and whether a snoop found the line modified in another core's
/// cache (HITM: the cost of sharing a line that is written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataSource {
    pub level: MemLevel,
    pub tlb_miss: bool,
    pub hitm: bool,
}

/// Decodes a `PERF_SAMPLE_DATA_SRC` word.
pub fn decode(data_src: u64) -> DataSource {
    let field = |shift: u32, bits: u32| (data_src >> shift) & ((1u64 << bits) - 1);
    let lvl = field(PERF_MEM_LVL_SHIFT, 14);
    let lvl_num = field(PERF_MEM_LVLNUM_SHIFT, 4) as u32;
    let remote = field(PERF_MEM_REMOTE_SHIFT, 1) == 1;
    let tlb = field(PERF_MEM_TLB_SHIFT, 7);
    let snoop = field(PERF_MEM_SNOOP_SHIFT, 5);
    let has = |bit: u32| lvl & bit as u64 != 0;
    let missed = has(PERF_MEM_LVL_MISS) && !has(PERF_MEM_LVL_HIT);
    let level = if missed {
        MemLevel::Unknown
    } else if (1..=14).contains(&lvl_num) {
        from_level_number(lvl_num, remote)
    } else {
        from_level_bits(&has)
    };
    DataSource {
        level,
        tlb_miss: tlb & PERF_MEM_TLB_MISS as u64 != 0,
        hitm: snoop & PERF_MEM_SNOOP_HITM as u64 != 0,
    }
}

/// `mem_lvl_num` (with `mem_remote`), where the kernel set it.
fn from_level_number(number: u32, remote: bool) -> MemLevel {
    match number {
        PERF_MEM_LVLNUM_L0 | PERF_MEM_LVLNUM_L1 => MemLevel::L1,
        PERF_MEM_LVLNUM_LFB => MemLevel::Lfb,
        PERF_MEM_LVLNUM_L2 | PERF_MEM_LVLNUM_L2_MHB => MemLevel::L2,
        PERF_MEM_LVLNUM_L3
        | PERF_MEM_LVLNUM_L4
        | PERF_MEM_LVLNUM_MSC
        | PERF_MEM_LVLNUM_ANY_CACHE
            if remote =>
        {
            MemLevel::RemoteCache
        }
        PERF_MEM_LVLNUM_L3 => MemLevel::L3,
        PERF_MEM_LVLNUM_L4 | PERF_MEM_LVLNUM_MSC | PERF_MEM_LVLNUM_ANY_CACHE => {
            MemLevel::OtherCache
        }
        PERF_MEM_LVLNUM_RAM if remote => MemLevel::RemoteRam,
        PERF_MEM_LVLNUM_RAM => MemLevel::Ram,
        PERF_MEM_LVLNUM_CXL => MemLevel::Cxl,
        PERF_MEM_LVLNUM_PMEM => MemLevel::Pmem,
        PERF_MEM_LVLNUM_IO => MemLevel::Io,
        PERF_MEM_LVLNUM_UNC => MemLevel::Uncached,
        _ => MemLevel::Unknown,
    }
}

/// The old `mem_lvl` bits: the farthest level set wins (the kernel sets one).
fn from_level_bits(has: &dyn Fn(u32) -> bool) -> MemLevel {
    if has(PERF_MEM_LVL_NA) {
        return MemLevel::Unknown;
    }
    [
        (PERF_MEM_LVL_UNC, MemLevel::Uncached),
        (PERF_MEM_LVL_IO, MemLevel::Io),
        (
            PERF_MEM_LVL_REM_CCE1 | PERF_MEM_LVL_REM_CCE2,
            MemLevel::RemoteCache,
        ),
        (
            PERF_MEM_LVL_REM_RAM1 | PERF_MEM_LVL_REM_RAM2,
            MemLevel::RemoteRam,
        ),
        (PERF_MEM_LVL_LOC_RAM, MemLevel::Ram),
        (PERF_MEM_LVL_L3, MemLevel::L3),
        (PERF_MEM_LVL_L2, MemLevel::L2),
        (PERF_MEM_LVL_LFB, MemLevel::Lfb),
        (PERF_MEM_LVL_L1, MemLevel::L1),
    ]
    .into_iter()
    .find(|&(bits, _)| has(bits))
    .map_or(MemLevel::Unknown, |(_, level)| level)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data source word from its parts (`mem_op` LOAD).
    fn word(lvl: u32, lvl_num: u32, remote: bool, tlb: u32) -> u64 {
        0x2 | (lvl as u64) << PERF_MEM_LVL_SHIFT
            | (lvl_num as u64) << PERF_MEM_LVLNUM_SHIFT
            | (remote as u64) << PERF_MEM_REMOTE_SHIFT
            | (tlb as u64) << PERF_MEM_TLB_SHIFT
    }

    /// The data sources of the 14 PEBS load-latency samples of a real capture (a Skylake-SP
    /// Xeon, perf 5.17: google/perf_data_converter's `src/quipper/testdata/
    /// perf.data.weight_struct`, BSD-3-Clause; decoded independently of perf as L1, LFB, L2
    /// and L3 hits, one of them after an STLB miss: dTLB bits 0x14, the others 0x1a).
    #[test]
    fn a_real_pebs_capture_decodes_to_its_levels() {
        for (data_src, level, tlb_miss) in [
            (0x102_6810_0142, MemLevel::L1, false),
            (0x102_6a10_0142, MemLevel::L1, false),
            (0x118_6810_0242, MemLevel::Lfb, false),
            (0x104_6810_0442, MemLevel::L2, false),
            (0x106_6810_0842, MemLevel::L3, false),
            (0x106_5010_0842, MemLevel::L3, true),
        ] {
            let d = decode(data_src);
            assert_eq!(d.level, level, "{data_src:#x}");
            assert_eq!(d.tlb_miss, tlb_miss, "{data_src:#x}");
        }
    }

    #[test]
    fn levels_by_number_and_remote_bit() {
        let hit = PERF_MEM_LVL_HIT;
        let ram = word(hit | PERF_MEM_LVL_LOC_RAM, PERF_MEM_LVLNUM_RAM, false, 0);
        assert_eq!(decode(ram).level, MemLevel::Ram);
        let far = word(hit, PERF_MEM_LVLNUM_RAM, true, 0);
        assert_eq!(decode(far).level, MemLevel::RemoteRam);
        assert_eq!(
            decode(word(hit, PERF_MEM_LVLNUM_CXL, false, 0)).level,
            MemLevel::Cxl
        );
        assert_eq!(
            decode(word(hit, PERF_MEM_LVLNUM_PMEM, false, 0)).level,
            MemLevel::Pmem
        );
        assert_eq!(
            decode(word(hit, PERF_MEM_LVLNUM_ANY_CACHE, true, 0)).level,
            MemLevel::RemoteCache
        );
        assert_eq!(
            decode(word(hit, PERF_MEM_LVLNUM_L4, false, 0)).level,
            MemLevel::OtherCache
        );
        assert_eq!(
            decode(word(hit, PERF_MEM_LVLNUM_L2_MHB, false, 0)).level,
            MemLevel::L2
        );
    }

    #[test]
    fn levels_by_the_old_bits() {
        let hit = PERF_MEM_LVL_HIT;
        assert_eq!(
            decode(word(hit | PERF_MEM_LVL_REM_RAM1, 0, false, 0)).level,
            MemLevel::RemoteRam
        );
        assert_eq!(
            decode(word(hit | PERF_MEM_LVL_LOC_RAM, 0, false, 0)).level,
            MemLevel::Ram
        );
        assert_eq!(
            decode(word(hit | PERF_MEM_LVL_REM_CCE2, 0, false, 0)).level,
            MemLevel::RemoteCache
        );
        assert_eq!(
            decode(word(hit | PERF_MEM_LVL_UNC, 0, false, 0)).level,
            MemLevel::Uncached
        );
        // "Not available", as the kernel fills a data source no PMU gave.
        assert_eq!(
            decode(word(
                PERF_MEM_LVL_NA,
                perf_event_open_sys::bindings::PERF_MEM_LVLNUM_NA,
                false,
                1
            ))
            .level,
            MemLevel::Unknown
        );
        assert_eq!(decode(0).level, MemLevel::Unknown);
    }

    #[test]
    fn misses_say_nothing_of_where_and_tlb_misses_are_kept() {
        // A store that missed L1 (Intel's store samples).
        let store_miss = word(
            PERF_MEM_LVL_MISS | PERF_MEM_LVL_L1,
            PERF_MEM_LVLNUM_L1,
            false,
            0,
        );
        assert_eq!(decode(store_miss).level, MemLevel::Unknown);
        let walked = word(
            PERF_MEM_LVL_HIT | PERF_MEM_LVL_LOC_RAM,
            PERF_MEM_LVLNUM_RAM,
            false,
            PERF_MEM_TLB_MISS | 0x20,
        );
        assert_eq!(
            decode(walked),
            DataSource {
                level: MemLevel::Ram,
                tlb_miss: true,
                hitm: false,
            }
        );
    }

    /// The capture's loads all snooped nothing modified (snoop bits 0x2: none); a load that
    /// hit a line modified in another core's L3 slice (as `perf c2c` looks for) is HITM.
    #[test]
    fn hitm_is_the_snoop_that_found_the_line_modified() {
        assert!(!decode(0x106_6810_0842).hitm);
        let hitm = word(
            PERF_MEM_LVL_HIT | PERF_MEM_LVL_L3,
            PERF_MEM_LVLNUM_L3,
            false,
            0,
        ) | (PERF_MEM_SNOOP_HITM as u64) << PERF_MEM_SNOOP_SHIFT;
        let d = decode(hitm);
        assert!(d.hitm && !d.tlb_miss);
        assert_eq!(d.level, MemLevel::L3);
    }

    #[test]
    fn names_follow_the_order_of_all() {
        for (i, level) in MemLevel::ALL.iter().enumerate() {
            assert_eq!(level.index(), i);
        }
        assert_eq!(MemLevel::ALL[6].name(), "ram");
    }
}
