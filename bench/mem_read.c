/*
 * The host's memory read bandwidth as a decode step meets it: `nthreads` threads each stream
 * through their share of one large buffer (far larger than the caches), summing 64-bit words
 * so the loads cannot be skipped. Built by memory_bandwidth.py with the kernels' target flags.
 */
#include <stdint.h>

volatile int64_t mem_read_sink;

/* Reads the `n` words at `buf` `rounds` times on `nthreads` threads; returns their sum. */
int64_t mem_read(const int64_t *buf, int64_t n, int rounds, int nthreads) {
    int64_t total = 0;
    for (int r = 0; r < rounds; r++) {
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(+ : total)
        for (int64_t i = 0; i < n; i++) total += buf[i];
    }
    mem_read_sink = total;
    return total;
}
