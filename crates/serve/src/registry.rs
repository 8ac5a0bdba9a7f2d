//! The stores a running server exports, by name.
//!
//! This module owns the [`Registry`]: the list of [`Served`] stores (name,
//! configuration label, store) that the NBD server exports, the control
//! socket acts on and the metrics endpoint reads, so all three agree on
//! names and on which store a name means. It also answers how many NBD
//! connections are open (the control interface refuses `reset` while any
//! is, as the kernel refuses it while the device is open). It does no I/O.

use std::sync::{Arc, OnceLock, Weak};

use nbd::{BudgetStats, Export, ExportError, Exports, Server};
use zram::Store;

use crate::device::export_device;

/// One exported store.
#[derive(Debug)]
pub struct Served {
    /// The NBD export name.
    pub name: String,
    /// The store's configuration, for humans (`zsmalloc/default/lz4/4K`).
    pub label: String,
    /// The store.
    pub store: Arc<Store>,
}

/// The exported stores, in order; the first is the default.
#[derive(Debug, Default)]
pub struct Registry {
    exports: Vec<Served>,
    server: OnceLock<Weak<Server>>,
}

impl Registry {
    /// A registry of `exports`. Names must be unique (the NBD export table
    /// checks it again in [`Registry::nbd_exports`]).
    pub fn new(exports: Vec<Served>) -> Registry {
        Registry {
            exports,
            server: OnceLock::new(),
        }
    }

    /// Every store, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Served> {
        self.exports.iter()
    }

    /// Number of stores.
    pub fn len(&self) -> usize {
        self.exports.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.exports.is_empty()
    }

    /// The store called `name`; `None` (or `""` when no export has the empty
    /// name) means the first, as NBD clients asking for `""` get it.
    pub fn get(&self, name: Option<&str>) -> Option<&Served> {
        match name {
            None => self.exports.first(),
            Some(n) => self
                .exports
                .iter()
                .find(|s| s.name == n)
                .or_else(|| n.is_empty().then(|| self.exports.first()).flatten()),
        }
    }

    /// The NBD export table: each store behind [`export_device`], described
    /// by its label and size.
    pub fn nbd_exports(&self) -> Result<Exports, ExportError> {
        let mut table = Exports::new();
        for s in &self.exports {
            let dev = Arc::new(export_device(s.store.clone()));
            let desc = format!("zmem zram store {}, {} bytes", s.label, s.store.disk_size());
            table.add(Export::new(s.name.clone(), dev).with_description(desc))?;
        }
        Ok(table)
    }

    /// Tells the registry which server exports it (once; later calls are
    /// ignored), so it can count connections without keeping the server
    /// alive.
    pub fn attach(&self, server: &Arc<Server>) {
        let _ = self.server.set(Arc::downgrade(server));
    }

    /// The NBD server's in-flight memory budget (`None` before
    /// [`Registry::attach`] and after the server is gone).
    pub fn nbd_budget(&self) -> Option<BudgetStats> {
        self.server
            .get()
            .and_then(Weak::upgrade)
            .map(|s| s.budget_stats())
    }

    /// NBD connections open now (0 before [`Registry::attach`] and after the
    /// server is gone).
    pub fn connections(&self) -> usize {
        self.server
            .get()
            .and_then(Weak::upgrade)
            .map_or(0, |s| s.connections())
    }
}
