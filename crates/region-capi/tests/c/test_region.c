/*
 * test_region.c - exercises every function of zmem_region.h from C.
 *
 * Built against libzmem_region.a and libzmem_region.so and run by
 * tests/c_api.rs. Checks bad input first (no userfaultfd needed), then
 * fills a 64 MiB region with an 8 MiB resident limit page by page, reads
 * every byte back (most pages come back from the store), uses the hints,
 * reads the statistics, and passes region pages to write(2) and read(2) on
 * a pipe. Exits 0 only if every check passed and ends with a
 * "c_api: N passed, N failed" line; exits 77 after the bad-input checks,
 * with a "SKIPPED:" line, where no userfaultfd can be opened.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmem_region.h>

#include "check.h"

#define MIB ((size_t)1 << 20)
/* Bytes passed to write(2) and read(2): under a pipe's 64 KiB capacity. */
#define IO_BYTES ((size_t)16384)

static size_t page;

/* The byte at offset i of page p: distinct for every page, and as
   compressible as ordinary data (runs of slowly changing bytes). */
static unsigned char pattern(size_t p, size_t i)
{
	return (unsigned char)(p * 131 + (i >> 5) * 7 + (p >> 8));
}

static void fill_page(unsigned char *base, size_t p)
{
	unsigned char *pg = base + p * page;
	size_t i;

	for (i = 0; i < page; i++)
		pg[i] = pattern(p, i);
	/* The page's own index up front, so no two pages are alike. */
	memcpy(pg, &p, sizeof p);
}

/* 1 if page p of base holds fill_page(p). */
static int page_ok(const unsigned char *base, size_t p)
{
	const unsigned char *pg = base + p * page;
	size_t i, got;

	memcpy(&got, pg, sizeof got);
	if (got != p)
		return 0;
	for (i = sizeof p; i < page; i++)
		if (pg[i] != pattern(p, i))
			return 0;
	return 1;
}

/* The number after "key": in json, or -1 if there is none. */
static long long json_number(const char *json, const char *key)
{
	char needle[64];
	const char *at;

	snprintf(needle, sizeof needle, "\"%s\":", key);
	at = strstr(json, needle);
	if (!at)
		return -1;
	return strtoll(at + strlen(needle), NULL, 10);
}

/* Checks that make no region: every one fails with EINVAL. */
static void bad_input(void)
{
	errno = 0;
	CHECK(zmem_region_new(0, MIB, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_new(8 * MIB, 0, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_new(8 * MIB, 16 * MIB, NULL) == NULL &&
	      errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_new(8 * MIB, MIB, "nope") == NULL && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_new(8 * MIB, MIB, "") == NULL && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_new(SIZE_MAX, MIB, NULL) == NULL && errno == EINVAL);

	/* A NULL region. */
	errno = 0;
	CHECK(zmem_region_ptr(NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_len(NULL) == 0 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_cold(NULL, 0, 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_hot(NULL, 0, 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_willneed(NULL, 0, 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_touch(NULL, 0, 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_user_mode_only(NULL) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_new_flags(MIB, MIB, NULL, 0x80) == NULL &&
	      errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_stats_json(NULL) == NULL && errno == EINVAL);
	zmem_region_free(NULL);
}

/* Ranges outside a region of len bytes fail with EINVAL; empty ones at its
   end are fine. */
static void bad_ranges(const struct zmem_region *r, size_t len)
{
	errno = 0;
	CHECK(zmem_region_cold(r, len, 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_cold(r, 0, len + 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_cold(r, SIZE_MAX, 2) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_hot(r, len - page, 2 * page) == -1 &&
	      errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_willneed(r, len + page, 0) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(zmem_region_touch(r, 1, len) == -1 && errno == EINVAL);
	CHECK(zmem_region_cold(r, len, 0) == 0);
	CHECK(zmem_region_touch(r, len, 0) == 0);
}

typedef long (*hint_fn)(const struct zmem_region *, size_t, size_t);

/*
 * Calls a hint on [off, off + len) until it has done want pages in all, for
 * up to a second; returns the pages done (or -1 as the hint). The hints skip
 * a page whose mapping is changing at that moment (the region's handler has
 * not yet read the kernel's event for a page just dropped): the header's
 * advice is to call again.
 */
static long hint_until(hint_fn hint, const struct zmem_region *r, size_t off,
		       size_t len, long want)
{
	const struct timespec ms = { 0, 1000000 };
	long done = 0, n;
	int tries;

	for (tries = 0; tries < 1000 && done < want; tries++) {
		if (tries > 0)
			nanosleep(&ms, NULL);
		n = hint(r, off, len);
		if (n < 0)
			return n;
		done += n;
	}
	return done;
}

/* Maps IO_BYTES at off, then compresses them: none of their pages mapped. */
static void make_cold(const struct zmem_region *r, size_t off)
{
	long pages = (long)((IO_BYTES + page - 1) / page);

	CHECK(zmem_region_touch(r, off, IO_BYTES) == 0);
	CHECK(hint_until(zmem_region_cold, r, off, IO_BYTES, pages) == pages);
}

/*
 * The kernel-side rule: write(2) from region pages that are not mapped, and
 * read(2) into them. A region whose userfaultfd serves the kernel's faults
 * takes both; a user-mode-only one fails them with EFAULT until the pages
 * are touched. Uses IO_BYTES from page src_page and into page dst_page.
 */
static void system_calls(const struct zmem_region *r, unsigned char *base,
			 size_t src_page, size_t dst_page)
{
	unsigned char want[IO_BYTES], got[IO_BYTES];
	size_t src = src_page * page, dst = dst_page * page, i;
	int umo = zmem_region_user_mode_only(r);
	int fds[2];
	ssize_t n;

	CHECK(umo == 0 || umo == 1);
	printf("user-mode-only userfaultfd: %s\n", umo ? "yes" : "no");
	for (i = 0; i < IO_BYTES; i++)
		want[i] = pattern(src_page + i / page, i % page);
	for (i = 0; i < IO_BYTES; i += page) {
		size_t p = src_page + i / page;

		memcpy(want + i, &p, sizeof p);
	}
	if (pipe(fds) != 0) {
		perror("pipe");
		CHECK(0);
		return;
	}

	/* write(2) from pages just compressed. */
	make_cold(r, src);
	errno = 0;
	n = write(fds[1], base + src, IO_BYTES);
	if (umo) {
		CHECK(n == -1 && errno == EFAULT);
	} else {
		CHECK(n == (ssize_t)IO_BYTES);
		CHECK(read(fds[0], got, IO_BYTES) == (ssize_t)IO_BYTES);
		CHECK(memcmp(got, want, IO_BYTES) == 0);
	}
	/* Touched first, it works either way. */
	make_cold(r, src);
	CHECK(zmem_region_touch(r, src, IO_BYTES) == 0);
	CHECK(write(fds[1], base + src, IO_BYTES) == (ssize_t)IO_BYTES);
	memset(got, 0, sizeof got);
	CHECK(read(fds[0], got, IO_BYTES) == (ssize_t)IO_BYTES);
	CHECK(memcmp(got, want, IO_BYTES) == 0);

	/* read(2) into pages just compressed. */
	make_cold(r, dst);
	CHECK(write(fds[1], want, IO_BYTES) == (ssize_t)IO_BYTES);
	errno = 0;
	n = read(fds[0], base + dst, IO_BYTES);
	if (umo) {
		CHECK(n == -1 && errno == EFAULT);
		CHECK(zmem_region_touch(r, dst, IO_BYTES) == 0);
		n = read(fds[0], base + dst, IO_BYTES);
	}
	CHECK(n == (ssize_t)IO_BYTES);
	CHECK(memcmp(base + dst, want, IO_BYTES) == 0);
	/* The region's copy of the bytes survives compression. */
	CHECK(hint_until(zmem_region_cold, r, dst, IO_BYTES, 1) > 0);
	CHECK(memcmp(base + dst, want, IO_BYTES) == 0);
	close(fds[0]);
	close(fds[1]);
}

/* The statistics of a region of npages with a limit of limit_pages. */
static void stats(const struct zmem_region *r, size_t npages,
		  size_t limit_pages)
{
	char *json = zmem_region_stats_json(r);
	long long resident, limit, over, stored, from_store;

	CHECK(json != NULL);
	if (!json)
		return;
	CHECK(json[0] == '{' && json[strlen(json) - 1] == '}');
	CHECK(strstr(json, "\"mm_stat\":{") != NULL);
	CHECK(json_number(json, "len") == (long long)(npages * page));
	resident = json_number(json, "resident_pages");
	limit = json_number(json, "resident_limit_pages");
	over = json_number(json, "over_limit");
	stored = json_number(json, "stored_pages");
	from_store = json_number(json, "missing_store");
	printf("resident %lld of %lld pages (%lld faults served over the "
	       "limit), %lld stored, %lld faults from the store\n",
	       resident, limit, over, stored, from_store);
	CHECK(limit == (long long)limit_pages);
	CHECK(resident >= 0 && over >= 0);
	/* Within the limit, unless faults were served over it because the
	   evictor made no room in time, and then by no more than those. */
	CHECK(resident <= limit + over);
	CHECK(stored > 0 && stored <= (long long)npages);
	CHECK(from_store > 0);
	CHECK(json_number(json, "orig_data_size") > 0);
	free(json);
}

/* A 64 MiB region with an 8 MiB limit, every page written and read back. */
static void big_region(struct zmem_region *r)
{
	const size_t len = 64 * MIB, limit = 8 * MIB;
	size_t npages = len / page, p, bad = 0;
	unsigned char *base = zmem_region_ptr(r);
	long n;

	CHECK(base != NULL);
	CHECK(zmem_region_len(r) == len);
	if (!base)
		return;
	for (p = 0; p < npages; p++)
		fill_page(base, p);
	for (p = 0; p < npages; p++)
		bad += !page_ok(base, p);
	CHECK(bad == 0);
	printf("%zu pages written and read back, %zu wrong\n", npages, bad);

	/* Everything resident to the store, then hints on 16 pages each. */
	n = hint_until(zmem_region_cold, r, 0, len, 1);
	CHECK(n > 0 && n <= (long)npages);
	n = hint_until(zmem_region_willneed, r, 0, 16 * page, 16);
	CHECK(n == 16);
	n = hint_until(zmem_region_hot, r, 16 * page, 16 * page, 16);
	CHECK(n == 16);
	/* Partial pages count whole. */
	n = hint_until(zmem_region_cold, r, 1, 16 * page - 2, 16);
	CHECK(n == 16);
	CHECK(zmem_region_touch(r, 0, 32 * page) == 0);
	for (p = 0, bad = 0; p < 32; p++)
		bad += !page_ok(base, p);
	CHECK(bad == 0);

	bad_ranges(r, len);
	system_calls(r, base, 100, npages - 100);
	stats(r, npages, limit / page);

	/* Every page once more, after all that. */
	for (p = 0, bad = 0; p < npages; p++) {
		if (p >= npages - 100 &&
		    p < npages - 100 + (IO_BYTES + page - 1) / page)
			continue; /* overwritten by read(2) */
		bad += !page_ok(base, p);
	}
	CHECK(bad == 0);
}

/* A small region with a named compressor. */
static void zstd_region(void)
{
	struct zmem_region *r = zmem_region_new(4 * MIB, MIB, "zstd");
	unsigned char *base;
	size_t p, bad = 0, npages = 4 * MIB / page;

	CHECK(r != NULL);
	if (!r)
		return;
	base = zmem_region_ptr(r);
	for (p = 0; p < npages; p++)
		fill_page(base, p);
	CHECK(hint_until(zmem_region_cold, r, 0, 4 * MIB, 1) > 0);
	for (p = 0; p < npages; p++)
		bad += !page_ok(base, p);
	CHECK(bad == 0);
	zmem_region_free(r);
}

int main(void)
{
	struct zmem_region *r;

	page = (size_t)sysconf(_SC_PAGESIZE);
	bad_input();

	errno = 0;
	r = zmem_region_new(64 * MIB, 8 * MIB, NULL);
	if (!r && (errno == ENOSYS || errno == EPERM || errno == EACCES)) {
		printf("SKIPPED: no userfaultfd here (%s)\n", strerror(errno));
		return check_summary(77);
	}
	CHECK(r != NULL);
	if (r) {
		big_region(r);
		zmem_region_free(r);
	}
	zstd_region();

	/* The same in a region whose faults are served in the faulting
	 * thread: the kernel's own accesses then fail until touched. */
	r = zmem_region_new_flags(64 * MIB, 8 * MIB, NULL,
				  ZMEM_REGION_FAULTING_THREAD);
	CHECK(r != NULL);
	if (r) {
		CHECK(zmem_region_user_mode_only(r) == 1);
		big_region(r);
		zmem_region_free(r);
	}

	return check_summary(0);
}
