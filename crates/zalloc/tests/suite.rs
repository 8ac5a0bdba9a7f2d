//! The shared allocator suite: every test runs against every allocator
//! (zsmalloc in both modes, zbud, z3fold, zblock) through `ZPool` alone.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{read_vec, Subject, SUBJECTS};
use proptest::prelude::*;
use testkit::{pattern, Rng};
use zpool::{ObjectRead, ZHandle, ZPoolError};

const PAGE_SIZES: [usize; 3] = [4096, 16384, 65536];

#[test]
fn every_size_round_trips() {
    for s in SUBJECTS {
        for (ps, step) in [(4096, 1), (16384, 7), (65536, 61)] {
            let pool = s.open(ps);
            let max = pool.max_object_size();
            assert!(max <= ps && max >= ps - ps / 32, "{}: max {max}", s.label);
            let mut live = Vec::new();
            for (id, len) in (0u64..).zip((1..=max).step_by(step).chain([max])) {
                let h = pool.malloc(len).unwrap();
                pool.write(h, &pattern(id, len)).unwrap();
                live.push((h, id, len));
            }
            s.check(&*pool).unwrap();
            for &(h, id, len) in &live {
                let obj = ObjectRead::begin(&*pool, h, len).unwrap();
                assert_eq!(&*obj, &pattern(id, len)[..], "{} {ps} len {len}", s.label);
            }
            for (h, _, _) in live {
                pool.free(h).unwrap();
            }
            assert_eq!(pool.total_pages(), 0, "{} {ps}", s.label);
            assert_eq!(pool.stats().objects, 0);
            s.check(&*pool).unwrap();
        }
    }
}

#[test]
fn bad_input_is_refused_and_harms_nothing() {
    for s in SUBJECTS {
        let pool = s.open(4096);
        let other = s.open(4096);
        let foreign_kind = SUBJECTS
            [(SUBJECTS.iter().position(|x| x.label == s.label).unwrap() + 2) % SUBJECTS.len()]
        .open(4096);
        let max = pool.max_object_size();
        assert_eq!(pool.malloc(0), Err(ZPoolError::ZeroSize), "{}", s.label);
        common::assert_too_large(&*pool, max);
        assert_eq!(pool.malloc(usize::MAX).unwrap_err().errno(), 28);

        let mut rng = Rng(99);
        let keep: Vec<(ZHandle, u64, usize)> = (0..300u64)
            .map(|i| {
                let len = rng.range(1, max);
                let h = pool.malloc(len).unwrap();
                pool.write(h, &pattern(i, len)).unwrap();
                (h, i, len)
            })
            .collect();
        let gone = pool.malloc(100).unwrap();
        pool.free(gone).unwrap();
        // Its slot is likely reused: the old handle must stay refused.
        let reuse = pool.malloc(100).unwrap();
        pool.write(reuse, &pattern(1000, 100)).unwrap();
        let stats = pool.stats();

        let (k, _, klen) = keep[0];
        let strangers = [
            gone,
            ZHandle::from_raw(1).unwrap(),
            ZHandle::from_raw(u64::MAX).unwrap(),
            ZHandle::from_raw(k.to_raw() ^ (1 << 45)).unwrap(), // a generation bit
            ZHandle::from_raw(k.to_raw() ^ (1 << 50)).unwrap(),
            other.malloc(100).unwrap(),
            foreign_kind.malloc(100).unwrap(),
        ];
        for h in strangers {
            let why = format!("{} {h:?}", s.label);
            assert!(
                matches!(pool.free(h), Err(ZPoolError::InvalidHandle(_))),
                "{why}"
            );
            assert!(
                matches!(pool.write(h, b"x"), Err(ZPoolError::InvalidHandle(_))),
                "{why}"
            );
            assert!(
                matches!(pool.read_begin(h, 1), Err(ZPoolError::InvalidHandle(_))),
                "{why}"
            );
        }
        // Too long: no object holds more than the largest.
        assert!(
            matches!(
                pool.write(k, &vec![0; max + 1]),
                Err(ZPoolError::TooLong { len, capacity }) if len == max + 1 && capacity >= klen
            ),
            "{}",
            s.label
        );
        assert!(matches!(
            pool.read_begin(k, max + 1),
            Err(ZPoolError::TooLong { .. })
        ));

        assert_eq!(
            pool.stats(),
            stats,
            "{}: a refusal changed the pool",
            s.label
        );
        s.check(&*pool).unwrap();
        for &(h, i, len) in &keep {
            assert_eq!(read_vec(&*pool, h, len), pattern(i, len), "{}", s.label);
        }
        assert_eq!(read_vec(&*pool, reuse, 100), pattern(1000, 100));
        for (h, _, _) in keep {
            pool.free(h).unwrap();
        }
        pool.free(reuse).unwrap();
        assert_eq!(pool.total_pages(), 0);
        s.check(&*pool).unwrap();
    }
}

#[test]
fn a_read_pins_its_object_until_it_ends() {
    for s in SUBJECTS {
        let pool = s.open(4096);
        let hs: Vec<ZHandle> = (0..200u64)
            .map(|i| {
                let h = pool.malloc(300).unwrap();
                pool.write(h, &pattern(i, 300)).unwrap();
                h
            })
            .collect();
        let kept = hs[1];
        let bytes = pool.read_begin(kept, 300).unwrap();
        // Free its neighbours and compact: the read object must not move.
        for &h in hs.iter().filter(|&&h| h != kept) {
            pool.free(h).unwrap();
        }
        pool.compact();
        // SAFETY: the read begun above is outstanding, so the bytes stay.
        let seen = unsafe { bytes.as_ref() };
        assert_eq!(seen, &pattern(1, 300)[..], "{}", s.label);

        // A free waits for the read to end. The check below cannot fail
        // by chance (a free that waits never sets `freed`); it only means
        // something once the thread has reached the free, so wait for that
        // first, then give the free time to (wrongly) get through.
        let freed = Arc::new(AtomicBool::new(false));
        let freeing = Arc::new(AtomicBool::new(false));
        let t = {
            let (pool, freed, freeing) = (pool.clone(), freed.clone(), freeing.clone());
            std::thread::spawn(move || {
                freeing.store(true, Ordering::SeqCst);
                pool.free(kept).unwrap();
                freed.store(true, Ordering::SeqCst);
            })
        };
        while !freeing.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !freed.load(Ordering::SeqCst),
            "{}: free did not wait",
            s.label
        );
        // SAFETY: still outstanding; `bytes` is not used after this.
        assert_eq!(unsafe { bytes.as_ref() }, &pattern(1, 300)[..]);
        // SAFETY: the one read begun above, ended once.
        unsafe { pool.read_end(kept) };
        t.join().unwrap();
        assert!(freed.load(Ordering::SeqCst));
        assert_eq!(pool.total_pages(), 0, "{}", s.label);
        s.check(&*pool).unwrap();
    }
}

#[test]
fn threads_share_a_pool() {
    for s in SUBJECTS {
        let pool = s.open(4096);
        let max = pool.max_object_size();
        // Objects every thread reads while the others churn.
        let shared: Arc<Vec<(ZHandle, u64, usize)>> = Arc::new(
            (0..64u64)
                .map(|i| {
                    let len = (i as usize * 61) % max + 1;
                    let h = pool.malloc(len).unwrap();
                    pool.write(h, &pattern(u64::MAX - i, len)).unwrap();
                    (h, u64::MAX - i, len)
                })
                .collect(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let compactor = {
            let (pool, stop) = (pool.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pool.compact();
                    std::thread::yield_now();
                }
            })
        };
        let workers: Vec<_> = (0..8u64)
            .map(|t| {
                let (pool, shared) = (pool.clone(), shared.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(t * 7919 + 1);
                    let mut live: Vec<(ZHandle, u64, usize)> = Vec::new();
                    for step in 0..15_000u64 {
                        let r = rng.next_u64() % 8;
                        if live.len() < 64 || r < 4 {
                            let len = rng.range(1, max);
                            let id = t << 32 | step;
                            let h = pool.malloc(len).unwrap();
                            pool.write(h, &pattern(id, len)).unwrap();
                            live.push((h, id, len));
                        } else if r < 6 {
                            let i = rng.range(0, live.len() - 1);
                            let (h, id, len) = live.swap_remove(i);
                            assert_eq!(read_vec(&*pool, h, len), pattern(id, len));
                            pool.free(h).unwrap();
                        } else {
                            let (h, id, len) = shared[rng.range(0, shared.len() - 1)];
                            let obj = ObjectRead::begin(&*pool, h, len).unwrap();
                            assert_eq!(&*obj, &pattern(id, len)[..]);
                        }
                        if live.len() > 300 {
                            let (h, _, _) = live.swap_remove(0);
                            pool.free(h).unwrap();
                        }
                    }
                    live
                })
            })
            .collect();
        let survivors: Vec<_> = workers
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        stop.store(true, Ordering::Relaxed);
        compactor.join().unwrap();
        s.check(&*pool).unwrap();
        for (h, id, len) in survivors.into_iter().chain(shared.iter().copied()) {
            assert_eq!(read_vec(&*pool, h, len), pattern(id, len), "{}", s.label);
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0, "{}", s.label);
        s.check(&*pool).unwrap();
    }
}

#[test]
fn density_follows_the_design() {
    // 12000 objects of 200 bytes (many fit in a page).
    let mut pages = HashMap::new();
    for s in SUBJECTS {
        let pool = s.open(4096);
        let hs: Vec<ZHandle> = (0..12_000).map(|_| pool.malloc(200).unwrap()).collect();
        s.check(&*pool).unwrap();
        pages.insert(s.label, pool.total_pages());
        for h in hs {
            pool.free(h).unwrap();
        }
    }
    assert_eq!(pages["zbud"], 6000, "exactly two a page");
    assert_eq!(pages["z3fold"], 4000, "exactly three a page");
    // zblock: 224-byte slots, 18 a page.
    assert_eq!(pages["zblock"], 12_000usize.div_ceil(18));
    assert!(pages["zsmalloc-kernel-compat"] < 700, "{pages:?}");
    assert!(pages["zsmalloc-default"] < 700, "{pages:?}");
}

#[test]
fn page_sizes_above_4k_keep_the_density_bounds() {
    for s in SUBJECTS {
        for ps in PAGE_SIZES {
            let pool = s.open(ps);
            let mut rng = Rng(ps as u64 + 5);
            let hs: Vec<ZHandle> = (0..2000)
                .map(|_| {
                    pool.malloc(rng.range(1, pool.max_object_size() / 4))
                        .unwrap()
                })
                .collect();
            s.check(&*pool).unwrap();
            for h in hs {
                pool.free(h).unwrap();
            }
            assert_eq!(pool.total_pages(), 0);
        }
    }
}

// ---- model-based property test ------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Malloc(usize),
    Write(usize, u64),
    Read(usize),
    Free(usize),
    Compact,
}

fn any_ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        5 => prop_oneof![1usize..=400, 1usize..=5000, 1usize..=70000].prop_map(Op::Malloc),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(i, s)| Op::Write(i, s)),
        2 => any::<usize>().prop_map(Op::Read),
        3 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::Compact),
    ];
    prop::collection::vec(op, 1..300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_allocator_matches_a_model(
        which in 0..SUBJECTS.len(),
        ps in prop::sample::select(PAGE_SIZES.to_vec()),
        ops in any_ops(),
    ) {
        let s: Subject = SUBJECTS[which];
        let pool = s.open(ps);
        let max = pool.max_object_size();
        // handle -> contents; the order of `order` picks objects by index.
        let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut order: Vec<ZHandle> = Vec::new();
        let mut freed: Vec<ZHandle> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Malloc(len) => match pool.malloc(len) {
                    Ok(h) => {
                        prop_assert!(len <= max);
                        let data = pattern(step as u64, len);
                        pool.write(h, &data).unwrap();
                        prop_assert!(model.insert(h.to_raw(), data).is_none(), "handle reused while live");
                        order.push(h);
                    }
                    Err(e) => prop_assert_eq!(e, ZPoolError::TooLarge { len, max }),
                },
                Op::Write(i, seed) if !order.is_empty() => {
                    let h = order[i % order.len()];
                    let len = model[&h.to_raw()].len();
                    let data = pattern(seed, len);
                    pool.write(h, &data).unwrap();
                    model.insert(h.to_raw(), data);
                }
                Op::Read(i) if !order.is_empty() => {
                    let h = order[i % order.len()];
                    let data = &model[&h.to_raw()];
                    prop_assert_eq!(&read_vec(&*pool, h, data.len()), data);
                }
                Op::Free(i) if !order.is_empty() => {
                    let h = order.swap_remove(i % order.len());
                    model.remove(&h.to_raw());
                    pool.free(h).unwrap();
                    freed.push(h);
                }
                Op::Compact => {
                    pool.compact();
                }
                _ => {}
            }
            if let Err(e) = s.check(&*pool) {
                prop_assert!(false, "after step {}: {}", step, e);
            }
            prop_assert_eq!(pool.stats().objects, model.len() as u64);
        }
        for h in freed {
            if !model.contains_key(&h.to_raw()) {
                prop_assert!(pool.free(h).is_err(), "a freed handle must be refused");
            }
        }
        for h in &order {
            let data = &model[&h.to_raw()];
            prop_assert_eq!(&read_vec(&*pool, *h, data.len()), data);
        }
        for h in order {
            pool.free(h).unwrap();
        }
        prop_assert_eq!(pool.total_pages(), 0);
        prop_assert!(s.check(&*pool).is_ok());
    }
}

#[test]
fn read_with_sees_the_bytes_and_ends_its_read() {
    for s in SUBJECTS {
        for ps in PAGE_SIZES {
            let pool = s.open(ps);
            let max = pool.max_object_size();
            let mut live = Vec::new();
            for (id, len) in (0u64..).zip([1, 37, ps / 3, max]) {
                let h = pool.malloc(len).unwrap();
                pool.write(h, &pattern(id, len)).unwrap();
                live.push((h, id, len));
            }
            for &(h, id, len) in &live {
                for want in [len, len / 2] {
                    let mut seen = Vec::new();
                    pool.read_with(h, want, &mut |b| seen.extend_from_slice(b))
                        .unwrap();
                    assert_eq!(seen, pattern(id, len)[..want], "{} {ps} len {len}", s.label);
                }
                // A read longer than the object is refused and calls nothing.
                let mut called = false;
                let too_long = pool.read_with(h, ps + 1, &mut |_| called = true);
                assert!(too_long.is_err() && !called, "{} {ps}", s.label);
                // A read that panics still ends.
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pool.read_with(h, len, &mut |_| panic!("reader panics"))
                }));
                assert!(caught.is_err());
            }
            // Every read ended: the objects can be rewritten and freed (each
            // would wait for a read still held).
            for (h, id, len) in live {
                pool.write(h, &pattern(id + 100, len)).unwrap();
                assert_eq!(read_vec(&*pool, h, len), pattern(id + 100, len));
                pool.free(h).unwrap();
                let mut called = false;
                let freed = pool.read_with(h, len, &mut |_| called = true);
                assert!(freed.is_err() && !called, "{} {ps}", s.label);
            }
            s.check(&*pool).unwrap();
        }
    }
}
