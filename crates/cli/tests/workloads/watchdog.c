/*
 * A deadline for a guest that may hang: the swap tests run it in the
 * background of each round inside a qemu guest.
 *
 *     watchdog SECONDS
 *
 * It locks itself in memory (mlockall: nothing it needs can be swapped
 * out to a device that no longer answers), sleeps SECONDS, then asks the
 * kernel for its dumps through /proc/sysrq-trigger (which the sysrq mask
 * does not restrict), with every log level on the console ('8'): the
 * blocked tasks ('w'), memory ('m') and every task's state and stack
 * ('t'), with a line before them, and powers the
 * guest off ('o'), so that a wedged guest ends with its task dump in the
 * console instead of at the harness's deadline with nothing. A round that
 * finishes kills it first.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static void trigger(int fd, char c)
{
	if (write(fd, &c, 1) != 1)
		perror("watchdog: /proc/sysrq-trigger");
}

int main(int argc, char **argv)
{
	if (argc != 2 || atoi(argv[1]) <= 0) {
		fprintf(stderr, "usage: watchdog SECONDS\n");
		return 2;
	}
	int fd = open("/proc/sysrq-trigger", O_WRONLY);
	if (fd < 0) {
		perror("watchdog: /proc/sysrq-trigger");
		return 1;
	}
	if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
		perror("watchdog: mlockall");
	sleep((unsigned)atoi(argv[1]));
	static const char line[] = "WATCHDOG: the round is past its deadline; task dump follows\n";
	if (write(2, line, sizeof line - 1) < 0)
		perror("watchdog");
	/* The dumps are KERN_INFO: every level to the console first. */
	trigger(fd, '8');
	trigger(fd, 'w');
	trigger(fd, 'm');
	trigger(fd, 't');
	sleep(10);
	trigger(fd, 'o');
	return 0;
}
