//! Recompression: compressing stored pages again with a stronger, slower
//! secondary compressor, as the kernel's `recomp_algorithm` and
//! `recompress` attributes do (the newest kernel's rules: one target
//! priority per run).
//!
//! Owns the recompression path, the secondaries' `algorithm_params` and the
//! request format; may not touch slots but through the core's API, nor
//! writeback or the policy (floor 6).
//!
//! - **Secondaries** (`Store::set_recomp_algorithm`): up to three, at
//!   priorities 1 to 3, set before the store is initialised (`EBUSY`
//!   after).
//! - **Choosing pages** ([`RecompressRequest`]): slots holding memory
//!   (not empty, same-filled or written back), matching `type=idle`,
//!   `huge` or `huge_idle` (none: every such slot), not marked
//!   INCOMPRESSIBLE, and compressed with a priority below the target; taken
//!   largest first.
//! - **One page**, under its slot lock: a page smaller than `threshold` is
//!   left alone; otherwise it is read (decompressed), loses IDLE, and is
//!   compressed with the target (`max_pages` counts it whatever happens).
//!   The new object is kept only if its size class is strictly smaller
//!   (and, with a threshold, it is below it): the old object is freed
//!   (a raw page stops being huge), and the slot records the new length and
//!   the target's priority. If not, and the target is the highest
//!   configured priority, the slot is marked INCOMPRESSIBLE; it keeps its
//!   old object.
//!
//! Statistics move as the kernel's: `compr_data_size` by the difference,
//! `huge_pages` down for a raw page that compressed, `pages_stored` never.
//!
//! This module owns the recompression path and its request format.

use std::sync::{Mutex, MutexGuard};

use crate::disk::{Disk, MAX_SECONDARIES};
use crate::error::StoreError;
use crate::postprocess::{by_bucket, PostProcess};
use crate::slot::{self, SlotContent, SlotGuard};
use crate::stats::Counter;
use crate::streams::Streams;

/// Longest algorithm name the kernel takes (`ZRAM_MAX_ALGO_NAME_SZ` - 1).
const MAX_ALGO_NAME: usize = 127;

fn inval(why: String) -> StoreError {
    StoreError::os(libc::EINVAL, why)
}

/// Splits `key=value` words; a word without a value is `EINVAL`, as the
/// kernel's attributes that take only key=value pairs answer.
fn pairs<'a>(what: &str, text: &'a str) -> Result<Vec<(&'a str, &'a str)>, StoreError> {
    text.split_whitespace()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if !v.is_empty() => Ok((k, v)),
            _ => Err(inval(format!("{what}: {w:?} is not key=value"))),
        })
        .collect()
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, StoreError> {
    v.parse()
        .map_err(|_| inval(format!("{key}={v}: not a number in range")))
}

/// A parsed `recomp_algorithm` value: a secondary compressor and the
/// priority (1..=3) it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecompAlgorithm {
    /// The compressor.
    pub algorithm: zcomp::Algorithm,
    /// Its priority, 1 to 3.
    pub priority: usize,
}

impl RecompAlgorithm {
    /// Parses what is written to `recomp_algorithm`: `algo=NAME
    /// [priority=N]` (priority 1 when not given; other keys ignored, as the
    /// kernel ignores them). `EINVAL` for a missing or unknown algorithm,
    /// a word without a value or a priority outside 1..=3; `E2BIG` for a
    /// name of 128 bytes or more.
    pub fn parse(text: &str) -> Result<RecompAlgorithm, StoreError> {
        let mut algo = None;
        let mut priority: i64 = 1;
        for (k, v) in pairs("recomp_algorithm", text)? {
            match k {
                "algo" => algo = Some(v),
                "priority" => priority = parse_num::<i32>(k, v)?.into(),
                _ => {}
            }
        }
        let algo = algo.ok_or_else(|| inval("recomp_algorithm: algo=NAME is required".into()))?;
        if !(1..=MAX_SECONDARIES as i64).contains(&priority) {
            return Err(inval(format!(
                "recomp_algorithm: priority {priority} is not 1 to 3"
            )));
        }
        if algo.len() > MAX_ALGO_NAME {
            return Err(StoreError::os(
                libc::E2BIG,
                "recomp_algorithm: name too long",
            ));
        }
        let algorithm = zcomp::Algorithm::from_name(algo)
            .map_err(|e| inval(format!("recomp_algorithm: {e}")))?;
        Ok(RecompAlgorithm {
            algorithm,
            priority: priority as usize,
        })
    }
}

impl std::str::FromStr for RecompAlgorithm {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<RecompAlgorithm, StoreError> {
        RecompAlgorithm::parse(s)
    }
}

impl std::fmt::Display for RecompAlgorithm {
    /// As written to `recomp_algorithm`: `algo=NAME priority=N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "algo={} priority={}", self.algorithm, self.priority)
    }
}

/// A parsed `recompress` command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecompressRequest {
    /// Only pages marked idle.
    pub idle: bool,
    /// Only pages stored uncompressed.
    pub huge: bool,
    /// Only pages of at least this many bytes, and keep a result only if
    /// below it (0: no threshold).
    pub threshold: usize,
    /// Most pages to try.
    pub max_pages: u64,
    /// The target compressor by name.
    pub algo: Option<String>,
    /// The target compressor by priority.
    pub priority: Option<i64>,
}

impl Default for RecompressRequest {
    fn default() -> Self {
        RecompressRequest {
            idle: false,
            huge: false,
            threshold: 0,
            max_pages: u64::MAX,
            algo: None,
            priority: None,
        }
    }
}

impl RecompressRequest {
    /// Parses what is written to `recompress`: `type=idle|huge|huge_idle`,
    /// `threshold=N`, `max_pages=N`, `algo=NAME`, `priority=N`. `EINVAL`
    /// for a word without a value, an unknown type or a malformed number;
    /// other keys are ignored, as the kernel ignores them.
    pub fn parse(text: &str) -> Result<RecompressRequest, StoreError> {
        let mut req = RecompressRequest::default();
        for (k, v) in pairs("recompress", text)? {
            match k {
                "type" => {
                    (req.idle, req.huge) = match v {
                        "idle" => (true, false),
                        "huge" => (false, true),
                        "huge_idle" => (true, true),
                        _ => {
                            return Err(inval(format!(
                                "recompress: unknown type {v:?} (idle, huge, huge_idle)"
                            )))
                        }
                    }
                }
                "max_pages" => req.max_pages = parse_num(k, v)?,
                "threshold" => req.threshold = parse_num::<u32>(k, v)? as usize,
                "algo" => req.algo = Some(v.to_string()),
                "priority" => req.priority = Some(parse_num::<i32>(k, v)?.into()),
                _ => {}
            }
        }
        Ok(req)
    }
}

/// What one recompression did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecompressReport {
    /// Pages chosen.
    pub chosen: u64,
    /// Pages now kept compressed by the target.
    pub recompressed: u64,
    /// Pages newly marked INCOMPRESSIBLE.
    pub incompressible: u64,
}

/// The recompression settings of one store: the `algorithm_params` of
/// priorities 1..=3, kept whether or not that priority has a compressor
/// yet (as the kernel keeps them), and which lz4 code its lz4 and lz4hc
/// secondaries run. The mutex is a leaf, taken with no slot lock held.
#[derive(Default)]
pub(crate) struct Recompress {
    table: Mutex<Table>,
}

/// What [`Recompress`]'s mutex guards.
struct Table {
    params: [zcomp::Params; MAX_SECONDARIES],
    encoder: zcomp::Encoder,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            params: Default::default(),
            encoder: zcomp::Encoder::Fastest,
        }
    }
}

impl Recompress {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Plain values replaced whole: a panic cannot leave them half-updated.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Which encoder compresses the lz4, lz4hc and deflate secondaries
    /// made from now on (kernel-compat stores: the kernel's, as their
    /// primary).
    pub(crate) fn set_encoder(&self, encoder: zcomp::Encoder) {
        self.table().encoder = encoder;
    }

    /// A secondary compressor: `algorithm` with `params`, run by the
    /// encoder this store's secondaries use.
    fn secondary(
        &self,
        algorithm: zcomp::Algorithm,
        params: &zcomp::Params,
    ) -> zcomp::Result<zcomp::Compressor> {
        let encoder = self.table().encoder;
        Ok(zcomp::Compressor::new(algorithm, params)?.with_encoder(encoder))
    }

    /// Sets a secondary compressor (`echo "algo=NAME priority=N" >
    /// recomp_algorithm`; priority 1 when not given) with its default
    /// settings: as in Linux 7.x, choosing a priority's algorithm resets
    /// that priority's `algorithm_params`. `EINVAL` for a missing or
    /// unknown algorithm, a word without a value or a priority outside
    /// 1..=3; `E2BIG` for a name of 128 bytes or more; `EBUSY` once the
    /// store is initialised.
    pub(crate) fn set_recomp_algorithm(
        &self,
        disk: &Disk,
        recomp: RecompAlgorithm,
    ) -> Result<(), StoreError> {
        let RecompAlgorithm {
            algorithm,
            priority,
        } = recomp;
        let compressor = self
            .secondary(algorithm, &zcomp::Params::default())
            .map_err(|e| inval(format!("recomp_algorithm: {algorithm}: {e}")))?;
        disk.refuse_if_initialised("recomp_algorithm")?;
        disk.set_secondary(priority, Streams::new(compressor));
        if let Some(entry) = self.table().params.get_mut(priority.wrapping_sub(1)) {
            *entry = zcomp::Params::default();
        }
        Ok(())
    }

    /// Sets the parameters of a secondary compressor (`echo "priority=N
    /// level=L" > algorithm_params`, or `algo=NAME` for the secondary of
    /// that name): `level`, `dict` and `deflate.winbits`, as for the
    /// primary. Each write replaces the priority's whole set (Linux 7.x:
    /// what it does not name goes back to its default), kept per priority
    /// until a `recomp_algorithm` write for that priority resets it.
    /// `EINVAL` for unknown keys, malformed values, a priority outside
    /// 1..=3, an `algo` no secondary has (or not the one at the given
    /// priority, or with no compressor there) or settings the priority's
    /// algorithm refuses; `EBUSY` for the
    /// primary (priority 0, or neither key: its parameters are given when
    /// the store is made) and once the store is initialised.
    pub(crate) fn set_algorithm_params(&self, disk: &Disk, text: &str) -> Result<(), StoreError> {
        let parsed = zcomp::AlgorithmParams::parse(text)
            .map_err(|e| inval(format!("algorithm_params: {e}")))?;
        let by_name = |a: zcomp::Algorithm| {
            Recompress::recomp_algorithms(disk)
                .into_iter()
                .find(|(_, n)| *n == a.name())
                .map(|(p, _)| p)
        };
        let priority = match (parsed.priority, parsed.algo) {
            (Some(p), algo) => {
                let p = p as usize;
                if p > MAX_SECONDARIES {
                    return Err(inval(format!(
                        "algorithm_params: priority {p} is not 0 to {MAX_SECONDARIES}"
                    )));
                }
                if let Some(a) = algo {
                    let have = match p {
                        0 => Some(disk.compressor().algorithm()),
                        _ => disk.secondary(p).map(|s| s.compressor().algorithm()),
                    };
                    if have != Some(a) {
                        return Err(inval(format!(
                            "algorithm_params: {} is not the priority {p} algorithm",
                            a.name()
                        )));
                    }
                }
                p
            }
            (None, Some(a)) if a == disk.compressor().algorithm() => 0,
            (None, Some(a)) => by_name(a).ok_or_else(|| {
                inval(format!(
                    "algorithm_params: no compressor {} (set it with recomp_algorithm first, or give priority=N)",
                    a.name()
                ))
            })?,
            (None, None) => 0,
        };
        if priority == 0 {
            return Err(StoreError::os(
                libc::EBUSY,
                "algorithm_params of the primary compressor are given when the store is made",
            ));
        }
        disk.refuse_if_initialised("algorithm_params")?;
        if let Some(have) = disk.secondary(priority) {
            let compressor = self
                .secondary(have.compressor().algorithm(), &parsed.params)
                .map_err(|e| inval(format!("algorithm_params: {e}")))?;
            disk.set_secondary(priority, Streams::new(compressor));
        }
        if let Some(entry) = self.table().params.get_mut(priority.wrapping_sub(1)) {
            *entry = parsed.params;
        }
        Ok(())
    }

    /// The `algorithm_params` settings kept for `priority` (1..=3).
    pub(crate) fn secondary_params(&self, priority: usize) -> zcomp::Params {
        self.table()
            .params
            .get(priority.wrapping_sub(1))
            .cloned()
            .unwrap_or_default()
    }

    /// The secondary compressors: `(priority, algorithm name)`.
    pub(crate) fn recomp_algorithms(disk: &Disk) -> Vec<(usize, &'static str)> {
        (1..=MAX_SECONDARIES)
            .filter_map(|p| Some((p, disk.secondary(p)?.compressor().algorithm().name())))
            .collect()
    }

    /// The target priority of `req`, by the kernel's rules.
    fn target_priority(&self, disk: &Disk, req: &RecompressRequest) -> Result<usize, StoreError> {
        let lookup = |name: &str| {
            Recompress::recomp_algorithms(disk)
                .into_iter()
                .find(|(_, n)| *n == name)
                .map(|(p, _)| p)
        };
        let prio = match (req.priority, &req.algo) {
            (Some(p), algo) => {
                if !(1..=MAX_SECONDARIES as i64).contains(&p) {
                    return Err(inval(format!("recompress: priority {p} is not 1 to 3")));
                }
                let p = p as usize;
                if let Some(name) = algo {
                    if lookup(name) != Some(p) {
                        return Err(inval(format!(
                            "recompress: {name} is not the priority {p} algorithm"
                        )));
                    }
                }
                p
            }
            (None, Some(name)) => lookup(name)
                .ok_or_else(|| inval(format!("recompress: no secondary algorithm {name}")))?,
            (None, None) => 1,
        };
        if disk.secondary(prio).is_none() {
            return Err(inval(format!(
                "recompress: no algorithm at priority {prio} (set one with recomp_algorithm)"
            )));
        }
        Ok(prio)
    }

    /// Recompresses the pages `req` chooses (`echo ... > recompress`).
    pub(crate) fn run(
        &self,
        disk: &Disk,
        post: &PostProcess,
        req: &RecompressRequest,
    ) -> Result<RecompressReport, StoreError> {
        if req.threshold >= disk.huge_class_size() {
            return Err(inval(format!(
                "recompress: threshold {} is not below huge_class_size {}",
                req.threshold,
                disk.huge_class_size()
            )));
        }
        let prio = self.target_priority(disk, req)?;
        let target = disk
            .secondary(prio)
            .ok_or_else(|| inval(format!("recompress: no algorithm at priority {prio}")))?;
        let last = prio == disk.highest_priority();
        let _running = post.run();
        let page_size = disk.page_size();
        let mut chosen = Vec::new();
        disk.scan(
            0..disk.disk_pages(),
            |index, guard| {
                let content = guard.content();
                if !content.holds_memory()
                    || (req.idle && !guard.has(slot::IDLE))
                    || (req.huge && !guard.has(slot::HUGE))
                    || guard.has(slot::INCOMPRESSIBLE)
                    || guard.has(slot::PP_SLOT)
                    || guard.priority() >= prio
                {
                    return None;
                }
                guard.update_flags(slot::PP_SLOT, 0);
                Some((index, content.stored_bytes(page_size)))
            },
            |candidate| chosen.push(candidate),
        );
        by_bucket(&mut chosen);
        let mut report = RecompressReport {
            chosen: chosen.len() as u64,
            ..RecompressReport::default()
        };
        let mut budget = req.max_pages;
        let mut page = vec![0u8; disk.page_size()];
        let mut result = Ok(());
        let mut done = 0;
        for &(index, _) in &chosen {
            if budget == 0 {
                break;
            }
            done += 1;
            let mut guard = disk.lock(index);
            if !guard.has(slot::PP_SLOT) {
                continue;
            }
            guard.update_flags(0, slot::PP_SLOT);
            let step = Step {
                index,
                threshold: req.threshold,
                prio,
                last,
                target: &target,
            };
            match self.recompress_slot(disk, &mut guard, &step, &mut page, &mut budget) {
                Ok(Outcome::Smaller) => report.recompressed += 1,
                Ok(Outcome::Incompressible) => report.incompressible += 1,
                Ok(Outcome::Kept) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        for &(index, _) in &chosen[done..] {
            disk.clear_pp(index);
        }
        result.map(|()| report)
    }

    fn recompress_slot(
        &self,
        disk: &Disk,
        guard: &mut SlotGuard<'_>,
        step: &Step<'_>,
        page: &mut [u8],
        budget: &mut u64,
    ) -> Result<Outcome, StoreError> {
        let old = guard.content();
        let old_len = old.stored_bytes(disk.page_size());
        if old_len < step.threshold {
            return Ok(Outcome::Kept);
        }
        disk.read_locked(step.index, guard, page)?;
        // Touched: no longer idle, so no other post-processing takes it as
        // such.
        guard.update_flags(0, slot::IDLE);
        let mut stream = step.target.get()?;
        let compressed = stream.context().compress_buffered(page);
        *budget = budget.saturating_sub(1);
        let compressed = compressed?;
        let new_len = compressed.len();
        let smaller = new_len < disk.huge_class_size()
            && disk.pool().class_size(new_len) < disk.pool().class_size(old_len)
            && (step.threshold == 0 || new_len < step.threshold);
        if !smaller {
            if step.last {
                guard.update_flags(slot::INCOMPRESSIBLE, 0);
                return Ok(Outcome::Incompressible);
            }
            return Ok(Outcome::Kept);
        }
        // The old object stays if the allocator refuses the new one.
        let handle = disk.pool().malloc(new_len)?;
        if let Err(e) = disk.pool().write(handle, compressed) {
            disk.free_content(SlotContent::Compressed {
                handle,
                size: new_len,
            });
            return Err(e.into());
        }
        drop(stream);
        guard.set(SlotContent::Compressed {
            handle,
            size: new_len,
        });
        guard.set_priority(step.prio);
        disk.free_content(old);
        disk.counters().sub(Counter::ComprDataSize, old_len as u64);
        disk.counters().add(Counter::ComprDataSize, new_len as u64);
        if old.is_raw() {
            disk.counters().sub(Counter::HugePages, 1);
        }
        Ok(Outcome::Smaller)
    }
}

/// One page's recompression settings.
struct Step<'a> {
    index: u64,
    threshold: usize,
    prio: usize,
    /// The target is the highest configured priority.
    last: bool,
    target: &'a Streams,
}

enum Outcome {
    Smaller,
    Incompressible,
    Kept,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_the_kernel_reads_them() {
        let r = RecompressRequest::parse(
            "type=huge_idle threshold=1000 max_pages=5 algo=zstd priority=2",
        )
        .unwrap();
        assert!(r.idle && r.huge);
        assert_eq!((r.threshold, r.max_pages), (1000, 5));
        assert_eq!((r.algo.as_deref(), r.priority), (Some("zstd"), Some(2)));
        assert_eq!(
            RecompressRequest::parse("").unwrap(),
            RecompressRequest::default()
        );
        assert_eq!(
            RecompressRequest::parse("colour=blue").unwrap(),
            RecompressRequest::default(),
            "unknown keys are ignored"
        );
        for bad in [
            "idle",
            "type=",
            "type=sleepy",
            "max_pages=x",
            "threshold=-1",
            "priority=one",
        ] {
            assert_eq!(
                RecompressRequest::parse(bad).unwrap_err().errno(),
                libc::EINVAL,
                "{bad}"
            );
        }
    }
}
