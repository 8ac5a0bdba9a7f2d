//! The invariant checker: a walk over the whole pool that re-derives every
//! count from first principles and compares it with what the pool keeps.
//!
//! It takes each class lock in turn and changes nothing. It is meant for
//! tests and debugging: it visits every zspage, slot and handle, so it costs
//! time proportional to the pool.
//!
//! Checked per class:
//! - every live zspage has a run, sits in exactly the fullness list its
//!   in-use count calls for, and the lists' links and counts agree;
//! - its free slots (in-object list or bitmap) are distinct, in range and
//!   number `objs - inuse`; the owner array covers every slot in
//!   kernel-compat and at most `objs` in default mode, its bitmap matching;
//!   each live slot's owner (header or owner array)
//!   names a handle whose entry points back at it, with the right generation
//!   form;
//! - counted pages match the mode's rule (whole zspage in kernel-compat; up to
//!   the highest live object in default mode);
//! - the handle table: allocated entries are exactly the live slots, free
//!   entries form one acyclic list, and nobody holds an object;
//! - class and pool totals equal the sums;
//! - framed pools (`frames.rs`): each zspage has a frame for each of its
//!   populated frames and none above, published as its frame entries; the
//!   arena's taken frames are exactly those, each naming its zspage and
//!   index; the pool counts the system pages holding a frame, which are
//!   the page source's pages out.

use std::collections::HashSet;

use crate::class::{Class, ClassInner};
use crate::frames::{FrameId, FrameOwner, NO_FRAME};
use crate::handle::{Entry, NO_SLOT};
use crate::pool::Pool;
use crate::zspage::{END_OF_LIST, NO_OWNER};

impl Pool {
    /// Verifies every count, free list, fullness list and handle. Returns the
    /// first violation found. Call it while no other thread uses the pool.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pages_total = 0u64;
        let mut frames = Vec::new();
        for (cid, class) in self.classes.iter().enumerate() {
            let inner = class.lock();
            check_class(class, &inner, &mut frames)
                .map_err(|e| format!("class {cid} (size {}): {e}", class.info.size))?;
            pages_total += inner.pages;
        }
        if let Some(arena) = &self.frames {
            return check_frames(self, arena, frames);
        }
        if pages_total != self.total_pages() as u64 {
            return Err(format!(
                "pool counts {} pages, classes {}",
                self.total_pages(),
                pages_total
            ));
        }
        let out = self.pages.pages_out() as u64;
        let zspage_pages: u64 = self
            .classes
            .iter()
            .map(|c| u64::from(c.lock().zspages) * u64::from(c.info.pages_per_zspage))
            .sum();
        if out != zspage_pages {
            return Err(format!(
                "page source has {out} pages out, zspages hold {zspage_pages}"
            ));
        }
        Ok(())
    }
}

/// Framed pools: the frames the classes hold (`held`: frame, owner, first
/// byte) are exactly the arena's taken frames, and the pool's count is the
/// arena's system pages, which are the page source's pages out.
fn check_frames(
    pool: &Pool,
    arena: &crate::frames::FrameArena,
    mut held: Vec<(FrameId, FrameOwner, *mut u8)>,
) -> Result<(), String> {
    let mut taken = arena.check(pool.pages.pages_out())?;
    if pool.total_pages() as u64 != arena.used_pages() {
        return Err(format!(
            "pool counts {} pages, {} system pages hold frames",
            pool.total_pages(),
            arena.used_pages()
        ));
    }
    held.sort_unstable_by_key(|h| h.0);
    taken.sort_unstable_by_key(|t| t.0);
    if held.len() != taken.len() {
        return Err(format!(
            "zspages hold {} frames, the arena has {} taken",
            held.len(),
            taken.len()
        ));
    }
    for (h, t) in held.iter().zip(&taken) {
        if h != t {
            return Err(format!(
                "a zspage holds frame {} ({:?}), the arena says frame {} ({:?})",
                h.0, h.1, t.0, t.1
            ));
        }
    }
    Ok(())
}

fn check_class(
    class: &Class,
    inner: &ClassInner,
    frames: &mut Vec<(FrameId, FrameOwner, *mut u8)>,
) -> Result<(), String> {
    let objs = class.objs();
    let scheme = class.scheme;
    let ps = u64::from(class.page_size);
    let size = u64::from(class.info.size);

    // Fullness lists: a zspage is on the list of its group unless it is
    // vacant or isolated.
    let lens = inner
        .lists
        .check(&inner.metas, |_, m| {
            (m.holds_zspage() && !m.isolated).then_some(usize::from(m.group))
        })
        .map_err(|e| format!("fullness lists: zspage {e}"))?;
    for (g, (&n, &count)) in lens.iter().zip(&inner.counts).enumerate() {
        if n != count {
            return Err(format!("group {g} counts {count} zspages, list has {n}"));
        }
        if n > 0 && g >= scheme.groups() {
            return Err(format!(
                "group {g} is past the scheme's {}",
                scheme.groups()
            ));
        }
    }

    // Zspages and their slots.
    let vacant: HashSet<u32> = inner.vacant.iter().copied().collect();
    let mut live_zspages = 0u32;
    let mut used = 0u64;
    let mut pages = 0u64;
    let mut live_slots: HashSet<(u32, u32)> = HashSet::new();
    for (zid, m) in inner.metas.iter().enumerate() {
        let zid = zid as u32;
        if !m.holds_zspage() {
            if !vacant.contains(&zid) {
                return Err(format!("zspage {zid} has no run but is not just vacant"));
            }
            continue;
        }
        if m.isolated {
            return Err(format!("zspage {zid} is still isolated"));
        }
        if vacant.contains(&zid) {
            return Err(format!("live zspage {zid} is vacant"));
        }
        let want = scheme.group(m.inuse, objs);
        if want != m.group {
            return Err(format!(
                "zspage {zid}: {} of {objs} in use belongs in group {want}, not {}",
                m.inuse, m.group
            ));
        }
        match (m.run.as_ref(), class.frames.is_some()) {
            (Some(run), false) => {
                if run.pages() != class.info.pages_per_zspage {
                    return Err(format!("zspage {zid} run has {} pages", run.pages()));
                }
                let base = class
                    .bases
                    .get(zid as usize)
                    .map(|b| b.load(std::sync::atomic::Ordering::Acquire));
                if base != Some(run.as_ptr()) {
                    return Err(format!("zspage {zid}: published base differs from its run"));
                }
            }
            (None, true) => {
                // A frame for each populated frame, none above, published.
                let per = class.info.pages_per_zspage;
                for f in 0..per {
                    let at = (zid * per + f) as usize;
                    let id = inner.frame_ids.get(at).copied().unwrap_or(NO_FRAME);
                    let ptr = class.frame_ptrs.get(at).map_or(std::ptr::null_mut(), |p| {
                        p.load(std::sync::atomic::Ordering::Acquire)
                    });
                    let populated = f < m.populated();
                    if populated != (id != NO_FRAME) || populated == ptr.is_null() {
                        return Err(format!(
                            "zspage {zid} frame {f}: frame {id:#x} at {ptr:?}, {} populated",
                            m.populated()
                        ));
                    }
                    if populated {
                        let owner = FrameOwner {
                            class: class.id,
                            zspage: zid,
                            index: f,
                        };
                        frames.push((id, owner, ptr));
                    }
                }
            }
            _ => return Err(format!("zspage {zid}: a run in a framed class or none")),
        }
        if m.inuse == 0 {
            return Err(format!("zspage {zid} is live but empty"));
        }
        live_zspages += 1;
        used += u64::from(m.inuse);
        pages += u64::from(m.populated());

        // The owner array (and bitmap): whole in kernel-compat, grown up to
        // at most the object count in default mode.
        let slots_ok = if class.in_object_list() {
            m.slots() == if class.header == 0 { objs } else { 0 }
        } else {
            m.slots() <= objs
        };
        if !slots_ok || !m.table_is_consistent(class.mode) {
            return Err(format!(
                "zspage {zid}: owner table covers {} slots of {objs} and is malformed",
                m.slots()
            ));
        }

        // Free slots.
        let mut free = vec![false; objs as usize];
        if class.in_object_list() {
            let mem = class.memory(inner, zid);
            let mut idx = m.free_head;
            let mut n = 0;
            while idx != END_OF_LIST {
                if idx >= objs || free[idx as usize] {
                    return Err(format!(
                        "zspage {zid}: free list reaches bad or repeated slot {idx}"
                    ));
                }
                free[idx as usize] = true;
                n += 1;
                // SAFETY: `idx` is a free slot of a live zspage, read under the
                // class lock; free slots are written only under it.
                let link = unsafe { mem.read_word(idx) };
                if link & 1 != 0 {
                    return Err(format!(
                        "zspage {zid}: free slot {idx} carries the allocated tag"
                    ));
                }
                idx = (link >> 1) as u32;
            }
            if n != objs - m.inuse {
                return Err(format!(
                    "zspage {zid}: {n} free slots listed, {} expected",
                    objs - m.inuse
                ));
            }
            if m.populated() != class.info.pages_per_zspage {
                return Err(format!(
                    "zspage {zid}: counts {} pages, not the whole zspage",
                    m.populated()
                ));
            }
        } else {
            let mut n = 0;
            for idx in 0..objs {
                if !m.is_live(idx) {
                    free[idx as usize] = true;
                    n += 1;
                }
            }
            // Past the table's slots, the last bitmap word's bits are clear.
            if let Some(idx) = (m.slots()..m.slots().next_multiple_of(32)).find(|&i| m.is_live(i)) {
                return Err(format!(
                    "zspage {zid}: slot {idx} is live past the {} slots of the table",
                    m.slots()
                ));
            }
            if n != objs - m.inuse {
                return Err(format!(
                    "zspage {zid}: bitmap has {n} free slots, {} expected",
                    objs - m.inuse
                ));
            }
            let need = (u64::from(m.live_end()) * size).div_ceil(ps) as u32;
            if m.populated() != need {
                return Err(format!(
                    "zspage {zid}: counts {} pages, live objects need {need}",
                    m.populated()
                ));
            }
        }

        // Owners of live slots.
        for idx in 0..objs {
            let owner_field = if class.header == 0 {
                Some(m.owner(idx))
            } else {
                None
            };
            if free[idx as usize] {
                if owner_field.is_some_and(|o| o != NO_OWNER) {
                    return Err(format!("zspage {zid}: free slot {idx} has an owner"));
                }
                continue;
            }
            if class.header > 0 {
                // SAFETY: a live slot's header is written only at placement,
                // under the class lock held here.
                let word = unsafe { class.memory(inner, zid).read_word(idx) };
                if word & 1 != 1 {
                    return Err(format!(
                        "zspage {zid}: live slot {idx} lacks the allocated tag"
                    ));
                }
            }
            let owner = class.owner(inner, zid, idx);
            let cell = class.handles.get(owner as usize).ok_or(format!(
                "zspage {zid} slot {idx}: owner {owner} outside the handle table"
            ))?;
            if cell.is_locked() {
                return Err(format!("handle slot {owner} is held during the check"));
            }
            match cell.load() {
                Entry::Allocated { zspage, obj, .. } if zspage == zid && obj == idx => {}
                other => {
                    return Err(format!(
                        "zspage {zid} slot {idx}: owner {owner} entry is {other:?}"
                    ))
                }
            }
            live_slots.insert((zid, idx));
        }
    }
    if live_zspages != inner.zspages {
        return Err(format!(
            "{} zspages counted, {live_zspages} live",
            inner.zspages
        ));
    }
    if used != inner.objs_used {
        return Err(format!(
            "{} objects counted in use, zspages hold {used}",
            inner.objs_used
        ));
    }
    if pages != inner.pages {
        return Err(format!(
            "{} pages counted, zspages count {pages}",
            inner.pages
        ));
    }

    // Handle table.
    let mut allocated = 0u64;
    for slot in 0..class.handles.len() {
        if let Entry::Allocated { zspage, obj, .. } =
            class.handles.get(slot).expect("in range").load()
        {
            if !live_slots.contains(&(zspage, obj)) {
                return Err(format!(
                    "handle slot {slot} points at ({zspage}, {obj}), not a live slot it owns"
                ));
            }
            allocated += 1;
        }
    }
    if allocated != used {
        return Err(format!(
            "{allocated} handle entries allocated, {used} objects live"
        ));
    }
    let mut seen = HashSet::new();
    let mut slot = inner.handle_free;
    while slot != NO_SLOT {
        if !seen.insert(slot) {
            return Err(format!("handle free list loops at {slot}"));
        }
        match class.handles.get(slot as usize).map(|c| c.load()) {
            Some(Entry::Free { next, .. }) => slot = next,
            other => return Err(format!("handle free list reaches {slot}: {other:?}")),
        }
    }
    if seen.len() as u64 + allocated != class.handles.len() as u64 {
        return Err(format!(
            "{} free + {allocated} allocated handle slots, table has {}",
            seen.len(),
            class.handles.len()
        ));
    }
    Ok(())
}
