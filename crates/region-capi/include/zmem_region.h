/*
 * zmem_region.h - C API of zmem's region: compressed memory for one process.
 *
 * Link with -lzmem_region (pkg-config --cflags --libs zmem_region).
 *
 * A region is an anonymous private mapping the program reads and writes as
 * ordinary memory through zmem_region_ptr(). At most a resident limit of it
 * stays mapped; the library's evictor thread compresses the pages beyond
 * the limit into a zram store (zsmalloc, one store page per region page)
 * and drops their mapping, and its handler thread brings a page back when
 * the program touches it again (a userfaultfd fault). Byte ranges given to
 * the hints are offsets from the start of the region.
 *
 * The userfaultfd is opened through /dev/userfaultfd, else the userfaultfd
 * system call (CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1), else the
 * system call with UFFD_USER_MODE_ONLY (Linux 5.11). In that last mode the
 * kernel's own accesses are not served: a system call that reads or writes
 * a page of the region that is not mapped (write(fd, buf, n) from it,
 * read(fd, buf, n) into it) fails with EFAULT. zmem_region_user_mode_only()
 * says which; zmem_region_touch() maps a range before such a call.
 *
 * Rules:
 * - Only zmem_region_free() unmaps the region. The program's
 *   madvise(MADV_DONTNEED) of a range is followed (it reads as zeros
 *   after), so are its munmap() of part of it and its mremap() of it.
 * - A forked child gets its own copy of the region, rebuilt with its own
 *   threads (pthread_atfork).
 * - Every function accepts a NULL region and returns its documented error;
 *   all but zmem_region_free() may be called from any thread at once.
 * - Failures return NULL or -1 and set errno. As in the C library, a call
 *   that succeeds may change errno too: test the return value first.
 *
 * errno values (Linux numbers):
 *   EINVAL (22)  a bad argument: a NULL region; a length of 0, or of 2^62
 *                or more once rounded up to whole pages; a resident limit
 *                below one page or above the length (rounded up to whole
 *                pages); an unknown compressor name; a byte range that
 *                overflows or ends past the region. Never the operating
 *                system's.
 *   ENOSYS (38)  this kernel has no userfaultfd, or not what a region needs
 *                (write-protect faults and the remap, remove and unmap
 *                events on anonymous memory: Linux 5.7 or later); the
 *                operating system's ENOENT and EINVAL while setting up are
 *                reported as ENOSYS.
 *   EPERM, EACCES, EMFILE, ENFILE, EAGAIN, ENOMEM, ...
 *                the operating system's, from opening the userfaultfd (the
 *                first refusal of the ways tried that says why: EPERM for
 *                a system call refused by policy or seccomp, EACCES for
 *                /dev/userfaultfd's permissions), mapping the region or
 *                starting its threads.
 *   ENOMEM (12)  also: the store or its tables could not be made.
 *   ENOTSUP (95) a mode this machine cannot serve (zmem_region_new_flags()).
 *   EIO (5)      a panic inside the library (a bug), caught at the
 *                boundary: the call did not complete.
 *
 * 64-bit Linux only. The memory a region takes besides its pages: about 22
 * bytes a page of bookkeeping, the compressed pages, and one locked
 * "probation" slot per 16 pages of the limit (16 to 4096 slots).
 */
#ifndef ZMEM_REGION_H
#define ZMEM_REGION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A region of compressed memory. Opaque; made by zmem_region_new(). */
struct zmem_region;

/*
 * Maps len bytes (rounded up to whole pages) of compressed memory, of which
 * at most resident_limit bytes (rounded down to whole pages) stay mapped,
 * and starts its two threads. comp names the compressor as the kernel's
 * zram does: "lz4", "lz4hc", "zstd", "lzo-rle", "lzo", "deflate", or zmem's
 * "lz4-flex"; NULL is lz4. The pages start as zeros.
 *
 * Returns the region, or NULL with errno set: EINVAL for len 0 or too large
 * (2^62 or more once rounded), resident_limit below a page or above len, or
 * an unknown comp; ENOSYS, EPERM, EACCES, ... when no userfaultfd can be
 * opened; ENOMEM when the mapping or the store cannot be made (see the top
 * of this file).
 */
struct zmem_region *zmem_region_new(size_t len, size_t resident_limit,
				    const char *comp);

/*
 * Serve each fault in the thread that took it, in a SIGBUS handler, instead
 * of on the region's handler thread: no thread switch per fault (a store
 * fault about twice as fast). The kernel's own accesses are then not
 * served, as in user-mode-only mode (zmem_region_user_mode_only() says 1;
 * touch a buffer before a system call); the process's SIGBUS handler is the
 * region library's from the first such region on (a SIGBUS that is not a
 * fault at a region's address goes to the handler that was there before,
 * or the default action; a handler the program installs later turns the
 * service off); threads that touch the region must not block SIGBUS.
 * x86-64 only.
 */
#define ZMEM_REGION_FAULTING_THREAD 0x1u

/*
 * zmem_region_new() with flags: ZMEM_REGION_FAULTING_THREAD, or 0. EINVAL
 * for any other bit; ENOTSUP (95) for ZMEM_REGION_FAULTING_THREAD off
 * x86-64 or with pages over 16 KiB; besides zmem_region_new()'s errors.
 */
struct zmem_region *zmem_region_new_flags(size_t len, size_t resident_limit,
					  const char *comp, unsigned int flags);

/*
 * The region's first byte: len bytes of memory to read and write. (After the
 * program moves the region with mremap(), wherever it put it.)
 * NULL, errno EINVAL, for a NULL region.
 */
void *zmem_region_ptr(const struct zmem_region *r);

/*
 * The region's length in bytes: the len it was made with, rounded up to
 * whole pages. 0, errno EINVAL, for a NULL region.
 */
size_t zmem_region_len(const struct zmem_region *r);

/*
 * Compresses the resident pages of the bytes [off, off + len) (partial pages
 * included) now, as if they were cold. Returns how many pages, or -1 with
 * errno EINVAL for a NULL region or a range that overflows or ends past the
 * region.
 *
 * The hints (cold, hot, willneed) are hints: they skip a page whose mapping
 * is changing at that moment (the region's own threads just dropped pages
 * and the handler has not yet read the kernel's event for them; also while
 * the program's madvise, munmap or mremap is under way), so the count can
 * be lower than the pages in the range, even 0, right after heavy use.
 * Calling again a millisecond later does the rest.
 */
long zmem_region_cold(const struct zmem_region *r, size_t off, size_t len);

/*
 * As zmem_region_willneed(), and marks the range's pages referenced now, so
 * eviction passes them over once and their age starts again. Returns how
 * many pages it brought back, or -1 with errno EINVAL as
 * zmem_region_cold().
 */
long zmem_region_hot(const struct zmem_region *r, size_t off, size_t len);

/*
 * Brings the compressed pages of [off, off + len) back ahead of use, as far
 * as the resident limit allows (madvise's MADV_WILLNEED). Returns how many
 * pages, or -1 with errno EINVAL as zmem_region_cold().
 */
long zmem_region_willneed(const struct zmem_region *r, size_t off,
			  size_t len);

/*
 * Maps [off, off + len) from user mode (reads one byte of each page), so a
 * system call given a buffer in that range finds its pages mapped: what a
 * user-mode-only region needs first (see zmem_region_user_mode_only()). The
 * pages may be evicted again later, like any others: touch right before the
 * call. Returns 0, or -1 with errno EINVAL as zmem_region_cold().
 */
int zmem_region_touch(const struct zmem_region *r, size_t off, size_t len);

/*
 * 1 if the region serves faults from user mode only (its userfaultfd was
 * opened so, or ZMEM_REGION_FAULTING_THREAD): then a
 * system call that reads or writes a page of the region that is not mapped
 * fails with EFAULT, so call zmem_region_touch() on its buffer first.
 * 0 if the kernel's own accesses are served too (any buffer works).
 * -1, errno EINVAL, for a NULL region.
 */
int zmem_region_user_mode_only(const struct zmem_region *r);

/*
 * The region's statistics now, as one line of JSON: length, page size,
 * "uffd_mode", "resident_pages" and "resident_limit_pages", stored and
 * probation pages, faults and evictions by kind, the fault latency
 * histogram, the promotion rate, and the store's "mm_stat" (the kernel
 * zram's fields by name). A NUL-terminated string from malloc(): release it
 * with free(). NULL with errno EINVAL for a NULL region, ENOMEM if malloc()
 * fails.
 */
char *zmem_region_stats_json(const struct zmem_region *r);

/*
 * Stops the region's threads, unmaps its memory and frees its store. NULL
 * is a no-op. No other thread may be using the region, and neither r nor
 * any pointer into the region's memory may be used afterwards.
 */
void zmem_region_free(struct zmem_region *r);

#ifdef __cplusplus
}
#endif

#endif /* ZMEM_REGION_H */
