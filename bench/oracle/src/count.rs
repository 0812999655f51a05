//! What the oracle counts, apart from QEMU: which node an address belongs to, the per-vCPU
//! counters, the marker instruction that opens and closes a measured window, and the JSON it
//! writes. All of it is unit-tested without a guest.

use objtier_cache_model::Cache;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counter cells for this many vCPUs; more vCPUs share cells (the adds are atomic, so sharing
/// only costs contention, never counts).
pub const VCPU_CELLS: usize = 64;
/// At most this many NUMA nodes (the tiered VM has 2 or 3).
pub const MAX_NODES: usize = 8;
/// The slot for accesses that hit no node: ROM, MMIO, RAM blocks that are not guest memory.
pub const OTHER: usize = MAX_NODES;
const SLOTS: usize = MAX_NODES + 1;

/// The marker is `nopl 0x6f72XXXX(%rax,%rax,1)`: an 8-byte NOP, harmless on any x86 CPU and
/// under any emulator, whose displacement no compiler or assembler emits (padding NOPs carry
/// displacement 0). The low 16 bits of the displacement say what to do.
pub const MARKER_PREFIX: [u8; 4] = [0x0f, 0x1f, 0x84, 0x00];
pub const MARKER_TAG: u16 = 0x6f72;
pub const MARK_START: u16 = 1;
pub const MARK_STOP: u16 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Open a window: counting starts from zero.
    Start,
    /// Close the window: its counts are written out.
    Stop,
}

impl Mark {
    /// The marker an instruction's bytes encode, if any.
    pub fn decode(insn: &[u8]) -> Option<Mark> {
        let (prefix, disp) = insn.split_first_chunk::<4>()?;
        if *prefix != MARKER_PREFIX || disp.len() != 4 {
            return None;
        }
        let disp = u32::from_le_bytes(disp.try_into().ok()?);
        if (disp >> 16) as u16 != MARKER_TAG {
            return None;
        }
        match disp as u16 {
            MARK_START => Some(Mark::Start),
            MARK_STOP => Some(Mark::Stop),
            _ => None,
        }
    }
}

/// What QEMU's `qemu_plugin_hwaddr_phys_addr` returns for guest RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// QEMU before 8.2: the RAM block's offset among all RAM blocks, plus the offset within
    /// it, plus the block's address in its container (`block->offset + offset +
    /// block->mr->addr`). Each node's memory backend is one RAM block, created in node order
    /// before any other (`info ramblock` shows node k at the sum of the sizes before it) and
    /// mapped at that same sum in the machine's RAM, so node k reads as
    /// [2 x start(k), 2 x start(k) + size(k)): node 1 of a 1G:2G guest at 2G..4G, which is
    /// "GPA + size of node 0". Plugin API version 1 means such a QEMU.
    RamBlock,
    /// QEMU 8.2 and later: the guest-physical address. For less than 3.5 GiB of RAM an x86
    /// `pc` guest lays its nodes out contiguously from 0, so node k is
    /// [start(k), start(k) + size(k)).
    Physical,
}

/// Where each node's memory lies in the addresses QEMU reports (see [`Layout`]). The oracle's
/// validation (tests/vm/run-oracle) proves the map on the QEMU in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMap {
    ranges: Vec<(u64, u64)>,
}

impl NodeMap {
    /// Parses `SIZE:SIZE[:SIZE...]`, the nodes' sizes in node order; a SIZE is a number of MiB,
    /// or a number with a K, M or G suffix.
    pub fn parse(spec: &str, layout: Layout) -> Result<NodeMap, String> {
        let mut ranges = Vec::new();
        let mut start = 0u64;
        for part in spec.split(':') {
            let size = parse_size(part)
                .ok_or_else(|| format!("bad node size '{part}' in nodes={spec} (want e.g. nodes=1024:2048, in MiB, or 1G:2G)"))?;
            if size == 0 {
                return Err(format!("node size 0 in nodes={spec}"));
            }
            let reported = match layout {
                Layout::RamBlock => 2 * start,
                Layout::Physical => start,
            };
            ranges.push((reported, reported + size));
            start += size;
        }
        if ranges.len() > MAX_NODES {
            return Err(format!(
                "{} nodes in nodes={spec}; at most {MAX_NODES}",
                ranges.len()
            ));
        }
        Ok(NodeMap { ranges })
    }

    pub fn nodes(&self) -> usize {
        self.ranges.len()
    }

    /// The node holding `addr`, or [`OTHER`].
    #[inline]
    pub fn node_of(&self, addr: u64) -> usize {
        self.ranges
            .iter()
            .position(|&(start, end)| (start..end).contains(&addr))
            .unwrap_or(OTHER)
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "M"),
    };
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.trim_end_matches(['i', 'B', 'b']) {
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// Loads and stores per slot (nodes, then [`OTHER`]); `user_*` are those made in user mode
/// (a virtual address in the lower half: on x86-64 the kernel lives in the upper half), i.e. by
/// programs rather than by the kernel on their behalf or its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub loads: [u64; SLOTS],
    pub stores: [u64; SLOTS],
    pub user_loads: [u64; SLOTS],
    pub user_stores: [u64; SLOTS],
    /// Loads and stores that missed the modeled cache (see [`CACHE_LINES`]): the memory traffic.
    pub misses: [u64; SLOTS],
    pub user_misses: [u64; SLOTS],
}

/// The modeled last-level cache, per vCPU: 2 MiB of 64-byte lines, [`WAYS`]-way set-associative
/// with least-recently-used replacement, its set chosen by a hash of the line's address as QEMU
/// reports it (the model is `objtier-cache-model`'s, shared with the emulation plugin, whose
/// crate doc says why hashed and why associative). TCG has no caches, so without one every
/// stack spill would count as a memory access and data with locality would drown the traffic
/// that tiering is about; the misses are what reaches memory on a real machine (roughly: real
/// caches are bigger and shared).
///
/// The model was direct-mapped until 2026-11-26: one lammps run counted 5.7 times the user
/// misses of the same program's other runs, for the same accesses, because a migration switched
/// a pair of hot lines sharing a slot on and off. With 8 ways a set needs 9 hot lines to thrash.
pub const CACHE_LINES: usize = CACHE_SETS * WAYS;
/// Lines per set.
pub const WAYS: usize = 8;
const CACHE_SETS: usize = 1 << 12;
const LINE_SHIFT: u32 = objtier_cache_model::LINE_SHIFT;

/// The modeled cache's set for a line number.
#[inline]
pub fn cache_set(line: u64) -> usize {
    Cache::set_of(line, CACHE_SETS)
}

/// Whether an access at `vaddr` was made in user mode (x86-64: the lower half).
#[inline]
pub fn is_user(vaddr: u64) -> bool {
    vaddr >> 63 == 0
}

impl Totals {
    /// `self - earlier`, per slot (counters only grow).
    pub fn since(&self, earlier: &Totals) -> Totals {
        let mut d = Totals::default();
        for i in 0..SLOTS {
            d.loads[i] = self.loads[i].wrapping_sub(earlier.loads[i]);
            d.stores[i] = self.stores[i].wrapping_sub(earlier.stores[i]);
            d.user_loads[i] = self.user_loads[i].wrapping_sub(earlier.user_loads[i]);
            d.user_stores[i] = self.user_stores[i].wrapping_sub(earlier.user_stores[i]);
            d.misses[i] = self.misses[i].wrapping_sub(earlier.misses[i]);
            d.user_misses[i] = self.user_misses[i].wrapping_sub(earlier.user_misses[i]);
        }
        d
    }

    /// `"nodes": [...], "other": {...}` for the first `nodes` slots.
    pub fn json_fields(&self, nodes: usize) -> String {
        let per_node: Vec<String> = (0..nodes)
            .map(|i| {
                format!(
                    r#"{{"node": {i}, "loads": {}, "stores": {}, "user_loads": {}, "user_stores": {}, "misses": {}, "user_misses": {}}}"#,
                    self.loads[i],
                    self.stores[i],
                    self.user_loads[i],
                    self.user_stores[i],
                    self.misses[i],
                    self.user_misses[i]
                )
            })
            .collect();
        format!(
            r#""nodes": [{}], "other": {{"loads": {}, "stores": {}}}"#,
            per_node.join(", "),
            self.loads[OTHER],
            self.stores[OTHER]
        )
    }
}

/// One cache line of counters per vCPU, so that vCPU threads do not share lines.
/// One vCPU's counters, indexed [user][store][slot] and [user][slot], and its modeled cache.
/// Only that vCPU's thread writes them.
#[repr(align(128))]
struct Cell {
    counts: [[[AtomicU64; SLOTS]; 2]; 2],
    misses: [[AtomicU64; SLOTS]; 2],
    cache: Cache,
}

impl Default for Cell {
    fn default() -> Self {
        Cell {
            counts: Default::default(),
            misses: Default::default(),
            cache: Cache::new(CACHE_SETS, WAYS),
        }
    }
}

/// The kernel's modeled cache misses by the address of the instruction that made them, per vCPU
/// cell (only that vCPU's thread locks its own), for reading which kernel code makes the traffic
/// a tiering configuration costs.
pub struct KernelPcs {
    cells: Box<[std::sync::Mutex<std::collections::HashMap<u64, u64>>]>,
}

impl Default for KernelPcs {
    fn default() -> Self {
        KernelPcs {
            cells: (0..VCPU_CELLS).map(|_| Default::default()).collect(),
        }
    }
}

impl KernelPcs {
    pub fn add(&self, vcpu: u32, pc: u64) {
        let mut cell = self.cells[vcpu as usize % VCPU_CELLS]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *cell.entry(pc).or_insert(0) += 1;
    }

    pub fn clear(&self) {
        for cell in self.cells.iter() {
            cell.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// The `n` instructions with the most misses, most first, and the misses of all.
    pub fn top(&self, n: usize) -> (Vec<(u64, u64)>, u64) {
        let mut all = std::collections::HashMap::new();
        for cell in self.cells.iter() {
            for (&pc, &count) in cell.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                *all.entry(pc).or_insert(0) += count;
            }
        }
        let total = all.values().sum();
        let mut top: Vec<(u64, u64)> = all.into_iter().collect();
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(n);
        (top, total)
    }

    /// `"kernel_pcs": {"total": T, "top": [["0x...", misses], ...]}`.
    pub fn json_field(&self, n: usize) -> String {
        let (top, total) = self.top(n);
        let list: Vec<String> = top
            .iter()
            .map(|(pc, count)| format!(r#"["{pc:#x}", {count}]"#))
            .collect();
        format!(
            r#""kernel_pcs": {{"total": {total}, "top": [{}]}}"#,
            list.join(", ")
        )
    }
}

pub struct Counters {
    cells: Box<[Cell]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            cells: (0..VCPU_CELLS).map(|_| Cell::default()).collect(),
        }
    }
}

impl Counters {
    /// Counts one access; true when the modeled cache missed.
    #[inline]
    pub fn add(&self, vcpu: u32, slot: usize, store: bool, user: bool, addr: u64) -> bool {
        let cell = &self.cells[vcpu as usize % VCPU_CELLS];
        cell.counts[user as usize][store as usize][slot].fetch_add(1, Relaxed);
        if cell.cache.touch_line(addr >> LINE_SHIFT) {
            cell.misses[user as usize][slot].fetch_add(1, Relaxed);
            return true;
        }
        false
    }

    pub fn sum(&self) -> Totals {
        let mut t = Totals::default();
        for cell in self.cells.iter() {
            for i in 0..SLOTS {
                let [kernel, user] = &cell.counts;
                let (kl, ks) = (kernel[0][i].load(Relaxed), kernel[1][i].load(Relaxed));
                let (ul, us) = (user[0][i].load(Relaxed), user[1][i].load(Relaxed));
                t.loads[i] += kl + ul;
                t.stores[i] += ks + us;
                t.user_loads[i] += ul;
                t.user_stores[i] += us;
                let (km, um) = (
                    cell.misses[0][i].load(Relaxed),
                    cell.misses[1][i].load(Relaxed),
                );
                t.misses[i] += km + um;
                t.user_misses[i] += um;
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_pcs_rank_by_misses_across_vcpus() {
        let pcs = KernelPcs::default();
        for _ in 0..3 {
            pcs.add(0, 0xffff_ffff_8100_0010);
        }
        pcs.add(1, 0xffff_ffff_8100_0010);
        pcs.add(1, 0xffff_ffff_8200_0000);
        let (top, total) = pcs.top(1);
        assert_eq!(top, vec![(0xffff_ffff_8100_0010, 4)]);
        assert_eq!(total, 5);
        assert_eq!(
            pcs.json_field(5),
            r#""kernel_pcs": {"total": 5, "top": [["0xffffffff81000010", 4], ["0xffffffff82000000", 1]]}"#
        );
        pcs.clear();
        assert_eq!(pcs.top(5), (vec![], 0));
    }

    fn marker(op: u16) -> [u8; 8] {
        let disp = (u32::from(MARKER_TAG) << 16) | u32::from(op);
        let mut b = [0; 8];
        b[..4].copy_from_slice(&MARKER_PREFIX);
        b[4..].copy_from_slice(&disp.to_le_bytes());
        b
    }

    #[test]
    fn markers_decode_and_ordinary_nops_do_not() {
        assert_eq!(Mark::decode(&marker(MARK_START)), Some(Mark::Start));
        assert_eq!(Mark::decode(&marker(MARK_STOP)), Some(Mark::Stop));
        assert_eq!(Mark::decode(&marker(7)), None);
        // The padding NOP assemblers emit: nopl 0x0(%rax,%rax,1).
        assert_eq!(Mark::decode(&[0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]), None);
        assert_eq!(Mark::decode(&marker(MARK_START)[..7]), None);
    }

    /// The bytes mark.c emits are the bytes the plugin looks for.
    #[test]
    fn mark_c_encodes_the_same_marker() {
        let src = include_str!("../mark.c");
        for (op, bytes) in [("START", marker(MARK_START)), ("STOP", marker(MARK_STOP))] {
            let want = bytes
                .iter()
                .map(|b| format!("0x{b:02x}"))
                .collect::<Vec<_>>()
                .join(", ");
            assert!(src.contains(&want), "mark.c has no {op} marker {want}");
        }
    }

    const G: u64 = 1 << 30;

    #[test]
    fn physical_layout_is_contiguous() {
        let m = NodeMap::parse("1024:2048", Layout::Physical).unwrap();
        assert_eq!(m.nodes(), 2);
        assert_eq!(m.node_of(0), 0);
        assert_eq!(m.node_of(G - 1), 0);
        assert_eq!(m.node_of(G), 1);
        assert_eq!(m.node_of(3 * G - 1), 1);
        assert_eq!(m.node_of(3 * G), OTHER);
        assert_eq!(
            NodeMap::parse("256MiB:1g", Layout::Physical)
                .unwrap()
                .nodes(),
            2
        );
        for bad in ["", "1024:", "x", "0:1", "1T"] {
            assert!(
                NodeMap::parse(bad, Layout::Physical).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    /// QEMU 7.2 as seen: node 1 of a 1G:2G guest at GPA + 1G, so its top GiB reads as 3G..4G.
    #[test]
    fn ram_block_layout_doubles_each_start() {
        let m = NodeMap::parse("1G:2G", Layout::RamBlock).unwrap();
        assert_eq!(
            (m.node_of(G - 1), m.node_of(G), m.node_of(2 * G)),
            (0, OTHER, 1)
        );
        assert_eq!((m.node_of(4 * G - 1), m.node_of(4 * G)), (1, OTHER));
        let three = NodeMap::parse("1G:512M:2G", Layout::RamBlock).unwrap();
        assert_eq!(
            (
                three.node_of(2 * G),
                three.node_of(3 * G),
                three.node_of(5 * G - 1)
            ),
            (1, 2, 2)
        );
        assert_eq!(three.node_of(2 * G + 512 * (1 << 20)), OTHER);
    }

    #[test]
    fn counters_sum_across_vcpus_and_windows_subtract() {
        let c = Counters::default();
        c.add(0, 0, false, true, 0);
        c.add(1, 0, false, false, 64);
        c.add(1, 1, true, true, 1 << 30);
        c.add(VCPU_CELLS as u32, OTHER, true, false, 3 << 30); // shares vCPU 0's cell
        let before = c.sum();
        assert_eq!(
            (before.loads[0], before.stores[1], before.stores[OTHER]),
            (2, 1, 1)
        );
        assert_eq!(
            (
                before.user_loads[0],
                before.user_stores[1],
                before.user_stores[OTHER]
            ),
            (1, 1, 0)
        );
        c.add(3, 1, false, true, 1 << 30);
        let window = c.sum().since(&before);
        assert_eq!(window.loads[1], 1);
        assert_eq!(window.loads[0], 0);
        assert_eq!(
            window.json_fields(2),
            r#""nodes": [{"node": 0, "loads": 0, "stores": 0, "user_loads": 0, "user_stores": 0, "misses": 0, "user_misses": 0}, {"node": 1, "loads": 1, "stores": 0, "user_loads": 1, "user_stores": 0, "misses": 1, "user_misses": 1}], "other": {"loads": 0, "stores": 0}"#
        );
        assert!(is_user(0x7fff_ffff_f000) && !is_user(0xffff_8880_0000_0000));
    }

    #[test]
    fn the_modeled_cache_counts_each_line_once_until_evicted() {
        let c = Counters::default();
        for _ in 0..3 {
            for off in (0..4096).step_by(8) {
                c.add(0, 0, false, true, 4096 + off);
            }
        }
        let t = c.sum();
        assert_eq!(
            (t.loads[0], t.misses[0], t.user_misses[0]),
            (3 * 512, 64, 64)
        );
        // Another vCPU has its own cache.
        c.add(1, 0, false, true, 4096);
        assert_eq!(c.sum().misses[0], 64 + 1);
    }

    /// Lines of one set: up to WAYS of them stay; one more evicts the least recently used.
    fn lines_of_one_set(n: usize) -> Vec<u64> {
        let line = 4096 >> LINE_SHIFT;
        (line..)
            .filter(|&l| cache_set(l) == cache_set(line))
            .take(n)
            .collect()
    }

    #[test]
    fn a_set_holds_its_ways_and_evicts_the_least_recently_used() {
        let c = Counters::default();
        let lines = lines_of_one_set(WAYS + 1);
        // Two hot lines of one set, interleaved, miss once each (direct-mapped, every access).
        for _ in 0..100 {
            c.add(0, 0, false, true, lines[0] << LINE_SHIFT);
            c.add(0, 0, false, true, lines[1] << LINE_SHIFT);
        }
        assert_eq!(c.sum().misses[0], 2);
        // WAYS lines fit; touching the first again makes lines[1] the least recently used.
        for &l in &lines[2..WAYS] {
            c.add(0, 0, false, true, l << LINE_SHIFT);
        }
        c.add(0, 0, false, true, lines[0] << LINE_SHIFT);
        assert_eq!(c.sum().misses[0], WAYS as u64);
        // One more line evicts lines[1], and only it.
        c.add(0, 0, false, true, lines[WAYS] << LINE_SHIFT);
        for &l in lines[2..=WAYS].iter().chain(&lines[..1]) {
            c.add(0, 0, false, true, l << LINE_SHIFT);
        }
        assert_eq!(c.sum().misses[0], WAYS as u64 + 1);
        c.add(0, 0, false, true, lines[1] << LINE_SHIFT);
        assert_eq!(c.sum().misses[0], WAYS as u64 + 2);
    }

    /// A loop over more lines than a set holds misses on every access (LRU's known worst case,
    /// as on real caches).
    #[test]
    fn a_loop_over_one_line_more_than_a_set_holds_always_misses() {
        let c = Counters::default();
        let lines = lines_of_one_set(WAYS + 1);
        for _ in 0..10 {
            for &l in &lines {
                c.add(0, 0, false, true, l << LINE_SHIFT);
            }
        }
        assert_eq!(c.sum().misses[0], 10 * (WAYS as u64 + 1));
    }

    /// A page copied a byte at a time between buffers 2 MiB apart (TCG's `rep movsb` between
    /// two huge pages, as a migration does) costs each line once, not each byte.
    #[test]
    fn copies_between_aligned_buffers_miss_once_a_line() {
        let c = Counters::default();
        let (src, dst) = (64u64 << 20, 66u64 << 20);
        for off in 0..4096 {
            c.add(0, 0, false, false, src + off);
            c.add(0, 0, true, false, dst + off);
        }
        assert_eq!(c.sum().misses[0], 128);
    }
}
