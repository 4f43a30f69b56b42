/* A workload whose whole memory is state (tests/integration/test_migration_criu.py): it fills
 * MB MiB with a pseudo-random pattern, keeps their checksum in memory, then prints "ID COUNT" ten
 * times a second, ID fixed for the life of the process and COUNT one more each time. On SIGUSR1
 * it reads all of its memory again and prints "check ID same" or "check ID differs": a page lost,
 * zeroed or swapped in a migration shows there. Built static (no libc in the lab's image).
 *     memhold MB */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t asked;

static void ask(int sig) { (void)sig; asked = 1; }

static uint64_t checksum(const uint64_t *words, size_t n) {
    uint64_t sum = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) sum = (sum ^ words[i]) * 1099511628211ULL;
    return sum;
}

int main(int argc, char **argv) {
    size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 16) << 17;  /* 8-byte words in MB MiB */
    uint64_t *words = malloc(n * sizeof *words), x = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    if (words == NULL) return 1;
    for (size_t i = 0; i < n; i++) {  /* xorshift64: every page different */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        words[i] = x;
    }
    const uint64_t sum = checksum(words, n);
    const unsigned id = (unsigned)(x % 1000000);
    signal(SIGUSR1, ask);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (unsigned long count = 1;; count++) {
        if (asked) {
            asked = 0;
            printf("check %u %s\n", id, checksum(words, n) == sum ? "same" : "differs");
        }
        printf("%u %lu\n", id, count);
        usleep(100000);
    }
}
