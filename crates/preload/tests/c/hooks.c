/* Every hook of libzmem_preload.so, from C: large allocations and anonymous
 * mappings are filled with a per-page pattern well past the region's
 * limit, resized, freed, read by the kernel (write(2) to a pipe) and
 * copied into a forked child; every byte is checked. Prints "ok" and exits
 * 0, or names the first wrong thing and exits 1. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096u
#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static void fill(unsigned char *p, size_t len, uint32_t tag) {
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = ((uint64_t)tag << 32) ^ (i / PAGE) * 0x9E3779B97F4A7C15ull ^ (i & 0xff8);
        memcpy(p + i, &v, 8);
    }
}

static int same(const unsigned char *p, size_t len, uint32_t tag) {
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = ((uint64_t)tag << 32) ^ (i / PAGE) * 0x9E3779B97F4A7C15ull ^ (i & 0xff8);
        if (memcmp(p + i, &v, 8) != 0) return 0;
    }
    return 1;
}

static int zeros(const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++) if (p[i]) return 0;
    return 1;
}

int main(void) {
    enum { N = 24 };
    size_t len = 4u << 20; /* 24 x 4 MiB = 96 MiB, limit 16 MiB */
    unsigned char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = i % 3 == 0 ? malloc(len) : i % 3 == 1 ? calloc(1, len)
             : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!b[i] || b[i] == MAP_FAILED) FAIL("allocation %d failed", i);
        if (i % 3 == 1 && !zeros(b[i], len)) FAIL("calloc %d not zero", i);
        fill(b[i], len, (uint32_t)i);
    }
    for (int i = 0; i < N; i++)
        if (!same(b[i], len, (uint32_t)i)) FAIL("buffer %d wrong after the others", i);
    if (malloc_usable_size(b[0]) < len) FAIL("usable size %zu", malloc_usable_size(b[0]));

    /* The kernel reads compressed pages: write(2) to a pipe, read back. */
    int fds[2];
    if (pipe(fds)) FAIL("pipe");
    unsigned char *back = malloc(len);
    pid_t reader = fork();
    if (reader == 0) {
        close(fds[1]);
        size_t got = 0;
        while (got < len) {
            ssize_t n = read(fds[0], back + got, len - got);
            if (n <= 0) _exit(2);
            got += (size_t)n;
        }
        exit(same(back, len, 0) ? 0 : 3);
    }
    close(fds[0]);
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fds[1], b[0] + off, len - off);
        if (n <= 0) FAIL("write from region pages failed");
        off += (size_t)n;
    }
    close(fds[1]);
    int st;
    waitpid(reader, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("the forked reader saw wrong bytes (%d)", st);

    /* realloc: grow (moves or extends), shrink; a glibc block grown past
     * the smallest size moves in. */
    b[0] = realloc(b[0], 2 * len);
    if (!b[0] || !same(b[0], len, 0)) FAIL("realloc grow lost data");
    b[0] = realloc(b[0], len / 2);
    if (!b[0] || !same(b[0], len / 2, 0)) FAIL("realloc shrink lost data");
    unsigned char *small = malloc(100);
    memset(small, 7, 100);
    small = realloc(small, len);
    if (!small || small[99] != 7) FAIL("realloc of a small block lost data");
    free(small);

    /* mremap of an anonymous mapping, then munmap of part of one. */
    unsigned char *m = mremap(b[2], len, 2 * len, MREMAP_MAYMOVE);
    if (m == MAP_FAILED || !same(m, len, 2)) FAIL("mremap lost data");
    if (!zeros(m + len, len)) FAIL("mremap's new pages are not zero");
    b[2] = m;
    if (munmap(b[5] + len / 2, len / 2)) FAIL("munmap of a half");
    if (!same(b[5], len / 2, 5)) FAIL("the kept half changed");

    void *al = NULL;
    if (posix_memalign(&al, 4096, len) || ((uintptr_t)al & 4095)) FAIL("posix_memalign");
    fill(al, len, 99);
    if (!same(al, len, 99)) FAIL("aligned buffer");
    free(al);

    /* A forked child sees its own copy; the parent's stays. */
    pid_t child = fork();
    if (child == 0) {
        for (int i = 6; i < N; i++) {
            if (!same(b[i], len, (uint32_t)i)) _exit(10 + i);
            fill(b[i], len, 1000u + (uint32_t)i);
        }
        for (int i = 6; i < N; i++)
            if (!same(b[i], len, 1000u + (uint32_t)i)) _exit(50 + i);
        exit(0);
    }
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("the forked child's copy was wrong (%d)", st);
    for (int i = 6; i < N; i++)
        if (!same(b[i], len, (uint32_t)i)) FAIL("buffer %d changed by the child", i);

    /* Freed memory comes back as zeros through calloc. */
    for (int i = 6; i < N; i += 3) free(b[i]);
    for (int i = 6; i < N; i += 3) {
        unsigned char *z = calloc(len, 1);
        if (!zeros(z, len)) FAIL("calloc after free not zero");
    }
    puts("ok");
    return 0;
}
