// jemalloc's settings for the batch executables (shardscope-cli and the non-GUI benchmarks), read by
// jemalloc at start-up from this symbol (the `MALLOC_CONF` environment variable still overrides it).
//
// A strategy search or a reproduction builds, partitions and simulates one program after another:
// a few hundred MB are allocated, freed and allocated again many times over. With jemalloc's
// defaults the freed pages are handed back to the kernel on a 10 s decay curve and the next
// candidate faults them in again, one 4 KiB page at a time, each zeroed by the kernel: the 128-core
// search of bench_search took ~87,000 page faults and spent about a quarter of its CPU time in the
// kernel (docs/search.md, "The allocator's pages"). Here:
//   * thp:always — jemalloc asks for transparent huge pages on its extents (the machine's
//     /sys/kernel/mm/transparent_hugepage/enabled is `madvise`), so a fault brings in 2 MiB;
//   * dirty_decay_ms:-1, muzzy_decay_ms:-1 — freed pages stay with the process for the next
//     candidate instead of being returned and faulted in again.
// Freed memory is reused, not added to: the resident set stays the process's peak, 5-6% larger
// with huge pages rounding the extents up; a batch process returns everything at exit. The GUI keeps jemalloc's defaults
// (a long-lived process whose peak matters; app/gui/release_memory.h hands pages back on demand).
// Ignored by glibc's malloc and by the sanitizers' allocators (the symbol is then unused).
extern "C" {
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables): jemalloc reads this symbol
const char* malloc_conf = "thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1";
}
