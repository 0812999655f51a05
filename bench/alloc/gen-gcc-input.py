"""Writes the C file the gcc workload compiles: many functions with loops, switches, structs and
inlining candidates, enough to make `gcc -O2 -c` allocate a few hundred MiB over a second or two.
Usage: gen-gcc-input.py FUNCTIONS > file.c (deterministic: the same file every time)."""
import sys

count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
out = ["#include <stddef.h>", "struct s { int a, b; double c; char name[16]; };"]
for i in range(count):
    out.append(f"""
static inline int helper_{i}(int x) {{ return (x * {i % 97 + 3}) ^ (x >> {i % 7 + 1}); }}
int func_{i}(struct s *v, size_t n, int k) {{
    int acc = {i};
    for (size_t j = 0; j < n; j++) {{
        switch ((v[j].a + k) & 7) {{
        case 0: acc += helper_{i}(v[j].b); break;
        case 1: acc ^= v[j].a * {i % 13 + 1}; break;
        case 2: v[j].c += acc * 0.5; break;
        case 3: acc -= v[j].name[j % 16]; break;
        case 4: v[j].b = acc + helper_{i}(k); break;
        default: acc += (int)v[j].c;
        }}
        if (acc > {1000 + i}) acc = helper_{i}(acc) % {i % 31 + 5};
    }}
    return acc{" + func_%d(v, n / 2, acc)" % (i - 1) if i % 5 == 1 else ""};
}}""")
print("\n".join(out))
