//! Raw requests on an `IoChannel` (`submit_raw`: borrowed memory, the C ABI's entry point):
//! they take the same paths, fail over with the same span on a path error and read back.

mod mp_util;

use mp_util::{drain, pattern, rig, rig_full};
use vfnvme::multipath::{HeadOptions, PathPolicy};
use vfnvme::ControllerOptions;
use vfnvme_model::{AnaState, Stall};

#[test]
fn raw_requests_fail_over_with_the_same_span_and_read_back() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    let n = 256u64;
    let mut buf = r.ctrls[0].dma().alloc(512 * n as usize).unwrap();
    for t in 0..n as usize {
        buf.as_mut_slice()[t * 512..(t + 1) * 512].copy_from_slice(&pattern(t as u64, 512));
    }
    let base = buf.as_ptr();
    let span = |t: u64| {
        // SAFETY: inside `buf`'s allocation (t < n).
        let p = unsafe { base.add(t as usize * 512) };
        r.ctrls[0]
            .dma()
            .span(p, 512)
            .expect("span of a live buffer")
    };
    for t in 0..n {
        // SAFETY: `buf` lives until the end of the test, after every request is delivered.
        unsafe { ch.submit_raw(true, t, 1, span(t), t) }.unwrap();
    }
    let sent = ch.stats().per_path;
    assert!(
        sent[0] >= n / 2 - 1 && sent[1] >= n / 2 - 1,
        "round-robin alternates raw requests from the first: {:?}",
        &sent[..2]
    );
    // Path 0 turns inaccessible before the doorbell: its commands fail over to path 1.
    r.model.set_ana_state(0, 1, AnaState::Inaccessible).unwrap();
    ch.commit();
    let done = drain(&r, &mut ch, n as usize, 100_000);
    assert_eq!(done.len(), n as usize);
    let mut seen = vec![0u32; n as usize];
    for c in &done {
        assert!(c.is_ok(), "{:?}", c.result);
        assert!(c.buffer.is_none(), "a raw request carries no buffer");
        seen[c.tag as usize] += 1;
    }
    assert!(seen.iter().all(|&k| k == 1), "exactly once");
    assert!(done.iter().any(|c| c.failovers > 0), "some failed over");
    assert!(done
        .iter()
        .filter(|c| c.failovers > 0)
        .all(|c| c.path == Some(1)));
    // Read everything back into a second buffer through the channel.
    let back = r.ctrls[0].dma().alloc(512 * n as usize).unwrap();
    let bbase = back.as_ptr();
    for t in 0..n {
        // SAFETY: inside `back` (t < n).
        let p = unsafe { bbase.add(t as usize * 512) };
        let s = r.ctrls[0].dma().span(p, 512).unwrap();
        // SAFETY: `back` lives until the reads are delivered.
        unsafe { ch.submit_raw(false, t, 1, s, t) }.unwrap();
    }
    ch.commit();
    let done = drain(&r, &mut ch, n as usize, 100_000);
    assert_eq!(done.len(), n as usize);
    assert!(done.iter().all(|c| c.is_ok() && c.path == Some(1)));
    assert_eq!(
        back.as_slice(),
        buf.as_slice(),
        "every acknowledged write reads back"
    );
    // Spans too short for the transfer are refused, not sent.
    // SAFETY: refused before anything reaches the device.
    let e = unsafe { ch.submit_raw(false, 0, 2, span(0), 9) }.unwrap_err();
    assert!(e.buffer.is_none());
    assert!(e.to_string().contains("buffer"), "{e}");
}

/// A raw write whose controller hangs and then can't be disabled ends with its error and
/// `memory_held`, and is not sent again on the other path: the old controller could still
/// carry it out, or write into the span, after the new one did (a repeated write). An owned
/// buffer on that path is kept by the driver (`buffer` None) and is not sent again either.
#[test]
fn a_raw_request_on_a_controller_that_cannot_be_disabled_is_not_failed_over() {
    const WRITE: u8 = 0x01;
    let r = rig_full(
        2,
        1,
        vec![],
        HeadOptions::default(),
        |cfg| {
            cfg.base.stalls = vec![Stall {
                qid: 1,
                opcode: WRITE,
                after_ns: u64::MAX / 4,
                completes: false,
                count: 2,
            }];
            cfg.base.ignore_disable = true;
            cfg.faulty = vec![0];
        },
        ControllerOptions {
            io_timeout_ms: 100,
            admin_timeout_ms: 1_000,
            ..ControllerOptions::default()
        },
    );
    let mut ch = r.channel(1, 64);
    ch.head().set_policy(PathPolicy::Numa);
    let buf = r.ctrls[0].dma().alloc(512).unwrap();
    let span = r.ctrls[0].dma().span(buf.as_ptr(), 512).unwrap();
    // SAFETY: `buf` lives until the end of the test (and is not freed while held).
    unsafe { ch.submit_raw(true, 7, 1, span, 1) }.unwrap();
    let owned = r.ctrls[0].dma().alloc(512).unwrap();
    ch.write(8, 1, owned, 2).unwrap();
    ch.commit();
    let done = drain(&r, &mut ch, 2, 10_000_000);
    assert_eq!(done.len(), 2, "both end: nothing hangs");
    for c in &done {
        assert!(!c.is_ok(), "{:?}", c.result);
        assert_eq!(
            c.path,
            Some(0),
            "ended on the stuck path, not sent to path 1"
        );
        assert_eq!(c.failovers, 0);
        assert!(c.memory_held, "the device may still use its memory");
        assert!(
            c.buffer.is_none(),
            "an owned buffer is kept, not handed back"
        );
    }
    assert_eq!(ch.stats().per_path[1], 0, "nothing went to path 1");
    assert!(drain(&r, &mut ch, 1, 1_000).is_empty(), "exactly once");
}
