/*
 * A program that pushes a file's pages through the kernel's zswap one by
 * one, in file order, and prints what zswap made of them: the guest half
 * of the zswap tests (vm_zswap73.rs).
 *
 *     zswap_pages FILE [settle]
 *
 * It pins itself to CPU 0 (the fault's per-CPU LRU batch and
 * MADV_PAGEOUT's drain are then on the same CPU), maps the file's size of
 * private anonymous memory without huge pages, and for each page in turn
 * copies the file's page in (the last one padded with zeros) and asks for
 * it to be paged out (MADV_PAGEOUT), then checks in /proc/self/pagemap that
 * its entry became a swap entry, retrying a few times if not. With
 * `settle`, after a page zswap refused (stored_pages did not grow) it waits
 * for the shrink worker the refusal queued to finish (written_back_pages
 * moved, then still for 100 ms) before the next page, so that the worker's writebacks
 * land between the same two stores as in a model that runs it at once.
 *
 * With every page out and still held, it prints one line
 * "ZSWAP {json}": the debugfs files of /sys/kernel/debug/zswap (the
 * counters as this run's increase, the sizes as they are), /proc/vmstat's
 * zswpout, zswpwb, pswpout and swpout_zero increases, the pages, how many
 * needed a retry and how many never went out; it exits 0 only when every
 * page went out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define DEBUGFS "/sys/kernel/debug/zswap/"

static const char *counters[] = {
	"pool_limit_hit", "reject_reclaim_fail", "reject_alloc_fail", "reject_kmemcache_fail",
	"reject_compress_fail", "reject_compress_poor", "decompress_fail", "written_back_pages",
};
#define NCOUNTERS (sizeof(counters) / sizeof(counters[0]))
static const char *sizes[] = { "pool_total_size", "stored_pages", "stored_incompressible_pages" };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
static const char *events[] = { "zswpout", "zswpwb", "pswpout", "swpout_zero" };
#define NEVENTS (sizeof(events) / sizeof(events[0]))

/* A debugfs file's number; -1 where it cannot be read. */
static long long debugfs(const char *name)
{
	char path[256], buf[64];
	snprintf(path, sizeof(path), DEBUGFS "%s", name);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return atoll(buf);
}

/* /proc/vmstat's `name`; -1 where the kernel has no such line. */
static long long vmstat(const char *name)
{
	FILE *f = fopen("/proc/vmstat", "r");
	char key[128];
	long long v, found = -1;
	if (!f)
		return -1;
	while (fscanf(f, "%127s %lld", key, &v) == 2)
		if (!strcmp(key, name))
			found = v;
	fclose(f);
	return found;
}

/* Whether the page at `addr` is a swap entry now (pagemap bit 62). */
static int swapped(int pagemap, void *addr)
{
	uint64_t e;
	off_t at = (off_t)((uintptr_t)addr / PAGE) * 8;
	if (pread(pagemap, &e, 8, at) != 8)
		return 0;
	return (e >> 62) & 1;
}

static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&t, NULL);
}

/*
 * Waits for the shrink worker a refused store queued: until
 * written_back_pages moves (at most 2 s), then until it has not moved for
 * 100 ms (at most 10 s more).
 */
static void settle(long long written_before)
{
	long long last = written_before;
	for (int i = 0; i < 400 && last == written_before; i++) {
		sleep_ms(5);
		last = debugfs("written_back_pages");
	}
	int still = 0;
	for (int i = 0; i < 2000 && still < 20; i++) {
		sleep_ms(5);
		long long now = debugfs("written_back_pages");
		still = now == last ? still + 1 : 0;
		last = now;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: zswap_pages FILE [settle]\n");
		return 2;
	}
	int settling = argc > 2 && !strcmp(argv[2], "settle");
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof(one), &one)) {
		perror("sched_setaffinity");
		return 1;
	}
	int fd = open(argv[1], O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		perror(argv[1]);
		return 1;
	}
	size_t pages = ((size_t)st.st_size + PAGE - 1) / PAGE;
	unsigned char *file = malloc(pages * PAGE);
	memset(file, 0, pages * PAGE);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, file + got, st.st_size - got);
		if (n <= 0) {
			perror("read");
			return 1;
		}
		got += n;
	}
	close(fd);
	unsigned char *mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED || madvise(mem, pages * PAGE, MADV_NOHUGEPAGE)) {
		perror("mmap");
		return 1;
	}
	int pagemap = open("/proc/self/pagemap", O_RDONLY);
	if (pagemap < 0) {
		perror("pagemap");
		return 1;
	}

	long long c0[NCOUNTERS], e0[NEVENTS];
	for (size_t i = 0; i < NCOUNTERS; i++)
		c0[i] = debugfs(counters[i]);
	for (size_t i = 0; i < NEVENTS; i++)
		e0[i] = vmstat(events[i]);

	size_t retried = 0, missing = 0;
	for (size_t p = 0; p < pages; p++) {
		unsigned char *at = mem + p * PAGE;
		long long before = settling ? debugfs("stored_pages") : 0;
		long long written = settling ? debugfs("written_back_pages") : 0;
		memcpy(at, file + p * PAGE, PAGE);
		int out = 0;
		for (int attempt = 0; attempt < 20 && !out; attempt++) {
			if (attempt) {
				retried++;
				sleep_ms(1);
			}
			if (madvise(at, PAGE, MADV_PAGEOUT) && errno != EAGAIN) {
				perror("MADV_PAGEOUT");
				return 1;
			}
			out = swapped(pagemap, at);
		}
		missing += !out;
		if (settling) {
			int zero = 1;
			for (int i = 0; i < PAGE && zero; i++)
				zero = file[p * PAGE + i] == 0;
			if (!zero && debugfs("stored_pages") <= before)
				settle(written);
		}
	}

	printf("ZSWAP {\"pages\": %zu, \"retried\": %zu, \"missing\": %zu", pages, retried, missing);
	for (size_t i = 0; i < NCOUNTERS; i++)
		printf(", \"%s\": %lld", counters[i], debugfs(counters[i]) - c0[i]);
	for (size_t i = 0; i < NSIZES; i++)
		printf(", \"%s\": %lld", sizes[i], debugfs(sizes[i]));
	for (size_t i = 0; i < NEVENTS; i++) {
		long long v = vmstat(events[i]);
		printf(", \"%s\": %lld", events[i], v < 0 ? -1 : v - e0[i]);
	}
	printf("}\n");
	fflush(stdout);
	return missing ? 1 : 0;
}
