/*
 * zsmalloc.h - C API of zmem's zsmalloc, a user-space re-implementation of
 * the Linux kernel's zsmalloc allocator.
 *
 * Link with -lzsmalloc (pkg-config --cflags --libs zsmalloc).
 *
 * The functions have the kernel's names and shapes, adapted to user space:
 * there are no gfp or nid arguments, and the kernel's void functions that can
 * fail on bad input also come as *_checked variants that return 0 or a
 * negative errno. Every function accepts a NULL pool and any handle value
 * (0, error values, stale, freed or forged handles) and returns the
 * documented error instead of crashing. All functions are thread-safe.
 *
 * Handles are unsigned long values; 64-bit targets only. zs_malloc encodes
 * failure as the kernel does, as an "error pointer" value (unsigned long)-errno
 * in the top 4095 values of the type; a real handle is never 0 and never in
 * that range. Test with zs_handle_is_err() and read the errno with
 * zs_handle_err().
 *
 * Errno values are Linux's: EINVAL 22, ENOMEM 12, ENOSPC 28, EBUSY 16,
 * EUCLEAN 117.
 */
#ifndef ZSMALLOC_H
#define ZSMALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A pool of objects. Opaque; made by zs_create_pool(_ex). */
struct zs_pool;

/* Errno values a handle can carry: 1..ZS_MAX_ERRNO (the kernel's MAX_ERRNO). */
#define ZS_MAX_ERRNO 4095UL

/* Non-zero if h is an error value rather than a handle (IS_ERR_VALUE). */
static inline int zs_handle_is_err(unsigned long h)
{
	return h >= (unsigned long)-ZS_MAX_ERRNO;
}

/* The negative errno an error value carries, or 0 for a handle (PTR_ERR). */
static inline int zs_handle_err(unsigned long h)
{
	return zs_handle_is_err(h) ? (int)(long)h : 0;
}

/* Pool modes (struct zs_pool_config.mode). */
enum zs_mode {
	/* The kernel's layout and policy: same page counts as the kernel. */
	ZS_MODE_KERNEL_COMPAT = 0,
	/* zmem's denser layout: no in-object header, partial zspages. */
	ZS_MODE_DEFAULT = 1
};

/* How many pages a zspage of a class gets (struct zs_pool_config.chain_rule). */
enum zs_chain_rule {
	ZS_CHAIN_MIN_WASTE = 0,    /* the kernel's since 6.3 */
	ZS_CHAIN_USED_PERCENT = 1, /* the kernel's before 6.3 */
	ZS_CHAIN_BALANCED = 2      /* fewer pages once waste is small */
};

/* Fullness groups (struct zs_pool_config.fullness). */
enum zs_fullness {
	/* 12 groups by the share of objects in use (kernel 6.4+) */
	ZS_FULLNESS_INUSE_RATIO = 0,
	/* 4 groups split at 3/4 of the objects in use: empty, almost empty,
	   almost full, full (kernels before 6.4) */
	ZS_FULLNESS_THREE_QUARTERS = 1
};

/* Compaction algorithms (struct zs_pool_config.compaction). */
enum zs_compaction {
	/* the kernel's before 6.4: each source zspage is drained into one
	   destination after another */
	ZS_COMPACT_DRAIN_SOURCE = 0,
	/* the kernel's since 6.4: one destination kept across sources */
	ZS_COMPACT_KEEP_DESTINATION = 1,
	/* zmem's: fewest object moves */
	ZS_COMPACT_OPTIMAL = 2
};

/* Former names, kept so that older sources still build. */
/* Deprecated alias of ZS_FULLNESS_THREE_QUARTERS. */
#define ZS_FULLNESS_LEGACY ZS_FULLNESS_THREE_QUARTERS
/* Deprecated alias of ZS_COMPACT_DRAIN_SOURCE. */
#define ZS_COMPACT_LEGACY ZS_COMPACT_DRAIN_SOURCE
/* Deprecated alias of ZS_COMPACT_KEEP_DESTINATION. */
#define ZS_COMPACT_SEED001 ZS_COMPACT_KEEP_DESTINATION

/*
 * Everything zs_create_pool_ex builds a pool from. Fill it with
 * zs_pool_config_init() and change what you need. 48 bytes, no padding.
 */
struct zs_pool_config {
	uint32_t page_size;  /* 4096, 8192, 16384, 32768 or 65536 */
	uint32_t chain;      /* most pages per zspage, 1..16 (kernel: 8) */
	uint32_t delta;      /* class step in bytes, multiple of 8; 0 = kernel's */
	uint32_t chain_rule; /* enum zs_chain_rule */
	uint32_t merge;      /* non-zero: merge classes of equal geometry */
	uint32_t mode;       /* enum zs_mode */
	uint32_t fullness;   /* enum zs_fullness */
	uint32_t compaction; /* enum zs_compaction */
	uint64_t page_limit; /* most pages held at once; 0 = no limit */
	uint64_t auto_compact_pages; /* compact a class at this many freeable
					pages after a free; 0 = never */
};

/* Pool counters: the kernel's pages_compacted first, then zmem's. */
struct zs_pool_stats {
	unsigned long pages_compacted; /* pages freed by compaction, ever */
	unsigned long objs_moved;      /* objects moved by compaction, ever */
	unsigned long total_pages;     /* pages held now */
	unsigned long objs_used;       /* live objects */
	unsigned long objs_allocated;  /* object slots in live zspages */
	unsigned long zspages;         /* live zspages */
};

/*
 * A kernel-compatible pool: 4 KiB pages, chain 8, the kernel's classes and
 * layout, keep-destination compaction. name may be NULL. Returns NULL on failure.
 */
struct zs_pool *zs_create_pool(const char *name);

/*
 * A pool made from *cfg. Returns NULL if cfg is NULL or any field is out of
 * range (page size, chain, delta, unknown enum code).
 */
struct zs_pool *zs_create_pool_ex(const char *name,
				  const struct zs_pool_config *cfg);

/*
 * Fills *cfg with the defaults of mode: ZS_MODE_KERNEL_COMPAT gives
 * zs_create_pool's pool, ZS_MODE_DEFAULT zmem's default (4 KiB pages,
 * chain 16, optimal compaction). Returns 0, or -EINVAL for a NULL cfg or an
 * unknown mode.
 */
int zs_pool_config_init(struct zs_pool_config *cfg, uint32_t mode);

/*
 * Frees the pool and all its objects. NULL is a no-op. Addresses from
 * zs_obj_read_begin on this pool become invalid.
 */
void zs_destroy_pool(struct zs_pool *pool);

/* The pool's name ("" for NULL or unnamed), valid until it is destroyed. */
const char *zs_pool_name(struct zs_pool *pool);

/*
 * Allocates an object of size bytes (1..page size); its contents are
 * unspecified until written. Returns the handle, or an error value:
 * -EINVAL for size 0 or a NULL pool, -ENOSPC for size > page size, -ENOMEM
 * when out of memory or over the page limit.
 */
unsigned long zs_malloc(struct zs_pool *pool, size_t size);

/* Frees an object. Ignores 0, error values and every other bad handle. */
void zs_free(struct zs_pool *pool, unsigned long handle);

/*
 * Frees an object. Returns 0; -EINVAL for a NULL pool, 0, an error value, or
 * a handle that is freed, stale or not this pool's; -EBUSY, freeing nothing,
 * while a zs_obj_read_begin of it has not ended.
 */
int zs_free_checked(struct zs_pool *pool, unsigned long handle);

/* Copies mem_len bytes from src to the start of the object; ignores errors. */
void zs_obj_write(struct zs_pool *pool, unsigned long handle, const void *src,
		  size_t mem_len);

/*
 * Copies mem_len bytes from src to the start of the object. Returns 0;
 * -EINVAL for a NULL pool, a bad handle, NULL src with mem_len > 0, or
 * mem_len larger than the object; -EBUSY, writing nothing, while a
 * zs_obj_read_begin of it has not ended.
 */
int zs_obj_write_checked(struct zs_pool *pool, unsigned long handle,
			 const void *src, size_t mem_len);

/*
 * Returns the address of the object's first mem_len bytes, for reading only,
 * and holds the object (it is not written, freed or moved) until
 * zs_obj_read_end. A zspage of a pool whose zspages are virtually
 * contiguous runs of pages (ZS_MODE_KERNEL_COMPAT, and ZS_MODE_DEFAULT on
 * 4 KiB pages) returns every object in place, even one that crosses a page
 * boundary. A ZS_MODE_DEFAULT pool on pages above 4 KiB builds its zspages
 * from 4 KiB frames of shared pages: an object within one frame is returned
 * in place, one that crosses frames is copied into a buffer the pool keeps
 * until zs_obj_read_end. Either way local_copy is never used and may be
 * NULL. Begin and end may run on different threads, and
 * reads of different objects nest freely; one object can have at most 63
 * reads outstanding. Returns NULL for a NULL pool, a bad handle, mem_len
 * larger than the object, or a 64th outstanding read.
 */
void *zs_obj_read_begin(struct zs_pool *pool, unsigned long handle,
			size_t mem_len, void *local_copy);

/*
 * Ends a read: handle_mem is what zs_obj_read_begin returned for handle.
 * Ignores a call with no matching outstanding read. mem_len is not used.
 */
void zs_obj_read_end(struct zs_pool *pool, unsigned long handle,
		     size_t mem_len, void *handle_mem);

/* As zs_obj_read_end; returns 0, or -EINVAL if no such read is outstanding. */
int zs_obj_read_end_checked(struct zs_pool *pool, unsigned long handle,
			    size_t mem_len, void *handle_mem);

/* Pages the pool holds (0 for NULL). */
unsigned long zs_get_total_pages(struct zs_pool *pool);

/*
 * Objects of this many bytes or more take a whole page each; zram stores a
 * page raw when it compresses to at least this (0 for NULL).
 */
size_t zs_huge_class_size(struct zs_pool *pool);

/*
 * Compacts every class. Returns the pages freed (0 for NULL or if another
 * compaction is running). Objects being read stay where they are.
 */
unsigned long zs_compact(struct zs_pool *pool);

/* Pages compaction could free now (the kernel's shrinker count; 0 for NULL). */
unsigned long zs_can_compact(struct zs_pool *pool);

/* Fills *stats (all zero for a NULL pool; a NULL stats is ignored). */
void zs_pool_stats(struct zs_pool *pool, struct zs_pool_stats *stats);

/*
 * Writes the per-class table (the layout of the kernel's debugfs "classes"
 * file, plus a total line) with snprintf semantics: at most len - 1 bytes
 * and a NUL, nothing if buf is NULL or len is 0. Returns the whole table's
 * length, so a return >= len means it was cut.
 */
size_t zs_format_classes(struct zs_pool *pool, char *buf, size_t len);

/*
 * Walks the whole pool, re-deriving every count. Returns 0; -EINVAL for
 * NULL; -EBUSY while any zs_obj_read_begin has not ended; -EUCLEAN if the
 * bookkeeping is inconsistent. Call it while no other thread uses the pool.
 */
int zs_check_invariants(struct zs_pool *pool);

#ifdef __cplusplus
}
#endif

#endif /* ZSMALLOC_H */
