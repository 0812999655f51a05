# Host tests of `objtier profile --source emulate` (sourced by tests/host/run): the counts are
# exact, a real program is profiled end to end, and what it cannot profile is refused before
# anything runs. They need qemu-user (scripts/install-deps installs it) and the plugin beside
# libobjtier.so (plugins/emulate/build).

PLUGIN=$BIN/libobjtier_emulate.so

need_emulation() {
    command -v qemu-x86_64 >/dev/null || fail "qemu-x86_64 is missing: run scripts/install-deps"
    [[ -f $PLUGIN ]] || fail "$PLUGIN is missing: run plugins/emulate/build"
}

# Every site's load and store misses equal what the program did, exactly: objects that fit the
# modeled cache and objects that do not, two objects on the same pages one after the other,
# two threads, a forked child; the program's exec'd /bin/true is said to run natively, once.
t_emulate_exact() {
    need_emulation
    gcc -O1 -g -Wall -pthread "$HERE/emulate_exact.c" -o "$T/emulate_exact" 2>"$T/gcc.log" ||
        fail "emulate_exact.c does not compile: $(head -n 5 "$T/gcc.log")"
    "$OBJTIER" profile --source emulate --emulate-cache 1M,16 -o "$T/exact.json" -- \
        "$T/emulate_exact" >"$T/expected.json" 2>"$T/profile.err" ||
        fail "profile failed: $(tail -n 3 "$T/profile.err")"
    "$PY" - "$T/exact.json" "$T/expected.json" >"$T/compare.out" 2>&1 <<'PY' || fail "$(cat "$T/compare.out")"
import json, sys
profile, expected = (json.load(open(p)) for p in sys.argv[1:3])
assert profile["source"] == "emulate", profile["source"]
assert expected.pop("same_pages") == 1, "the allocator did not reuse first's pages for second"
got = {}
for s in profile["sites"]:
    name = (s.get("symbols") or [None])[0] or ""
    for site in expected:
        if name.startswith(f"alloc_{site}+"):
            got[site] = [s["loads"], s["stores"]]
wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
assert not wrong, f"sites whose misses are not what the program did (got, expected): {wrong}"
pids = [p["pid"] for p in profile["processes"]]
assert len(pids) == 3, f"processes: {profile['processes']} (want the program, its fork, system()'s child)"
assert "ran natively" in profile["measurement"]["description"], profile["measurement"]["description"]
pages = {tuple(p["frames"]) for p in profile["pages"]}
assert any(tuple(s["frames"]) in pages for s in profile["sites"] if s["kind"] == "site"), "no page detail"
print("exact:", got)
PY
    local warned
    warned=$(grep -c "ran natively" "$T/profile.err" || true)
    [[ $warned == 1 ]] || fail "the native processes were reported $warned times, not once: $(cat "$T/profile.err")"
    grep -q "/usr/bin/true" "$T/profile.err" || fail "the warning does not name /usr/bin/true: $(cat "$T/profile.err")"
    "$OBJTIER" report "$T/exact.json" --json >"$T/report.json" 2>"$T/report.err" ||
        fail "report: $(tail -n 3 "$T/report.err")"
    [[ $(json "$T/report.json" 'd["profiles"][0]["pages"]["detail"]') == present ]] ||
        fail "objtier report shows no page section for the emulated profile"
}

# A real program no one here wrote: sqlite3 builds, indexes and joins a table under the
# emulation; its answer is the native one, and its misses fall on libsqlite3's sites.
t_emulate_sqlite() {
    need_emulation
    cat >"$T/small.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, payload TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
INSERT INTO t SELECT x, (x * 7919) % 1009, printf('%08d-%s', x, hex(x * x)) FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(k), total(length(payload)) FROM t;
SELECT count(*) FROM t a JOIN t b ON a.k = b.k WHERE a.id < 2000;
SQL
    sqlite3 -batch :memory: <"$T/small.sql" >"$T/native.out" || fail "sqlite3 failed natively"
    "$OBJTIER" profile --source emulate --emulate-cache 256K,8 --interval 100ms -o "$T/sqlite.json" -- \
        sqlite3 -batch :memory: <"$T/small.sql" >"$T/emulated.out" 2>"$T/profile.err" ||
        fail "profile failed: $(tail -n 3 "$T/profile.err")"
    cmp -s "$T/native.out" "$T/emulated.out" ||
        fail "sqlite3 answered differently under emulation: $(diff "$T/native.out" "$T/emulated.out" | head -n 5)"
    "$PY" - "$T/sqlite.json" >"$T/check.out" 2>&1 <<'PY' || fail "$(cat "$T/check.out")"
import json, sys
p = json.load(open(sys.argv[1]))
m = p["measurement"]
sites = [s for s in p["sites"] if s["kind"] == "site"]
sqlite = [s for s in sites if any("libsqlite3" in f for f in s["frames"]) and s["accesses"] > 0]
assert sqlite, "no site of libsqlite3 with misses"
assert m["sampled"] > 10000 and m["attributed_share"] > 0.3, m
assert all(s["loads"] is not None and s["accesses"] == s["loads"] + s["stores"] for s in sites)
assert len(p["intervals"]) >= 2, f"{len(p['intervals'])} intervals of 100 ms of emulated time"
assert p["program"]["name"].startswith("sqlite3"), p["program"]
print(f"{len(sites)} sites, {m['sampled']:.0f} misses, {m['attributed_share']:.2f} on objects")
PY
}

# What emulation cannot profile is refused before anything runs, saying what to do: QEMU
# missing, the plugin missing, a static program, a program for another machine; and a bad
# --emulate-cache.
t_emulate_bad_input() {
    need_emulation
    local ran=$T/ran
    printf '#!/bin/sh\ntouch %s\n' "$ran" >"$T/script"
    chmod +x "$T/script"
    mkdir -p "$T/empty"
    expect_error "apt-get install qemu-user" env PATH="$T/empty" "$OBJTIER" profile --source emulate -- "$T/script"
    mkdir -p "$T/lib"
    cp "$LIB" "$T/lib/libobjtier.so"
    expect_error "plugins/emulate/build" "$OBJTIER" profile --source emulate --lib "$T/lib/libobjtier.so" -- "$T/script"
    printf 'int main(void) { return 0; }\n' >"$T/static.c"
    gcc -static -o "$T/static" "$T/static.c" 2>"$T/gcc.log" || fail "cannot link a static program: $(head -n 3 "$T/gcc.log")"
    expect_error "is statically linked" "$OBJTIER" profile --source emulate -- "$T/static"
    # An AArch64 executable's ELF header (QEMU here runs x86-64 only).
    "$PY" -c 'import sys; h = bytearray(64); h[:4] = b"\x7fELF"; h[4] = 2; h[5] = 1; h[16] = 2; h[18:20] = (183).to_bytes(2, "little"); open(sys.argv[1], "wb").write(h)' "$T/arm"
    chmod +x "$T/arm"
    expect_error "is a program for AArch64, not x86-64" "$OBJTIER" profile --source emulate -- "$T/arm"
    expect_error "want SIZE,WAYS" "$OBJTIER" profile --source emulate --emulate-cache 2M -- "$T/script"
    expect_error "--emulate-cache is for --source emulate" "$OBJTIER" profile --emulate-cache 2M,8 -- "$T/script"
    [[ ! -e $ran ]] || fail "a refused profile ran the program"
    # The script itself is profiled through its interpreter.
    "$OBJTIER" profile --source emulate --emulate-cache 1M,8 -o "$T/script.json" -- "$T/script" 2>"$T/script.err" ||
        fail "a script under emulation: $(tail -n 3 "$T/script.err")"
    [[ -e $ran ]] || fail "the script did not run under emulation"
}
