//! Scenario `data`: a controller reset under load. Two threads, one queue pair
//! each, write and read back their own slots of the namespace at queue depth 16 with every
//! read checked; the main thread resets the controller through the API in the middle. Every
//! request must complete exactly once (success, or `ABORTED_BY_RESET` with its buffer back),
//! data acknowledged as written must read back, and I/O must go on after the reset. Prints a
//! line of counts for the closing note.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vfnvme::admin::ControllerEvent;
use vfnvme::hal::DmaBuffer;
use vfnvme::spec::Status;
use vfnvme_tests::{guest, guest_io};

const THREADS: usize = 2;
const DEPTH: usize = 16;
const SLOTS: u64 = 256;
const IO: usize = 4096;
/// Successful completions per thread before the reset, and again after it.
const PHASE: u64 = 400;

/// The bytes slot `slot` of thread `t` holds after its write of generation `gen`.
fn pattern(t: usize, slot: u64, gen: u64) -> Vec<u8> {
    guest_io::random_bytes(IO, (t as u64) << 48 | slot << 24 | gen)
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    issued: u64,
    ok: u64,
    aborted: u64,
    lost: u64,
    duplicated: u64,
    corrupt: u64,
    other_errors: u64,
}

/// What a slot holds: the generation of its last acknowledged write, and that of a write
/// aborted by the reset (it may or may not have reached the medium).
#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    acked: Option<u64>,
    maybe: Option<u64>,
    in_flight: bool,
    next_gen: u64,
}

fn matches(t: usize, slot: u64, s: &Slot, data: &[u8]) -> bool {
    let is = |g: Option<u64>| g.is_some_and(|g| pattern(t, slot, g) == data);
    match (s.acked, s.maybe) {
        (None, None) => true, // never written: whatever the image held
        (a, m) => is(a) || is(m) || (a.is_none() && data.iter().all(|&b| b == 0)),
    }
}

#[allow(clippy::too_many_arguments)]
fn worker(
    t: usize,
    ctrl: &guest_io::Ctrl,
    ns: &vfnvme::namespace::Namespace,
    mut qp: guest_io::Qpair,
    done: &AtomicU64,
    stop: &AtomicBool,
) -> (Counts, Vec<Slot>) {
    let blocks = (IO as u32) / ns.lba_size();
    let first = 4096 + t as u64 * SLOTS * u64::from(blocks);
    let lba = |slot: u64| first + slot * u64::from(blocks);
    let mut slots = vec![Slot::default(); SLOTS as usize];
    let mut c = Counts::default();
    let mut bufs: Vec<DmaBuffer> = (0..DEPTH).map(|_| ctrl.dma().alloc(IO).unwrap()).collect();
    let mut next = 0u64;
    // Tag: slot << 1 | is_read.
    let submit = |qp: &mut guest_io::Qpair,
                  slots: &mut [Slot],
                  c: &mut Counts,
                  bufs: &mut Vec<DmaBuffer>,
                  next: &mut u64| {
        while let Some(mut buf) = bufs.pop() {
            let slot = *next % SLOTS;
            *next += 1;
            let s = &mut slots[slot as usize];
            if s.in_flight {
                bufs.push(buf);
                return;
            }
            // Alternate per slot: write a new generation, then read it back.
            let read = s.acked.is_some() && s.next_gen % 2 == 1;
            let r = if read {
                qp.read(ns, lba(slot), blocks, buf, slot << 1 | 1)
            } else {
                let g = s.next_gen;
                buf.as_mut_slice().copy_from_slice(&pattern(t, slot, g));
                qp.write(ns, lba(slot), blocks, buf, slot << 1)
            };
            s.next_gen += 1;
            match r {
                Ok(()) => {
                    s.in_flight = true;
                    c.issued += 1;
                }
                Err(e) => panic!("thread {t}: submission refused: {e}"),
            }
        }
        qp.commit();
    };
    let on_completion = |cpl: vfnvme::IoCompletion,
                         slots: &mut [Slot],
                         c: &mut Counts,
                         bufs: &mut Vec<DmaBuffer>| {
        let slot = cpl.tag >> 1;
        let read = cpl.tag & 1 == 1;
        let s = &mut slots[slot as usize];
        if !s.in_flight {
            c.duplicated += 1;
            return;
        }
        s.in_flight = false;
        // The generation this request carried (next_gen was bumped at submission).
        let g = s.next_gen - 1;
        match cpl.status {
            st if st.is_success() => {
                c.ok += 1;
                done.fetch_add(1, Ordering::Relaxed);
                if read {
                    if !matches(t, slot, s, cpl.buffer.as_ref().unwrap().as_slice()) {
                        c.corrupt += 1;
                    }
                } else {
                    s.acked = Some(g);
                    s.maybe = None;
                }
            }
            Status::ABORTED_BY_RESET => {
                c.aborted += 1;
                if !read {
                    s.maybe = Some(g);
                }
            }
            _ => c.other_errors += 1,
        }
        match cpl.buffer {
            Some(b) => bufs.push(b),
            None => c.lost += 1, // leaked: the device might still use it
        }
    };
    while !stop.load(Ordering::Relaxed) {
        submit(&mut qp, &mut slots, &mut c, &mut bufs, &mut next);
        let mut got = Vec::new();
        qp.poll(usize::MAX, |cpl| got.push(cpl));
        for cpl in got {
            on_completion(cpl, &mut slots, &mut c, &mut bufs);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while qp.outstanding() > 0 && Instant::now() < deadline {
        let mut got = Vec::new();
        qp.poll(usize::MAX, |cpl| got.push(cpl));
        for cpl in got {
            on_completion(cpl, &mut slots, &mut c, &mut bufs);
        }
    }
    c.lost += qp.outstanding() as u64;
    // Read every slot back once more: what was acknowledged is there.
    for slot in 0..SLOTS {
        let s = slots[slot as usize];
        if s.acked.is_none() && s.maybe.is_none() {
            continue;
        }
        let buf = ctrl.dma().alloc(IO).unwrap();
        let buf = qp
            .read_sync(ns, lba(slot), blocks, buf)
            .unwrap_or_else(|e| panic!("thread {t}: final read of slot {slot}: {e}"));
        if !matches(t, slot, &s, buf.as_slice()) {
            c.corrupt += 1;
        }
    }
    (c, slots)
}

#[test]
fn a_reset_under_load_ends_each_request_once_and_keeps_the_data() {
    if !guest::in_guest(
        "guest_data_resetload::a_reset_under_load_ends_each_request_once_and_keeps_the_data",
    ) {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let events = ctrl.subscribe_controller_events();
    let ns = guest_io::namespace(&ctrl, 1);
    let done: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let wait_all = |at_least: &[u64], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(300);
        while done
            .iter()
            .zip(at_least)
            .any(|(d, &n)| d.load(Ordering::Relaxed) < n)
        {
            assert!(Instant::now() < deadline, "{what}: I/O stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let results: Vec<(Counts, Vec<Slot>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let qp = guest_io::qpair(&ctrl, 64);
                let (ctrl, ns, done, stop) = (&ctrl, &ns, &done[t], &stop);
                s.spawn(move || worker(t, ctrl, ns, qp, done, stop))
            })
            .collect();
        wait_all(&[PHASE; THREADS], "before the reset");
        let at_reset: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
        let start = Instant::now();
        ctrl.reset().expect("controller reset under load");
        let took = start.elapsed();
        eprintln!("reset under load took {took:?}; completions before it: {at_reset:?}");
        let after: Vec<u64> = at_reset.iter().map(|n| n + PHASE).collect();
        wait_all(&after, "after the reset");
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let seen: Vec<ControllerEvent> = events.try_iter().collect();
    assert_eq!(
        seen,
        [ControllerEvent::ResetStarted, ControllerEvent::ResetDone]
    );
    let mut total = Counts::default();
    for (t, (c, _)) in results.iter().enumerate() {
        eprintln!("thread {t}: {c:?}");
        total.issued += c.issued;
        total.ok += c.ok;
        total.aborted += c.aborted;
        total.lost += c.lost;
        total.duplicated += c.duplicated;
        total.corrupt += c.corrupt;
        total.other_errors += c.other_errors;
    }
    println!(
        "RESET-UNDER-LOAD issued={} ok={} aborted={} lost={} duplicated={} corrupt={} other_errors={}",
        total.issued,
        total.ok,
        total.aborted,
        total.lost,
        total.duplicated,
        total.corrupt,
        total.other_errors
    );
    assert_eq!(total.lost, 0, "every request completed (buffers back)");
    assert_eq!(total.duplicated, 0);
    assert_eq!(total.corrupt, 0);
    assert_eq!(total.other_errors, 0);
    assert_eq!(total.issued, total.ok + total.aborted, "each exactly once");
    assert!(
        total.ok >= 2 * PHASE * THREADS as u64,
        "I/O went on after the reset"
    );
}
