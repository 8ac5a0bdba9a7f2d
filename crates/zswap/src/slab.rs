//! SLUB's arithmetic for the kmem caches zswap's metadata lives in: an
//! object's slot size, a slab's order and how many objects it holds, as
//! Linux 7.3's `mm/slub.c` computes them (`calculate_sizes`,
//! `calculate_order`, `calc_slab_order`) without debugging on, and the bytes
//! a number of objects needs when their slabs are packed full.
//!
//! Owns that arithmetic and the three caches zswap uses (`zswap_entry`,
//! `zs_handle`, `radix_tree_node`); pure: it touches no memory and no other
//! module.

use serde::Serialize;

/// The page size of the model (x86-64's 4 KiB).
pub const PAGE_SIZE: usize = 4096;

/// `slub_max_order`: `PAGE_ALLOC_COSTLY_ORDER`.
const SLUB_MAX_ORDER: u32 = 3;

/// `MAX_OBJS_PER_PAGE` (a slab's object count is 15 bits).
const MAX_OBJS_PER_PAGE: u32 = 32767;

/// The pointer size of a 64-bit kernel.
const POINTER: u32 = 8;

/// `sizeof(struct zswap_entry)` on x86-64: `swpentry` (8), `length` (4),
/// `referenced` (1, padded to 8), `pool`, `handle`, `objcg` (8 each), `lru`
/// (a `list_head`, 16).
pub const ZSWAP_ENTRY_SIZE: u32 = 56;

/// `ZS_HANDLE_SIZE`: zsmalloc's handle, one `unsigned long` from its own
/// `zs_handle` cache per object.
pub const ZS_HANDLE_SIZE: u32 = 8;

/// `sizeof(struct xa_node)` (`radix_tree_node`): four bytes of counts
/// (padded to 8), `parent`, `array`, a `list_head`, 64 slots and three
/// 64-bit mark words.
pub const XA_NODE_SIZE: u32 = 576;

/// One kmem cache's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SlabCache {
    /// The cache's name, as `/proc/slabinfo` shows it.
    pub name: &'static str,
    /// `object_size`: the bytes asked for.
    pub object_size: u32,
    /// `size`: the slot each object takes in a slab.
    pub size: u32,
    /// The slab's page order.
    pub order: u32,
    /// Objects per slab.
    pub objects: u32,
}

/// `fls`: the position of the highest bit set, 1-based (0 for 0).
fn fls(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// `get_order`: the smallest order whose pages hold `size` bytes.
fn get_order(size: u64) -> u32 {
    let pages = (size.max(1) - 1) >> PAGE_SIZE.trailing_zeros();
    64 - pages.leading_zeros()
}

fn order_objects(order: u32, size: u32) -> u32 {
    ((PAGE_SIZE as u64) << order).div_euclid(u64::from(size)) as u32
}

/// `calc_slab_order`: the first order from `min_order` whose leftover is at
/// most `1/fraction` of the slab (`max_order + 1` if none).
fn calc_slab_order(size: u32, min_order: u32, max_order: u32, fraction: u32) -> u32 {
    let mut order = min_order;
    while order <= max_order {
        let slab = (PAGE_SIZE as u32) << order;
        if slab % size <= slab / fraction {
            break;
        }
        order += 1;
    }
    order
}

/// `calculate_order` for a slot of `size` bytes on a machine of `nr_cpus`
/// present CPUs (`slub_min_objects` and `slub_min_order` unset).
pub fn calculate_order(size: u32, nr_cpus: u32) -> u32 {
    let min_objects = 4 * (fls(nr_cpus.max(1)) + 1);
    let max_objects = order_objects(SLUB_MAX_ORDER, size).max(1);
    let min_objects = min_objects.min(max_objects);
    let min_order = get_order(u64::from(min_objects) * u64::from(size));
    if order_objects(min_order, size) > MAX_OBJS_PER_PAGE {
        return get_order(u64::from(size) * u64::from(MAX_OBJS_PER_PAGE)) - 1;
    }
    let mut fraction = 16;
    while fraction > 1 {
        let order = calc_slab_order(size, min_order, SLUB_MAX_ORDER, fraction);
        if order <= SLUB_MAX_ORDER {
            return order;
        }
        fraction /= 2;
    }
    get_order(u64::from(size))
}

impl SlabCache {
    /// A cache made with `kmem_cache_create(name, object_size, align, 0,
    /// ctor)`: the slot is the object rounded to a pointer and to the
    /// alignment, plus a free pointer of its own after the object when the
    /// cache has a constructor (SLUB keeps it inside a free object
    /// otherwise).
    pub fn new(
        name: &'static str,
        object_size: u32,
        align: u32,
        has_ctor: bool,
        nr_cpus: u32,
    ) -> SlabCache {
        let align = align.max(POINTER).next_multiple_of(POINTER);
        let mut size = object_size.next_multiple_of(POINTER);
        if has_ctor {
            size += POINTER;
        }
        let size = size.next_multiple_of(align);
        let order = calculate_order(size, nr_cpus);
        SlabCache {
            name,
            object_size,
            size,
            order,
            objects: order_objects(order, size),
        }
    }

    /// `zswap_entry`: `KMEM_CACHE(zswap_entry, 0)`, no constructor.
    pub fn zswap_entry(nr_cpus: u32) -> SlabCache {
        SlabCache::new("zswap_entry", ZSWAP_ENTRY_SIZE, 8, false, nr_cpus)
    }

    /// `zs_handle`: one per zsmalloc object.
    pub fn zs_handle(nr_cpus: u32) -> SlabCache {
        SlabCache::new("zs_handle", ZS_HANDLE_SIZE, 0, false, nr_cpus)
    }

    /// `radix_tree_node`: the xarray's nodes (it has a constructor).
    pub fn radix_tree_node(nr_cpus: u32) -> SlabCache {
        SlabCache::new("radix_tree_node", XA_NODE_SIZE, 0, true, nr_cpus)
    }

    /// Bytes of one slab.
    pub fn slab_bytes(&self) -> u64 {
        (PAGE_SIZE as u64) << self.order
    }

    /// Bytes of the slabs `objects` objects need, packed full (what a cache
    /// filled by these objects alone holds; partly used slabs only add).
    pub fn bytes_for(&self, objects: u64) -> u64 {
        objects.div_ceil(u64::from(self.objects)) * self.slab_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_and_counts_are_slubs() {
        // radix_tree_node: 576 bytes and the constructor's free pointer; 2
        // CPUs ask 12 objects a slab (order 1, 14 fit, 16 bytes left), 8
        // CPUs 20 (order 2, 28 fit), the 584 and 28 /proc/slabinfo shows.
        let node = SlabCache::radix_tree_node(2);
        assert_eq!((node.size, node.order, node.objects), (584, 1, 14));
        let node = SlabCache::radix_tree_node(8);
        assert_eq!((node.size, node.order, node.objects), (584, 2, 28));
        // zswap_entry: 56 bytes, the free pointer inside, 73 per page.
        let entry = SlabCache::zswap_entry(2);
        assert_eq!((entry.size, entry.order, entry.objects), (56, 0, 73));
        let handle = SlabCache::zs_handle(64);
        assert_eq!((handle.size, handle.order, handle.objects), (8, 0, 512));
    }

    #[test]
    fn bytes_round_up_to_whole_slabs() {
        let entry = SlabCache::zswap_entry(2);
        assert_eq!(entry.bytes_for(0), 0);
        assert_eq!(entry.bytes_for(1), 4096);
        assert_eq!(entry.bytes_for(73), 4096);
        assert_eq!(entry.bytes_for(74), 8192);
    }

    #[test]
    fn get_order_is_the_kernels() {
        assert_eq!(get_order(1), 0);
        assert_eq!(get_order(4096), 0);
        assert_eq!(get_order(4097), 1);
        assert_eq!(get_order(8192), 1);
        assert_eq!(get_order(16385), 3);
    }
}
