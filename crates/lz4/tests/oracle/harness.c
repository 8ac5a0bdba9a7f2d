/* The oracle of zmem-lz4's kernel test: runs the Linux kernel's own
 * lib/lz4 compressors (built with it from a kernel source outside zmem's
 * tree, never committed) on requests read from standard input.
 * Written for zmem. SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * A request: u8 kind, i32 level, u32 dictionary length and its bytes,
 * u32 block count, then per block u32 capacity, u32 length and its bytes
 * (all little-endian). Kinds: 0 LZ4_compress_fast, 1 zram's lz4 with a
 * dictionary (LZ4_loadDict into a zeroed stream, a copy of it, one
 * LZ4_compress_fast_continue), 2 LZ4_compress_HC, 3 zram's lz4hc with a
 * dictionary (LZ4_resetStreamHC, LZ4_loadDictHC, LZ4_compress_HC_continue),
 * 4 a fast stream (LZ4_loadDict, then LZ4_compress_fast_continue per
 * block), 5 an HC stream (LZ4_resetStreamHC, LZ4_loadDictHC when the
 * dictionary is not empty, then LZ4_compress_HC_continue per block); each
 * block is in a buffer of its own, kept until the request ends. The answer
 * per block: i32 result (the kernel's return value; for kinds 1 and 3 -1
 * when the dictionary load returned less than its length) and the bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/lz4.h>

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	if (!p) {
		fprintf(stderr, "harness: out of memory\n");
		exit(1);
	}
	return p;
}

static int get(void *p, size_t n)
{
	return fread(p, 1, n, stdin) == n;
}

static unsigned get32(void)
{
	unsigned char b[4];
	if (!get(b, 4)) {
		fprintf(stderr, "harness: truncated request\n");
		exit(1);
	}
	return b[0] | b[1] << 8 | b[2] << 16 | (unsigned)b[3] << 24;
}

static void put(int ret, const char *dst)
{
	unsigned char b[4] = { ret, ret >> 8, ret >> 16, (unsigned)ret >> 24 };
	fwrite(b, 1, 4, stdout);
	if (ret > 0)
		fwrite(dst, 1, ret, stdout);
}

int main(void)
{
	static LZ4_stream_t fast, loaded;
	static LZ4_streamHC_t hc;
	unsigned char kind;

	while (get(&kind, 1)) {
		int level = (int)get32();
		unsigned dlen = get32();
		/* Zeros after the dictionary: what zmem-lz4 reads there. */
		char *dict = xmalloc(dlen + 16);
		unsigned nblocks, i;
		char **blocks;
		int dict_ok = 1;

		if (!get(dict, dlen))
			return 1;
		nblocks = get32();
		blocks = xmalloc(nblocks * sizeof(*blocks));
		if (kind == 1 || kind == 4) {
			memset(&fast, 0, sizeof(fast));
			dict_ok = LZ4_loadDict(&fast, dict, dlen) == (int)dlen;
			memcpy(&loaded, &fast, sizeof(fast));
		}
		if (kind == 5) {
			LZ4_resetStreamHC(&hc, level);
			if (dlen)
				LZ4_loadDictHC(&hc, dict, dlen);
		}
		for (i = 0; i < nblocks; i++) {
			unsigned cap = get32(), len = get32();
			char *dst = xmalloc(cap);
			int ret = 0;

			blocks[i] = xmalloc(len);
			if (!get(blocks[i], len))
				return 1;
			switch (kind) {
			case 0:
				memset(&fast, 0x5a, sizeof(fast));
				ret = LZ4_compress_fast(blocks[i], dst, len, cap, level, &fast);
				break;
			case 1:
				if (!dict_ok) {
					ret = -1;
					break;
				}
				memcpy(&fast, &loaded, sizeof(fast));
				ret = LZ4_compress_fast_continue(&fast, blocks[i], dst, len, cap, level);
				break;
			case 2:
				ret = LZ4_compress_HC(blocks[i], dst, len, cap, level, &hc);
				break;
			case 3:
				LZ4_resetStreamHC(&hc, level);
				if (LZ4_loadDictHC(&hc, dict, dlen) != (int)dlen) {
					ret = -1;
					break;
				}
				ret = LZ4_compress_HC_continue(&hc, blocks[i], dst, len, cap);
				break;
			case 4:
				ret = LZ4_compress_fast_continue(&fast, blocks[i], dst, len, cap, level);
				break;
			case 5:
				ret = LZ4_compress_HC_continue(&hc, blocks[i], dst, len, cap);
				break;
			default:
				fprintf(stderr, "harness: unknown kind %d\n", kind);
				return 1;
			}
			put(ret, dst);
			free(dst);
		}
		for (i = 0; i < nblocks; i++)
			free(blocks[i]);
		free(blocks);
		free(dict);
	}
	return fflush(stdout) != 0;
}
