#!/usr/bin/env bash
# Smoke test for the tiered VM. Runs *inside* the guest:
#   scripts/tiered-vm --topology 2tier -- tests/vm/smoke.sh
#   scripts/tiered-vm --topology 3tier -- tests/vm/smoke.sh
# Checks that the kernel ranks the NUMA nodes into distinct memory tiers, that NUMA
# balancing is off, that DAMON's sysfs interface exists, and that move_pages(2) moves
# pages to every node and back.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failures=0
check() { echo "smoke: checking $*"; }
ok() { echo "smoke:   ok: $*"; }
fail() { echo "smoke:   FAIL: $*" >&2; failures=$((failures + 1)); }

nodes_online=$(cat /sys/devices/system/node/online)
topology=${OBJTIER_VM_TOPOLOGY:-}
if [[ -z $topology ]]; then
	case $nodes_online in 0-1) topology=2tier ;; 0-2) topology=3tier ;; *)
		echo "smoke: FAIL: not in a tiered VM? nodes online: $nodes_online" >&2; exit 1 ;;
	esac
fi
case $topology in
2tier) want_nodes=0-1 want_tiers=2 cpu_node=0 ;;
3tier) want_nodes=0-2 want_tiers=3 cpu_node=0 hbm_node=1 ;;
*) echo "smoke: FAIL: unknown topology '$topology'" >&2; exit 1 ;;
esac
echo "smoke: topology $topology, kernel $(uname -r)"

check "NUMA nodes online = $want_nodes"
[[ $nodes_online == "$want_nodes" ]] && ok "$nodes_online" || fail "nodes online: $nodes_online"

# Expand a kernel node list ("0", "0-2", "0,2") into space-separated ids.
expand() {
	local part out=()
	IFS=, read -ra parts <<<"$1"
	for part in "${parts[@]}"; do
		if [[ $part == *-* ]]; then out+=($(seq "${part%-*}" "${part#*-}")); else out+=("$part"); fi
	done
	echo "${out[@]}"
}

check "memory tiers in /sys/devices/virtual/memory_tiering"
declare -A tier_of=()
tiers=()
for d in /sys/devices/virtual/memory_tiering/memory_tier*; do
	[[ -f $d/nodelist ]] || continue
	t=${d##*memory_tier}
	list=$(cat "$d/nodelist")
	echo "smoke:   memory_tier$t: nodes $list"
	[[ -n $list ]] || continue
	tiers+=("$t")
	for n in $(expand "$list"); do tier_of[$n]=$t; done
done
if [[ ${#tiers[@]} -eq $want_tiers ]]; then ok "${#tiers[@]} tiers"; else fail "expected $want_tiers tiers, found ${#tiers[@]}"; fi
for n in $(expand "$want_nodes"); do
	[[ -n ${tier_of[$n]:-} ]] || fail "node $n is in no memory tier"
done
# Lower tier id = lower abstract distance = faster.
slowest=$(printf '%s\n' "${tiers[@]}" | sort -n | tail -1)
check "CPU node $cpu_node is not in the slowest tier"
if [[ ${tier_of[$cpu_node]:-x} != "$slowest" ]]; then ok "node $cpu_node in memory_tier${tier_of[$cpu_node]:-?}, slowest is memory_tier$slowest"
else fail "CPU node $cpu_node is in the slowest tier (memory_tier$slowest)"; fi
if [[ -n ${hbm_node:-} ]]; then
	check "HBM node $hbm_node is in a faster tier than DRAM node $cpu_node"
	if [[ -n ${tier_of[$hbm_node]:-} && -n ${tier_of[$cpu_node]:-} && ${tier_of[$hbm_node]} -lt ${tier_of[$cpu_node]} ]]; then
		ok "memory_tier${tier_of[$hbm_node]} < memory_tier${tier_of[$cpu_node]}"
	else
		fail "HBM node $hbm_node in memory_tier${tier_of[$hbm_node]:-?}, DRAM node $cpu_node in memory_tier${tier_of[$cpu_node]:-?}"
	fi
fi

check "CPU-less nodes have no CPUs"
for n in $(expand "$want_nodes"); do
	[[ $n == "$cpu_node" ]] && continue
	cpul=$(cat /sys/devices/system/node/node$n/cpulist)
	[[ -z $cpul ]] && ok "node $n has no CPUs" || fail "node $n has CPUs $cpul"
done

check "/proc/sys/kernel/numa_balancing = 0"
nb=$(cat /proc/sys/kernel/numa_balancing)
[[ $nb == 0 ]] && ok "0" || fail "numa_balancing is $nb"

check "/sys/kernel/mm/damon/admin exists"
[[ -d /sys/kernel/mm/damon/admin ]] && ok "present" || fail "missing (kernel without DAMON_SYSFS?)"

check "move_pages(2) moves pages to each node and back"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -o "$tmp/movepages" "$here/movepages.c"
others=()
for n in $(expand "$want_nodes"); do [[ $n == "$cpu_node" ]] || others+=("$n"); done
if "$tmp/movepages" 256 "$cpu_node" "${others[@]}"; then ok "256 pages moved to nodes ${others[*]} and back"
else fail "movepages failed"; fi

if [[ $failures -gt 0 ]]; then
	echo "smoke: $failures check(s) FAILED ($topology)" >&2
	exit 1
fi
echo "smoke: all checks passed ($topology)"
