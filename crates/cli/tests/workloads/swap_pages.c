/*
 * A program whose anonymous memory must survive swap, page for page, for
 * the swap tests that run inside qemu guests.
 *
 *     swap_pages MIB [SEED]
 *
 * It maps MIB MiB of private anonymous memory and fills each page with one
 * of three kinds, chosen by a seeded generator: text-like (words from a
 * small vocabulary), binary-like (a few random bytes repeated with small
 * changes) and zero, about 2x compressible together; it keeps a checksum
 * of every page. Then it rewrites a quarter of the pages (new contents,
 * new checksums), frees half of them (MADV_DONTNEED: they must read back
 * as zero), and verifies every page. It prints one line, "pages N right,
 * M wrong, T s", and exits 0 only when every page is right; when memory
 * runs out the kernel's OOM killer ends it, which the caller sees as a
 * signal.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "pages.h"

static const char *words[] = {
	"static ", "int ", "return ", "struct ", "page ", "memory ", "the ", "of ",
	"kernel ", "zram ", "swap ", "compress ", "for (", "if (", "} else {\n", "NULL;\n",
};

static void fill(unsigned char *p)
{
	uint64_t kind = next() % 10;
	if (kind < 2) {
		memset(p, 0, PAGE);
	} else if (kind < 6) {
		int at = 0;
		while (at < PAGE) {
			const char *w = words[next() % 16];
			size_t n = strlen(w);
			if (at + n > PAGE)
				n = PAGE - at;
			memcpy(p + at, w, n);
			at += n;
		}
	} else {
		unsigned char base[64];
		for (int i = 0; i < 64; i++)
			base[i] = next();
		for (int i = 0; i < PAGE; i += 64) {
			memcpy(p + i, base, 64);
			p[i + next() % 64] = next();
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: swap_pages MIB [SEED]\n");
		return 2;
	}
	size_t pages = (size_t)atol(argv[1]) * 256;
	state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned char *mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *sums = calloc(pages, sizeof(*sums));
	if (mem == MAP_FAILED || !sums) {
		perror("swap_pages: memory");
		return 1;
	}
	for (size_t i = 0; i < pages; i++) {
		fill(mem + i * PAGE);
		sums[i] = checksum(mem + i * PAGE);
	}
	/* Rewrite a quarter. */
	for (size_t i = 0; i < pages; i += 4) {
		fill(mem + i * PAGE);
		sums[i] = checksum(mem + i * PAGE);
	}
	/* Free half, in runs of 16 pages. */
	static unsigned char zero[PAGE];
	uint64_t zero_sum = checksum(zero);
	for (size_t i = 0; i + 16 <= pages; i += 32) {
		madvise(mem + i * PAGE, 16 * PAGE, MADV_DONTNEED);
		for (size_t k = i; k < i + 16; k++)
			sums[k] = zero_sum;
	}
	size_t right = 0, wrong = 0;
	for (size_t i = 0; i < pages; i++) {
		if (checksum(mem + i * PAGE) == sums[i])
			right++;
		else
			wrong++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("pages %zu right, %zu wrong, %.1f s\n", right, wrong,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return wrong == 0 ? 0 : 1;
}
