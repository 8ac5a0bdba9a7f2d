//! The exports a running server has, by name, and the life of each.
//!
//! This module owns the [`Registry`]: every export the NBD server lists, the
//! control socket acts on and the metrics endpoint reads, so all three agree
//! on names and on which store a name means. Exports come and go while the
//! server runs (`hot_add`, `hot_remove`, after `/sys/class/zram-control`),
//! and each lives as a zram disk does:
//!
//! ```text
//!   hot_add NAME ──> uninitialised ──disksize SIZE──> initialised
//!   (initstate 0,    (no store; comp_algorithm,      (a store and its
//!    disksize 0)      algorithm_params, mem_limit,    NBD device)
//!                     backing_dev, writeback_compressed,
//!                     writeback_batch_size, recomp_algorithm
//!                     are settings)        <──reset── (EBUSY while a client
//!                                                      is connected)
//!   hot_add NAME SIZE: straight to initialised.  hot_remove NAME: from
//!   either state (EBUSY while a client is connected to it).
//! ```
//!
//! An uninitialised export is in the NBD table as
//! [`nbd::Export::unavailable`]: not listed, and a client asking for it gets
//! `NBD_REP_ERR_UNKNOWN` ("the requested export is not available", the only
//! error reply the protocol has for it; libnbd shows it as "No such file or
//! directory") with a message saying it is not initialised. Stores are made by a [`StoreFactory`] the binary
//! gives (it owns the allocator and page flags); a registry without one
//! serves the stores it was made with and refuses `hot_add` and a new
//! `disksize` with `EOPNOTSUPP`. It does no I/O besides what a store does
//! when it is made.
//!
//! Locks, taken in this order: the registry's list (`RwLock`; written only
//! to add or remove an export), an export's life lock (`RwLock`: shared for
//! a control command's whole run, as the kernel holds its `init_lock` for
//! reading; exclusive to initialise, reset or remove), then the NBD server's
//! connection and export-table locks (inside `nbd`), then the ublk device
//! table ([`crate::ublk_exports`]), then the store's own. Neither I/O path
//! (NBD's, the ublk queue threads) takes any of these but the store's.
//!
//! With a ublk front end ([`Registry::attach_ublk`]), every initialised
//! export is also a `/dev/ublkbN`, made and removed with its store; a reset
//! or removal is refused with `EBUSY` while that device is held.

use std::fmt;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use nbd::{BudgetStats, Errno, Export, ExportError, Exports, Server, SessionStats};
use zram::{PolicyRunner, Store};

use recipe::FactoryError;
pub use recipe::{Settings, StoreFactory};

use crate::ctl_error::{disksize_bytes, CtlError};
use crate::device::export_device;
use crate::swap::SwapMode;
use crate::ublk_exports::UblkExports;

/// One initialised export: its store.
pub struct Served {
    /// The NBD export name.
    pub name: String,
    /// The store's configuration, for humans (`zsmalloc/default/lz4/4K`).
    pub label: String,
    /// The store.
    pub store: Arc<Store>,
    /// The thread running the store's timed policy (idle marking,
    /// recompression, writeback), if the server has one; it stops when the
    /// export is reset or removed.
    pub policy: Option<PolicyRunner>,
}

impl fmt::Debug for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("name", &self.name)
            .field("label", &self.label)
            .field("store", &self.store)
            .field("policy", &self.policy.is_some())
            .finish()
    }
}

/// Where an export is in its life.
enum Life {
    Uninitialised(Settings),
    Initialised(Arc<Served>),
}

/// One export.
struct Entry {
    name: String,
    /// Served read-only (`NBD_FLAG_READ_ONLY`), in every life.
    read_only: bool,
    /// Makes its store on `disksize`; `None` for a registry without one.
    factory: Option<Arc<dyn StoreFactory>>,
    life: RwLock<Life>,
}

impl Entry {
    fn life(&self) -> RwLockReadGuard<'_, Life> {
        self.life.read().unwrap_or_else(|e| e.into_inner())
    }

    fn life_mut(&self) -> RwLockWriteGuard<'_, Life> {
        self.life.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// An export as a control command sees it, with its life lock held shared
/// for as long as the view lives (a reset or removal waits for it).
pub enum ExportView<'a> {
    /// No store yet: the settings it will be made with.
    Uninitialised(&'a Settings),
    /// The store.
    Initialised(&'a Served),
}

/// The longest export name `hot_add` takes (a file name's limit).
pub(crate) const MAX_NAME: usize = 255;

/// The NBD description of an initialised export.
fn description(s: &Served) -> String {
    format!("zmem zram store {}, {} bytes", s.label, s.store.disk_size())
}

/// Why clients are refused by an uninitialised export.
fn not_initialised(name: &str) -> String {
    format!(
        "export {name:?} is not initialised (disksize 0): set its size with \
         `zmem ctl --export {name} disksize SIZE` first"
    )
}

/// The NBD export of an entry in `life`.
fn nbd_export(name: &str, read_only: bool, life: &Life) -> Export {
    let export = match life {
        Life::Uninitialised(_) => Export::unavailable(name, not_initialised(name)),
        Life::Initialised(s) => Export::new(name, Arc::new(export_device(s.store.clone())))
            .with_description(description(s)),
    };
    if read_only {
        export.read_only()
    } else {
        export
    }
}

/// Checks a name for `hot_add`: not empty (the empty name, NBD's default
/// export, is only given with `zmem serve --export :SIZE`), at most
/// [`MAX_NAME`] bytes, no `:` (`--export NAME:SIZE` splits on it), no
/// whitespace or control characters (the control protocol is
/// whitespace-separated lines) and no `/`, `?` or `#` (NBD URIs carry the
/// name as their path).
pub(crate) fn check_name(name: &str) -> Result<(), CtlError> {
    let bad = |why: &str| Err(CtlError::inval(format!("export name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty (the default export is named only at start)");
    }
    if name.len() > MAX_NAME {
        return bad(&format!("longer than {MAX_NAME} bytes"));
    }
    if let Some(c) = name.chars().find(|&c| {
        c == ':' || c == '/' || c == '?' || c == '#' || c.is_whitespace() || c.is_control()
    }) {
        return bad(&format!("contains {c:?}"));
    }
    Ok(())
}

/// The export list and the server that exports it.
#[derive(Default)]
pub struct Registry {
    entries: RwLock<Vec<Arc<Entry>>>,
    server: OnceLock<Weak<Server>>,
    factory: OnceLock<Arc<dyn StoreFactory>>,
    swap: OnceLock<SwapMode>,
    ublk: OnceLock<Arc<UblkExports>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("exports", &self.names())
            .finish()
    }
}

impl Registry {
    /// A registry of initialised `exports`, without a store factory (see
    /// [`Registry::set_factory`]). Names must be unique (the NBD export
    /// table checks it again in [`Registry::nbd_exports`]).
    pub fn new(exports: Vec<Served>) -> Registry {
        let reg = Registry::default();
        for s in exports {
            reg.push(s, None, false);
        }
        reg
    }

    /// Adds an initialised export at start (before [`Registry::attach`]);
    /// `factory` makes its store again after a reset (default: the
    /// registry's); `read_only` holds for the export's whole life.
    pub fn push(&self, served: Served, factory: Option<Arc<dyn StoreFactory>>, read_only: bool) {
        self.entries_mut().push(Arc::new(Entry {
            name: served.name.clone(),
            read_only,
            factory,
            life: RwLock::new(Life::Initialised(Arc::new(served))),
        }));
    }

    /// Adds an uninitialised export at start (before [`Registry::attach`])
    /// with `settings`; `factory` makes its store on `disksize` (default:
    /// the registry's); `read_only` holds for the export's whole life.
    pub fn push_uninitialised(
        &self,
        name: &str,
        settings: Settings,
        factory: Option<Arc<dyn StoreFactory>>,
        read_only: bool,
    ) {
        self.entries_mut().push(Arc::new(Entry {
            name: name.to_string(),
            read_only,
            factory,
            life: RwLock::new(Life::Uninitialised(settings)),
        }));
    }

    /// Whether the export called `name` is served read-only (the rule of
    /// [`Registry::get`]); `None` if there is no such export.
    pub fn is_read_only(&self, name: Option<&str>) -> Option<bool> {
        self.entry(name).map(|e| e.read_only)
    }

    /// Records that the server runs in swap mode (once; later calls are
    /// ignored).
    pub fn set_swap_mode(&self, mode: SwapMode) {
        let _ = self.swap.set(mode);
    }

    /// The server's swap mode, if it runs in it.
    pub fn swap_mode(&self) -> Option<&SwapMode> {
        self.swap.get()
    }

    /// Sets the factory that makes stores for `hot_add` and for exports
    /// given none (once; later calls are ignored).
    pub fn set_factory(&self, factory: Arc<dyn StoreFactory>) {
        let _ = self.factory.set(factory);
    }

    fn entries(&self) -> RwLockReadGuard<'_, Vec<Arc<Entry>>> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    fn entries_mut(&self) -> RwLockWriteGuard<'_, Vec<Arc<Entry>>> {
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }

    fn factory_of(&self, e: &Entry) -> Option<Arc<dyn StoreFactory>> {
        e.factory.clone().or_else(|| self.factory.get().cloned())
    }

    /// The entry called `name`; `None` (or `""` when no export has the
    /// empty name) means the first, as NBD clients asking for `""` get it.
    fn entry(&self, name: Option<&str>) -> Option<Arc<Entry>> {
        let entries = self.entries();
        match name {
            None => entries.first(),
            Some(n) => entries
                .iter()
                .find(|e| e.name == n)
                .or_else(|| n.is_empty().then(|| entries.first()).flatten()),
        }
        .cloned()
    }

    /// Every export's name, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries().iter().map(|e| e.name.clone()).collect()
    }

    /// Every initialised export, in order (a snapshot).
    pub fn served(&self) -> Vec<Arc<Served>> {
        self.entries()
            .iter()
            .filter_map(|e| match &*e.life() {
                Life::Initialised(s) => Some(s.clone()),
                Life::Uninitialised(_) => None,
            })
            .collect()
    }

    /// Number of exports, initialised or not.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// Whether an export called `name` exists (with the rule of
    /// [`Registry::get`]).
    pub fn contains(&self, name: Option<&str>) -> bool {
        self.entry(name).is_some()
    }

    /// The initialised export called `name`; `None` (or `""` when no export
    /// has the empty name) means the first, as NBD clients asking for `""`
    /// get it.
    pub fn get(&self, name: Option<&str>) -> Option<Arc<Served>> {
        match &*self.entry(name)?.life() {
            Life::Initialised(s) => Some(s.clone()),
            Life::Uninitialised(_) => None,
        }
    }

    /// Runs `f` on the export called `name` (the rule of
    /// [`Registry::get`]) with its life lock held shared; `ENOENT` if there
    /// is none.
    pub fn with_export<T>(
        &self,
        name: Option<&str>,
        f: impl FnOnce(&str, ExportView<'_>) -> Result<T, CtlError>,
    ) -> Result<T, CtlError> {
        let e = self
            .entry(name)
            .ok_or_else(|| no_export(name.unwrap_or("")))?;
        let life = e.life();
        match &*life {
            Life::Uninitialised(s) => f(&e.name, ExportView::Uninitialised(s)),
            Life::Initialised(s) => f(&e.name, ExportView::Initialised(s)),
        }
    }

    /// Changes the settings of the uninitialised export called `name` with
    /// `f` and returns true; returns false, changing nothing, if it is
    /// initialised (its store answers instead). `ENOENT` if there is none.
    pub fn update_settings(
        &self,
        name: Option<&str>,
        f: impl FnOnce(&mut Settings) -> Result<(), CtlError>,
    ) -> Result<bool, CtlError> {
        let e = self
            .entry(name)
            .ok_or_else(|| no_export(name.unwrap_or("")))?;
        let mut life = e.life_mut();
        match &mut *life {
            Life::Uninitialised(s) => f(s).map(|()| true),
            Life::Initialised(_) => Ok(false),
        }
    }

    /// Every export in order, with its store if it is initialised.
    pub fn listing(&self) -> Vec<(String, Option<Arc<Served>>)> {
        self.entries()
            .iter()
            .map(|e| {
                let served = match &*e.life() {
                    Life::Initialised(s) => Some(s.clone()),
                    Life::Uninitialised(_) => None,
                };
                (e.name.clone(), served)
            })
            .collect()
    }

    /// The NBD export table: each export as the NBD server shows it.
    pub fn nbd_exports(&self) -> Result<Exports, ExportError> {
        let mut table = Exports::new();
        for e in self.entries().iter() {
            table.add(nbd_export(&e.name, e.read_only, &e.life()))?;
        }
        Ok(table)
    }

    /// Tells the registry which server exports it (once; later calls are
    /// ignored), so it can count connections and change the server's
    /// export table without keeping the server alive.
    pub fn attach(&self, server: &Arc<Server>) {
        let _ = self.server.set(Arc::downgrade(server));
    }

    /// Serves every export as a ublk block device too (once; later calls
    /// are ignored): starts a device for each initialised export now, and
    /// for every export initialised later.
    pub fn attach_ublk(&self, front: Arc<UblkExports>) -> Result<(), CtlError> {
        if self.ublk.set(front.clone()).is_err() {
            return Ok(());
        }
        for e in self.entries().iter() {
            if let Life::Initialised(s) = &*e.life() {
                front.start(&e.name, &s.store, e.read_only)?;
            }
        }
        Ok(())
    }

    /// The ublk front end, if the server has one.
    pub fn ublk(&self) -> Option<&Arc<UblkExports>> {
        self.ublk.get()
    }

    /// Export `name`'s ublk block device, if it has one.
    pub fn ublk_device(&self, name: &str) -> Option<std::path::PathBuf> {
        self.ublk.get()?.device_path(name)
    }

    /// `EBUSY` while export `name` has clients: NBD connections, or its
    /// ublk device held (mounted, swapped on).
    fn check_idle(&self, name: &str) -> Result<(), CtlError> {
        let open = self.export_connections(name);
        if open > 0 {
            return Err(CtlError::new(
                Errno::EBUSY,
                format!("{open} NBD client(s) connected to {name:?}; disconnect them first"),
            ));
        }
        if let Some(why) = self.ublk.get().and_then(|u| u.busy(name)) {
            return Err(CtlError::new(
                Errno::EBUSY,
                format!("export {name:?}: {why}"),
            ));
        }
        Ok(())
    }

    fn server(&self) -> Option<Arc<Server>> {
        self.server.get().and_then(Weak::upgrade)
    }

    /// The NBD server's in-flight memory budget (`None` before
    /// [`Registry::attach`] and after the server is gone).
    pub fn nbd_budget(&self) -> Option<BudgetStats> {
        self.server().map(|s| s.budget_stats())
    }

    /// NBD sessions since the start, by reply form (`None` before
    /// [`Registry::attach`] and after the server is gone).
    pub fn nbd_sessions(&self) -> Option<SessionStats> {
        self.server().map(|s| s.session_stats())
    }

    /// NBD connections open now (0 before [`Registry::attach`] and after the
    /// server is gone).
    pub fn connections(&self) -> usize {
        self.server().map_or(0, |s| s.connections())
    }

    /// NBD clients connected to the export called `name` now.
    pub fn export_connections(&self, name: &str) -> usize {
        self.server().map_or(0, |s| s.export_connections(name))
    }

    /// Puts the NBD export for `name` in `life` in the server's table
    /// (`EBUSY` while clients are connected to the one it replaces).
    fn publish(&self, e: &Entry, life: &Life) -> Result<(), CtlError> {
        if let Some(server) = self.server() {
            server
                .replace_export(nbd_export(&e.name, e.read_only, life))
                .map_err(|e| nbd_refusal(&e))?;
        }
        if let Some(front) = self.ublk.get() {
            match life {
                Life::Initialised(s) => {
                    front.start(&e.name, &s.store, e.read_only)?;
                }
                Life::Uninitialised(_) => front.stop(&e.name)?,
            }
        }
        Ok(())
    }

    /// `hot_add NAME [SIZE]`: a new export, uninitialised or (with a size)
    /// initialised at once, read-only for its whole life if `read_only`.
    /// `EEXIST` for a name in use, `EINVAL` for a bad name or size,
    /// `EOPNOTSUPP` without a store factory.
    pub fn hot_add(&self, name: &str, size: Option<&str>, read_only: bool) -> Result<(), CtlError> {
        check_name(name)?;
        let factory = self.factory.get().cloned().ok_or_else(|| {
            CtlError::new(Errno::EOPNOTSUPP, "this server cannot make new stores")
        })?;
        let settings = factory.defaults();
        let life = match size {
            None => Life::Uninitialised(settings),
            Some(size) => {
                let bytes = disksize_bytes(size)?;
                Life::Initialised(Arc::new(make_store(name, &*factory, &settings, bytes)?))
            }
        };
        let mut entries = self.entries_mut();
        if entries.iter().any(|e| e.name == name) {
            return Err(CtlError::new(
                Errno::EEXIST,
                format!("an export named {name:?} already exists"),
            ));
        }
        if let Some(server) = self.server() {
            server
                .add_export(nbd_export(name, read_only, &life))
                .map_err(|e| nbd_refusal(&e))?;
        }
        if let (Some(front), Life::Initialised(s)) = (self.ublk.get(), &life) {
            if let Err(err) = front.start(name, &s.store, read_only) {
                if let Some(server) = self.server() {
                    let _ = server.remove_export(name);
                }
                return Err(err);
            }
        }
        entries.push(Arc::new(Entry {
            name: name.to_string(),
            read_only,
            factory: None,
            life: RwLock::new(life),
        }));
        log::info!(
            "ctl: hot_add {name:?}{}{}",
            size.map(|s| format!(" {s}")).unwrap_or_default(),
            if read_only { " read-only" } else { "" }
        );
        Ok(())
    }

    /// `hot_remove NAME`: removes an export and frees its store. `EBUSY`
    /// while an NBD client is connected to it, `ENOENT` for an unknown name
    /// (the kernel's `hot_remove` answers `ENODEV` for an unknown id).
    pub fn hot_remove(&self, name: &str) -> Result<(), CtlError> {
        let mut entries = self.entries_mut();
        let i = entries
            .iter()
            .position(|e| e.name == name)
            .ok_or_else(|| no_export(name))?;
        let entry = entries[i].clone();
        let life = entry.life_mut();
        if let Some(why) = self.ublk.get().and_then(|u| u.busy(name)) {
            return Err(CtlError::new(
                Errno::EBUSY,
                format!("export {name:?}: {why}"),
            ));
        }
        if let Some(server) = self.server() {
            server.remove_export(name).map_err(|e| nbd_refusal(&e))?;
        }
        if let Some(front) = self.ublk.get() {
            front.stop(name)?;
        }
        entries.remove(i);
        drop(entries);
        if let Life::Initialised(s) = &*life {
            s.store.reset();
        }
        log::info!("ctl: hot_remove {name:?}");
        Ok(())
    }

    /// `disksize` on the export called `name`: makes a store of `bytes`
    /// (a parsed, page-rounded size: `ctl_error::disksize_bytes`) from its
    /// settings. `EBUSY` if it is initialised, `ENOMEM` if the store cannot
    /// be made.
    pub fn initialise(&self, name: Option<&str>, bytes: u64) -> Result<(), CtlError> {
        let e = self
            .entry(name)
            .ok_or_else(|| no_export(name.unwrap_or("")))?;
        let mut life = e.life_mut();
        let Life::Uninitialised(settings) = &*life else {
            return Err(CtlError::new(
                Errno::EBUSY,
                format!("export {:?} is initialised; reset it first", e.name),
            ));
        };
        let factory = self.factory_of(&e).ok_or_else(|| {
            CtlError::new(Errno::EOPNOTSUPP, "this server cannot make new stores")
        })?;
        let new = Life::Initialised(Arc::new(make_store(&e.name, &*factory, settings, bytes)?));
        self.publish(&e, &new)?;
        *life = new;
        log::info!("ctl: {}: disksize {bytes}", e.name);
        Ok(())
    }

    /// `reset` of the export called `name`: frees its store and returns it
    /// to uninitialised with its factory's default settings (an export
    /// without a factory keeps its store, emptied, as before). `EBUSY`
    /// while an NBD client is connected to it.
    pub fn reset(&self, name: Option<&str>) -> Result<(), CtlError> {
        let e = self
            .entry(name)
            .ok_or_else(|| no_export(name.unwrap_or("")))?;
        let mut life = e.life_mut();
        let factory = self.factory_of(&e);
        self.check_idle(&e.name)?;
        match (&*life, factory) {
            (Life::Initialised(s), None) => s.store.reset(),
            (Life::Initialised(s), Some(f)) => {
                let new = Life::Uninitialised(f.defaults());
                self.publish(&e, &new)?;
                // Frees every page now, even if a command that is ending
                // still holds the store; the rest goes with the last
                // reference.
                s.store.reset();
                *life = new;
            }
            (Life::Uninitialised(_), f) => {
                // zram's reset of an uninitialised disk only clears its
                // limit; here every setting returns to the defaults.
                if let Some(f) = f {
                    *life = Life::Uninitialised(f.defaults());
                }
            }
        }
        log::info!("ctl: {}: reset", e.name);
        Ok(())
    }
}

fn no_export(name: &str) -> CtlError {
    CtlError::new(Errno::ENOENT, format!("no export named {name:?}"))
}

/// The control error for a refused change of the NBD export table.
fn nbd_refusal(e: &ExportError) -> CtlError {
    let errno = match e {
        ExportError::Busy { .. } => Errno::EBUSY,
        ExportError::Duplicate(_) => Errno::EEXIST,
        ExportError::NotFound(_) => Errno::ENOENT,
        ExportError::BadString(_) | ExportError::BadBlockSize(_) => Errno::EINVAL,
    };
    CtlError::new(errno, e.to_string())
}

/// The store of an export being initialised with `settings`, `bytes` big
/// (already checked and rounded by `ctl_error::disksize_bytes`), made by
/// the export's factory, and its policy started. A setting the store
/// refuses keeps the store's errno; any other refusal is `ENOMEM`.
fn make_store(
    name: &str,
    factory: &dyn StoreFactory,
    settings: &Settings,
    bytes: u64,
) -> Result<Served, CtlError> {
    let refused = |m: FactoryError| CtlError::new(Errno::ENOMEM, format!("export {name:?}: {m}"));
    let (store, label) = factory.make(settings, bytes).map_err(|e| match e {
        FactoryError::Setting { error, .. } => crate::ctl_error::store_error(&error),
        e => refused(e),
    })?;
    let store = Arc::new(store);
    let policy = factory.start_policy(name, &store).map_err(refused)?;
    Ok(Served {
        name: name.to_string(),
        label,
        store,
        policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::execute;

    fn registry() -> Registry {
        crate::test_factory::registry(false)
    }

    fn errno(reg: &Registry, export: Option<&str>, line: &str) -> &'static str {
        execute(reg, export, line).unwrap_err().errno.name()
    }

    #[test]
    fn algorithm_params_follow_linux_7() {
        let reg = registry();
        let u = Some("u");
        reg.hot_add("u", None, false).unwrap();
        let run = |line: &str| execute(&reg, u, line).map(drop);
        let primary_level = |reg: &Registry| reg.get(u).unwrap().store.compressor().level();
        // Level 8 is forgotten, and the store gets zstd's default (3): each
        // algorithm_params write replaces the whole set (the second one
        // has no level), and a comp_algorithm write resets the primary's
        // settings, even for the same algorithm.
        for last in ["algorithm_params algo=zstd", "comp_algorithm zstd"] {
            run("comp_algorithm zstd").unwrap();
            run("algorithm_params level=8").unwrap();
            run(last).unwrap();
            run("disksize 1M").unwrap();
            assert_eq!(primary_level(&reg), 3, "after {last:?}");
            run("reset").unwrap();
        }
        // Settings the algorithm refuses are taken by algorithm_params and
        // refused by disksize, which leaves the export uninitialised.
        run("comp_algorithm lz4").unwrap();
        run("algorithm_params level=0").unwrap();
        let e = execute(&reg, u, "disksize 1M").unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL, "{}", e.message);
        assert!(e.message.contains("level"), "{}", e.message);
        assert_eq!(execute(&reg, u, "initstate").unwrap(), "0\n");
        run("algorithm_params level=2").unwrap();
        run("disksize 1M").unwrap();
        assert_eq!(primary_level(&reg), 2);
        run("reset").unwrap();
        // A secondary: algo= and priority= must name the same compressor,
        // algo= alone one that is set; recomp_algorithm resets its priority.
        run("recomp_algorithm algo=zstd priority=1").unwrap();
        for (bad, why) in [
            (
                "algorithm_params priority=1 algo=deflate",
                "not priority 1's",
            ),
            (
                "algorithm_params priority=2 algo=zstd",
                "none at priority 2",
            ),
            ("algorithm_params algo=deflate level=3", "no deflate"),
            ("algorithm_params priority=4", "no priority 4"),
        ] {
            assert_eq!(errno(&reg, u, bad), "EINVAL", "{why}");
        }
        run("algorithm_params algo=zstd priority=1 level=9").unwrap();
        run("recomp_algorithm algo=zstd priority=1").unwrap();
        run("algorithm_params priority=2 level=7").unwrap();
        run("recomp_algorithm algo=deflate priority=2").unwrap();
        run("recomp_algorithm algo=lz4hc priority=3").unwrap();
        run("algorithm_params algo=lz4hc level=12").unwrap();
        run("disksize 1M").unwrap();
        let store = &reg.get(u).unwrap().store;
        assert_eq!(
            store.secondary_params(1).level,
            None,
            "reset by recomp_algorithm"
        );
        assert_eq!(
            store.secondary_params(2).level,
            None,
            "reset by recomp_algorithm"
        );
        assert_eq!(store.secondary_params(3).level, Some(12));
    }

    #[test]
    fn writeback_batch_size_is_a_setting_before_init_as_in_the_kernel() {
        let reg = registry();
        reg.hot_add("u", None, false).unwrap();
        let run = |line: &str| execute(&reg, Some("u"), line);
        assert_eq!(run("writeback_batch_size").unwrap(), "32\n");
        for bad in ["0", "257", "x"] {
            let line = format!("writeback_batch_size {bad}");
            assert_eq!(errno(&reg, Some("u"), &line), "EINVAL", "{line}");
        }
        run("writeback_batch_size 8").unwrap();
        assert_eq!(run("writeback_batch_size").unwrap(), "8\n");
        // The store made on disksize takes it.
        run("disksize 1M").unwrap();
        assert_eq!(reg.get(Some("u")).unwrap().store.writeback_batch_size(), 8);
        assert_eq!(run("writeback_batch_size").unwrap(), "8\n");
        // A reset returns to the factory's defaults.
        run("reset").unwrap();
        assert_eq!(run("writeback_batch_size").unwrap(), "32\n");
    }

    #[test]
    fn an_export_lives_as_a_zram_disk() {
        let reg = registry();
        let x = Some("x");
        execute(&reg, None, "hot_add x").unwrap();
        assert_eq!(execute(&reg, x, "initstate").unwrap(), "0\n");
        assert_eq!(execute(&reg, x, "disksize").unwrap(), "0\n");
        assert_eq!(
            execute(&reg, None, "exports").unwrap(),
            "x\tuninitialised\t0\n"
        );
        assert!(reg.get(x).is_none() && reg.served().is_empty());
        // Settings before init, checked when written.
        execute(&reg, x, "comp_algorithm zstd").unwrap();
        execute(&reg, x, "algorithm_params level=5").unwrap();
        execute(&reg, x, "mem_limit 8M").unwrap();
        execute(&reg, x, "recomp_algorithm algo=deflate priority=2").unwrap();
        // A secondary's parameters, by priority (kept for disksize).
        execute(&reg, x, "algorithm_params priority=2 level=9").unwrap();
        assert_eq!(execute(&reg, x, "comp_algorithm").unwrap(), "[zstd]\n");
        assert_eq!(
            execute(&reg, x, "recomp_algorithm").unwrap(),
            "#2: [deflate]\n"
        );
        let mm = execute(&reg, x, "mm_stat").unwrap();
        assert_eq!(mm.split_whitespace().nth(3), Some("8388608"), "{mm}");
        for (bad, e) in [
            ("comp_algorithm lzma", "EINVAL"),
            ("algorithm_params level=x", "EINVAL"),
            ("recomp_algorithm algo=zstd priority=4", "EINVAL"),
            ("algorithm_params priority=4 level=3", "EINVAL"),
            ("algorithm_params priority=1 colour=red", "EINVAL"),
            ("backing_dev /nonexistent/zmem", "ENOENT"),
            ("disksize 0", "EINVAL"),
            ("disksize lots", "EINVAL"),
            ("compact", "EINVAL"),
            ("idle all", "EINVAL"),
            ("writeback idle", "EINVAL"),
            ("classes", "EINVAL"),
        ] {
            assert_eq!(errno(&reg, x, bad), e, "{bad}");
        }
        assert_eq!(
            errno(&reg, x, &format!("comp_algorithm {}", "z".repeat(128))),
            "E2BIG"
        );
        // disksize makes the store from the settings.
        execute(&reg, x, "disksize 1M").unwrap();
        assert_eq!(execute(&reg, x, "initstate").unwrap(), "1\n");
        let s = reg.get(x).unwrap();
        assert_eq!(s.store.disk_size(), 1 << 20);
        assert_eq!(s.store.mem_limit(), 8 << 20);
        assert_eq!(s.store.compressor().algorithm().name(), "zstd");
        assert_eq!(
            execute(&reg, x, "recomp_algorithm").unwrap(),
            "#2: [deflate]\n"
        );
        assert_eq!(s.store.secondary_params(2).level, Some(9));
        // Until the first write a secondary's parameters may still change.
        execute(&reg, x, "algorithm_params algo=deflate level=3").unwrap();
        assert_eq!(s.store.secondary_params(2).level, Some(3));
        assert_eq!(
            execute(&reg, None, "exports").unwrap(),
            "x\tzsmalloc/default/zstd/4K\t1048576\n"
        );
        // After init: EBUSY, as the kernel; a bad name is still EINVAL first.
        for bad in [
            "disksize 2M",
            "comp_algorithm lz4",
            "algorithm_params level=1",
        ] {
            assert_eq!(errno(&reg, x, bad), "EBUSY", "{bad}");
        }
        assert_eq!(errno(&reg, x, "comp_algorithm lzma"), "EINVAL");
        let page: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
        s.store.write_page(0, &page).unwrap();
        assert_eq!(
            errno(&reg, x, "algorithm_params priority=2 level=1"),
            "EBUSY"
        );
        // reset: back to uninitialised with the defaults, the store emptied.
        execute(&reg, x, "reset").unwrap();
        assert_eq!(s.store.mm_stat().orig_data_size, 0);
        drop(s);
        assert_eq!(execute(&reg, x, "initstate").unwrap(), "0\n");
        assert_eq!(execute(&reg, x, "comp_algorithm").unwrap(), "[lz4]\n");
        assert_eq!(
            execute(&reg, x, "mm_stat").unwrap(),
            format!("{}\n", zram::MmStat::default())
        );
        // reset of an uninitialised export is allowed, as in zram.
        execute(&reg, x, "reset").unwrap();
        execute(&reg, None, "hot_remove x").unwrap();
        assert!(reg.is_empty());
        assert_eq!(errno(&reg, x, "initstate"), "ENOENT");
    }

    #[test]
    fn hot_add_checks_names_and_sizes() {
        let reg = registry();
        execute(&reg, None, "hot_add a 64K").unwrap();
        assert_eq!(execute(&reg, Some("a"), "disksize").unwrap(), "65536\n");
        assert_eq!(errno(&reg, None, "hot_add a"), "EEXIST");
        for bad in [
            "hot_add",
            "hot_add a:b",
            "hot_add a/b",
            "hot_add b 0",
            "hot_add b 12Q",
            "hot_add b 1M 2",
            "hot_remove",
            "hot_remove a b",
        ] {
            assert_eq!(errno(&reg, None, bad), "EINVAL", "{bad}");
        }
        assert_eq!(
            errno(&reg, None, &format!("hot_add {}", "n".repeat(MAX_NAME + 1))),
            "EINVAL"
        );
        execute(&reg, None, &format!("hot_add {}", "n".repeat(MAX_NAME))).unwrap();
        assert_eq!(errno(&reg, None, "hot_remove zz"), "ENOENT");
        assert_eq!(reg.names().len(), 2);
        // Without a factory, nothing new can be made.
        let fixed = Registry::default();
        assert_eq!(errno(&fixed, None, "hot_add a"), "EOPNOTSUPP");
    }

    #[test]
    fn clients_of_an_export_block_its_reset_and_removal_only() {
        let reg = Arc::new(registry());
        execute(&reg, None, "hot_add a 1M").unwrap();
        execute(&reg, None, "hot_add u").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nbd.sock");
        let server = Arc::new(
            Server::bind(
                nbd::ListenAddr::Unix(path.clone()),
                reg.nbd_exports().unwrap(),
                nbd::Config::default(),
            )
            .unwrap(),
        );
        reg.attach(&server);
        // An uninitialised export is in the table but refuses clients.
        let names: Vec<String> = server
            .exports()
            .iter()
            .map(|e| e.name().to_string())
            .collect();
        assert_eq!(names, ["a", "u"]);
        let refused = testkit::clients::raw_go(&path, "u").unwrap_err();
        assert!(refused.contains("not initialised"), "{refused}");
        // A client on a: a's reset and removal are EBUSY, u's are not.
        let client = testkit::clients::raw_go(&path, "a").unwrap();
        assert_eq!(errno(&reg, Some("a"), "reset"), "EBUSY");
        assert_eq!(errno(&reg, None, "hot_remove a"), "EBUSY");
        execute(&reg, Some("u"), "disksize 64K").unwrap();
        let u = testkit::clients::raw_go(&path, "u").unwrap();
        drop(u);
        execute(&reg, None, "hot_add late 64K").unwrap();
        assert!(server.exports().get("late").is_some());
        drop(client);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while reg.export_connections("a") > 0 || reg.export_connections("u") > 0 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        execute(&reg, Some("a"), "reset").unwrap();
        execute(&reg, None, "hot_remove a").unwrap();
        execute(&reg, None, "hot_remove u").unwrap();
        assert!(server.exports().get("a").is_none());
        assert_eq!(reg.names(), ["late"]);
    }
}
