/* The oracle of kernel-compat's deflate test: the Linux kernel's own
 * lib/zlib_deflate (built with it from a kernel source outside zmem's tree,
 * never committed), set up as zram's deflate backend sets it up
 * (drivers/block/zram/backend_deflate.c: zlib_deflateInit2 with the level,
 * raw deflate at the window given, MAX_MEM_LEVEL, Z_DEFAULT_STRATEGY; per
 * page zlib_deflateReset and one zlib_deflate(Z_FINISH)), on requests read
 * from standard input. Written for zmem.
 * SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * A request: i32 level, i32 window bits (9..15), u32 block count, then per
 * block u32 capacity, u32 length and its bytes (all little-endian). The
 * answer per block: i32 (the compressed length, or -1 where zlib_deflate
 * did not reach Z_STREAM_END in the capacity) and the bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <linux/zutil.h>

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	if (!p) {
		fprintf(stderr, "deflate oracle: out of memory\n");
		exit(1);
	}
	return p;
}

static int get32(unsigned *v)
{
	unsigned char b[4];
	if (fread(b, 1, 4, stdin) != 4)
		return 0;
	*v = b[0] | b[1] << 8 | b[2] << 16 | (unsigned)b[3] << 24;
	return 1;
}

static void put32(int v)
{
	unsigned char b[4] = { v, v >> 8, v >> 16, (unsigned)v >> 24 };
	fwrite(b, 1, 4, stdout);
}

int main(void)
{
	unsigned level, bits, count;
	while (get32(&level)) {
		if (!get32(&bits) || !get32(&count)) {
			fprintf(stderr, "deflate oracle: truncated request\n");
			return 1;
		}
		int wb = -(int)bits;
		struct z_stream_s s = { 0 };
		s.workspace = xmalloc(zlib_deflate_workspacesize(wb, MAX_MEM_LEVEL));
		if (zlib_deflateInit2(&s, (int)level, Z_DEFLATED, wb, MAX_MEM_LEVEL,
				      Z_DEFAULT_STRATEGY) != Z_OK) {
			fprintf(stderr, "deflate oracle: level %d window %d refused\n",
				(int)level, (int)bits);
			return 1;
		}
		for (unsigned i = 0; i < count; i++) {
			unsigned cap, len;
			if (!get32(&cap) || !get32(&len)) {
				fprintf(stderr, "deflate oracle: truncated block\n");
				return 1;
			}
			unsigned char *src = xmalloc(len), *dst = xmalloc(cap);
			if (fread(src, 1, len, stdin) != len) {
				fprintf(stderr, "deflate oracle: truncated block\n");
				return 1;
			}
			zlib_deflateReset(&s);
			s.next_in = src;
			s.avail_in = len;
			s.next_out = dst;
			s.avail_out = cap;
			if (zlib_deflate(&s, Z_FINISH) == Z_STREAM_END) {
				put32((int)s.total_out);
				fwrite(dst, 1, s.total_out, stdout);
			} else {
				put32(-1);
			}
			free(src);
			free(dst);
		}
		zlib_deflateEnd(&s);
		free(s.workspace);
	}
	return 0;
}
