/*
 * A program that reads and writes a large malloc'd buffer page by page
 * with a skewed trace, and checks every page it reads: the C workload of
 * `zmem run`'s tests and of scripts/vm-run-bench.
 *
 *     page_trace MIB ACCESSES SEED
 *
 * It mallocs MIB MiB in one call (so `zmem run`'s preload library, which
 * serves allocations of 64 KiB and more, puts it in its region) and fills
 * each 4 KiB page with seeded content, about 2x compressible: runs of
 * text-like words from a small vocabulary, of random bytes and of zeros.
 * It keeps a checksum of every page (in a second malloc'd array). Then it
 * makes ACCESSES accesses to pages drawn Zipf-distributed (s = 1) over
 * a seeded shuffle of the pages (the hot pages are spread over the
 * buffer): four in five read the page and check it against its checksum,
 * one in five overwrites a run of it with new words and updates its
 * checksum. At the end it checks every page. It prints one line, the same
 * for the same arguments wherever it runs ("page_trace ... checksum X",
 * X a hash of every page's final checksum and of the trace), and the time
 * it took on standard error; it exits 1 if any page was wrong.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pages.h"

static const char *words[] = {
	"static ", "int ", "return ", "struct ", "page ", "memory ", "the ", "of ",
	"kernel ", "zram ", "swap ", "compress ", "for (", "if (", "} else {\n", "NULL;\n",
	"unsigned ", "long ", "void ", "const ", "char ", "size_t ", "while (", "break;\n",
	"spin_lock(", "&lock);\n", "->next", "->prev", "list_head ", "err = ", "goto out;\n", "#define ",
};

/* Words from the vocabulary, with a number now and then, into p[0..n). */
static void text(unsigned char *p, int n)
{
	int at = 0;
	while (at < n) {
		char num[24];
		const char *w = words[next() % 32];
		uint64_t r = next();
		if (r % 8 == 0) {
			snprintf(num, sizeof(num), "%u ", (unsigned)(r >> 40) % 1000);
			w = num;
		}
		int k = (int)strlen(w);
		if (at + k > n)
			k = n - at;
		memcpy(p + at, w, k);
		at += k;
	}
}

/* A whole page: runs of text, random bytes and zeros. */
static void fill(unsigned char *p)
{
	int at = 0;
	while (at < PAGE) {
		uint64_t kind = next() % 8;
		int n;
		if (kind < 4) {
			n = 64 + next() % 448;
			if (at + n > PAGE)
				n = PAGE - at;
			text(p + at, n);
		} else if (kind < 5) {
			n = 16 + next() % 112;
			if (at + n > PAGE)
				n = PAGE - at;
			for (int i = 0; i < n; i++)
				p[at + i] = (unsigned char)next();
		} else {
			n = 32 + next() % 480;
			if (at + n > PAGE)
				n = PAGE - at;
			memset(p + at, 0, n);
		}
		at += n;
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: page_trace MIB ACCESSES SEED\n");
		return 2;
	}
	size_t pages = (size_t)strtoull(argv[1], NULL, 10) * (1 << 20) / PAGE;
	uint64_t accesses = strtoull(argv[2], NULL, 10);
	uint64_t seed = strtoull(argv[3], NULL, 10);
	if (pages == 0) {
		fprintf(stderr, "page_trace: MIB must be at least 1\n");
		return 2;
	}
	state = seed;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned char *mem = malloc(pages * PAGE);
	uint64_t *sums = malloc(pages * sizeof(*sums));
	uint32_t *order = malloc(pages * sizeof(*order));
	double *cum = malloc(pages * sizeof(*cum));
	if (!mem || !sums || !order || !cum) {
		perror("page_trace: malloc");
		return 1;
	}
	for (size_t i = 0; i < pages; i++) {
		fill(mem + i * PAGE);
		sums[i] = checksum(mem + i * PAGE);
	}
	/* Zipf over ranks 1..pages, each rank a page of a seeded shuffle. */
	for (size_t i = 0; i < pages; i++)
		order[i] = (uint32_t)i;
	for (size_t i = pages - 1; i > 0; i--) {
		size_t j = next() % (i + 1);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	double total = 0;
	for (size_t r = 0; r < pages; r++) {
		total += 1.0 / (double)(r + 1);
		cum[r] = total;
	}
	uint64_t trace = 0, writes = 0, wrong = 0;
	for (uint64_t a = 0; a < accesses; a++) {
		double u = (double)(next() >> 11) / (double)(1ULL << 53) * total;
		size_t lo = 0, hi = pages - 1;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (cum[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t pg = order[lo];
		unsigned char *p = mem + pg * PAGE;
		if (checksum(p) != sums[pg]) {
			if (wrong++ < 10)
				fprintf(stderr, "page_trace: page %zu wrong at access %llu\n", pg,
					(unsigned long long)a);
		}
		if (next() % 5 == 0) {
			int off = (int)(next() % (PAGE / 64)) * 64;
			int n = 64 + (int)(next() % 448);
			if (off + n > PAGE)
				n = PAGE - off;
			text(p + off, n);
			sums[pg] = checksum(p);
			writes++;
		}
		trace = (trace ^ sums[pg] ^ pg) * 0x100000001b3ULL;
	}
	uint64_t all = trace;
	for (size_t i = 0; i < pages; i++) {
		uint64_t s = checksum(mem + i * PAGE);
		if (s != sums[i]) {
			if (wrong++ < 10)
				fprintf(stderr, "page_trace: page %zu wrong at the end\n", i);
		}
		all = (all ^ s) * 0x100000001b3ULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("page_trace %zu pages, %llu accesses, %llu writes, %llu wrong, checksum %016llx\n",
	       pages, (unsigned long long)accesses, (unsigned long long)writes,
	       (unsigned long long)wrong, (unsigned long long)all);
	fprintf(stderr, "page_trace: %.2f s\n",
		(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(cum);
	free(order);
	free(sums);
	free(mem);
	return wrong == 0 ? 0 : 1;
}
