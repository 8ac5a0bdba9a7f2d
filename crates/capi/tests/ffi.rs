//! The exported functions called from Rust: garbage input of every kind,
//! handles clear of the error range in every pool tag, and reads that begin
//! on one thread and end on another while other threads allocate, free and
//! compact.

use std::ffi::{c_ulong, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use testkit::{pattern, Rng};
use zsmalloc_capi::config::ZS_MODE_DEFAULT;
use zsmalloc_capi::errno::{err_value, is_err_value, EBUSY, EINVAL, ENOSPC, FIRST_ERR_VALUE};
use zsmalloc_capi::*;

/// A pool pointer that may cross threads (the pool is thread-safe).
#[derive(Clone, Copy)]
struct Shared(*mut ZsPool);
// SAFETY: a `ZsPool` is `Sync` (the allocator and the hold table lock
// internally) and outlives every thread that uses the pointer in these tests.
unsafe impl Send for Shared {}
// SAFETY: as above; sharing the pointer only copies it.
unsafe impl Sync for Shared {}

#[test]
fn garbage_handles_are_refused_everywhere() {
    // SAFETY: every call gets a live pool (or NULL) and valid buffers; only
    // the handles are garbage, which the API must refuse.
    unsafe {
        let pool = zs_create_pool(ptr::null());
        assert!(!pool.is_null());
        let live: Vec<c_ulong> = (0..50).map(|i| zs_malloc(pool, 10 + i * 70)).collect();
        assert!(live.iter().all(|&h| h != 0 && !is_err_value(h)));
        let mut rng = Rng(0x5eed);
        let mut buf = [0u8; 64];
        let mut garbage = vec![0, 1, c_ulong::MAX, FIRST_ERR_VALUE, FIRST_ERR_VALUE - 1];
        garbage.extend((0..2000).map(|_| rng.next_u64()));
        // Near misses of live handles: one bit flipped anywhere.
        for &h in &live[..5] {
            garbage.extend((0..64).map(|b| h ^ (1 << b)));
        }
        for g in garbage {
            if live.contains(&g) {
                continue;
            }
            assert_eq!(zs_free_checked(pool, g), -EINVAL, "{g:#x}");
            assert_eq!(
                zs_obj_write_checked(pool, g, buf.as_ptr().cast(), 8),
                -EINVAL
            );
            assert!(zs_obj_read_begin(pool, g, 8, ptr::null_mut()).is_null());
            let fake = buf.as_mut_ptr().cast::<c_void>();
            assert_eq!(zs_obj_read_end_checked(pool, g, 8, fake), -EINVAL);
            zs_free(pool, g);
            zs_obj_read_end(pool, g, 8, fake);
        }
        assert_eq!(zs_check_invariants(pool), 0);
        for &h in &live {
            assert_eq!(zs_free_checked(pool, h), 0);
        }
        assert_eq!(zs_get_total_pages(pool), 0);
        zs_destroy_pool(pool);
    }
}

#[test]
fn no_handle_is_an_error_value_in_any_pool() {
    // Pool tags cycle through 7 bits: 300 pools cover every tag twice.
    for _ in 0..300 {
        // SAFETY: a live pool is used and destroyed once.
        unsafe {
            let pool = zs_create_pool(c"tags".as_ptr());
            let hs: Vec<c_ulong> = [1, 100, 3000, 4096]
                .iter()
                .map(|&n| zs_malloc(pool, n))
                .collect();
            for h in hs {
                assert!(!is_err_value(h) && h != 0, "{h:#x}");
                assert!(h < zs::Handle::RAW_LIMIT);
                zs_free(pool, h);
            }
            assert_eq!(zs_malloc(pool, 4097), err_value(ENOSPC));
            zs_destroy_pool(pool);
        }
    }
}

#[test]
fn reads_end_on_other_threads_while_the_pool_churns() {
    // SAFETY: the pool is created here and destroyed after every thread is
    // joined; each read's address is only read, and only before its end.
    unsafe {
        let pool = Shared(zs_create_pool(c"churn".as_ptr()));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel::<(c_ulong, usize, u64, usize)>();
            // Enders: check the bytes and end reads begun elsewhere.
            let ender = s.spawn(move || {
                let p = pool;
                let mut ended = 0u64;
                for (h, addr, id, len) in rx {
                    let bytes = std::slice::from_raw_parts(addr as *const u8, len);
                    assert_eq!(bytes, &pattern(id, len)[..]);
                    assert_eq!(zs_obj_read_end_checked(p.0, h, len, addr as *mut c_void), 0);
                    ended += 1;
                }
                ended
            });
            // A compactor that keeps moving unheld objects.
            let compactor = s.spawn(|| {
                let p = pool;
                let mut freed = 0;
                while !stop.load(Ordering::Relaxed) {
                    freed += zs_compact(p.0);
                    std::thread::yield_now();
                }
                freed
            });
            let workers: Vec<_> = (0..3u64)
                .map(|t| {
                    let tx = tx.clone();
                    s.spawn(move || {
                        let p = pool;
                        let mut rng = Rng(t + 11);
                        let mut live: Vec<(c_ulong, u64, usize)> = Vec::new();
                        for i in 0..3000u64 {
                            let id = t << 32 | i;
                            let len = (rng.next_u64() % 4096 + 1) as usize;
                            let h = zs_malloc(p.0, len);
                            assert!(!is_err_value(h));
                            let data = pattern(id, len);
                            assert_eq!(zs_obj_write_checked(p.0, h, data.as_ptr().cast(), len), 0);
                            live.push((h, id, len));
                            if rng.next_u64() % 3 == 0 {
                                let (h, id, len) =
                                    live.swap_remove(rng.next_u64() as usize % live.len());
                                let addr = zs_obj_read_begin(p.0, h, len, ptr::null_mut());
                                assert!(!addr.is_null());
                                // Held: neither writes nor frees get through.
                                assert_eq!(zs_free_checked(p.0, h), -EBUSY);
                                tx.send((h, addr as usize, id, len)).unwrap();
                                // Freed once the ender is done: keep it aside.
                                live.push((h, id, len));
                            }
                            if rng.next_u64() % 2 == 0 && !live.is_empty() {
                                let (h, id, len) =
                                    live.swap_remove(rng.next_u64() as usize % live.len());
                                let mut back = vec![0u8; len];
                                let addr = zs_obj_read_begin(p.0, h, len, ptr::null_mut());
                                assert!(!addr.is_null());
                                back.copy_from_slice(std::slice::from_raw_parts(addr.cast(), len));
                                zs_obj_read_end(p.0, h, len, addr);
                                assert_eq!(back, pattern(id, len));
                                // The ender may still hold it: retry until it lets go.
                                while zs_free_checked(p.0, h) == -EBUSY {
                                    std::thread::yield_now();
                                }
                            }
                        }
                        live
                    })
                })
                .collect();
            drop(tx);
            let mut rest = Vec::new();
            for w in workers {
                rest.extend(w.join().unwrap());
            }
            assert!(ender.join().unwrap() > 0);
            stop.store(true, Ordering::Relaxed);
            compactor.join().unwrap();
            assert_eq!(zs_check_invariants(pool.0), 0);
            for (h, id, len) in rest {
                let addr = zs_obj_read_begin(pool.0, h, len, ptr::null_mut());
                assert!(!addr.is_null());
                assert_eq!(
                    std::slice::from_raw_parts(addr.cast::<u8>(), len),
                    &pattern(id, len)[..]
                );
                zs_obj_read_end(pool.0, h, len, addr);
                assert_eq!(zs_free_checked(pool.0, h), 0);
            }
        });
        assert_eq!(zs_get_total_pages(pool.0), 0);
        assert_eq!(zs_check_invariants(pool.0), 0);
        zs_destroy_pool(pool.0);
    }
}

#[test]
fn nested_reads_of_an_object_across_frames_end_one_by_one() {
    // SAFETY: a live pool, valid buffers; each address is read only between
    // its begin and its end.
    unsafe {
        let mut cfg = ZsPoolConfig::default();
        assert_eq!(zs_pool_config_init(&mut cfg, ZS_MODE_DEFAULT), 0);
        // Default mode on 16 KiB pages: zspages of 4 KiB frames, so objects
        // of 6000 bytes cross from one frame to the next and are read as
        // copies, one per read.
        cfg.page_size = 16384;
        let pool = zs_create_pool_ex(ptr::null(), &cfg);
        assert!(!pool.is_null());
        let mut crossing = 0;
        for i in 0..8u8 {
            let data = vec![i; 6000];
            let h = zs_malloc(pool, data.len());
            assert!(!is_err_value(h));
            zs_obj_write(pool, h, data.as_ptr().cast(), data.len());
            let a = zs_obj_read_begin(pool, h, data.len(), ptr::null_mut());
            let b = zs_obj_read_begin(pool, h, data.len(), ptr::null_mut());
            assert!(!a.is_null() && !b.is_null());
            crossing += usize::from(a != b);
            for p in [a, b] {
                assert_eq!(
                    std::slice::from_raw_parts(p.cast::<u8>(), data.len()),
                    &data[..]
                );
            }
            assert_eq!(zs_free_checked(pool, h), -EBUSY);
            assert_eq!(zs_obj_read_end_checked(pool, h, data.len(), a), 0);
            assert_eq!(zs_free_checked(pool, h), -EBUSY, "one read still holds it");
            assert_eq!(zs_obj_read_end_checked(pool, h, data.len(), b), 0);
            assert_eq!(zs_obj_read_end_checked(pool, h, data.len(), b), -EINVAL);
            assert_eq!(zs_free_checked(pool, h), 0);
        }
        assert!(crossing > 0, "no object crossed a frame");
        assert_eq!(zs_check_invariants(pool), 0);
        zs_destroy_pool(pool);
    }
}
