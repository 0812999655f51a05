#!/usr/bin/env python3
"""Names the kernel code behind a run's kernel memory traffic.

The oracle lists, for each measured window, the kernel instructions whose accesses missed its
modeled cache most often ("kernel_pcs" of the window's event). This maps them to functions with
the kernel's symbol table and prints the functions, most misses first:

    kernel_pcs.py ORACLE.jsonl /proc/kallsyms

bench/eval/guest runs it in the guest right after the run (the guest's own kernel, read as root,
so the addresses are the running ones) and keeps the output as kernel-misses.txt.
"""
import bisect
import json
import sys


def text_symbols(path):
    """Sorted (address, name) of the kernel's text symbols."""
    symbols = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in ("t", "T"):
                name = parts[2] + (" " + parts[3] if len(parts) > 3 else "")
                symbols.append((int(parts[0], 16), name))
    symbols.sort()
    return symbols


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: kernel_pcs.py ORACLE.jsonl KALLSYMS")
    windows = [
        e for e in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))
        if e.get("event") == "window" and "kernel_pcs" in e
    ]
    if not windows:
        sys.exit("no window with kernel_pcs in " + sys.argv[1])
    pcs = windows[-1]["kernel_pcs"]
    symbols = text_symbols(sys.argv[2])
    if not symbols or symbols[-1][0] == 0:
        sys.exit("no addresses in " + sys.argv[2] + ": read it as root")
    addresses = [a for a, _ in symbols]
    by_function = {}
    for pc, misses in pcs["top"]:
        i = bisect.bisect_right(addresses, int(pc, 16)) - 1
        name = symbols[i][1] if i >= 0 else "?"
        by_function[name] = by_function.get(name, 0) + misses
    total = pcs["total"] or 1
    listed = sum(m for _, m in pcs["top"])
    print(f"kernel misses in window {windows[-1]['window']}: {pcs['total']}; "
          f"the {len(pcs['top'])} instructions listed hold {100 * listed / total:.1f} %")
    for name, misses in sorted(by_function.items(), key=lambda x: -x[1]):
        print(f"{100 * misses / total:6.2f} %  {misses:>12}  {name}")


if __name__ == "__main__":
    main()
