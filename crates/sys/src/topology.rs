//! NUMA nodes and memory tiers, read from sysfs.
//!
//! The kernel ranks memory into tiers (`/sys/devices/virtual/memory_tiering/memory_tierN`, lower
//! N = faster, derived from ACPI HMAT or driver-provided abstract distances). Where that
//! directory is missing (kernels before 6.1, or no tiering information), CPU-attached nodes are
//! taken as the fast tier and CPU-less nodes as the slow one, which is how CXL expanders and
//! Optane in app-direct mode appear.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot parse {path}: {what}")]
    Parse { path: PathBuf, what: String },
    #[error("no NUMA nodes with memory found under {0}")]
    NoNodes(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: u32,
    pub has_cpus: bool,
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Clean file cache on the node that the kernel deems cold: `Inactive(file)` less what is
    /// `Dirty` or under `Writeback` (which reclaim must write first). Reclaim takes it first,
    /// so moving pages into the node makes room of it.
    pub cold_cache_bytes: u64,
}

/// One memory tier: nodes the kernel considers equally fast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    /// The kernel's tier id (`memory_tierN`), or a synthetic rank when derived from CPU presence.
    pub kernel_id: u32,
    pub nodes: Vec<u32>,
}

/// Nodes and tiers, tiers ordered fastest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub tiers: Vec<Tier>,
    /// Where the tier order came from, for logs and `objtier status`.
    pub tier_source: TierSource,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierSource {
    /// `/sys/devices/virtual/memory_tiering`.
    KernelMemoryTiering,
    /// CPU-attached nodes first, CPU-less nodes after.
    CpuPresence,
    /// Given explicitly by the user.
    Explicit,
}

/// Largest id a range of a list may reach: above the kernel's most CPUs (`NR_CPUS` is at most
/// 8,192) and NUMA nodes (`MAX_NUMNODES`, 1,024).
pub const MAX_LIST_ID: u32 = 1 << 16;

/// Parses a kernel node/cpu list such as `0-2,4,7-8`. Empty input is an empty list.
pub fn parse_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                // Found by the config fuzzer: `0-1111110000` in `--tiers` was a 4 GiB list.
                if a > b || b > MAX_LIST_ID {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
        // No list of distinct ids is longer; ranges repeated would multiply without end.
        if out.len() > MAX_LIST_ID as usize + 1 {
            return None;
        }
    }
    Some(out)
}

fn read(path: &Path) -> Result<String, TopologyError> {
    fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_owned(),
        source,
    })
}

/// What a node's meminfo says, in bytes (the file gives kB).
#[derive(Default)]
struct NodeMeminfo {
    total: Option<u64>,
    free: Option<u64>,
    inactive_file: Option<u64>,
    dirty: Option<u64>,
    writeback: Option<u64>,
}

impl NodeMeminfo {
    /// Cold file cache that reclaim can drop at once (see [`Node::cold_cache_bytes`]).
    fn cold_cache(&self) -> Option<u64> {
        let unclean = self.dirty.unwrap_or(0) + self.writeback.unwrap_or(0);
        self.inactive_file.map(|i| i.saturating_sub(unclean))
    }
}

/// Reads `MemTotal`, `MemFree` and the file cache's `Inactive(file)`, `Dirty` and `Writeback`
/// from a node's meminfo.
fn parse_node_meminfo(text: &str) -> NodeMeminfo {
    let mut info = NodeMeminfo::default();
    for line in text.lines() {
        // "Node 0 MemTotal:        2009680 kB"
        let mut words = line.split_whitespace().skip(2);
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let kib = value.parse::<u64>().ok().map(|v| v * 1024);
        match key {
            "MemTotal:" => info.total = kib,
            "MemFree:" => info.free = kib,
            "Inactive(file):" => info.inactive_file = kib,
            "Dirty:" => info.dirty = kib,
            "Writeback:" => info.writeback = kib,
            _ => {}
        }
    }
    info
}

impl Topology {
    /// A made-up machine for fakes, tests and benchmarks: node 0 with the CPUs and
    /// `fast_total` bytes (`fast_free` of them free) as the fast tier, node 1 CPU-less with
    /// `slow_total` bytes, all free, as the slow tier (kernel tier ids 4 and 72, as the tiered
    /// VM's HMAT numbers give).
    pub fn two_tiers(fast_total: u64, fast_free: u64, slow_total: u64) -> Topology {
        let node = |id, has_cpus, total_bytes, free_bytes| Node {
            id,
            has_cpus,
            total_bytes,
            free_bytes,
            cold_cache_bytes: 0,
        };
        Topology {
            nodes: vec![
                node(0, true, fast_total, fast_free),
                node(1, false, slow_total, slow_total),
            ],
            tiers: vec![
                Tier {
                    kernel_id: 4,
                    nodes: vec![0],
                },
                Tier {
                    kernel_id: 72,
                    nodes: vec![1],
                },
            ],
            tier_source: TierSource::Explicit,
        }
    }

    /// Reads the topology under `sys_root` (normally `/sys`).
    pub fn discover(sys_root: &Path) -> Result<Topology, TopologyError> {
        let node_dir = sys_root.join("devices/system/node");
        let online_path = node_dir.join("online");
        let online = match fs::read_to_string(&online_path) {
            Ok(text) => parse_list(&text).ok_or_else(|| TopologyError::Parse {
                path: online_path.clone(),
                what: format!("bad node list {text:?}"),
            })?,
            // No NUMA support compiled in: one node 0.
            Err(e) if e.kind() == io::ErrorKind::NotFound => vec![0],
            Err(source) => {
                return Err(TopologyError::Read {
                    path: online_path,
                    source,
                })
            }
        };
        let mut nodes = Vec::new();
        for id in online {
            let dir = node_dir.join(format!("node{id}"));
            let cpulist = fs::read_to_string(dir.join("cpulist")).unwrap_or_default();
            let has_cpus = parse_list(&cpulist).is_some_and(|l| !l.is_empty());
            let info = match fs::read_to_string(dir.join("meminfo")) {
                Ok(text) => parse_node_meminfo(&text),
                Err(_) => NodeMeminfo::default(),
            };
            let total_bytes = info.total.unwrap_or(0);
            if total_bytes == 0 {
                continue; // memory-less node (CPUs only): not a tier
            }
            nodes.push(Node {
                id,
                has_cpus,
                total_bytes,
                free_bytes: info.free.unwrap_or(0),
                cold_cache_bytes: info.cold_cache().unwrap_or(0),
            });
        }
        if nodes.is_empty() {
            return Err(TopologyError::NoNodes(node_dir));
        }
        let tiering_dir = sys_root.join("devices/virtual/memory_tiering");
        let mut tiers = Vec::new();
        if let Ok(entries) = fs::read_dir(&tiering_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(id) = name
                    .strip_prefix("memory_tier")
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                let path = entry.path().join("nodelist");
                let text = read(&path)?;
                let members = parse_list(&text).ok_or_else(|| TopologyError::Parse {
                    path: path.clone(),
                    what: format!("bad node list {text:?}"),
                })?;
                let members: Vec<u32> = members
                    .into_iter()
                    .filter(|n| nodes.iter().any(|node| node.id == *n))
                    .collect();
                if !members.is_empty() {
                    tiers.push(Tier {
                        kernel_id: id,
                        nodes: members,
                    });
                }
            }
        }
        tiers.sort_by_key(|t| t.kernel_id);
        let tier_source = if tiers.is_empty() {
            let fast: Vec<u32> = nodes.iter().filter(|n| n.has_cpus).map(|n| n.id).collect();
            let slow: Vec<u32> = nodes.iter().filter(|n| !n.has_cpus).map(|n| n.id).collect();
            for (rank, members) in [fast, slow].into_iter().enumerate() {
                if !members.is_empty() {
                    tiers.push(Tier {
                        kernel_id: rank as u32,
                        nodes: members,
                    });
                }
            }
            TierSource::CpuPresence
        } else {
            // Nodes the kernel did not place in any tier go last rather than vanish.
            let placed: Vec<u32> = tiers.iter().flat_map(|t| t.nodes.clone()).collect();
            let rest: Vec<u32> = nodes
                .iter()
                .map(|n| n.id)
                .filter(|id| !placed.contains(id))
                .collect();
            if !rest.is_empty() {
                tiers.push(Tier {
                    kernel_id: u32::MAX,
                    nodes: rest,
                });
            }
            TierSource::KernelMemoryTiering
        };
        Ok(Topology {
            nodes,
            tiers,
            tier_source,
        })
    }

    /// Replaces the tier order with an explicit one (each inner list is a tier, fastest first).
    pub fn with_explicit_tiers(mut self, tiers: &[Vec<u32>]) -> Result<Topology, String> {
        let mut out = Vec::new();
        for (rank, members) in tiers.iter().enumerate() {
            for id in members {
                if !self.nodes.iter().any(|n| n.id == *id) {
                    return Err(format!(
                        "node {id} in the tier list is not an online node with memory \
                         (online: {:?})",
                        self.nodes.iter().map(|n| n.id).collect::<Vec<_>>()
                    ));
                }
            }
            out.push(Tier {
                kernel_id: rank as u32,
                nodes: members.clone(),
            });
        }
        self.tiers = out;
        self.tier_source = TierSource::Explicit;
        Ok(self)
    }

    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Tier index (0 = fastest) of a node, if it is in a tier.
    pub fn tier_of_node(&self, node: u32) -> Option<usize> {
        self.tiers.iter().position(|t| t.nodes.contains(&node))
    }

    /// The nodes of a tier.
    fn tier_nodes(&self, tier: usize) -> impl Iterator<Item = &Node> {
        self.tiers[tier]
            .nodes
            .iter()
            .filter_map(|id| self.node(*id))
    }

    /// Total and free bytes of a tier.
    pub fn tier_bytes(&self, tier: usize) -> (u64, u64) {
        self.tier_nodes(tier)
            .fold((0, 0), |(t, f), n| (t + n.total_bytes, f + n.free_bytes))
    }

    /// Clean cold file cache in a tier (see [`Node::cold_cache_bytes`]), in bytes.
    pub fn tier_cold_cache_bytes(&self, tier: usize) -> u64 {
        self.tier_nodes(tier).map(|n| n.cold_cache_bytes).sum()
    }

    /// Re-reads free memory and cold file cache per node (cheap; done every interval).
    pub fn refresh_free(&mut self, sys_root: &Path) {
        for node in &mut self.nodes {
            let path = sys_root.join(format!("devices/system/node/node{}/meminfo", node.id));
            if let Ok(text) = fs::read_to_string(path) {
                let info = parse_node_meminfo(&text);
                if let Some(free) = info.free {
                    node.free_bytes = free;
                }
                if let Some(cold) = info.cold_cache() {
                    node.cold_cache_bytes = cold;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn meminfo(node: u32, total_kib: u64, free_kib: u64) -> String {
        format!(
            "Node {node} MemTotal:       {total_kib} kB\nNode {node} MemFree:        {free_kib} kB\n\
             Node {node} MemUsed:        1 kB\nNode {node} Inactive(file):  {} kB\n\
             Node {node} Dirty:          {} kB\nNode {node} Writeback:      {} kB\n",
            free_kib / 2,
            free_kib / 20,
            free_kib / 40,
        )
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list("0-2,4\n"), Some(vec![0, 1, 2, 4]));
        assert_eq!(parse_list(""), Some(vec![]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
        // Bounded, whatever the text asks for (a 4 GiB list, found by the config fuzzer).
        assert_eq!(parse_list("0-1111110000"), None);
        assert_eq!(parse_list(&"0-60000,".repeat(3)), None);
        assert_eq!(parse_list("0-65536").map(|l| l.len()), Some(65_537));
    }

    /// The layout seen in the 2-tier QEMU guest (HMAT: node 1 slower, CPU-less).
    #[test]
    fn two_tiers_from_memory_tiering() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "devices/system/node/online", "0-1\n");
        write(root, "devices/system/node/node0/cpulist", "0-1\n");
        write(
            root,
            "devices/system/node/node0/meminfo",
            &meminfo(0, 500_000, 100_000),
        );
        write(root, "devices/system/node/node1/cpulist", "\n");
        write(
            root,
            "devices/system/node/node1/meminfo",
            &meminfo(1, 2_000_000, 1_900_000),
        );
        write(
            root,
            "devices/virtual/memory_tiering/memory_tier67/nodelist",
            "1\n",
        );
        write(
            root,
            "devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0\n",
        );
        let topo = Topology::discover(root).unwrap();
        assert_eq!(topo.tier_source, TierSource::KernelMemoryTiering);
        assert_eq!(topo.tiers.len(), 2);
        assert_eq!(topo.tiers[0].nodes, vec![0]);
        assert_eq!(topo.tiers[1].nodes, vec![1]);
        assert_eq!(topo.tier_bytes(0), (500_000 * 1024, 100_000 * 1024));
        assert_eq!(
            topo.tier_cold_cache_bytes(0),
            (50_000 - 5_000 - 2_500) * 1024
        );
        assert_eq!(topo.tier_of_node(1), Some(1));
        // Free memory and cold file cache are read again at every interval.
        write(
            root,
            "devices/system/node/node0/meminfo",
            &meminfo(0, 500_000, 10_000),
        );
        let mut topo = topo;
        topo.refresh_free(root);
        assert_eq!(topo.tier_bytes(0), (500_000 * 1024, 10_000 * 1024));
        assert_eq!(topo.tier_cold_cache_bytes(0), (5_000 - 500 - 250) * 1024);
        let explicit = topo
            .clone()
            .with_explicit_tiers(&[vec![1], vec![0]])
            .unwrap();
        assert_eq!(explicit.tiers[0].nodes, vec![1]);
        assert!(topo.with_explicit_tiers(&[vec![7]]).is_err());
    }

    #[test]
    fn cpu_presence_fallback_and_single_node() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "devices/system/node/online", "0-1\n");
        write(root, "devices/system/node/node0/cpulist", "0\n");
        write(
            root,
            "devices/system/node/node0/meminfo",
            &meminfo(0, 1000, 10),
        );
        write(root, "devices/system/node/node1/cpulist", "");
        write(
            root,
            "devices/system/node/node1/meminfo",
            &meminfo(1, 4000, 40),
        );
        let topo = Topology::discover(root).unwrap();
        assert_eq!(topo.tier_source, TierSource::CpuPresence);
        assert_eq!(topo.tiers.len(), 2);
        assert_eq!(topo.tiers[1].nodes, vec![1]);

        let single = tempfile::tempdir().unwrap();
        write(single.path(), "devices/system/node/online", "0\n");
        write(single.path(), "devices/system/node/node0/cpulist", "0-1\n");
        write(
            single.path(),
            "devices/system/node/node0/meminfo",
            &meminfo(0, 1000, 10),
        );
        let topo = Topology::discover(single.path()).unwrap();
        assert_eq!(topo.tiers.len(), 1);
    }

    #[test]
    fn missing_sysfs_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Topology::discover(dir.path()).unwrap_err();
        assert!(err.to_string().contains("no NUMA nodes"), "{err}");
    }
}
