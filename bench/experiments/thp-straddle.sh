#!/bin/bash
# The 2 MiB alternation of the capped record-parts run (tests/vm/tiering.sh capped), with
# transparent huge pages always and never: not a test, an experiment (docs/evaluation.md).
#   scripts/tiered-vm --topology 2tier --fast-mem 2G --slow-mem 2G -- bench/experiments/thp-straddle.sh
cd "$(dirname "$0")/../.."
BIN=$PWD/target/release
export OBJTIER_SOCKET=/tmp/thp.sock
for thp in always never; do
	echo $thp > /sys/kernel/mm/transparent_hugepage/enabled
	echo "== THP $thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
	grep -E "^thp_(collapse_alloc|split_page|migration_split|fault_alloc) " /proc/vmstat | tr '\n' ' '; echo
	OBJTIER_LOG=info "$BIN/objtier" run --fast-capacity 80M --daemon-log /tmp/thp-$thp.log -- "$BIN/tierbench" \
		hotcold --objects 8 --size 48M --hot 2 --seconds 20 --first-touch slow --json > /tmp/thp-$thp.json
	python3 tests/vm/check_fast_share.py /tmp/thp-$thp.json --reach 0.7 --within 12 | head -2
	sed 's/\x1b\[[0-9;]*m//g' /tmp/thp-$thp.log | grep migrated | awk '{print $5, $6, $7}' | tr '\n' ';'; echo
	grep -E "^thp_(collapse_alloc|split_page|migration_split|fault_alloc) " /proc/vmstat | tr '\n' ' '; echo
	for _ in $(seq 100); do [ -S "$OBJTIER_SOCKET" ] || break; sleep 0.1; done
done
