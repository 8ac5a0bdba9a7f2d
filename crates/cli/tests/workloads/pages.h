/*
 * pages.h - what the C workloads (page_trace.c, swap_pages.c) share: the
 * page size they work in, a seeded generator and a page's checksum.
 * Header-only, for one program each.
 */
#ifndef ZMEM_WORKLOAD_PAGES_H
#define ZMEM_WORKLOAD_PAGES_H

#include <stdint.h>
#include <string.h>

#define PAGE 4096

/* The generator's state: the program sets it to its seed. */
static uint64_t state;

/* The next value of splitmix64. */
static uint64_t next(void)
{
	uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A hash of one page, eight bytes at a time. */
static uint64_t checksum(const unsigned char *p)
{
	uint64_t h = 1469598103934665603ULL;
	for (int i = 0; i < PAGE; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	return h;
}

#endif
