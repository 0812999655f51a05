#!/bin/bash
# Acceptance tests of the first tiering path, run INSIDE the tiered VM as root:
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh small-fast
#   scripts/tiered-vm --fast-mem 2G   --slow-mem 2G -- tests/vm/tiering.sh capped
#   scripts/tiered-vm --topology 3tier -- tests/vm/tiering.sh three-tier
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh priorities
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh placement
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh proactive
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh phase-change
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh warm-start
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh cache-room
#   scripts/tiered-vm --fast-mem 126M --slow-mem 1G -- tests/vm/tiering.sh page-location
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh thp-threads
#   scripts/tiered-vm --fast-mem 512M --slow-mem 2G -- tests/vm/tiering.sh realloc-tier
# Each scenario runs tierbench once without objtier (the baseline must leave the hot objects
# slow) and once under `objtier run`, and judges both by tierbench's own ground truth
# (move_pages status of its pages), never by objtier's counters.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${OBJTIER_BIN:-$PWD/target/release}
WORK=$(mktemp -d /tmp/objtier-vm-test.XXXXXX)
# The reach checks' deadlines count the time the guest ran: the vCPUs' stalls, which
# tlb-flusher records, are added to them (see there).
CHECK="tests/vm/check_fast_share.py --stalls $WORK/stalls"
export OBJTIER_SOCKET=$WORK/objtier.sock
FAILED=0
PASSED=0
STALLED=0
pass() { echo "ok $1"; PASSED=$((PASSED + 1)); }
# Called first in the `else` of a check, so $? is the check's status: 3 from check_fast_share.py
# means its deadline failed while a vCPU stood still for 5 s or more (see there).
fail() {
	[ $? -eq 3 ] && STALLED=$((STALLED + 1))
	echo "FAIL $1"
	FAILED=$((FAILED + 1))
}
daemon_log() { echo "--- daemon log:"; sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon.log" 2>/dev/null | tail -15; }
# Waits up to 5 s for a daemon just started to listen on $OBJTIER_SOCKET.
wait_for_socket() { for _ in $(seq 50); do [ -S "$OBJTIER_SOCKET" ] && break; sleep 0.1; done; }
# Every scenario runs with the emulated TLB losing entries as hardware's would (see the
# script): without it DAMON can miss a hot set for many intervals in a row.
tests/vm/tlb-flusher "$WORK/stalls" &
FLUSHER=$!
cleanup() {
	pkill -f "objtier daemon --socket $OBJTIER_SOCKET" 2>/dev/null || true
	kill $FLUSHER 2>/dev/null || true
}
trap cleanup EXIT

bench() { "$BIN/tierbench" hotcold --objects 8 --size 96M --hot 2 --json "$@"; }

scenario=${1:?usage: tiering.sh small-fast|capped|three-tier|priorities|placement|proactive|phase-change|warm-start|cache-room|page-location|thp-threads|realloc-tier}
echo "== $scenario: $(grep -h MemTotal /sys/devices/system/node/node*/meminfo | tr -s ' ' | tr '\n' ';')"
case $scenario in
small-fast)
	# doctor agrees with what the kernel offers here: two tiers, DAMON usable.
	if "$BIN/objtier" doctor --json > "$WORK/doctor.json" &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["auto_source"] == "damon" and len(d["topology"]["tiers"]) == 2 and d["move_pages"]["works"] else 1)' "$WORK/doctor.json"; then
		pass doctor-sees-two-tiers-and-damon
	else
		fail doctor-sees-two-tiers-and-damon; cat "$WORK/doctor.json"
	fi
	# The daemon locates pages through /proc/PID/pagemap here (root, memory blocks), and that
	# agrees with move_pages page for page on pages doctor spread over both nodes.
	if python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["page_location"]; sys.exit(0 if l["method"] == "pagemap" and l["agrees_with_move_pages"] and l["nodes"] == [0, 1] else 1)' "$WORK/doctor.json"; then
		pass pagemap-locates-pages-as-move-pages-does
	else
		fail pagemap-locates-pages-as-move-pages-does; python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["page_location"])' "$WORK/doctor.json"
	fi
	# 512 MiB fast node, 768 MiB of objects: first touch fills the fast node with the cold
	# objects and leaves the hot ones (allocated last) in the slow tier.
	bench --seconds 12 > "$WORK/plain.json"
	if python3 $CHECK "$WORK/plain.json" --below 0.4; then pass baseline-leaves-hot-objects-slow; else fail baseline-leaves-hot-objects-slow; fi

	# objtier run starts its own daemon (none is running) and preloads the library.
	"$BIN/objtier" run --daemon-log "$WORK/daemon.log" -- "$BIN/tierbench" hotcold \
		--objects 8 --size 96M --hot 2 --seconds 40 --json > "$WORK/objtier.json" &
	run=$!
	# DAMON's observations land on the objects tierbench knows are hot: 12 s into the hot loop
	# (6 intervals), the daemon's hottest records are the hot objects' own.
	# (grep, not a python3 started 10 times a second: under TCG that took most of a vCPU from
	# the daemon's migrations, whose speed the deadline below measures)
	for _ in $(seq 600); do
		grep -qE '"t":(1[2-9]|[2-9][0-9]|[0-9]{3,})\.' "$WORK/objtier.json" 2>/dev/null && break
		sleep 0.1
	done
	"$BIN/objtier" status --json > "$WORK/status.json" || true
	wait $run
	if python3 tests/vm/check_attribution.py "$WORK/objtier.json" "$WORK/status.json" --top 4; then
		pass damon-observations-land-on-the-hot-objects
	else
		fail damon-observations-land-on-the-hot-objects; daemon_log
	fi
	# The deadlines of the reach checks (here and in the scenarios below) are sanity bounds,
	# not speed measurements: reaching 0.9 means moving 0.9 of the hot set up and as much cold
	# data down, and migration under TCG runs at 8-60 MiB/s with the host's load. On one quiet
	# host this scenario reached 0.9 in 5.2-19.7 s over nine runs of today's daemon, and in
	# 6.3 and 13.5 s with the daemon of 2026-11-23 (whose CI passed at 10 s). What these checks
	# catch is a daemon that does not promote, or only after most of the run.
	if python3 $CHECK "$WORK/objtier.json" --reach 0.9 --within 20; then
		pass objtier-promotes-hot-objects
	else
		fail objtier-promotes-hot-objects; daemon_log
	fi

	# The daemon `objtier run` started exits by itself once its program is gone.
	for _ in $(seq 100); do [ -S "$OBJTIER_SOCKET" ] || break; sleep 0.1; done
	if [ -S "$OBJTIER_SOCKET" ]; then fail run-daemon-exits-when-idle; else pass run-daemon-exits-when-idle; fi

	# A process that exits (SIGKILL) while the daemon is migrating its pages: the daemon
	# stays up, forgets the process, and keeps serving.
	"$BIN/objtier" daemon --socket "$OBJTIER_SOCKET" --interval 1s >> "$WORK/daemon.log" 2>&1 &
	wait_for_socket
	"$BIN/objtier" run --no-daemon -- "$BIN/tierbench" hotcold --objects 8 --size 96M --hot 2 \
		--seconds 60 --json > "$WORK/killed.json" &
	victim=$!
	# Wait for the hot loop, then kill while migrations are in flight.
	for _ in $(seq 300); do grep -q '"tick"' "$WORK/killed.json" 2>/dev/null && break; sleep 0.1; done
	for _ in $(seq 100); do grep -q "migrated" "$WORK/daemon.log" && break; sleep 0.05; done
	kill -9 $victim 2>/dev/null || true
	wait $victim 2>/dev/null || true
	sleep 3
	if "$BIN/objtier" status --json > "$WORK/status.json" &&
		python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if not s["processes"] else 1)' "$WORK/status.json" &&
		! grep -qiE "panick|segfault" "$WORK/daemon.log"; then
		pass daemon-survives-process-killed-mid-migration
		grep -q "exited during migration" "$WORK/daemon.log" &&
			echo "   (the kill landed inside a move_pages batch)"
	else
		fail daemon-survives-process-killed-mid-migration; daemon_log
	fi
	;;
capped)
	# A big fast node, but objtier may use only 256 MiB of it for this program. The hot
	# objects start in the slow tier (--first-touch slow) so that only objtier can fix it.
	# Within 20 s of a 30 s loop: as in the parts run below, the daemon's steps during setup
	# fill the cap with objects being initialized, and on a slow host its plans in the hot loop
	# take up to 10 s to put them back (0.9 at 13.2 and 13.7 s in full CI runs of 2026-12-02,
	# the share at 0.19 for the first 8 s; 6.5-8.5 s alone).
	bench --seconds 12 --first-touch slow > "$WORK/plain.json"
	if python3 $CHECK "$WORK/plain.json" --below 0.4; then pass capped-baseline-starts-slow; else fail capped-baseline-starts-slow; fi
	"$BIN/objtier" run --fast-capacity 256M --daemon-log "$WORK/daemon.log" -- "$BIN/tierbench" \
		hotcold --objects 8 --size 96M --hot 2 --seconds 30 --first-touch slow --json > "$WORK/objtier.json"
	if python3 $CHECK "$WORK/objtier.json" --reach 0.9 --within 20 --max-fast-bytes $((256 << 20)); then
		pass objtier-promotes-within-fast-capacity
	else
		fail objtier-promotes-within-fast-capacity; daemon_log
	fi
	# Two hot 48 MiB objects and 72 MiB of budget (90 % of an 80 MiB cap): whole records would
	# place one (half the hot accesses); with record parts the second's first 24 MiB join it.
	# Within 22 s of a 35 s loop: on a slow host the daemon's steps during setup promote the
	# objects being initialized (80 MiB of cold ones, the whole cap, in CI runs of 2026-12-02),
	# and its plans in the hot loop must put them back first: 0.7 at 13.3 and 15.7 s there (the
	# share at 0.00 until t=12 s), 5.3-7.0 s alone.
	# (The last run's daemon exits by itself; wait, so that this run starts one with its own log.)
	for _ in $(seq 100); do [ -S "$OBJTIER_SOCKET" ] || break; sleep 0.1; done
	OBJTIER_LOG=${OBJTIER_LOG:-info} "$BIN/objtier" run --fast-capacity 80M --daemon-log "$WORK/daemon-parts.log" -- "$BIN/tierbench" \
		hotcold --objects 8 --size 48M --hot 2 --seconds 35 --first-touch slow --json > "$WORK/parts.json" &
	run=$!
	for _ in $(seq 600); do
		python3 -c 'import json,sys; sys.exit(0 if any(json.loads(l).get("t", 0) >= 12 for l in open(sys.argv[1]) if l.startswith("{")) else 1)' "$WORK/parts.json" 2>/dev/null && break
		sleep 0.1
	done
	"$BIN/objtier" status > "$WORK/parts-status.txt" 2>&1 || true
	wait $run
	if python3 $CHECK "$WORK/parts.json" --reach 0.7 --within 22 --max-fast-bytes $((80 << 20)); then
		pass objtier-places-the-part-of-a-record-that-fits
	else
		fail objtier-places-the-part-of-a-record-that-fits
		cat "$WORK/parts-status.txt"
		sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon-parts.log" | grep -v "hot record" | tail -25
		sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon-parts.log" | grep "hot record" | tail -8
	fi
	# Once placed, the plan holds still: the guest backs the objects with transparent huge
	# pages, and a huge page moved in part once went along whole and came back at every other
	# step (12 steps in 25 s: 6 or more migrations). Placing takes one or two steps (records are
	# made halfway through an interval too, so the first plan may see only the objects allocated
	# by then and the next one the rest), and settling the parts' edges one or two more.
	# Counted are the plans made after tierbench's setup (attach plus its setup_seconds): the
	# steps during it act on the writes that initialize the objects, one step an interval, and
	# on a slow host setup takes several intervals (6.2-6.8 s under one 2.5 times slower than
	# the first, 2026-12-01: up to three steps, each within the cap, before the hot loop began).
	# A step that finishes what the step before it deferred (its time bound) is the same plan.
	parts_log=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon-parts.log" || true)
	migrations=$(grep " migrated" <<<"$parts_log" || true)
	steps=$(grep -c . <<<"$migrations" || true)
	splits=$({ grep -o "huge_page_splits=[0-9]*" <<<"$migrations" || true; } | awk -F= '{ n += $2 } END { print n + 0 }')
	after_setup=$(python3 -c '
import datetime, json, re, sys
def at(line):  # seconds of the log line'"'"'s timestamp
    stamp = re.match(r"(\S+?)\.(\d+)Z", line)
    base = datetime.datetime.fromisoformat(stamp.group(1)).timestamp()
    return base + float("0." + stamp.group(2))
setup = next(json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"event\":\"setup\""))
lines = sys.stdin.read().splitlines()
attached = next(at(l) for l in lines if "process attached" in l)
loop = attached + setup["setup_seconds"]
steps = [l for l in lines if " migrated " in l]
began = [at(l) - int(re.search(r"duration_ms=(\d+)", l).group(1)) / 1000 for l in steps]
deferred = [int(re.search(r"deferred_pages=(\d+)", l).group(1)) > 0 for l in steps]
print(sum(b >= loop and not (i > 0 and deferred[i - 1]) for i, b in enumerate(began)))
' "$WORK/parts.json" <<<"$parts_log")
	echo "   $steps steps moved pages ($after_setup plans made after tierbench's setup), splitting $splits huge pages"
	if [ -n "$after_setup" ] && [ "$after_setup" -le 4 ]; then
		pass objtier-parts-settle-with-huge-pages
	else
		fail objtier-parts-settle-with-huge-pages
		echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
		echo "$migrations"
	fi
	;;
three-tier)
	# HBM-like node 1 is the fastest tier, DRAM (node 0, with the CPUs) the middle one.
	# First touch puts everything in DRAM; only objtier can lift the hot objects into HBM.
	bench --seconds 10 > "$WORK/plain.json"
	if python3 $CHECK "$WORK/plain.json" --below 0.4; then pass three-tier-baseline-in-dram; else fail three-tier-baseline-in-dram; fi
	"$BIN/objtier" run --daemon-log "$WORK/daemon.log" -- "$BIN/tierbench" hotcold \
		--objects 8 --size 96M --hot 2 --seconds 20 --json > "$WORK/objtier.json"
	if python3 $CHECK "$WORK/objtier.json" --reach 0.9 --within 15; then
		pass objtier-promotes-into-the-fastest-of-three-tiers
	else
		fail objtier-promotes-into-the-fastest-of-three-tiers; daemon_log
	fi
	;;
priorities)
	# Two programs whose hot objects together exceed the fast tier (288 + 192 MiB hot, 512 MiB
	# node): a low-priority one runs first and gets the fast tier; a high-priority one arrives,
	# and only it may compete for the fast tier while it runs; when it exits, the low-priority
	# one gets the fast tier back.
	"$BIN/objtier" daemon --socket "$OBJTIER_SOCKET" > "$WORK/daemon.log" 2>&1 &
	wait_for_socket
	stamp() { while IFS= read -r line; do echo "$(date +%s.%N) $line"; done; }
	"$BIN/objtier" run --no-daemon --priority 0 -- "$BIN/tierbench" hotcold --objects 4 --size 96M \
		--hot 3 --seconds 60 --json | stamp > "$WORK/low.json" &
	low=$!
	# Let the low-priority program settle in the fast tier first.
	for _ in $(seq 300); do
		python3 tests/vm/priorities.py settled "$WORK/low.json" && break
		sleep 0.5
	done
	"$BIN/objtier" run --no-daemon --priority 10 -- "$BIN/tierbench" hotcold --objects 4 --size 96M \
		--hot 2 --seconds 20 --json > "$WORK/high.json"
	high_exit=$(date +%s.%N)
	wait $low
	# Bounds are what the current design meets under TCG with both programs busy (measured
	# 4-14 s and 4-8 s): every page the high-priority program gains needs an eviction first.
	# Objects born in the fast tier (proactive placement) is what will bring the first down.
	if python3 $CHECK "$WORK/high.json" --reach 0.95 --within 20; then
		pass high-priority-owns-the-fast-tier
	else
		fail high-priority-owns-the-fast-tier; daemon_log
	fi
	if python3 tests/vm/priorities.py back "$WORK/low.json" "$high_exit" 15; then
		pass low-priority-gets-the-fast-tier-back
	else
		fail low-priority-gets-the-fast-tier-back; daemon_log
	fi
	;;
placement)
	# `objtier place` puts a site's new objects in the slow tier from their first touch, while
	# another site's stay where first touch puts them (the fast node, beside the CPUs); judged
	# by move_pages right after the touch. The daemon runs with --dry-run: this judges where
	# allocation puts pages, and a daemon that moves pages may promote the placed objects (the
	# fast node has room and they were just written) between the touch and the count, as it did
	# once in CI (2048 of 32768 pages, with snapshots spread over the interval).
	gcc -O1 -Wall -o "$WORK/placement" tests/vm/placement.c
	"$BIN/objtier" daemon --dry-run --socket "$OBJTIER_SOCKET" >> "$WORK/daemon.log" 2>&1 &
	wait_for_socket
	"$BIN/objtier" run --no-daemon -- "$WORK/placement" "$WORK" > "$WORK/placement.json" &
	app=$!
	for _ in $(seq 300); do [ -f "$WORK/ready" ] && break; sleep 0.1; done
	# The site with 4 objects of 16 MiB, once its frames are named (at the next interval).
	site=""
	for _ in $(seq 60); do
		"$BIN/objtier" status --json > "$WORK/status.json"
		site=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(next((s["site"] for p in d["processes"] for s in p["sites"] if s["objects"] == 4 and s["bytes"] == 4 * 16 << 20 and s["frames"] and "placement+0x" in s["frames"][0]), ""))' "$WORK/status.json")
		[ -n "$site" ] && break
		sleep 0.2
	done
	slow=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(str(n) for n in d["tiers"][-1]["nodes"]))' "$WORK/status.json")
	if [ -n "$site" ] && "$BIN/objtier" place --pid $app --site "$site" --tier 1; then
		touch "$WORK/placed"
		wait $app || true
		cat "$WORK/placement.json"
		if python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); slow = set(sys.argv[2].split(","))
share = lambda nodes: sum(v for n, v in nodes.items() if n in slow) / max(1, sum(nodes.values()))
placed, unplaced = share(d["placed"]), share(d["unplaced"])
print("   share on the slow tier: placed site %.3f, unplaced site %.3f" % (placed, unplaced))
sys.exit(0 if placed >= 0.95 and unplaced <= 0.05 else 1)' "$WORK/placement.json" "$slow"; then
			pass placed-site-starts-in-its-tier
		else
			fail placed-site-starts-in-its-tier; daemon_log
		fi
	else
		kill $app 2>/dev/null || true
		fail placed-site-starts-in-its-tier
		echo "no site found to place; sites: $(python3 -c 'import json,sys; print([p["sites"] for p in json.load(open(sys.argv[1]))["processes"]])' "$WORK/status.json")"
		daemon_log
	fi
	;;
realloc-tier)
	# A tracked object that realloc moves starts its copy in the tier the object is in, not where
	# first touch or its site's starting tier would put it: the program moves its object's pages
	# to the slow node (as a demotion would), then grows it (a move: a small object holds the
	# pages after it) and writes all of it. Judged by move_pages right after the writes; the
	# daemon runs with --dry-run, so only the library's placement can have put pages there.
	gcc -O1 -Wall -Iinclude -o "$WORK/realloc_tier" tests/vm/realloc_tier.c
	"$BIN/objtier" daemon --dry-run --socket "$OBJTIER_SOCKET" >> "$WORK/daemon.log" 2>&1 &
	wait_for_socket
	"$BIN/objtier" status --json > "$WORK/status.json"
	slow=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tiers"][-1]["nodes"][0])' "$WORK/status.json")
	if "$BIN/objtier" run --no-daemon -- "$WORK/realloc_tier" "$slow" > "$WORK/realloc.json" &&
		cat "$WORK/realloc.json" && python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); slow = sys.argv[2]
share = d["pages"].get(slow, 0) / max(1, sum(d["pages"].values()))
print("   the grown object: tier %d before, %d after, %.3f of its pages on the slow node" % (d["before"], d["after"], share))
sys.exit(0 if d["before"] == 1 and d["after"] == 1 and share >= 0.95 else 1)' "$WORK/realloc.json" "$slow"; then
		pass moved-object-keeps-its-tier
	else
		fail moved-object-keeps-its-tier; daemon_log
	fi
	;;
thp-threads)
	# The library's own memory must not take the fast tier a huge page at a time. With
	# transparent huge pages `always` (this guest's default, and many distributions'), each
	# 2 MiB-aligned range touched first can fault in whole; first touch puts those pages in the
	# fast tier, ahead of the program's data. 8 threads that allocate one 8 KiB object and 100
	# small ones each: glibc adds ~0.2 MiB, Debian's mimalloc ~2.6 MiB, libobjtier ~0.34 MiB
	# (2.4 MiB while the first arena and the chunks' first 2 MiB could take huge pages, 18.6 MiB
	# when mimalloc's arenas were committed whole and every thread had a shard). The bound is
	# less than one huge page.
	echo always > /sys/kernel/mm/transparent_hugepage/enabled
	gcc -O1 -Wall -pthread -o "$WORK/thp_threads" tests/vm/thp_threads.c
	plain=$("$WORK/thp_threads")
	preloaded=$(LD_PRELOAD="$BIN/libobjtier.so" OBJTIER_SOCKET=/nonexistent/objtier.sock "$WORK/thp_threads")
	echo "   RssAnon added by 8 threads: ${plain} KiB with glibc, ${preloaded} KiB with libobjtier"
	if [ "$preloaded" -le 1536 ]; then pass threads-cost-no-huge-page; else fail threads-cost-no-huge-page; fi
	;;
proactive)
	# A cold site that keeps allocating while a hot site owns the fast tier: once all of the
	# cold site's objects are planned slow, the daemon places the site, and its new objects are
	# born on the slow node instead of taking the fast tier's free room only to be demoted
	# later. Judged by where each new cold object's pages land right after it is written.
	gcc -O1 -Wall -pthread -o "$WORK/proactive" tests/vm/proactive.c
	for mode in on off; do
		# --fast-capacity 200M: the hot objects take all of objtier's share of the fast tier, so
		# every cold object is planned slow, while the node itself has room: without proactive
		# placement new cold objects are born there only to be demoted an interval later.
		# Warm start off: this compares the live policy with its absence (the warm-start
		# scenario tests what a second run does with the first one's placements).
		"$BIN/objtier" daemon --socket "$OBJTIER_SOCKET" --proactive $mode --warm-start off --fast-capacity 200M >> "$WORK/daemon.log" 2>&1 &
		daemon=$!
		wait_for_socket
		"$BIN/objtier" run --no-daemon -- "$WORK/proactive" 30 > "$WORK/proactive-$mode.json"
		kill $daemon; wait $daemon 2>/dev/null || true
		rm -f "$OBJTIER_SOCKET"
	done
	summary() {
		python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
late = [r["fast_share"] for r in rows if "cold" in r and r["t"] >= 20]
hot = [r["hot_fast_share"] for r in rows if "hot_fast_share" in r][0]
born_fast = sum(1 for s in late if s > 0.05)
print("%d %d %.3f" % (born_fast, len(late), hot))' "$1"
	}
	# (no process substitution: the VM has no /dev/fd)
	set -- $(summary "$WORK/proactive-on.json") $(summary "$WORK/proactive-off.json")
	on_fast=$1 on_late=$2 on_hot=$3 off_fast=$4 off_late=$5 off_hot=$6
	echo "   cold objects allocated after 20 s born (partly) on the fast node: proactive on $on_fast of $on_late, off $off_fast of $off_late; hot objects on the fast node at the end: on $on_hot, off $off_hot"
	sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon.log" | grep "proactive placement" | sed 's/^/   /' | head -n 8 || true
	python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "cold" in l]
print("   born fast share per cold object (proactive on):", " ".join("%.0f" % (10 * r["fast_share"]) for r in rows))' "$WORK/proactive-on.json"
	# Without the policy some late cold objects must be born fast (else this scenario could not
	# tell the policy from its absence); with it, none.
	if [ "$on_late" -gt 0 ] && [ "$on_fast" -eq 0 ] && [ "$off_fast" -gt 0 ] &&
		grep -q "proactive placement" "$WORK/daemon.log"; then
		pass cold-site-born-slow
	else
		fail cold-site-born-slow; daemon_log
	fi
	if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.95 else 1)' "$on_hot"; then
		pass hot-site-keeps-the-fast-tier
	else
		fail hot-site-keeps-the-fast-tier; daemon_log
	fi
	;;
phase-change)
	# The hot set moves to other objects mid-run; under the time trigger (2 s intervals)
	# fast_share must be back at 0.9 within 3 intervals (6 s) of the change, and stay there.
	#
	# 40 objects of 16 MiB (640 MiB) on a 512 MiB fast node: first touch fills the fast node
	# with the first ~28 and leaves the rest slow. The last 2 are hot for 20 s, long enough to
	# be promoted (the last tick before the change must be >= 0.9); then the hot set moves to
	# the 2 objects with the fewest pages on the fast node at that moment (--phase-hot slowest,
	# so it surely starts slow: checked at the change).
	#
	# Why this sizing. The fast tier (budget ~90 % of the node) has room for both hot sets
	# (2 x 32 MiB) but is full of cold objects, so the new hot set gets in only by demoting
	# cold ones: the daemon ranks by an EMA (alpha 0.1) of sampled accesses, and the new hot
	# objects outrank the cold ones from the first interval that samples them, while the old
	# hot ones keep outranking them for ~7 intervals (0.9^n > 1 - 0.9^n until n = 7). A fast
	# tier that held only one hot set could therefore not recover in 3 intervals; that is the
	# paper's policy, not something this test should hide.
	# The hot sets are small because under TCG migration runs at ~30-60 MiB/s while the hot
	# loop runs (less when other work loads the host), and reaching 0.9 moves 0.9 of the new
	# set up and as much cold data down: after up to one interval before the daemon samples
	# the change, and the tick that shows it, ~2.5 s are left for that. 32 MiB sets need
	# ~1-2 s. With 2 x 32 MiB objects (64 MiB sets) recovery measured 2.1-5.1 s in 13 runs of
	# 14 and failed once, at ~31 MiB/s; with 2 x 64 MiB, 8-11 s, nearly all of it copying.
	phase() { "$BIN/tierbench" hotcold --objects 40 --size 16M --hot 2 --phase-hot slowest --json "$@"; }
	phase --seconds 8 --phase-after 4 > "$WORK/plain.json"
	if python3 $CHECK "$WORK/plain.json" --after-event phase --below 0.4 --event-fast-below 0.1; then
		pass phase-baseline-leaves-new-hot-set-slow
	else
		fail phase-baseline-leaves-new-hot-set-slow
	fi
	"$BIN/objtier" daemon --socket "$OBJTIER_SOCKET" --interval 2s --trigger time:1 > "$WORK/daemon.log" 2>&1 &
	wait_for_socket
	"$BIN/objtier" run --no-daemon -- "$BIN/tierbench" hotcold --objects 40 --size 16M --hot 2 \
		--phase-hot slowest --seconds 34 --phase-after 20 --json > "$WORK/objtier.json"
	if python3 $CHECK "$WORK/objtier.json" --after-event phase --before-reach 0.9 \
		--event-fast-below 0.1 --reach 0.9 --within 6; then
		pass objtier-follows-the-phase-change
	else
		fail objtier-follows-the-phase-change; daemon_log
	fi
	;;
warm-start)
	# The proactive program twice, each time under a new daemon, with one site store. In the
	# first run the live policy places the cold site after a few seconds (the cold objects
	# before that are born on the fast node), and the daemon saves the placement for the
	# program. In the second run the daemon places the site when the program attaches, so
	# every cold object, from the first one, is born on the slow node: judged by the program
	# itself (move_pages) right after writing each object, before any interval could have
	# seen it, let alone migrated it. Judged over the first 6 s, before the live policy could
	# have placed the site itself (its records must be two intervals old, and its wish hold for
	# two intervals); what the live policy does later is the proactive scenario's business.
	gcc -O1 -Wall -pthread -o "$WORK/proactive" tests/vm/proactive.c
	store=$WORK/sites
	for run in first:15 second:10; do
		"$BIN/objtier" daemon --socket "$OBJTIER_SOCKET" --fast-capacity 200M --site-store "$store" >> "$WORK/daemon.log" 2>&1 &
		daemon=$!
		wait_for_socket
		"$BIN/objtier" run --no-daemon -- "$WORK/proactive" "${run#*:}" > "$WORK/warm-${run%:*}.json"
		kill $daemon; wait $daemon 2>/dev/null || true
		rm -f "$OBJTIER_SOCKET"
		# Judged on the store as the first run left it: the second run saves what it learns
		# too, and a check after both runs passed when only the second had saved the site.
		if [ "${run%:*}" = first ]; then
			echo "   site store after the first run: $(ls "$store" 2>&1)"
			cat "$store"/proactive-*.json 2>/dev/null | sed 's/^/   /' | head -n 30 || true
			if python3 -c '
import glob, json, sys
files = glob.glob(sys.argv[1] + "/proactive-*.json")
sites = json.load(open(files[0]))["sites"] if len(files) == 1 else []
sys.exit(0 if any(s.get("tier") == 1 and s.get("learnt") == "proactive" and "/proactive+0x" in s["frames"][0] for s in sites) else 1)' "$store"; then
				pass first-run-saves-the-cold-site
			else
				fail first-run-saves-the-cold-site; daemon_log
			fi
		fi
	done
	summary() {
		python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cold = [r for r in rows if "cold" in r]
early = [r for r in cold if r["t"] < 6]
hot = [r["hot_fast_share"] for r in rows if "hot_fast_share" in r][0]
fast = lambda rs: sum(1 for r in rs if r["fast_share"] > 0.05)
print("%d %d %d %d %.2f %.3f" % (fast(early), len(early), fast(cold), len(cold), cold[0]["t"] if cold else -1, hot))' "$1"
	}
	if ! first=$(summary "$WORK/warm-first.json") || ! second=$(summary "$WORK/warm-second.json"); then
		fail second-run-cold-site-born-slow-from-the-start
		echo "   the proactive program's output lacks cold or hot objects:"
		tail -n 3 "$WORK/warm-first.json" "$WORK/warm-second.json" | sed 's/^/   /'
		daemon_log
		echo "$PASSED passed, $FAILED failed"
		exit 1
	fi
	# shellcheck disable=SC2086 # six numbers each
	set -- $first $second
	first_early_fast=$1 first_early=$2 second_early_fast=$7 second_early=$8 second_fast=$9 second_all=${10} second_t0=${11} second_hot=${12}
	echo "   cold objects of the first 6 s born (partly) on the fast node: first run $first_early_fast of $first_early, second run $second_early_fast of $second_early (the first at t=$second_t0 s); over the whole second run $second_fast of $second_all; hot objects on the fast node at the end of the second run: $second_hot"
	for run in first second; do
		python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "cold" in l]
print("   born fast share per cold object (%s run):" % sys.argv[2], " ".join("%.0f" % (10 * r["fast_share"]) for r in rows))' "$WORK/warm-$run.json" "$run"
	done
	sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon.log" | grep -E "warm start|proactive placement|site store|disproved" | sed 's/^/   /' | head -n 8 || true
	# The first run must have had something to learn (its early cold objects born fast), and
	# the second none of it left to learn: every early cold object born slow.
	if [ "$first_early_fast" -ge 4 ] && [ "$second_early" -ge 8 ] && [ "$second_early_fast" -eq 0 ] &&
		sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon.log" | grep -q "warm start: .*remembered=1 placed=1"; then
		pass second-run-cold-site-born-slow-from-the-start
	else
		fail second-run-cold-site-born-slow-from-the-start; daemon_log
	fi
	if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.95 else 1)' "$second_hot"; then
		pass second-run-hot-site-keeps-the-fast-tier
	else
		fail second-run-hot-site-keeps-the-fast-tier; daemon_log
	fi
	;;
page-location)
	# A 126 MiB fast node is not a multiple of the 128 MiB memory block: the block where node 0
	# ends and node 1 begins, here all of node 0, is listed under both nodes. Pages in it must
	# still be located right (pagemap leaves them to move_pages): doctor's check, with its pages
	# on both nodes.
	"$BIN/objtier" doctor --json >"$WORK/doctor.json"
	if python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["page_location"]; sys.exit(0 if l["method"] == "pagemap" and l["agrees_with_move_pages"] and l["nodes"] == [0, 1] else 1)' "$WORK/doctor.json"; then
		pass pagemap-locates-pages-in-a-block-two-nodes-share
	else
		fail pagemap-locates-pages-in-a-block-two-nodes-share; python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["page_location"])' "$WORK/doctor.json"
	fi
	;;
cache-room)
	# The fast node full of cold file cache, as a program's start leaves it with the libraries
	# it read (hpcc in the evaluation), and the hot objects in the slow tier. Files of the
	# host's /usr are read once on node 0 (the guest's root is the host's, over 9p with the
	# page cache on) until less than the 10 % reserve of the 90 % fill is free.
	node0() { awk -v f="$1:" '$3 == f { print $4 }' /sys/devices/system/node/node0/meminfo; }
	fill_cache() {
		# Without numactl nothing fills the node, and the loop below reads all of /usr.
		if ! command -v numactl >/dev/null; then
			echo "   numactl is missing: scripts/install-deps installs it"
			return
		fi
		sync
		echo 3 >/proc/sys/vm/drop_caches
		find /usr/lib /usr/share -xdev -type f -size +256k 2>/dev/null | while read -r f; do
			numactl --membind=0 cat "$f" >/dev/null 2>&1 || true
			[ "$(node0 MemFree)" -lt $((40 << 10)) ] && break
		done || true # find meets a closed pipe when the loop stops early
		echo "   node 0: $(($(node0 MemFree) >> 10)) MiB free, $(($(node0 'Inactive(file)') >> 10)) MiB cold file cache"
	}
	# Base pages: with transparent huge pages, each hot 2 MiB page promoted into a node with
	# no free 2 MiB block makes the kernel compact in the daemon's move_pages, and under TCG
	# clearing a compacted huge page (init_on_alloc) has taken minutes (soft-lockup reports
	# in clear_page_erms, 0.4 pages a second): an emulator artefact this test is not about.
	thp=/sys/kernel/mm/transparent_hugepage/enabled
	thp_was=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp")
	echo madvise >"$thp"
	fill_cache
	if [ "$(node0 MemFree)" -ge $((48 << 10)) ] || [ "$(node0 'Inactive(file)')" -lt $((256 << 10)) ]; then
		fail fast-node-filled-with-cold-file-cache
		# What follows compares runs on a full node; on this one it would say nothing.
		echo "$PASSED passed, $FAILED failed"
		exit 1
	else
		pass fast-node-filled-with-cold-file-cache
	fi
	# Only free memory as room (--reclaim-cache off): nothing beyond the reserve is free, so
	# the hot objects stay slow. This is what the daemon did before it counted the cache.
	"$BIN/objtier" daemon --socket "$OBJTIER_SOCKET" --reclaim-cache off >"$WORK/daemon-off.log" 2>&1 &
	off=$!
	wait_for_socket
	"$BIN/objtier" run --no-daemon -- "$BIN/tierbench" hotcold --objects 8 --size 96M --hot 2 \
		--seconds 16 --first-touch slow --json >"$WORK/off.json"
	kill $off; wait $off 2>/dev/null || true
	if python3 $CHECK "$WORK/off.json" --below 0.4; then
		pass free-memory-alone-leaves-hot-objects-slow
	else
		fail free-memory-alone-leaves-hot-objects-slow; sed 's/\x1b\[[0-9;]*m//g' "$WORK/daemon-off.log" | tail -15
	fi
	# By default the cold cache is room: the daemon promotes into it and the kernel reclaims
	# the cache as the pages arrive.
	fill_cache
	"$BIN/objtier" run --daemon-log "$WORK/daemon.log" -- "$BIN/tierbench" hotcold --objects 8 \
		--size 96M --hot 2 --seconds 25 --first-touch slow --json >"$WORK/objtier.json"
	echo "   node 0 after: $(($(node0 MemFree) >> 10)) MiB free, $(($(node0 'Inactive(file)') >> 10)) MiB cold file cache"
	if python3 $CHECK "$WORK/objtier.json" --reach 0.9 --within 15; then
		pass objtier-promotes-into-cold-file-cache
	else
		fail objtier-promotes-into-cold-file-cache; daemon_log
	fi
	echo "$thp_was" >"$thp"
	;;
*)
	echo "unknown scenario $scenario" >&2
	exit 2
	;;
esac
if [ -s "$WORK/stalls" ]; then
	awk '{ n++; s += $3; if ($3 > m) m = $3 } END { printf "a vCPU stood still %d times, %.1f s in all (longest %.1f s)\n", n, s, m }' "$WORK/stalls"
fi
echo "$PASSED passed, $FAILED failed"
if [ "$FAILED" -gt 0 ] && [ "$FAILED" -eq "$STALLED" ]; then
	# Every failure is a deadline the vCPUs' stalls decided: exit 75 (EX_TEMPFAIL), and
	# tests/vm/run-tiering runs the scenario once more from a fresh boot.
	echo "every failure above is a deadline missed while a vCPU stood still"
	exit 75
fi
[ "$FAILED" -eq 0 ]
