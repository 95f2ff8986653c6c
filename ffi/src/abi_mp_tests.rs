//! Host tests of the multipath C ABI on a model subsystem: open, head options, events,
//! channels (policy switch under I/O, failover with data verified, queue-if-no-path) and
//! misuse.

use crate::ctrl::{vfnvme_ctrl_close, vfnvme_dma_alloc};
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_open_model, ModelOpts};
use crate::mp::channel::*;
use crate::mp::model::*;
use crate::mp::subsys::*;
use crate::mp::types::*;
use crate::types::Completion;
use crate::Status;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

const OK: i32 = 0;
const BS: usize = 512;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn open(controllers: u32, namespaces: u32, sopts: Option<SubsysOpts>) -> *mut Subsys {
    let opts = ModelSubsysOpts {
        controllers,
        namespaces,
        blocks: 4096,
        ..ModelSubsysOpts::default()
    };
    let mut s = null_mut();
    let so = sopts.as_ref().map_or(null(), |o| o as *const SubsysOpts);
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_subsys_open_model(&opts, so, &mut s) };
    assert_eq!(rc, OK, "{}", last_error());
    s
}

fn channel(s: *mut Subsys, nsid: u32) -> *mut Channel {
    let mut ch = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_channel_open(s, nsid, null(), &mut ch) };
    assert_eq!(rc, OK, "{}", last_error());
    ch
}

/// A DMA buffer of `blocks` blocks from the subsystem.
fn alloc(s: *mut Subsys, blocks: usize) -> *mut u8 {
    let mut p = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_subsys_dma_alloc(s, blocks * BS, &mut p, null_mut()) };
    assert_eq!(rc, OK, "{}", last_error());
    p.cast()
}

fn pattern(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..BS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Block `i` of `buf`.
fn block<'a>(buf: *mut u8, i: u64) -> &'a mut [u8] {
    // SAFETY: the callers' buffers hold every block they name.
    unsafe { std::slice::from_raw_parts_mut(buf.add(i as usize * BS), BS) }
}

/// Submits a write of block `i` of `buf` to LBA `i` (tag `i`).
fn write(ch: *mut Channel, buf: *mut u8, i: u64) -> i32 {
    // SAFETY: a live channel and a buffer from the subsystem.
    unsafe {
        vfnvme_channel_write(
            ch,
            block(buf, i).as_ptr().cast(),
            i,
            1,
            i as usize as *mut c_void,
        )
    }
}

fn read(ch: *mut Channel, buf: *mut u8, i: u64) -> i32 {
    // SAFETY: as in `write`.
    unsafe {
        vfnvme_channel_read(
            ch,
            block(buf, i).as_mut_ptr().cast(),
            i,
            1,
            i as usize as *mut c_void,
        )
    }
}

/// Polls the channel (and the subsystem now and then) until `n` completions arrived.
fn drain(s: *mut Subsys, ch: *mut Channel, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut batch = [Completion::default(); 64];
    for k in 0..200_000 {
        if out.len() >= n {
            break;
        }
        // SAFETY: live handles, a 64-entry array.
        let got = unsafe { vfnvme_channel_poll(ch, batch.as_mut_ptr(), 64) };
        assert!(got >= 0, "{}", last_error());
        out.extend_from_slice(&batch[..got as usize]);
        if k % 8 == 0 {
            // SAFETY: a live subsystem.
            assert!(unsafe { vfnvme_subsys_poll(s) } >= 0);
        }
        if got == 0 {
            // SAFETY: a live model subsystem.
            assert_eq!(unsafe { vfnvme_subsys_model_relax(s) }, OK);
        }
    }
    out
}

fn stats(ch: *mut Channel) -> ChannelStats {
    let mut st = ChannelStats::default();
    // SAFETY: live handles.
    assert_eq!(unsafe { vfnvme_channel_stats(ch, &mut st) }, OK);
    st
}

fn events(s: *mut Subsys) -> Vec<MpEvent> {
    let mut v = Vec::new();
    let mut e = MpEvent::new(MpEventKind::VfnvmeMpEventNone);
    // SAFETY: live handles.
    while unsafe { vfnvme_subsys_next_event(s, &mut e) } == 1 {
        v.push(e);
    }
    assert_eq!(e.kind, MpEventKind::VfnvmeMpEventNone);
    v
}

fn exactly_once(done: &[Completion], n: u64) {
    let mut seen = vec![0u32; n as usize];
    for c in done {
        seen[c.arg as usize] += 1;
    }
    assert!(
        seen.iter().all(|&k| k == 1),
        "every request completes exactly once"
    );
}

/// Reads LBAs 0..n back through `ch` and checks each holds `pattern(lba)`.
fn verify(s: *mut Subsys, ch: *mut Channel, n: u64) {
    let back = alloc(s, n as usize);
    for i in 0..n {
        assert_eq!(read(ch, back, i), OK, "{}", last_error());
    }
    let done = drain(s, ch, n as usize);
    assert_eq!(done.len(), n as usize);
    for c in &done {
        assert_eq!(c.cpl.rc, 0);
        assert_eq!(c.cpl.status, 0, "read of lba {:?}", c.arg);
    }
    for i in 0..n {
        assert!(
            block(back, i) == pattern(i).as_slice(),
            "lba {i} reads back what was acknowledged"
        );
    }
}

fn fill(buf: *mut u8, n: u64) {
    for i in 0..n {
        block(buf, i).copy_from_slice(&pattern(i));
    }
}

fn close(s: *mut Subsys, ch: *mut Channel) {
    // SAFETY: live handles, closed once.
    unsafe {
        assert_eq!(vfnvme_channel_close(ch), OK, "{}", last_error());
        assert_eq!(vfnvme_subsys_close(s), OK, "{}", last_error());
    }
}

#[test]
fn a_model_subsystem_has_heads_paths_and_events() {
    let s = open(2, 2, None);
    let mut nqn = [0 as std::ffi::c_char; 256];
    // SAFETY: live handles, valid buffers.
    unsafe {
        assert_eq!(vfnvme_subsys_info(s, nqn.as_mut_ptr(), nqn.len()), 2);
        let nqn = CStr::from_ptr(nqn.as_ptr()).to_string_lossy();
        assert!(nqn.starts_with("nqn."), "{nqn}");
        let mut c = std::mem::zeroed::<SubsysCtrlInfo>();
        assert_eq!(vfnvme_subsys_controller(s, 1, &mut c), OK);
        assert!(c.alive);
        assert_eq!(
            vfnvme_subsys_controller(s, 2, &mut c),
            Status::VfnvmeErrNotFound.code()
        );
        let mut h = std::mem::zeroed::<HeadInfo>();
        assert_eq!(vfnvme_subsys_head_info(s, 1, &mut h), 1, "one head of ns 1");
        let uid = CStr::from_bytes_until_nul(&h.unique_id)
            .unwrap()
            .to_string_lossy();
        assert!(!uid.starts_with("unidentified"), "{uid}");
        assert_eq!((h.nsid, h.lba_size, h.blocks, h.paths), (1, 512, 4096, 2));
        assert_eq!(h.path_state[0], MpPathState::VfnvmePathOptimized);
        assert_eq!(h.path_state[1], MpPathState::VfnvmePathOptimized);
        assert_eq!(h.path_state[2], MpPathState::VfnvmePathNone);
        assert!(h.queue_if_no_path);
        assert_eq!(h.policy, MpPolicy::VfnvmeMpPolicyNuma);
        assert_eq!(
            vfnvme_subsys_head_info(s, 9, &mut h),
            Status::VfnvmeErrNotFound.code()
        );
        assert!(last_error().contains("namespace 9"), "{}", last_error());
        // Nothing changed yet.
        assert!(vfnvme_subsys_poll(s) >= 0);
        let quiet = events(s);
        assert!(
            quiet
                .iter()
                .all(|e| e.kind == MpEventKind::VfnvmeMpEventAnaChange),
            "{quiet:?}"
        );
        // ANA: namespace 2 turns non-optimized on controller 1.
        assert_eq!(
            vfnvme_subsys_model_set_ana(s, 1, 2, MpPathState::VfnvmePathNonOptimized as u32),
            OK
        );
        for _ in 0..50 {
            vfnvme_subsys_poll(s);
            vfnvme_subsys_model_relax(s);
        }
        let ev = events(s);
        assert!(
            ev.iter()
                .any(|e| e.kind == MpEventKind::VfnvmeMpEventAnaChange && e.count >= 1),
            "{ev:?}"
        );
        let change: Vec<_> = ev
            .iter()
            .filter(|e| e.kind == MpEventKind::VfnvmeMpEventPathState)
            .collect();
        assert_eq!(change.len(), 1, "{ev:?}");
        assert_eq!((change[0].nsid, change[0].controller), (2, 1));
        assert_eq!(change[0].old_state, MpPathState::VfnvmePathOptimized);
        assert_eq!(change[0].new_state, MpPathState::VfnvmePathNonOptimized);
        assert_eq!(vfnvme_subsys_head_info(s, 2, &mut h), 1);
        assert_eq!(h.path_state[1], MpPathState::VfnvmePathNonOptimized);
        // Controller 0 removed: lost, and its paths go.
        assert_eq!(vfnvme_subsys_model_remove(s, 0), OK);
        for _ in 0..50 {
            vfnvme_subsys_poll(s);
            vfnvme_subsys_model_relax(s);
        }
        let ev = events(s);
        assert!(
            ev.iter()
                .any(|e| e.kind == MpEventKind::VfnvmeMpEventControllerLost && e.controller == 0),
            "{ev:?}"
        );
        let gone = ev
            .iter()
            .filter(|e| {
                e.controller == 0
                    && matches!(
                        e.kind,
                        MpEventKind::VfnvmeMpEventPathRemoved | MpEventKind::VfnvmeMpEventPathState
                    )
            })
            .count();
        assert_eq!(
            gone, 2,
            "both heads lose the path through controller 0: {ev:?}"
        );
        assert_eq!(vfnvme_subsys_controller(s, 0, &mut c), OK);
        assert!(!c.alive);
        assert_eq!(vfnvme_subsys_close(s), OK);
    }
}

#[test]
fn the_policy_switches_while_io_runs() {
    let s = open(2, 1, None);
    let ch = channel(s, 1);
    let n = 384u64;
    let buf = alloc(s, n as usize);
    fill(buf, n);
    // SAFETY: live handles, valid strings.
    unsafe {
        assert_eq!(
            vfnvme_subsys_set_policy_name(s, 1, c"round-robin".as_ptr()),
            OK
        );
    }
    let mut done = Vec::new();
    for i in 0..128 {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    let rr = stats(ch).per_path;
    assert!(
        rr[0] >= 60 && rr[1] >= 60,
        "round-robin uses both paths: {:?}",
        &rr[..2]
    );
    // Switched to numa with requests in flight: everything new goes to the first path.
    // SAFETY: a live subsystem.
    let rc = unsafe { vfnvme_subsys_set_policy(s, 1, MpPolicy::VfnvmeMpPolicyNuma as u32) };
    assert_eq!(rc, OK);
    done.extend(drain(s, ch, 20));
    for i in 128..256 {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    let numa = stats(ch).per_path;
    assert_eq!(numa[1], rr[1], "numa sends nothing to path 1");
    assert_eq!(numa[0], rr[0] + 128);
    // queue-depth, by name 0 = every head.
    // SAFETY: a live subsystem.
    let rc = unsafe { vfnvme_subsys_set_policy_name(s, 0, c"queue-depth".as_ptr()) };
    assert_eq!(rc, OK);
    for i in 256..n {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    let qd = stats(ch).per_path;
    assert!(
        qd[1] > numa[1],
        "queue-depth picks the idle path: {:?}",
        &qd[..2]
    );
    done.extend(drain(s, ch, n as usize - done.len()));
    exactly_once(&done, n);
    assert!(done.iter().all(|c| c.cpl.rc == 0 && c.cpl.status == 0));
    let mut h = HeadInfo {
        nsid: 0,
        lba_size: 0,
        blocks: 0,
        policy: MpPolicy::VfnvmeMpPolicyNuma,
        queue_if_no_path: false,
        delayed_removal_ms: 0,
        paths: 0,
        path_state: [MpPathState::VfnvmePathNone; VFNVME_MAX_PATHS],
        unique_id: [0; 64],
    };
    // SAFETY: live handles.
    assert!(unsafe { vfnvme_subsys_head_info(s, 1, &mut h) } > 0);
    assert_eq!(h.policy, MpPolicy::VfnvmeMpPolicyQueueDepth);
    verify(s, ch, n);
    close(s, ch);
}

#[test]
fn ana_inaccessible_under_io_fails_over_with_data_verified() {
    let s = open(
        2,
        1,
        Some(SubsysOpts {
            policy: 1,
            ..SubsysOpts::default()
        }),
    );
    let ch = channel(s, 1);
    let n = 400u64;
    let buf = alloc(s, n as usize);
    fill(buf, n);
    for i in 0..n {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    // Path 0 turns inaccessible before the doorbell: its commands fail with the ANA status.
    // SAFETY: a live subsystem.
    let rc =
        unsafe { vfnvme_subsys_model_set_ana(s, 0, 1, MpPathState::VfnvmePathInaccessible as u32) };
    assert_eq!(rc, OK);
    // SAFETY: a live channel.
    assert_eq!(unsafe { vfnvme_channel_commit(ch) }, OK);
    let done = drain(s, ch, n as usize);
    exactly_once(&done, n);
    assert!(
        done.iter().all(|c| c.cpl.rc == 0 && c.cpl.status == 0),
        "no error reaches the user"
    );
    let over: Vec<_> = done.iter().filter(|c| c.failovers > 0).collect();
    assert!(!over.is_empty(), "requests on path 0 failed over");
    assert!(over.iter().all(|c| c.path == 1));
    let st = stats(ch);
    assert_eq!(st.failovers, over.len() as u64);
    let before = st.per_path;
    verify(s, ch, n);
    let after = stats(ch).per_path;
    assert_eq!(
        after[0], before[0],
        "nothing more goes to the inaccessible path"
    );
    assert_eq!(after[1], before[1] + n);
    close(s, ch);
}

#[test]
fn a_controller_removed_under_io_fails_over_with_data_verified() {
    let s = open(
        2,
        1,
        Some(SubsysOpts {
            policy: 1,
            ..SubsysOpts::default()
        }),
    );
    let ch = channel(s, 1);
    let n = 300u64;
    let buf = alloc(s, n as usize);
    fill(buf, n);
    for i in 0..n {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    // SAFETY: live handles.
    unsafe {
        assert_eq!(vfnvme_channel_commit(ch), OK);
        assert_eq!(vfnvme_subsys_model_remove(s, 0), OK);
    }
    let done = drain(s, ch, n as usize);
    exactly_once(&done, n);
    assert!(
        done.iter().all(|c| c.cpl.rc == 0 && c.cpl.status == 0),
        "{:?}",
        done.iter().find(|c| c.cpl.status != 0)
    );
    // SAFETY: a live subsystem.
    unsafe { vfnvme_subsys_poll(s) };
    let ev = events(s);
    assert!(
        ev.iter()
            .any(|e| e.kind == MpEventKind::VfnvmeMpEventControllerLost),
        "{ev:?}"
    );
    verify(s, ch, n);
    close(s, ch);
}

/// Both paths inaccessible: `n` writes wait in the channel's queue.
fn queued(n: u64) -> (*mut Subsys, *mut Channel, *mut u8) {
    let s = open(2, 1, None);
    let ch = channel(s, 1);
    let buf = alloc(s, n as usize);
    fill(buf, n);
    // SAFETY: a live subsystem.
    unsafe {
        for c in 0..2 {
            assert_eq!(
                vfnvme_subsys_model_set_ana(s, c, 1, MpPathState::VfnvmePathInaccessible as u32),
                OK
            );
        }
        for _ in 0..20 {
            vfnvme_subsys_poll(s);
            vfnvme_subsys_model_relax(s);
        }
    }
    for i in 0..n {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    let mut none = [Completion::default(); 8];
    // SAFETY: live handles.
    assert_eq!(unsafe { vfnvme_channel_poll(ch, none.as_mut_ptr(), 8) }, 0);
    let st = stats(ch);
    assert_eq!((st.queued, st.outstanding), (n, n));
    (s, ch, buf)
}

#[test]
fn queueing_switched_off_fails_every_queued_request_with_a_typed_status() {
    let n = 500;
    let (s, ch, buf) = queued(n);
    // SAFETY: a live subsystem.
    let rc = unsafe { vfnvme_subsys_set_queue_if_no_path(s, 1, false) };
    assert_eq!(rc, OK);
    // All fail at once, at the next poll; a small array takes them over several polls,
    // none lost.
    let mut out = Vec::new();
    let mut small = [Completion::default(); 7];
    // SAFETY: live handles, an array of 7 entries.
    let got = unsafe { vfnvme_channel_poll(ch, small.as_mut_ptr(), 7) };
    assert_eq!(got, 7);
    out.extend_from_slice(&small);
    assert_eq!(stats(ch).outstanding, n - 7, "the rest wait in the channel");
    while out.len() < n as usize {
        // SAFETY: as above.
        let got = unsafe { vfnvme_channel_poll(ch, small.as_mut_ptr(), 7) };
        assert!(got > 0, "{} of {n} delivered", out.len());
        out.extend_from_slice(&small[..got as usize]);
    }
    for c in &out[..n as usize] {
        assert_eq!(c.cpl.rc, Status::VfnvmeErrNoPath.code());
        assert_eq!(c.reason, MpFail::VfnvmeMpFailQueueingOff);
        assert_eq!(c.path, -1);
    }
    exactly_once(&out[..n as usize], n);
    assert_eq!(stats(ch).failed_no_path, n);
    // New requests fail at submission.
    assert_eq!(write(ch, buf, 0), Status::VfnvmeErrNoPath.code());
    assert!(last_error().contains("no usable path"), "{}", last_error());
    close(s, ch);
}

#[test]
fn queued_requests_go_out_when_a_path_returns() {
    let n = 200;
    let (s, ch, _buf) = queued(n);
    // SAFETY: a live subsystem.
    let rc =
        unsafe { vfnvme_subsys_model_set_ana(s, 1, 1, MpPathState::VfnvmePathOptimized as u32) };
    assert_eq!(rc, OK);
    let done = drain(s, ch, n as usize);
    exactly_once(&done, n);
    assert!(done
        .iter()
        .all(|c| c.cpl.rc == 0 && c.cpl.status == 0 && c.path == 1));
    verify(s, ch, n);
    close(s, ch);
}

#[test]
fn the_delayed_removal_time_fails_queued_requests_when_it_runs_out() {
    let s = open(
        2,
        1,
        Some(SubsysOpts {
            delayed_removal_ms: 5,
            ..SubsysOpts::default()
        }),
    );
    let ch = channel(s, 1);
    let buf = alloc(s, 4);
    // SAFETY: a live subsystem.
    unsafe {
        for c in 0..2 {
            assert_eq!(
                vfnvme_subsys_model_set_ana(s, c, 1, MpPathState::VfnvmePathInaccessible as u32),
                OK
            );
        }
    }
    for _ in 0..20 {
        // SAFETY: a live subsystem.
        unsafe {
            vfnvme_subsys_poll(s);
            vfnvme_subsys_model_relax(s);
        }
    }
    for i in 0..4 {
        assert_eq!(write(ch, buf, i), OK);
    }
    let done = drain(s, ch, 4);
    assert_eq!(done.len(), 4, "the timer ran out in virtual time");
    assert!(done
        .iter()
        .all(|c| c.reason == MpFail::VfnvmeMpFailNoPathTimeout
            && c.cpl.rc == Status::VfnvmeErrNoPath.code()));
    close(s, ch);
}

#[test]
fn misuse_is_refused_with_typed_errors() {
    let inval = Status::VfnvmeErrInvalidArgument.code();
    let s = open(2, 1, None);
    // SAFETY: every call below is given NULL, stale or foreign handles on purpose, or live
    // ones; none of it is dereferenced by vfnvme when refused.
    unsafe {
        let mut out = null_mut();
        assert_eq!(vfnvme_subsys_open_model(null(), null(), null_mut()), inval);
        let bad = SubsysOpts {
            policy: 7,
            ..SubsysOpts::default()
        };
        assert_eq!(vfnvme_subsys_open_model(null(), &bad, &mut out), inval);
        assert!(last_error().contains("policy 7"), "{}", last_error());
        assert_eq!(vfnvme_subsys_poll(null()), inval);
        assert_eq!(
            vfnvme_channel_open(null(), 1, null(), &mut null_mut()),
            inval
        );
        assert_eq!(vfnvme_channel_open(s, 1, null(), null_mut()), inval);
        // Wrong nsid.
        let mut ch = null_mut();
        assert_eq!(
            vfnvme_channel_open(s, 3, null(), &mut ch),
            Status::VfnvmeErrNotFound.code()
        );
        assert!(ch.is_null());
        let ch = channel(s, 1);
        assert_eq!(
            vfnvme_channel_read(null_mut(), null_mut(), 0, 1, null_mut()),
            inval
        );
        assert_eq!(vfnvme_channel_poll(ch, null_mut(), 4), inval);
        assert_eq!(vfnvme_channel_stats(ch, null_mut()), inval);
        assert_eq!(vfnvme_subsys_set_policy(s, 1, 9), inval);
        assert_eq!(
            vfnvme_subsys_set_policy_name(s, 1, c"fastest".as_ptr()),
            inval
        );
        assert!(last_error().contains("round-robin"), "{}", last_error());
        assert_eq!(vfnvme_subsys_set_policy_name(s, 1, null()), inval);
        assert_eq!(
            vfnvme_subsys_set_queue_if_no_path(s, 4, false),
            Status::VfnvmeErrNotFound.code()
        );
        // Buffers: not DMA memory, another pool, too short, freed.
        let mut plain = vec![0u8; 4096];
        assert_eq!(
            vfnvme_channel_read(ch, plain.as_mut_ptr().cast(), 0, 1, null_mut()),
            Status::VfnvmeErrBadBuffer.code()
        );
        let mut ctrl = null_mut();
        let mopts = ModelOpts {
            lba_size: 512,
            ..ModelOpts::default()
        };
        assert_eq!(vfnvme_ctrl_open_model(&mopts, &mut ctrl), OK);
        let mut foreign = null_mut();
        assert_eq!(vfnvme_dma_alloc(ctrl, 4096, &mut foreign, null_mut()), OK);
        assert_eq!(
            vfnvme_channel_read(ch, foreign, 0, 1, null_mut()),
            Status::VfnvmeErrBadBuffer.code()
        );
        assert!(
            last_error().contains("vfnvme_subsys_dma_alloc"),
            "{}",
            last_error()
        );
        let buf = alloc(s, 2);
        assert_eq!(
            vfnvme_channel_read(ch, buf.cast(), 0, 3, null_mut()),
            Status::VfnvmeErrBadBuffer.code()
        );
        assert!(
            last_error().contains("runs past the end"),
            "{}",
            last_error()
        );
        assert_eq!(
            vfnvme_channel_read(ch, buf.add(512).cast(), 0, 2, null_mut()),
            Status::VfnvmeErrBadBuffer.code()
        );
        assert_eq!(
            vfnvme_channel_read(ch, buf.cast(), 4096, 1, null_mut()),
            Status::VfnvmeErrOutOfRange.code()
        );
        assert_eq!(
            vfnvme_channel_read(ch, buf.cast(), 0, 0, null_mut()),
            Status::VfnvmeErrOutOfRange.code()
        );
        assert_eq!(
            vfnvme_subsys_dma_free(s, foreign),
            Status::VfnvmeErrBadBuffer.code()
        );
        assert_eq!(vfnvme_subsys_dma_free(s, buf.cast()), OK);
        assert_eq!(
            vfnvme_channel_read(ch, buf.cast(), 0, 1, null_mut()),
            Status::VfnvmeErrBadBuffer.code()
        );
        assert!(last_error().contains("freed"), "{}", last_error());
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
        // A channel with requests outstanding, and a subsystem with channels, stay open.
        let buf = alloc(s, 1);
        assert_eq!(vfnvme_channel_read(ch, buf.cast(), 0, 1, null_mut()), OK);
        assert_eq!(vfnvme_channel_close(ch), Status::VfnvmeErrBusy.code());
        assert_eq!(vfnvme_subsys_close(s), Status::VfnvmeErrBusy.code());
        assert_eq!(drain(s, ch, 1).len(), 1);
        // Closed twice, used after close.
        assert_eq!(vfnvme_channel_close(ch), OK);
        assert_eq!(vfnvme_channel_close(ch), inval);
        assert!(last_error().contains("not open"), "{}", last_error());
        assert_eq!(vfnvme_subsys_close(s), OK);
        assert_eq!(vfnvme_subsys_close(s), inval);
        assert_eq!(vfnvme_subsys_poll(s), inval);
        let mut c2 = null_mut();
        assert_eq!(vfnvme_channel_open(s, 1, null(), &mut c2), inval);
        assert_eq!(vfnvme_subsys_close(null_mut()), OK);
        assert_eq!(vfnvme_channel_close(null_mut()), OK);
    }
}

#[test]
fn controllers_of_two_subsystems_are_not_one_subsystem() {
    let opts = ModelSubsysOpts {
        controllers: 1,
        ..ModelSubsysOpts::default()
    };
    let a = model_subsystem(&opts, "nqn.2024-01.io.vfnvme:a").unwrap();
    let b = model_subsystem(&opts, "nqn.2024-01.io.vfnvme:b").unwrap();
    let mut ctrls = bring_up(a.controllers()).unwrap();
    ctrls.extend(bring_up(b.controllers()).unwrap());
    let e = vfnvme::multipath::Subsystem::from_controllers(ctrls, Default::default()).unwrap_err();
    let f = crate::mp::subsys::mp_error(&e);
    assert_eq!(f.status, Status::VfnvmeErrNotOneSubsystem);
    assert!(
        f.message.contains("nqn.2024-01.io.vfnvme:b"),
        "{}",
        f.message
    );
}

#[test]
fn namespace_attachment_takes_a_path_away_under_io_and_brings_it_back() {
    let s = open(
        2,
        1,
        Some(SubsysOpts {
            policy: 1,
            ..SubsysOpts::default()
        }),
    );
    let ch = channel(s, 1);
    let n = 300u64;
    let buf = alloc(s, n as usize);
    fill(buf, n);
    for i in 0..n {
        assert_eq!(write(ch, buf, i), OK, "{}", last_error());
    }
    // SAFETY: live handles.
    unsafe {
        assert_eq!(
            vfnvme_subsys_namespace_attachment(s, 0, 1, false),
            OK,
            "{}",
            last_error()
        );
        assert_eq!(vfnvme_channel_commit(ch), OK);
    }
    let done = drain(s, ch, n as usize);
    exactly_once(&done, n);
    assert!(
        done.iter().all(|c| c.cpl.rc == 0 && c.cpl.status == 0),
        "no error reaches the user"
    );
    // SAFETY: a live subsystem.
    unsafe { vfnvme_subsys_poll(s) };
    let ev = events(s);
    assert!(
        ev.iter()
            .any(|e| e.kind == MpEventKind::VfnvmeMpEventPathRemoved
                && e.controller == 0
                && e.nsid == 1),
        "{ev:?}"
    );
    let before = stats(ch).per_path;
    verify(s, ch, n);
    assert_eq!(
        stats(ch).per_path[0],
        before[0],
        "nothing goes to the detached path"
    );
    // SAFETY: live handles.
    unsafe {
        assert_eq!(
            vfnvme_subsys_namespace_attachment(s, 0, 1, false),
            Status::VfnvmeErrDevice.code()
        );
        assert!(
            last_error().contains("Namespace Attachment"),
            "{}",
            last_error()
        );
        assert_eq!(
            vfnvme_subsys_namespace_attachment(s, 0, 1, true),
            OK,
            "{}",
            last_error()
        );
        assert_eq!(
            vfnvme_subsys_namespace_attachment(s, 5, 1, true),
            Status::VfnvmeErrNotFound.code()
        );
        for _ in 0..50 {
            vfnvme_subsys_poll(s);
            vfnvme_subsys_model_relax(s);
        }
    }
    let ev = events(s);
    assert!(
        ev.iter()
            .any(|e| e.kind == MpEventKind::VfnvmeMpEventPathAdded
                && e.controller == 0
                && e.nsid == 1),
        "{ev:?}"
    );
    let back = stats(ch).per_path;
    verify(s, ch, n);
    assert!(
        stats(ch).per_path[0] > back[0],
        "round-robin uses the path again"
    );
    close(s, ch);
}

/// Frees `buf` (a buffer from `alloc`) and returns the status.
fn free(s: *mut Subsys, buf: *mut u8) -> i32 {
    // SAFETY: a live subsystem; `buf` is from it (freed once it succeeds).
    unsafe { vfnvme_subsys_dma_free(s, buf.cast()) }
}

#[test]
fn a_buffer_a_channel_request_uses_cannot_be_freed() {
    let busy = Status::VfnvmeErrBusy.code();
    let s = open(2, 1, None);
    let ch = channel(s, 1);
    let a = alloc(s, 2);
    let b = alloc(s, 1);
    let c = alloc(s, 1);
    // A read into the second block of `a`, sent to a path, not yet polled.
    assert_eq!(read(ch, a, 1), OK, "{}", last_error());
    // SAFETY: a live channel.
    assert_eq!(unsafe { vfnvme_channel_commit(ch) }, OK);
    assert_eq!(free(s, a), busy);
    assert!(
        last_error().contains("poll them with vfnvme_channel_poll"),
        "{}",
        last_error()
    );
    // A flush holds no buffer; another buffer is free to go; a refused submission leaves no
    // mark behind.
    // SAFETY: a live channel.
    assert_eq!(unsafe { vfnvme_channel_flush(ch, 77 as *mut c_void) }, OK);
    assert_eq!(free(s, b), OK);
    // SAFETY: a live channel; the LBA is past the namespace's end (refused).
    let rc = unsafe { vfnvme_channel_read(ch, c.cast(), 4096, 1, null_mut()) };
    assert_eq!(rc, Status::VfnvmeErrOutOfRange.code());
    assert_eq!(free(s, c), OK);
    // Polled: the completions carry their `arg` and the buffer goes.
    let done = drain(s, ch, 2);
    let mut args: Vec<usize> = done.iter().map(|c| c.arg as usize).collect();
    args.sort_unstable();
    assert_eq!(args, [1, 77]);
    assert!(done.iter().all(|c| c.cpl.rc == 0 && c.cpl.status == 0));
    assert_eq!(free(s, a), OK);
    close(s, ch);
}

#[test]
fn a_buffer_a_queued_request_uses_cannot_be_freed_until_it_is_handed_out() {
    let busy = Status::VfnvmeErrBusy.code();
    let n = 4;
    // `n` writes of `buf` wait in the channel's queue: no path is usable.
    let (s, ch, buf) = queued(n);
    let other = alloc(s, 1);
    assert_eq!(free(s, buf), busy, "queued in the channel");
    assert_eq!(free(s, other), OK);
    // Queueing off: all fail at once at the next poll; a one-entry array takes one, the
    // rest wait in the channel (their buffer still in use until they are handed out).
    // SAFETY: a live subsystem.
    let rc = unsafe { vfnvme_subsys_set_queue_if_no_path(s, 1, false) };
    assert_eq!(rc, OK);
    let mut one = [Completion::default(); 1];
    // SAFETY: live handles, a one-entry array.
    assert_eq!(unsafe { vfnvme_channel_poll(ch, one.as_mut_ptr(), 1) }, 1);
    assert_eq!(one[0].reason, MpFail::VfnvmeMpFailQueueingOff);
    assert_eq!(stats(ch).outstanding, n - 1);
    assert_eq!(free(s, buf), busy, "failed, not yet handed out");
    let mut out = vec![one[0]];
    let mut rest = [Completion::default(); 8];
    // SAFETY: live handles, an 8-entry array.
    let got = unsafe { vfnvme_channel_poll(ch, rest.as_mut_ptr(), 8) };
    assert_eq!(got, (n - 1) as i32);
    out.extend_from_slice(&rest[..got as usize]);
    exactly_once(&out, n);
    assert!(out
        .iter()
        .all(|c| c.reason == MpFail::VfnvmeMpFailQueueingOff
            && c.cpl.rc == Status::VfnvmeErrNoPath.code()));
    assert_eq!(stats(ch).outstanding, 0);
    assert_eq!(free(s, buf), OK, "every request failed and was handed out");
    close(s, ch);
}

#[test]
fn a_buffer_is_free_to_go_once_every_queued_request_failed_at_once() {
    let n = 50;
    let (s, ch, buf) = queued(n);
    assert_eq!(free(s, buf), Status::VfnvmeErrBusy.code());
    // SAFETY: a live subsystem.
    let rc = unsafe { vfnvme_subsys_set_queue_if_no_path(s, 1, false) };
    assert_eq!(rc, OK);
    let mut out = [Completion::default(); 64];
    // SAFETY: live handles, a 64-entry array.
    let got = unsafe { vfnvme_channel_poll(ch, out.as_mut_ptr(), 64) };
    assert_eq!(got, n as i32, "all at once");
    exactly_once(&out[..n as usize], n);
    assert_eq!(free(s, buf), OK);
    close(s, ch);
}

#[test]
fn the_io_calls_refuse_a_channel_that_is_not_open() {
    let inval = Status::VfnvmeErrInvalidArgument.code();
    let s = open(2, 1, None);
    let buf = alloc(s, 1);
    // Reading a closed channel's freed memory would be undefined behaviour; a zeroed object
    // of a channel's size and alignment stands in for one whose magic is not that of an open
    // channel (as after close), and a misaligned pointer for a foreign one.
    let mut fake = std::mem::MaybeUninit::<Channel>::zeroed();
    let zeroed = fake.as_mut_ptr();
    // SAFETY: one byte into the fake object: in bounds, never dereferenced (refused first).
    let misaligned = unsafe { zeroed.cast::<u8>().add(1) }.cast::<Channel>();
    let mut out = [Completion::default(); 4];
    let mut st = ChannelStats::default();
    for ch in [zeroed, misaligned] {
        // SAFETY: pointers to readable memory of a channel's size (only the magic is read);
        // a live subsystem's buffer; valid out-pointers.
        unsafe {
            assert_eq!(vfnvme_channel_read(ch, buf.cast(), 0, 1, null_mut()), inval);
            assert!(last_error().contains("is not open"), "{}", last_error());
            assert_eq!(
                vfnvme_channel_write(ch, buf.cast(), 0, 1, null_mut()),
                inval
            );
            assert_eq!(vfnvme_channel_flush(ch, null_mut()), inval);
            assert_eq!(vfnvme_channel_commit(ch), inval);
            assert_eq!(vfnvme_channel_poll(ch, out.as_mut_ptr(), 4), inval);
            assert_eq!(vfnvme_channel_stats(ch, &mut st), inval);
            assert!(last_error().contains("is not open"), "{}", last_error());
        }
    }
    // An open channel passes the check, and is refused once closed (by the registry).
    let ch = channel(s, 1);
    assert_eq!(read(ch, buf, 0), OK, "{}", last_error());
    assert_eq!(drain(s, ch, 1).len(), 1);
    assert_eq!(free(s, buf), OK);
    // SAFETY: a live channel, closed once; the second close is refused by the registry
    // without touching its memory.
    unsafe {
        assert_eq!(vfnvme_channel_close(ch), OK);
        assert_eq!(vfnvme_channel_close(ch), inval);
        assert_eq!(vfnvme_subsys_close(s), OK);
    }
}
