/*
 * test_zsmalloc.c - exercises every function of zsmalloc.h from C.
 *
 * Built and run (also under valgrind) by tests/c_api.rs; exits 0 only if
 * every check passed, and ends with a "N passed, N failed" line.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zsmalloc.h>

#include "check.h"

#define PAGE 4096

/* Deterministic bytes for object id. */
static void fill(unsigned char *buf, size_t len, unsigned long id)
{
	uint64_t x = id * 0x9e3779b97f4a7c15ULL | 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
}

/* 1 if the object of handle h holds fill(len, id). Takes and ends a read. */
static int holds(struct zs_pool *pool, unsigned long h, size_t len,
		 unsigned long id)
{
	unsigned char want[PAGE];
	void *mem = zs_obj_read_begin(pool, h, len, NULL);
	int ok;

	if (!mem)
		return 0;
	fill(want, len, id);
	ok = memcmp(mem, want, len) == 0;
	zs_obj_read_end(pool, h, len, mem);
	return ok;
}

static void test_errors_and_null(void)
{
	struct zs_pool *pool = zs_create_pool("errors");
	struct zs_pool_stats st;
	char buf[8];
	unsigned long h;

	CHECK(pool != NULL);
	CHECK(strcmp(zs_pool_name(pool), "errors") == 0);

	/* The kernel's error encoding. */
	h = zs_malloc(pool, 0);
	CHECK(zs_handle_is_err(h) && zs_handle_err(h) == -EINVAL);
	CHECK(h == (unsigned long)-EINVAL);
	h = zs_malloc(pool, PAGE + 1);
	CHECK(zs_handle_is_err(h) && zs_handle_err(h) == -ENOSPC);
	h = zs_malloc(pool, (size_t)-1);
	CHECK(zs_handle_err(h) == -ENOSPC);
	CHECK(!zs_handle_is_err(0) && zs_handle_err(0) == 0);
	CHECK(zs_handle_is_err((unsigned long)-4095));
	CHECK(!zs_handle_is_err((unsigned long)-4096));

	/* NULL pool: every function returns its error or does nothing. */
	CHECK(zs_handle_err(zs_malloc(NULL, 10)) == -EINVAL);
	CHECK(zs_free_checked(NULL, 1) == -EINVAL);
	zs_free(NULL, 1);
	CHECK(zs_obj_write_checked(NULL, 1, "x", 1) == -EINVAL);
	zs_obj_write(NULL, 1, "x", 1);
	CHECK(zs_obj_read_begin(NULL, 1, 1, NULL) == NULL);
	CHECK(zs_obj_read_end_checked(NULL, 1, 1, buf) == -EINVAL);
	zs_obj_read_end(NULL, 1, 1, buf);
	CHECK(zs_get_total_pages(NULL) == 0);
	CHECK(zs_huge_class_size(NULL) == 0);
	CHECK(zs_compact(NULL) == 0);
	CHECK(zs_can_compact(NULL) == 0);
	memset(&st, 0xff, sizeof(st));
	zs_pool_stats(NULL, &st);
	CHECK(st.pages_compacted == 0 && st.total_pages == 0 && st.zspages == 0);
	zs_pool_stats(pool, NULL);
	buf[0] = 'x';
	CHECK(zs_format_classes(NULL, buf, sizeof(buf)) == 0 && buf[0] == 0);
	CHECK(zs_check_invariants(NULL) == -EINVAL);
	CHECK(strcmp(zs_pool_name(NULL), "") == 0);
	zs_destroy_pool(NULL);

	/* Garbage handles: 0, error values, forged values. */
	CHECK(zs_free_checked(pool, 0) == -EINVAL);
	CHECK(zs_free_checked(pool, (unsigned long)-ENOMEM) == -EINVAL);
	CHECK(zs_free_checked(pool, 0x12345) == -EINVAL);
	CHECK(zs_free_checked(pool, ~0UL) == -EINVAL);
	CHECK(zs_free_checked(pool, 1UL << 63) == -EINVAL);
	zs_free(pool, 0);
	zs_free(pool, (unsigned long)-EINVAL);
	zs_free(pool, 0xdeadbeefUL);
	CHECK(zs_obj_write_checked(pool, 0xdeadbeefUL, "x", 1) == -EINVAL);
	CHECK(zs_obj_read_begin(pool, 0xdeadbeefUL, 1, NULL) == NULL);
	CHECK(zs_obj_read_begin(pool, 0, 1, NULL) == NULL);
	CHECK(zs_obj_read_end_checked(pool, 0xdeadbeefUL, 1, buf) == -EINVAL);

	/* Bad configurations give NULL. */
	{
		struct zs_pool_config cfg, bad;

		CHECK(sizeof(struct zs_pool_config) == 48);
		CHECK(zs_pool_config_init(NULL, ZS_MODE_DEFAULT) == -EINVAL);
		CHECK(zs_pool_config_init(&cfg, 7) == -EINVAL);
		CHECK(zs_pool_config_init(&cfg, ZS_MODE_KERNEL_COMPAT) == 0);
		CHECK(cfg.page_size == PAGE && cfg.chain == 8 && cfg.delta == 0);
		CHECK(cfg.mode == ZS_MODE_KERNEL_COMPAT &&
		      cfg.compaction == ZS_COMPACT_KEEP_DESTINATION && cfg.merge == 1);
		/* The deprecated aliases name the same codes as the new names,
		   and the kernel's groups and compaction before 6.4 make a pool. */
		CHECK(ZS_COMPACT_SEED001 == ZS_COMPACT_KEEP_DESTINATION);
		CHECK(ZS_COMPACT_LEGACY == ZS_COMPACT_DRAIN_SOURCE);
		CHECK(ZS_FULLNESS_LEGACY == ZS_FULLNESS_THREE_QUARTERS);
		{
			struct zs_pool_config before = cfg;
			struct zs_pool *old;

			before.fullness = ZS_FULLNESS_THREE_QUARTERS;
			before.compaction = ZS_COMPACT_DRAIN_SOURCE;
			old = zs_create_pool_ex("before-6.4", &before);
			CHECK(old != NULL);
			zs_destroy_pool(old);
		}
		CHECK(zs_create_pool_ex("x", NULL) == NULL);
/* cfg with one field set to a value out of its range is refused. */
#define CHECK_REFUSED(field, value)                                          \
	do {                                                                 \
		bad = cfg;                                                   \
		bad.field = value;                                           \
		CHECK(zs_create_pool_ex("x", &bad) == NULL);                 \
	} while (0)
		CHECK_REFUSED(page_size, 5000);
		CHECK_REFUSED(chain, 17);
		CHECK_REFUSED(delta, 12);
		CHECK_REFUSED(mode, 9);
		CHECK_REFUSED(compaction, 3);
#undef CHECK_REFUSED
	}

	/* A page limit turns into -ENOMEM. */
	{
		struct zs_pool_config cfg;
		struct zs_pool *small;
		unsigned long hs[4];

		zs_pool_config_init(&cfg, ZS_MODE_KERNEL_COMPAT);
		cfg.page_limit = 2;
		small = zs_create_pool_ex("small", &cfg);
		CHECK(small != NULL);
		hs[0] = zs_malloc(small, PAGE);
		hs[1] = zs_malloc(small, PAGE);
		hs[2] = zs_malloc(small, PAGE);
		CHECK(!zs_handle_is_err(hs[0]) && !zs_handle_is_err(hs[1]));
		CHECK(zs_handle_err(hs[2]) == -ENOMEM);
		zs_free(small, hs[0]);
		zs_free(small, hs[1]);
		CHECK(zs_get_total_pages(small) == 0);
		zs_destroy_pool(small);
	}

	CHECK(zs_get_total_pages(pool) == 0);
	zs_destroy_pool(pool);
}

/* Every size 1..PAGE: malloc, write, read in place, free. */
static void test_every_size(struct zs_pool *pool)
{
	static unsigned long handles[PAGE + 1];
	unsigned char buf[PAGE];
	size_t len, huge = zs_huge_class_size(pool);
	unsigned long bad = 0, spanning = 0;

	CHECK(huge > 0 && huge <= PAGE);
	for (len = 1; len <= PAGE; len++) {
		unsigned long h = zs_malloc(pool, len);

		if (zs_handle_is_err(h) || h == 0) {
			bad++;
			continue;
		}
		handles[len] = h;
		fill(buf, len, len);
		if (zs_obj_write_checked(pool, h, buf, len) != 0)
			bad++;
	}
	CHECK(bad == 0);
	CHECK(zs_check_invariants(pool) == 0);

	bad = 0;
	for (len = 1; len <= PAGE; len++) {
		unsigned char *mem;
		uintptr_t off;

		fill(buf, len, len);
		mem = zs_obj_read_begin(pool, handles[len], len, buf);
		if (!mem) {
			bad++;
			continue;
		}
		CHECK(mem != buf); /* never the local copy */
		off = (uintptr_t)mem % PAGE;
		if (off + len > PAGE)
			spanning++; /* crosses a page boundary, still in place */
		if (memcmp(mem, buf, len) != 0)
			bad++;
		zs_obj_read_end(pool, handles[len], len, mem);
	}
	CHECK(bad == 0);
	CHECK(spanning > 0);
	printf("every size: %lu objects cross a page boundary, huge from %zu\n",
	       spanning, huge);

	/* Reads longer than the object are refused; huge objects hold a page. */
	CHECK(zs_obj_read_begin(pool, handles[PAGE], PAGE + 1, NULL) == NULL);
	CHECK(zs_obj_write_checked(pool, handles[PAGE], buf, PAGE + 1) ==
	      -EINVAL);
	CHECK(zs_obj_write_checked(pool, handles[1], NULL, 1) == -EINVAL);
	CHECK(zs_obj_write_checked(pool, handles[1], NULL, 0) == 0);
	CHECK(holds(pool, handles[huge], huge, huge));

	bad = 0;
	for (len = 1; len <= PAGE; len++)
		if (zs_free_checked(pool, handles[len]) != 0)
			bad++;
	CHECK(bad == 0);
	CHECK(zs_get_total_pages(pool) == 0);
	CHECK(zs_check_invariants(pool) == 0);
}

/* Freed, double-freed and forged handles, via the checked variants. */
static void test_stale_handles(struct zs_pool *pool)
{
	unsigned long h = zs_malloc(pool, 100), h2;
	char data[100];

	memset(data, 7, sizeof(data));
	CHECK(zs_obj_write_checked(pool, h, data, sizeof(data)) == 0);
	CHECK(zs_free_checked(pool, h) == 0);
	CHECK(zs_free_checked(pool, h) == -EINVAL); /* double free */
	CHECK(zs_obj_write_checked(pool, h, data, 1) == -EINVAL);
	CHECK(zs_obj_read_begin(pool, h, 1, NULL) == NULL);
	/* The slot is reused by a new object: the old handle stays refused. */
	h2 = zs_malloc(pool, 100);
	CHECK(!zs_handle_is_err(h2) && h2 != h);
	CHECK(zs_free_checked(pool, h) == -EINVAL);
	CHECK(zs_obj_read_begin(pool, h, 1, NULL) == NULL);
	/* Forged neighbours of a live handle. */
	CHECK(zs_free_checked(pool, h2 ^ (1UL << 60)) == -EINVAL);
	CHECK(zs_free_checked(pool, h2 + 1) == -EINVAL);
	CHECK(zs_free_checked(pool, h2 ^ (1UL << 45)) == -EINVAL);
	CHECK(zs_free_checked(pool, h2) == 0);
	CHECK(zs_get_total_pages(pool) == 0);
}

/* Reads nest, pin their object, and end where they began. */
static void test_holds(struct zs_pool *pool)
{
	unsigned long a = zs_malloc(pool, 300), b = zs_malloc(pool, 300);
	unsigned char buf[300];
	void *ma, *ma2, *mb, *many[64];
	int i;

	fill(buf, 300, 1);
	zs_obj_write(pool, a, buf, 300);
	fill(buf, 300, 2);
	zs_obj_write(pool, b, buf, 300);

	ma = zs_obj_read_begin(pool, a, 300, NULL);
	mb = zs_obj_read_begin(pool, b, 300, NULL);
	ma2 = zs_obj_read_begin(pool, a, 10, NULL);
	CHECK(ma && mb && ma2 == ma);
	CHECK(zs_check_invariants(pool) == -EBUSY);
	/* A held object is neither written nor freed, and says so. */
	CHECK(zs_obj_write_checked(pool, a, buf, 300) == -EBUSY);
	CHECK(zs_free_checked(pool, a) == -EBUSY);
	CHECK(holds(pool, a, 300, 1));
	/* End with a wrong address or handle is refused and changes nothing. */
	CHECK(zs_obj_read_end_checked(pool, a, 300, mb) == -EINVAL);
	CHECK(zs_obj_read_end_checked(pool, b, 300, ma) == -EINVAL);
	CHECK(zs_obj_read_end_checked(pool, a, 300, ma) == 0);
	CHECK(zs_free_checked(pool, a) == -EBUSY); /* ma2 still holds it */
	CHECK(zs_obj_read_end_checked(pool, b, 300, mb) == 0);
	CHECK(zs_obj_read_end_checked(pool, b, 300, mb) == -EINVAL);
	CHECK(zs_obj_read_end_checked(pool, a, 10, ma2) == 0);
	CHECK(zs_obj_read_end_checked(pool, a, 10, ma2) == -EINVAL);
	CHECK(zs_check_invariants(pool) == 0);

	/* 63 reads of one object at most; the 64th is refused, not a hang. */
	for (i = 0; i < 63; i++)
		many[i] = zs_obj_read_begin(pool, a, 1, NULL);
	many[63] = zs_obj_read_begin(pool, a, 1, NULL);
	CHECK(many[0] != NULL && many[62] == many[0] && many[63] == NULL);
	for (i = 0; i < 63; i++)
		zs_obj_read_end(pool, a, 1, many[i]);
	CHECK(zs_check_invariants(pool) == 0);

	CHECK(zs_free_checked(pool, a) == 0);
	CHECK(zs_free_checked(pool, b) == 0);
	CHECK(zs_get_total_pages(pool) == 0);
}

struct cross {
	struct zs_pool *pool;
	unsigned long *handles;
	void **mems;
	int n;
	int ended;
};

static void *end_reads(void *arg)
{
	struct cross *c = arg;
	int i;

	c->ended = 0;
	for (i = 0; i < c->n; i++)
		if (zs_obj_read_end_checked(c->pool, c->handles[i], 64,
					    c->mems[i]) == 0)
			c->ended++;
	return NULL;
}

/* Reads begun on this thread end on another. */
static void test_cross_thread(struct zs_pool *pool)
{
	enum { N = 200 };
	unsigned long handles[N];
	void *mems[N];
	unsigned char buf[64];
	struct cross c = { pool, handles, mems, N, 0 };
	pthread_t t;
	int i, begun = 0;

	for (i = 0; i < N; i++) {
		handles[i] = zs_malloc(pool, 64);
		fill(buf, 64, (unsigned long)i);
		zs_obj_write(pool, handles[i], buf, 64);
		mems[i] = zs_obj_read_begin(pool, handles[i], 64, NULL);
		if (mems[i] && memcmp(mems[i], buf, 64) == 0)
			begun++;
	}
	CHECK(begun == N);
	CHECK(pthread_create(&t, NULL, end_reads, &c) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(c.ended == N);
	CHECK(zs_check_invariants(pool) == 0);
	for (i = 0; i < N; i++)
		zs_free(pool, handles[i]);
	CHECK(zs_get_total_pages(pool) == 0);
}

/* Fragment a pool, compact it, and see the counters move. */
static void test_compaction(struct zs_pool *pool, const char *what)
{
	enum { N = 6000 };
	static unsigned long handles[N];
	static size_t lens[N];
	unsigned char buf[PAGE];
	struct zs_pool_stats before, after;
	unsigned long pages_full, pages_frag, freed, can, bad = 0;
	int i;

	for (i = 0; i < N; i++) {
		lens[i] = 40 + (size_t)(i * 131) % 3000;
		handles[i] = zs_malloc(pool, lens[i]);
		fill(buf, lens[i], (unsigned long)i);
		zs_obj_write(pool, handles[i], buf, lens[i]);
	}
	pages_full = zs_get_total_pages(pool);
	/* Free three objects in four. */
	for (i = 0; i < N; i++)
		if (i % 4 != 0)
			zs_free(pool, handles[i]);
	pages_frag = zs_get_total_pages(pool);
	can = zs_can_compact(pool);
	zs_pool_stats(pool, &before);
	CHECK(can > 0);
	CHECK(before.total_pages == pages_frag);
	CHECK(before.objs_used == (N + 3) / 4);
	CHECK(before.zspages > 0 && before.objs_allocated >= before.objs_used);

	freed = zs_compact(pool);
	zs_pool_stats(pool, &after);
	printf("%s: %lu pages full, %lu after freeing 3/4, compact freed %lu "
	       "(could %lu), moved %lu objects\n",
	       what, pages_full, pages_frag, freed, can,
	       after.objs_moved - before.objs_moved);
	CHECK(freed > 0);
	CHECK(zs_can_compact(pool) == 0);
	CHECK(after.pages_compacted == before.pages_compacted + freed);
	CHECK(after.objs_moved > before.objs_moved);
	CHECK(after.total_pages == pages_frag - freed);
	CHECK(after.total_pages == zs_get_total_pages(pool));
	CHECK(zs_check_invariants(pool) == 0);

	for (i = 0; i < N; i += 4)
		if (!holds(pool, handles[i], lens[i], (unsigned long)i))
			bad++;
	CHECK(bad == 0);
	for (i = 0; i < N; i += 4)
		if (zs_free_checked(pool, handles[i]) != 0)
			bad++;
	CHECK(bad == 0);
	CHECK(zs_get_total_pages(pool) == 0);
	zs_pool_stats(pool, &after);
	CHECK(after.objs_used == 0 && after.zspages == 0);
	CHECK(zs_check_invariants(pool) == 0);
}

struct churn {
	struct zs_pool *pool;
	volatile int done;
};

/* Allocates and frees objects of mixed sizes, freeing most now and then. */
static void *churn_objects(void *arg)
{
	enum { LIVE = 2000, STEPS = 20000 };
	static unsigned long live[LIVE];
	struct churn *c = arg;
	unsigned long x = 12345;
	int n = 0, step, i;

	for (step = 0; step < STEPS; step++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		if (n < LIVE && (x >> 33) % 3 != 0) {
			live[n++] = zs_malloc(c->pool, 20 + (x >> 40) % 3000);
		} else if (n > 0) {
			i = (int)((x >> 20) % (unsigned long)n);
			zs_free(c->pool, live[i]);
			live[i] = live[--n];
		}
		if (step % 1000 == 999)
			while (n > LIVE / 8)
				zs_free(c->pool, live[--n]);
	}
	while (n > 0)
		zs_free(c->pool, live[--n]);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A short pause: under valgrind, which runs one thread at a time, a loop
 * that takes the pool's locks back to back can keep the churning thread
 * from ever getting them; the pause is a system call that lets it run. */
static void pause_briefly(void)
{
	struct timespec ts = { 0, 50000 };

	nanosleep(&ts, NULL);
}

static void *compact_until_done(void *arg)
{
	struct churn *c = arg;

	while (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
		zs_compact(c->pool);
		pause_briefly();
	}
	return NULL;
}

/*
 * zs_pool_stats read while one thread allocates and frees and another
 * compacts: every snapshot must agree with itself.
 */
static void test_stats_while_compacting(struct zs_pool *pool, int compat)
{
	struct churn c = { pool, 0 };
	struct zs_pool_stats st;
	pthread_t writer, compactor;
	unsigned long reads = 0, bad = 0;

	CHECK(pthread_create(&writer, NULL, churn_objects, &c) == 0);
	CHECK(pthread_create(&compactor, NULL, compact_until_done, &c) == 0);
	while (!__atomic_load_n(&c.done, __ATOMIC_ACQUIRE) || reads < 100) {
		zs_pool_stats(pool, &st);
		if (st.objs_used > st.objs_allocated)
			bad++;
		if (compat && st.total_pages < st.zspages)
			bad++;
		reads++;
		if (reads % 16 == 0)
			pause_briefly();
	}
	CHECK(pthread_join(writer, NULL) == 0);
	CHECK(pthread_join(compactor, NULL) == 0);
	printf("stats while compacting: %lu snapshots, %lu inconsistent\n",
	       reads, bad);
	CHECK(bad == 0);
	zs_pool_stats(pool, &st);
	CHECK(st.objs_used == 0 && st.total_pages == zs_get_total_pages(pool));
	CHECK(zs_check_invariants(pool) == 0);
}

static void test_format_classes(struct zs_pool *pool)
{
	char small[16], *big;
	size_t n = zs_format_classes(pool, NULL, 0);

	CHECK(n > 100);
	CHECK(zs_format_classes(pool, small, sizeof(small)) == n);
	CHECK(strlen(small) == sizeof(small) - 1);
	small[0] = 'x';
	CHECK(zs_format_classes(pool, small, 0) == n && small[0] == 'x');
	big = malloc(n + 1);
	CHECK(big != NULL);
	if (!big)
		return;
	CHECK(zs_format_classes(pool, big, n + 1) == n);
	CHECK(strlen(big) == n);
	CHECK(strstr(big, "obj_allocated") != NULL);
	CHECK(strstr(big, "Total") != NULL);
	CHECK(zs_format_classes(pool, small, sizeof(small)) == n);
	CHECK(memcmp(big, small, sizeof(small) - 1) == 0);
	free(big);
}

int main(void)
{
	struct zs_pool_config cfg;
	struct zs_pool *compat, *dflt;

	test_errors_and_null();

	compat = zs_create_pool("zram0");
	CHECK(compat != NULL);
	if (!compat)
		return 1;
	CHECK(zs_huge_class_size(compat) == 3625);
	test_every_size(compat);
	test_stale_handles(compat);
	test_holds(compat);
	test_cross_thread(compat);
	test_compaction(compat, "kernel-compat");
	test_stats_while_compacting(compat, 1);
	test_format_classes(compat);

	CHECK(zs_pool_config_init(&cfg, ZS_MODE_DEFAULT) == 0);
	CHECK(cfg.mode == ZS_MODE_DEFAULT && cfg.compaction == ZS_COMPACT_OPTIMAL);
	dflt = zs_create_pool_ex("default", &cfg);
	CHECK(dflt != NULL);
	if (!dflt)
		return 1;
	CHECK(strcmp(zs_pool_name(dflt), "default") == 0);
	test_every_size(dflt);
	test_stale_handles(dflt);
	test_holds(dflt);
	test_compaction(dflt, "default");
	test_stats_while_compacting(dflt, 0);
	/* A handle of one pool is refused by the other. */
	{
		unsigned long h = zs_malloc(compat, 10);

		CHECK(zs_free_checked(dflt, h) == -EINVAL);
		CHECK(zs_obj_read_begin(dflt, h, 1, NULL) == NULL);
		CHECK(zs_free_checked(compat, h) == 0);
	}

	/* Destroying a pool frees all its objects, held ones included. */
	{
		unsigned long h = zs_malloc(dflt, 500);

		CHECK(!zs_handle_is_err(h));
		CHECK(zs_obj_read_begin(dflt, h, 500, NULL) != NULL);
		CHECK(zs_get_total_pages(dflt) > 0);
	}
	zs_destroy_pool(dflt);
	zs_destroy_pool(compat);

	return check_summary(0);
}
