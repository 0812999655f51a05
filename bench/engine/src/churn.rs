//! What records coming and going cost the record store, next to a `BTreeMap` given the same changes.

use crate::*;

/// Changes to a store of `records` records as frees and allocations at random addresses make
/// them, a `share` of the records each way, against a `BTreeMap` given the same changes: for
/// each share, (share, changes, store: [events, walk unsettled, settle, walk settled] ms, map:
/// [events, walk] ms). The records are a process's, one every 64 KiB; the new ones fall
/// between them, as a reused hole's would.
pub(crate) fn records_churn(records: u64, shares: &[u64]) -> Vec<serde_json::Value> {
    use objtier_daemon::process::{Record, Records};
    let record = Record::new(3 * 4096, 1, 0);
    let timed = |f: &mut dyn FnMut()| {
        let t = cpu_ns();
        f();
        ms(cpu_ns() - t)
    };
    let mut rows = Vec::new();
    for &share in shares {
        let mut rng = Rng(0x0b7_1e4 + share);
        let changes = records / share;
        let frees: Vec<u64> = (0..changes)
            .map(|_| rng.next() % records * 0x10000)
            .collect();
        let allocs: Vec<u64> = (0..changes)
            .map(|_| rng.next() % records * 0x10000 + 0x8000)
            .collect();
        let mut store = Records::new();
        let mut map = std::collections::BTreeMap::new();
        for i in 0..records {
            store.insert(i * 0x10000, record.clone());
            map.insert(i * 0x10000, record.clone());
        }
        let mut sum = 0u64;
        let store_events = timed(&mut || {
            for &start in &frees {
                store.remove(start);
            }
            for &start in &allocs {
                store.insert(start, record.clone());
            }
        });
        let mut walk = |store: &Records| {
            timed(&mut || {
                for (start, r) in store.iter() {
                    sum = sum.wrapping_add(start ^ r.len);
                }
            })
        };
        let unsettled = walk(&store);
        let settle = timed(&mut || store.settle());
        let settled = walk(&store);
        let map_events = timed(&mut || {
            for start in &frees {
                map.remove(start);
            }
            for &start in &allocs {
                map.insert(start, record.clone());
            }
        });
        let map_walk = timed(&mut || {
            for (start, r) in &map {
                sum = sum.wrapping_add(start ^ r.len);
            }
        });
        std::hint::black_box(sum);
        rows.push(serde_json::json!({
            "records": records,
            "share": share,
            "changes_each_way": changes,
            "store_events_ms": store_events,
            "store_walk_unsettled_ms": unsettled,
            "store_settle_ms": settle,
            "store_walk_settled_ms": settled,
            "btree_events_ms": map_events,
            "btree_walk_ms": map_walk,
        }));
    }
    rows
}
