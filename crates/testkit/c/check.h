/*
 * check.h - the checks of the C libraries' test programs
 * (crates/capi/tests/c, crates/region-capi/tests/c), shared.
 *
 * CHECK(cond) counts a passed check or prints the failed one with its file
 * and line; check_summary() prints the "c_api: N passed, N failed" line
 * testkit::clib reads and returns the exit code: 0 if every check passed,
 * else 1 (or `ok` where the caller has another code for success).
 * Header-only, for one program each: the counters are static.
 */
#ifndef ZMEM_TESTKIT_CHECK_H
#define ZMEM_TESTKIT_CHECK_H

#include <stdio.h>

static unsigned long passed, failed;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (cond) {                                                  \
			passed++;                                            \
		} else {                                                     \
			failed++;                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                            \
		}                                                            \
	} while (0)

/* Prints the summary line; returns `ok` if no check failed, else 1. */
static inline int check_summary(int ok)
{
	printf("c_api: %lu passed, %lu failed\n", passed, failed);
	return failed == 0 ? ok : 1;
}

#endif
