/*
 * A program that makes a child process by every path that copies its
 * memory, and checks that each child reads its own copy of a buffer well
 * past `zmem run`'s limit: the workload of `zmem run`'s test of the paths
 * glibc's fork() handlers do not see.
 *
 *     fork_paths MIB
 *
 * It mallocs MIB MiB in one call (in the region under `zmem run`) and
 * fills each 4 KiB page with a pattern of its own (its number and a
 * generation, 0 in the parent). Then it makes a child by each path in
 * turn: fork() (the control: glibc runs its handlers), _Fork(), glibc's
 * clone() without CLONE_VM (on a malloc'd stack), and the raw system
 * calls clone, clone3 (no stack) and fork (where the architecture has
 * it). Each child checks every page, overwrites every eighth page with a
 * generation of its own (faulting in the child), checks every page again
 * and exits 0 only if all were right; it ends itself after 60 s (a page
 * it could never read must fail, not hang). After each child the parent
 * checks every page of its own. It prints one line per path and a last
 * line, the same wherever it runs, and exits 1 if anything was wrong.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pages.h"

/* clone3's arguments (linux/sched.h's struct clone_args, version 0). */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static unsigned char *buf;
static size_t pages;

/* The pattern of page `n` in generation `gen`. */
static uint64_t word(size_t n, uint64_t gen, int i)
{
	if (i % 8 == 0) {
		state = n * 131 + gen;
		return next();
	}
	return (uint64_t)n << 20 | gen << 12 | (uint64_t)i;
}

static void fill(size_t n, uint64_t gen)
{
	uint64_t *w = (uint64_t *)(buf + n * PAGE);
	for (int i = 0; i < PAGE / 8; i++)
		w[i] = word(n, gen, i);
}

static int right(size_t n, uint64_t gen)
{
	const uint64_t *w = (const uint64_t *)(buf + n * PAGE);
	for (int i = 0; i < PAGE / 8; i++)
		if (w[i] != word(n, gen, i))
			return 0;
	return 1;
}

/* Pages not as they should be: generation `gen` on every eighth page
 * when `written`, 0 on the rest. */
static size_t wrong(uint64_t gen, int written)
{
	size_t bad = 0;
	for (size_t n = 0; n < pages; n++)
		bad += !right(n, written && n % 8 == 0 ? gen : 0);
	return bad;
}

/* What each child does; its exit status. */
static int child(int k)
{
	alarm(60);
	uint64_t gen = (uint64_t)k + 1;
	size_t before = wrong(gen, 0);
	for (size_t n = 0; n < pages; n += 8)
		fill(n, gen);
	size_t after = wrong(gen, 1);
	if (before || after) {
		char line[96];
		int len = snprintf(line, sizeof(line), "child %d: %zu pages wrong, %zu after its writes\n",
				   k, before, after);
		if (write(2, line, len) < 0)
			return 2;
		return 1;
	}
	return 0;
}

static int clone_fn(void *arg)
{
	return child(*(int *)arg);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fork_paths MIB\n");
		return 2;
	}
	size_t bytes = (size_t)atoi(argv[1]) << 20;
	pages = bytes / PAGE;
	buf = malloc(bytes);
	size_t stack_len = 256 << 10;
	unsigned char *stack = malloc(stack_len);
	if (!buf || !stack) {
		fprintf(stderr, "fork_paths: out of memory\n");
		return 2;
	}
	for (size_t n = 0; n < pages; n++)
		fill(n, 0);

	static const char *paths[] = {
		"fork()", "_Fork()", "clone()", "syscall(SYS_clone)", "syscall(SYS_clone3)",
		"syscall(SYS_fork)",
	};
	int bad = 0;
	for (int k = 0; k < 6; k++) {
		pid_t pid = -1;
		switch (k) {
		case 0:
			pid = fork();
			break;
		case 1:
			pid = _Fork();
			break;
		case 2:
			pid = clone(clone_fn, stack + stack_len, SIGCHLD, &k);
			break;
		case 3:
			pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
			break;
		case 4: {
			struct clone3_args a = { .exit_signal = SIGCHLD };
			pid = syscall(SYS_clone3, &a, sizeof(a));
			break;
		}
		case 5:
#ifdef SYS_fork
			pid = syscall(SYS_fork);
#else
			printf("%-20s not on this architecture\n", paths[k]);
			continue;
#endif
			break;
		}
		if (pid == 0)
			_exit(child(k));
		if (pid < 0) {
			printf("%-20s failed\n", paths[k]);
			bad = 1;
			continue;
		}
		int st = 0;
		if (waitpid(pid, &st, 0) != pid) {
			printf("%-20s wait failed\n", paths[k]);
			bad = 1;
			continue;
		}
		int child_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
		size_t parent_wrong = wrong(0, 0);
		if (WIFEXITED(st))
			printf("%-20s child exit %d, parent %zu pages wrong\n", paths[k],
			       WEXITSTATUS(st), parent_wrong);
		else
			printf("%-20s child signal %d, parent %zu pages wrong\n", paths[k],
			       WIFSIGNALED(st) ? WTERMSIG(st) : 0, parent_wrong);
		fflush(stdout);
		bad |= !child_ok || parent_wrong;
	}
	printf("%zu pages, %s\n", pages, bad ? "something wrong" : "all right");
	free(stack);
	free(buf);
	return bad;
}
