//! A store factory for this crate's unit tests: zsmalloc stores of 4 KiB
//! pages made with what the export's settings say.

use std::sync::Arc;

use recipe::{FactoryError, Settings, StoreFactory};

use crate::registry::Registry;

/// Makes zsmalloc stores with 4 KiB pages; with `whole_pages_only`, refuses
/// a size that is not a whole number of pages (as the kernel's
/// `zram_meta_alloc` only ever gets a page-aligned size).
pub(crate) struct Factory {
    pub(crate) whole_pages_only: bool,
}

impl StoreFactory for Factory {
    fn defaults(&self) -> Settings {
        Settings {
            comp: zcomp::Algorithm::Lz4,
            ..Settings::default()
        }
    }

    fn make(
        &self,
        settings: &Settings,
        disksize: u64,
    ) -> Result<(zram::Store, String), FactoryError> {
        let refused = |e: String| FactoryError::Spec(recipe::Error::Usage(e));
        if self.whole_pages_only && disksize % 4096 != 0 {
            return Err(refused(format!(
                "{disksize} bytes is not a whole number of pages"
            )));
        }
        let pool = zalloc::open("zsmalloc", &zalloc::AllocOptions::default())
            .map_err(|e| refused(e.to_string()))?;
        let comp = settings.compressor()?;
        let label = format!("zsmalloc/default/{}/4K", comp.algorithm().name());
        let store = zram::Store::new(pool, comp, disksize.div_ceil(4096))
            .map_err(|e| refused(e.to_string()))?;
        settings.apply(&store)?;
        Ok((store, label))
    }
}

/// An empty registry whose exports get their stores from a [`Factory`].
pub(crate) fn registry(whole_pages_only: bool) -> Registry {
    let reg = Registry::default();
    reg.set_factory(Arc::new(Factory { whole_pages_only }));
    reg
}
