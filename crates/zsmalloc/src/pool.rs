//! The pool: the object API, what each mode does, and the lock order.
//!
//! # Lock order
//!
//! ```text
//!   object hold (handle entry: shared or exclusive)
//!     -> class lock (ClassInner mutex)
//!       -> frame arena mutex (framed pools only)
//!         -> page source mutex (leaf)
//! ```
//!
//! - A **handle entry** ([`EntryCell`](crate::handle)) is the lock of its
//!   object. Readers hold it shared for as long as they look at the bytes;
//!   `write` and `free` hold it exclusive. While any hold is taken the entry's
//!   location (zspage, slot) cannot change, so a reader needs no other lock:
//!   that is the protocol that keeps a handle's target in place while it is
//!   read, and why reads of different objects never serialise.
//! - The **class lock** protects the class's zspage bookkeeping: fullness
//!   lists, free slots, in-use counts, the handle free list, and every change
//!   of an entry's location. `free` takes it after its exclusive hold.
//!   Compaction takes it first and then only *tries* object holds, skipping
//!   objects somebody holds, so it never waits on a reader and never
//!   deadlocks against `free`.
//! - The **frame arena** mutex (`frames.rs`, framed pools only: default
//!   mode on system pages above 4 KiB) is taken inside the class lock to
//!   take or give back a zspage's frames, and by compaction's emptying of a
//!   sparse system page inside the lock of the frame's class; it never takes
//!   a class lock. It takes the page source mutex inside it to get or
//!   return a system page.
//! - A framed pool's kept reads (copies of objects across frames whose
//!   holds outlive the read, [`ObjectRef::into_raw`]) are kept in a sharded
//!   map whose mutexes are leaves, taken with no other lock.
//! - The **page source** mutex is taken inside the class lock (or the frame
//!   arena mutex) to get or return runs (and, in default mode, to give up or reclaim the pages
//!   above a zspage's highest object), and nothing is taken inside it.
//!   Freed zspages and given-up pages go back to the OS in batches (see the
//!   `pages` crate): after compaction, when the pool empties, or when the
//!   page source's small cache passes its bound.
//!
//! # Modes
//!
//! - [`Mode::KernelCompat`]: the kernel's layout and policy: 8-byte handle
//!   header in every non-huge object, none in huge objects, the in-object LIFO
//!   free list, allocation from the fullest non-full group, whole zspages
//!   counted from creation. The same operations give the same page count as
//!   the kernel.
//! - [`Mode::Default`]: no in-object header (the handle table and a per-zspage
//!   owner array do its work), slots filled lowest first, and a zspage counts
//!   only the pages up to its highest live object; pages above it go back to
//!   the OS as objects are freed (with the page source's next batch). See
//!   "Default-mode geometry: measured before chosen" in BENCHMARKS.md for the
//!   measurements behind the default geometry, and docs/design.md for the
//!   lock order of the whole stack. Every class owns whole pages, so what
//!   default mode keeps over the objects' bytes is mostly each occupied
//!   class's partly filled last page: with units above 8 KiB the class
//!   step widens to `unit / 512` to have fewer classes. On system pages
//!   above 4 KiB the pool is *framed* (`frames.rs`): its classes are laid
//!   out on 4 KiB frames with the system page as the unit, zspages take
//!   frames of shared system pages, and the pool counts system pages; an
//!   object across two frames is copied out to be read (docs/design.md,
//!   "Default mode's density on large pages and units").

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use pages::{PageSource, PagesError};
use zpool::ErrorKind;

use crate::class::{Class, ClassFull, ListInsertion};
use crate::config::{CompactionAlgo, Mode, PoolConfig, DEFAULT_RETAIN_DIVISOR};
use crate::frames::{FrameArena, FRAME_SIZE};
use crate::geometry::{ClassDelta, Geometry, GeometryConfig, GeometryError, ZS_HANDLE_SIZE};
use crate::handle::{EntryCell, Handle, Refusal, MAX_CLASSES};
use crate::zspage::SlotMemory;

/// Why a pool call failed. Every failure leaves the pool and every other
/// object as they were.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The geometry is invalid.
    Geometry(GeometryError),
    /// The page source cannot be made for this page size.
    Pages(PagesError),
    /// `malloc(0)`.
    ZeroSize,
    /// `malloc` of more than the unit (a page unless the pool has a larger unit).
    TooLarge {
        /// Requested bytes.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// No memory: the OS refused, or the page limit is reached.
    OutOfMemory(PagesError),
    /// The class's handle or zspage table is full.
    TableFull,
    /// A handle this pool never issued.
    InvalidHandle,
    /// A handle of an object that was freed.
    FreedHandle,
    /// A handle whose slot now holds another object (freed, then reused).
    StaleHandle,
    /// A read or write longer than the object.
    TooLong {
        /// Bytes asked for.
        len: usize,
        /// Bytes the object holds.
        capacity: usize,
    },
}

impl PoolError {
    /// The kind of this failure (the C API and the block device decide on
    /// it).
    pub fn kind(&self) -> ErrorKind {
        match self {
            PoolError::ZeroSize
            | PoolError::Geometry(_)
            | PoolError::Pages(_)
            | PoolError::TooLong { .. } => ErrorKind::InvalidArgument,
            PoolError::InvalidHandle | PoolError::FreedHandle | PoolError::StaleHandle => {
                ErrorKind::InvalidHandle
            }
            PoolError::TooLarge { .. } => ErrorKind::TooLarge,
            PoolError::OutOfMemory(_) | PoolError::TableFull => ErrorKind::NoMemory,
        }
    }

    /// The kernel's errno for this failure (positive): its kind's.
    pub fn errno(&self) -> i32 {
        self.kind().errno()
    }
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Geometry(e) => write!(f, "invalid geometry: {e}"),
            PoolError::Pages(e) => write!(f, "cannot create the page source: {e}"),
            PoolError::ZeroSize => f.write_str("cannot allocate 0 bytes"),
            PoolError::TooLarge { len, max } => {
                write!(
                    f,
                    "{len} bytes is more than the largest object, {max} bytes"
                )
            }
            PoolError::OutOfMemory(e) => write!(f, "out of memory: {e}"),
            PoolError::TableFull => f.write_str("the class's handle or zspage table is full"),
            PoolError::InvalidHandle => f.write_str("not a handle of this pool"),
            PoolError::FreedHandle => f.write_str("the handle's object was freed"),
            PoolError::StaleHandle => f.write_str("stale handle: its slot holds another object"),
            PoolError::TooLong { len, capacity } => {
                write!(f, "{len} bytes do not fit in an object of {capacity} bytes")
            }
        }
    }
}

impl std::error::Error for PoolError {}

impl From<Refusal> for PoolError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Freed => PoolError::FreedHandle,
            Refusal::Stale => PoolError::StaleHandle,
        }
    }
}

impl From<ClassFull> for PoolError {
    fn from(e: ClassFull) -> Self {
        match e {
            ClassFull::Table => PoolError::TableFull,
            ClassFull::Pages(p) => PoolError::OutOfMemory(p),
        }
    }
}

/// A zsmalloc pool.
pub struct Pool {
    config: PoolConfig,
    geometry: Geometry,
    pub(crate) classes: Box<[Class]>,
    /// Physical class of each logical class.
    logical: Box<[u16]>,
    pub(crate) pages: PageSource,
    /// Pages counted over all classes. On lines of its own: writers raise
    /// it at every new zspage, and every call reads the fields beside it.
    pub(crate) total_pages: OwnLines<AtomicI64>,
    /// Tag in every handle, to catch handles of another pool.
    tag: u8,
    /// Set while a compaction runs (one at a time).
    pub(crate) compacting: AtomicBool,
    /// Framed pools: the system pages their frames come from.
    pub(crate) frames: Option<Arc<FrameArena>>,
    /// Framed pools: copies of objects across frames whose reads were kept
    /// with [`ObjectRef::into_raw`], until [`Pool::release_read`].
    kept: KeptCopies,
}

/// A value alone on its cache lines (two: the adjacent-line prefetcher
/// moves lines in pairs), so that writing it does not take the lines of
/// the fields beside it away from other threads.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct OwnLines<T>(pub(crate) T);

impl<T> std::ops::Deref for OwnLines<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The geometry a pool lays its classes out in: the configured one, or for
/// a framed pool (default mode on pages above 4 KiB) the same classes on
/// 4 KiB frames with the system page (or the larger unit) as the unit.
fn layout(config: &PoolConfig) -> GeometryConfig {
    let g = config.geometry;
    if !is_framed(config) {
        return g;
    }
    GeometryConfig {
        page_size: FRAME_SIZE,
        delta: ClassDelta::Fixed(g.delta.bytes(g.page_size)),
        unit: g.unit_bytes(),
        ..g
    }
}

/// True if a pool of this configuration is framed.
fn is_framed(config: &PoolConfig) -> bool {
    config.mode == Mode::Default && config.geometry.page_size > FRAME_SIZE
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("config", &self.config)
            .field("total_pages", &self.total_pages())
            .finish_non_exhaustive()
    }
}

/// A fresh pool tag, never all ones: a handle's top bits are its tag, so every
/// raw handle stays below [`Handle::RAW_LIMIT`], clear of the top 4095 values
/// that C callers read as error codes (the kernel's `IS_ERR_VALUE` range).
fn pool_tag() -> u8 {
    use std::sync::atomic::AtomicU8;
    static NEXT: AtomicU8 = AtomicU8::new(0x2b);
    loop {
        let tag = NEXT.fetch_add(37, Ordering::Relaxed) & 0x7f;
        if tag != 0x7f {
            return tag;
        }
    }
}

impl Pool {
    /// Creates an empty pool.
    pub fn new(config: PoolConfig) -> Result<Pool, PoolError> {
        config.geometry.validate().map_err(PoolError::Geometry)?;
        let geometry = Geometry::new(layout(&config)).map_err(PoolError::Geometry)?;
        if geometry.classes().len() > MAX_CLASSES {
            return Err(PoolError::Geometry(GeometryError::Delta(geometry.delta())));
        }
        let page_size = config.geometry.page_size;
        let pages =
            PageSource::new(page_size as usize, config.page_limit).map_err(PoolError::Pages)?;
        if config.mode == Mode::Default {
            pages.set_retain_divisor(DEFAULT_RETAIN_DIVISOR);
        }
        // The drain-source algorithm runs with the kernel of its time, whose list
        // insertion kept fuller zspages first.
        let insertion = match config.compaction {
            CompactionAlgo::DrainSource => ListInsertion::FullerFirst,
            CompactionAlgo::KeepDestination | CompactionAlgo::Optimal => ListInsertion::Head,
        };
        let frames = is_framed(&config).then(|| Arc::new(FrameArena::new(page_size)));
        let classes = geometry
            .classes()
            .iter()
            .enumerate()
            .map(|(id, info)| {
                let header = match config.mode {
                    Mode::KernelCompat if !info.huge => ZS_HANDLE_SIZE,
                    Mode::KernelCompat | Mode::Default => 0,
                };
                Class::new(
                    id as u32,
                    *info,
                    geometry.page_size(),
                    header,
                    config.mode,
                    config.fullness,
                    insertion,
                    frames.clone(),
                )
            })
            .collect();
        let logical = geometry.logical().iter().map(|l| l.class as u16).collect();
        Ok(Pool {
            config,
            geometry,
            classes,
            logical,
            pages,
            total_pages: OwnLines(AtomicI64::new(0)),
            tag: pool_tag(),
            compacting: AtomicBool::new(false),
            frames,
            kept: KeptCopies::default(),
        })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The size-class table: the configured geometry, or for a framed pool
    /// (default mode on pages above 4 KiB) its classes on 4 KiB frames.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.config.geometry.page_size as usize
    }

    /// Gives the page source's cache of freed zspages back to the OS now
    /// (see [`pages`]'s module documentation). The pool does this itself at
    /// the end of [`Pool::compact`] and when it becomes empty. Returns the
    /// pages released.
    pub fn flush_page_cache(&self) -> usize {
        self.pages.flush()
    }

    /// Keeps up to `1 / divisor` of the pages out, on top of the cache's
    /// bound, resident in the page source after they are freed or trimmed,
    /// for the next zspage or store to take without a page fault (0: none,
    /// kernel-compat's setting; default mode's is
    /// [`DEFAULT_RETAIN_DIVISOR`]). They are not counted in
    /// [`Pool::total_pages`]; the decay due by time (or
    /// [`Pool::decay_page_cache`]) releases those not reused for a whole
    /// epoch, and a manual [`Pool::compact`], an empty pool and
    /// [`Pool::flush_page_cache`] release them all. See [`pages`]'s
    /// `PageSource::set_retain_divisor`.
    pub fn set_page_retain_divisor(&self, divisor: usize) {
        self.pages.set_retain_divisor(divisor);
    }

    /// With a retained share, ends the page source's epoch: the pages not
    /// reused since the previous one go back to the OS (see
    /// [`Pool::set_page_retain_divisor`]; the page source does this by
    /// itself once an epoch has lasted its interval, at the next free, and
    /// the store's compactor thread when the store is idle). Without one,
    /// nothing. Returns the pages released.
    pub fn decay_page_cache(&self) -> usize {
        self.pages.decay()
    }

    /// The retained share's divisor (0: none; see
    /// [`Pool::set_page_retain_divisor`]).
    pub fn page_retain_divisor(&self) -> usize {
        self.pages.retain_divisor()
    }

    /// Bounds the page source's cache of freed zspages, in pages (0: every
    /// freed zspage goes back to the OS at once). The default is
    /// [`pages::DEFAULT_CACHE_BYTES`] worth of pages.
    pub fn set_page_cache_limit(&self, pages: usize) {
        self.pages.set_cache_limit(pages);
    }

    /// Bounds the page source's cache while compaction runs, in pages: the
    /// zspages compaction frees are kept until it ends, up to this many
    /// (default [`pages::DEFAULT_HOLD_BYTES`] worth), then given back in one
    /// batch.
    pub fn set_page_hold_limit(&self, pages: usize) {
        self.pages.set_hold_limit(pages);
    }

    /// The page source's counters: pages cached, system calls that gave
    /// pages back, cache hits.
    pub fn page_stats(&self) -> pages::SourceStats {
        self.pages.stats()
    }

    /// Pages the pool holds (the kernel's `zs_get_total_pages`): in a
    /// framed pool, the system pages holding a frame of any zspage.
    pub fn total_pages(&self) -> usize {
        self.total_pages.load(Ordering::Relaxed).max(0) as usize
    }

    /// True if the pool is framed: default mode on system pages above 4 KiB,
    /// its zspages made of 4 KiB frames of shared system pages.
    pub fn is_framed(&self) -> bool {
        self.frames.is_some()
    }

    pub(crate) fn add_pages(&self, delta: i64) {
        if delta != 0 {
            self.total_pages.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Objects of this many bytes or more are stored in a huge class (a unit,
    /// a page in the kernel's geometry, each); zram stores a block raw when
    /// it compresses to at least this.
    pub fn huge_class_size(&self) -> usize {
        let largest_non_huge = self.geometry.huge_class_size() + (ZS_HANDLE_SIZE - 1);
        let header = match self.config.mode {
            Mode::KernelCompat => ZS_HANDLE_SIZE,
            Mode::Default => 0,
        };
        (largest_non_huge - header + 1) as usize
    }

    /// The largest object in bytes: the compression unit the pool was made
    /// for (the page size unless [`GeometryConfig::unit`](crate::GeometryConfig::unit)
    /// is set). Objects above a page span pages of one zspage.
    pub fn unit(&self) -> usize {
        self.geometry.unit() as usize
    }

    /// The physical class serving `len` bytes.
    fn class_id_for(&self, len: usize) -> Result<usize, PoolError> {
        let ps = self.unit();
        if len == 0 {
            return Err(PoolError::ZeroSize);
        }
        if len > ps {
            return Err(PoolError::TooLarge { len, max: ps });
        }
        let header = match self.config.mode {
            Mode::KernelCompat => ZS_HANDLE_SIZE as usize,
            Mode::Default => 0,
        };
        // As zs_malloc: the header is added before the lookup, which caps at
        // the last class (a huge class stores no header).
        let stored = (len + header).min(ps) as u32;
        let idx = self
            .geometry
            .logical_index(stored)
            .expect("1..=unit has a class");
        Ok(self.logical[idx as usize] as usize)
    }

    /// Bytes a caller may store in an object allocated for `len` bytes (at least
    /// `len`: merged classes round up).
    pub fn capacity_for(&self, len: usize) -> Result<usize, PoolError> {
        Ok(self.classes[self.class_id_for(len)?].capacity() as usize)
    }

    /// Allocates an object of `len` bytes (1..=unit, the page size unless
    /// the pool was made for a larger compression unit). Its contents are
    /// unspecified until written.
    ///
    /// ```
    /// use zsmalloc::{Pool, PoolConfig};
    ///
    /// let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
    /// let h = pool.malloc(100).unwrap();
    /// // Its class may be a little larger (classes step by 16 bytes, and
    /// // merged ones round up): the object holds at least what was asked.
    /// assert!(pool.capacity_for(100).unwrap() >= 100);
    /// pool.write(h, &[7; 100]).unwrap();
    /// // Its zspage is counted whole (kernel-compat), however many pages.
    /// assert!(pool.total_pages() >= 1);
    /// // Larger than the unit (a page here): refused.
    /// assert!(pool.malloc(4097).is_err());
    /// pool.free(h).unwrap();
    /// assert_eq!(pool.total_pages(), 0);
    /// assert!(pool.free(h).is_err(), "a freed handle is refused");
    /// ```
    pub fn malloc(&self, len: usize) -> Result<Handle, PoolError> {
        let class_id = self.class_id_for(len)?;
        let class = &self.classes[class_id];
        let mut inner = class.lock();
        let (slot, generation) = class.take_handle_slot(&mut inner)?;
        let zid = match class.find_zspage(&inner) {
            Some(zid) => zid,
            None => match class.new_zspage(&mut inner, &self.pages) {
                Ok((zid, counted)) => {
                    self.add_pages(i64::from(counted));
                    zid
                }
                Err(e) => {
                    class.return_handle_slot(&mut inner, slot, generation);
                    return Err(e.into());
                }
            },
        };
        let (obj, delta) = match class.place(&mut inner, zid, slot, &self.pages) {
            Ok(placed) => placed,
            Err(e) => {
                // A framed zspage could not have the frame: a new, empty one goes.
                if inner.metas[zid as usize].inuse == 0 {
                    let delta = class.release_zspage(&mut inner, zid, &self.pages);
                    self.add_pages(delta);
                }
                class.return_handle_slot(&mut inner, slot, generation);
                return Err(e.into());
            }
        };
        self.add_pages(delta);
        class.handles.get(slot as usize).expect("taken slot").store(
            crate::handle::Entry::Allocated {
                generation,
                zspage: zid,
                obj,
            },
        );
        Ok(Handle::new(class_id, slot, generation, self.tag))
    }

    /// The class and handle-table cell a handle names.
    fn resolve(&self, handle: Handle) -> Result<(&Class, u32, &EntryCell), PoolError> {
        if handle.tag() != self.tag {
            return Err(PoolError::InvalidHandle);
        }
        let class = self
            .classes
            .get(handle.class())
            .ok_or(PoolError::InvalidHandle)?;
        let slot = handle.slot().ok_or(PoolError::InvalidHandle)?;
        let cell = class
            .handles
            .get(slot as usize)
            .ok_or(PoolError::InvalidHandle)?;
        Ok((class, slot, cell))
    }

    /// Frees an object. Waits while another thread reads or writes it.
    ///
    /// Freeing an object while this thread holds an [`ObjectRef`] of it waits
    /// forever, as taking a lock twice does: drop the guard first.
    pub fn free(&self, handle: Handle) -> Result<(), PoolError> {
        let (class, slot, cell) = self.resolve(handle)?;
        let loc = cell.lock_exclusive(handle.generation())?;
        let mut inner = class.lock();
        let freed = Class::freed_entry(&mut inner, slot, handle.generation());
        // From here readers see a free slot; the bytes are unreachable.
        cell.replace_exclusive(freed);
        let delta = class.unplace(&mut inner, loc.zspage, loc.obj, &self.pages);
        self.add_pages(delta);
        drop(inner);
        if delta < 0 && self.total_pages.load(Ordering::Relaxed) <= 0 {
            // The pool holds nothing: neither should the page cache.
            self.pages.flush();
        }
        self.auto_compact(handle.class());
        Ok(())
    }

    /// Bytes the object can hold.
    pub fn capacity(&self, handle: Handle) -> Result<usize, PoolError> {
        let (class, _, cell) = self.resolve(handle)?;
        match cell.load() {
            crate::handle::Entry::Allocated { generation, .. }
                if generation == handle.generation() =>
            {
                Ok(class.capacity() as usize)
            }
            crate::handle::Entry::Allocated { .. } => Err(PoolError::StaleHandle),
            crate::handle::Entry::Free { .. } => Err(PoolError::FreedHandle),
        }
    }

    /// Writes `data` at the start of the object (the kernel's `zs_obj_write`).
    pub fn write(&self, handle: Handle, data: &[u8]) -> Result<(), PoolError> {
        let (class, _, cell) = self.resolve(handle)?;
        let capacity = class.capacity() as usize;
        if data.len() > capacity {
            return Err(PoolError::TooLong {
                len: data.len(),
                capacity,
            });
        }
        let loc = cell.lock_exclusive(handle.generation())?;
        let mem = class.memory_unlocked(loc.zspage);
        // SAFETY: the object is live and held exclusive, so its bytes are ours
        // alone and its zspage stays mapped; `header + data.len()` is within
        // the slot (checked against the capacity above).
        unsafe { mem.write_bytes(loc.obj, class.header, data) };
        cell.unlock_exclusive();
        Ok(())
    }

    /// The first `len` bytes of the object (the kernel's
    /// `zs_obj_read_begin`; dropping the guard is `zs_obj_read_end`).
    ///
    /// A zspage of a pool that is not framed is one virtually contiguous
    /// run, so every object, even one that crosses a page boundary, is read
    /// in place without a copy: the kernel's bounce-buffer path is never
    /// needed. In a framed pool (default mode on system pages above 4 KiB,
    /// [`Pool::is_framed`]) an object within one 4 KiB frame is read in
    /// place, and one that crosses frames is copied out into a buffer the
    /// guard owns. While the guard lives the object cannot be written,
    /// freed or moved; other objects are unaffected.
    ///
    /// ```
    /// use zsmalloc::{Pool, PoolConfig};
    ///
    /// for page_size in [4096, 16384] {
    ///     let pool = Pool::new(PoolConfig::default_mode(page_size)).unwrap();
    ///     // Default mode on 16 KiB pages is framed: objects of 3000 bytes
    ///     // on 4 KiB frames, some crossing from one frame to the next.
    ///     assert_eq!(pool.is_framed(), page_size > 4096);
    ///     let data: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 3000]).collect();
    ///     let handles: Vec<_> = data
    ///         .iter()
    ///         .map(|d| {
    ///             let h = pool.malloc(d.len()).unwrap();
    ///             pool.write(h, d).unwrap();
    ///             h
    ///         })
    ///         .collect();
    ///     for (h, d) in handles.iter().zip(&data) {
    ///         let bytes = pool.read(*h, d.len()).unwrap();
    ///         assert_eq!(&*bytes, &d[..]);
    ///         // A prefix reads as well; reads of one object may overlap.
    ///         assert_eq!(&*pool.read(*h, 10).unwrap(), &d[..10]);
    ///     } // each guard dropped: the objects may be written, freed, moved
    ///     for h in handles {
    ///         pool.free(h).unwrap();
    ///     }
    /// }
    /// ```
    pub fn read(&self, handle: Handle, len: usize) -> Result<ObjectRef<'_>, PoolError> {
        let (class, _, cell) = self.resolve(handle)?;
        let capacity = class.capacity() as usize;
        if len > capacity {
            return Err(PoolError::TooLong { len, capacity });
        }
        let loc = cell.lock_shared(handle.generation())?;
        let (bytes, copy) = match class.memory_unlocked(loc.zspage) {
            // SAFETY: the object is live and held shared until the guard
            // drops, so its zspage stays mapped and nobody writes these bytes
            // (writers hold the object exclusive); `header + len` is within
            // the slot.
            SlotMemory::Run(mem) => (unsafe { mem.bytes(loc.obj, class.header, len) }, None),
            // SAFETY: as above; the object's frames stay taken while held.
            SlotMemory::Frames(mem) => match unsafe { mem.bytes(loc.obj, class.header, len) } {
                Some(bytes) => (bytes, None),
                None => {
                    let mut copy = vec![0u8; len].into_boxed_slice();
                    // SAFETY: as above.
                    unsafe { mem.copy_out(loc.obj, class.header, &mut copy) };
                    (&[][..], Some(copy))
                }
            },
        };
        let kept = self
            .frames
            .is_some()
            .then_some((&self.kept, handle.to_raw()));
        Ok(ObjectRef {
            cell,
            bytes,
            copy,
            kept,
        })
    }

    /// Copies the first `buf.len()` bytes of the object into `buf`.
    pub fn read_into(&self, handle: Handle, buf: &mut [u8]) -> Result<(), PoolError> {
        let obj = self.read(handle, buf.len())?;
        buf.copy_from_slice(&obj);
        Ok(())
    }
}

/// A held object's bytes (see [`Pool::read`]).
pub struct ObjectRef<'a> {
    cell: &'a EntryCell,
    bytes: &'a [u8],
    /// Framed pools: the object's bytes copied out of its frames, when they
    /// cross frames (`bytes` is then empty).
    copy: Option<Box<[u8]>>,
    /// Framed pools: where [`Self::into_raw`] keeps the copy, and the key.
    kept: Option<(&'a KeptCopies, u64)>,
}

/// Framed pools: copies read with [`ObjectRef::into_raw`], by raw handle:
/// how many kept holds the handle has and the copies made for them, all
/// dropped when its last kept hold is released (holds of one object may
/// read different lengths, and a release does not say which hold it ends).
/// Sharded by handle so that readers of different objects rarely meet.
#[derive(Default)]
struct KeptCopies {
    shards: [Mutex<KeptShard>; 16],
}

/// One shard of [`KeptCopies`]: by raw handle, the kept holds and copies.
type KeptShard = HashMap<u64, (u32, Vec<Box<[u8]>>)>;

impl KeptCopies {
    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, KeptShard> {
        let i = (key ^ key >> 17) as usize % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a kept hold of `key` and keeps its copy, if any.
    fn keep(&self, key: u64, copy: Option<Box<[u8]>>) {
        let mut shard = self.shard(key);
        let entry = shard.entry(key).or_default();
        entry.0 += 1;
        entry.1.extend(copy);
    }

    /// Ends a kept hold of `key`: the copies go with the last.
    fn release(&self, key: u64) {
        let mut shard = self.shard(key);
        if let Some(entry) = shard.get_mut(&key) {
            entry.0 -= 1;
            if entry.0 == 0 {
                shard.remove(&key);
            }
        }
    }
}

impl ObjectRef<'_> {
    /// Most shared holds (guards and kept holds) one object can have at once
    /// (63); a further [`Pool::read`] of it waits until one ends.
    pub const MAX_PER_OBJECT: u32 = crate::handle::MAX_READERS;

    /// Ends the guard but keeps its hold, for APIs whose begin and end are
    /// separate calls (the C API's `zs_obj_read_begin`/`zs_obj_read_end`).
    ///
    /// The object stays held shared, so it cannot be written, freed or moved,
    /// and the returned bytes stay valid, until [`Pool::release_read`] is
    /// called for its handle. A hold never released keeps the object pinned
    /// (and `free` of it waiting) for the pool's life.
    pub fn into_raw(mut self) -> NonNull<[u8]> {
        let bytes = NonNull::from(&*self);
        if let Some((kept, key)) = self.kept {
            // The copy's heap bytes do not move with the box.
            kept.keep(key, self.copy.take());
        }
        std::mem::forget(self);
        bytes
    }
}

impl Pool {
    /// Releases a hold kept by [`ObjectRef::into_raw`].
    ///
    /// # Safety
    ///
    /// A hold on `handle`'s object, kept by [`ObjectRef::into_raw`] on a guard
    /// that this pool's [`Pool::read`] of `handle` returned, must be
    /// outstanding; each kept hold is released exactly once. The bytes that
    /// `into_raw` returned must not be used after their hold is released.
    pub unsafe fn release_read(&self, handle: Handle) {
        match self.resolve(handle) {
            Ok((_, _, cell)) => {
                if self.frames.is_some() {
                    self.kept.release(handle.to_raw());
                }
                cell.unlock_shared()
            }
            Err(e) => debug_assert!(false, "release_read of a handle never held: {e}"),
        }
    }
}

impl Deref for ObjectRef<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.copy.as_deref().unwrap_or(self.bytes)
    }
}

impl Drop for ObjectRef<'_> {
    fn drop(&mut self) {
        self.cell.unlock_shared();
    }
}

impl fmt::Debug for ObjectRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectRef")
            .field("len", &self.bytes.len())
            .finish()
    }
}
