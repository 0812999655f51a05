// A C++ program for tests/host/run's cxx-program test: the standard containers, new[]/delete[],
// over-aligned new and threads, all reaching libobjtier.so only through libstdc++'s operator new
// and delete (which call malloc, aligned_alloc and free). It prints checksums that must be the
// same with and without LD_PRELOAD, and exits 1 with "FAIL: what" on stderr if a check fails.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

static int failures;

static void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ULL; }

// A vector grown one element at a time: its buffer moves from small blocks to tracked pages.
static uint64_t vectors(unsigned seed) {
    std::vector<uint64_t> v;
    for (uint64_t i = 0; i < 1000000; i++) v.push_back(i * seed + 1);
    uint64_t h = 14695981039346656037ULL;
    for (uint64_t x : v) h = mix(h, x);
    v.resize(10);
    v.shrink_to_fit();
    for (uint64_t x : v) h = mix(h, x);
    return h;
}

// Strings grown past 4 KiB and cut back, copied and compared.
static uint64_t strings(unsigned seed) {
    std::string s;
    uint64_t h = 1469598103934665603ULL;
    for (unsigned i = 0; i < 20000; i++) {
        s += std::to_string(i * seed);
        s += ',';
        if (s.size() > 50000) {
            std::string copy = s;
            check(copy == s, "a copied string differs from its original");
            for (char c : copy) h = mix(h, static_cast<unsigned char>(c));
            s.erase(0, s.size() / 2);
        }
    }
    return mix(h, s.size());
}

// A map with many small nodes and some large values.
static uint64_t maps(unsigned seed) {
    std::map<int, std::string> m;
    for (int i = 0; i < 100000; i++) {
        int key = static_cast<int>((i * 7919u + seed) % 200003);
        m[key] = std::string(static_cast<size_t>(i % 97 == 0 ? 5000 : 8 + i % 40), static_cast<char>('a' + i % 26));
    }
    for (int i = 0; i < 100000; i += 3) m.erase(static_cast<int>((i * 7919u + seed) % 200003));
    uint64_t h = m.size();
    for (const auto &[key, value] : m) h = mix(mix(h, static_cast<uint64_t>(key)), value.size() + static_cast<unsigned char>(value[0]));
    return h;
}

struct Counted {
    static int live;
    uint64_t value;
    Counted() : value(42) { live++; }
    ~Counted() { live--; }
};
int Counted::live = 0;

static void arrays() {
    for (size_t n : {1, 10, 600, 5000, 100000}) {
        Counted *a = new Counted[n];
        check(Counted::live == static_cast<int>(n), "new[] did not construct every element");
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++) sum += a[i].value;
        check(sum == 42 * n, "new[] elements lost their values");
        delete[] a;
        check(Counted::live == 0, "delete[] did not destroy every element");
        char *raw = new char[n];
        for (size_t i = 0; i < n; i++) raw[i] = static_cast<char>(i);
        delete[] raw;
    }
}

struct alignas(4096) PageSized {
    unsigned char bytes[4096];
};

static void aligned() {
    for (int round = 0; round < 50; round++) {
        auto *one = new PageSized;                     // operator new(size_t, align_val_t)
        auto *many = new PageSized[3];                 // operator new[](size_t, align_val_t)
        auto *small = new (std::align_val_t(4096)) uint64_t(7); // explicit alignment, 8 bytes
        void *raw = ::operator new(100, std::align_val_t(64));
        check(reinterpret_cast<uintptr_t>(one) % 4096 == 0, "new of an alignas(4096) type is not page aligned");
        check(reinterpret_cast<uintptr_t>(many) % 4096 == 0, "new[] of an alignas(4096) type is not page aligned");
        check(reinterpret_cast<uintptr_t>(small) % 4096 == 0, "new (std::align_val_t(4096)) is not page aligned");
        check(reinterpret_cast<uintptr_t>(raw) % 64 == 0, "operator new(100, align_val_t(64)) is not 64-byte aligned");
        one->bytes[4095] = 1;
        many[2].bytes[4095] = 2;
        delete one;
        delete[] many;
        ::operator delete(small, std::align_val_t(4096));
        ::operator delete(raw, std::align_val_t(64));
    }
}

int main() {
    arrays();
    aligned();
    // Four threads, each with its own seed, allocating and freeing at once; each result is
    // printed in a fixed order.
    std::vector<uint64_t> results(4 * 3);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 4; t++) {
        threads.emplace_back([t, &results] {
            results[t * 3] = vectors(t + 1);
            results[t * 3 + 1] = strings(t + 1);
            results[t * 3 + 2] = maps(t + 1);
        });
    }
    for (auto &thread : threads) thread.join();
    for (unsigned t = 0; t < 4; t++)
        std::printf("thread %u: vector %016llx string %016llx map %016llx\n", t, static_cast<unsigned long long>(results[t * 3]),
                    static_cast<unsigned long long>(results[t * 3 + 1]), static_cast<unsigned long long>(results[t * 3 + 2]));
    if (failures) return 1;
    std::printf("cxx ok\n");
    return 0;
}
