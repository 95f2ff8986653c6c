//! I/O helpers for guest tests: open a controller on vfio-pci, seeded random data, synchronous
//! write / read / verify over any size, and bounded waits for batches of completions.

use std::time::{Duration, Instant};

use vfnvme::hal::DmaBuffer;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions, IoCompletion, Namespace, QpairOptions, QueuePair};

/// A controller driven through VFIO.
pub type Ctrl = Controller<VfioPlatform>;
/// A queue pair of such a controller.
pub type Qpair = QueuePair<VfioPlatform>;

/// How long a batch of commands may take under TCG before the test fails.
pub const IO_DEADLINE: Duration = Duration::from_secs(60);

/// Opens the controller at `bdf` (on vfio-pci) with the default options.
pub fn open(bdf: &str) -> Ctrl {
    open_with(bdf, ControllerOptions::default())
}

/// Opens the controller at `bdf` with `options`; panics with the driver's error message.
pub fn open_with(bdf: &str, options: ControllerOptions) -> Ctrl {
    let platform = VfioPlatform::open(bdf, VfioOptions::default())
        .unwrap_or_else(|e| panic!("{bdf}: opening through VFIO failed: {e}"));
    Controller::new(platform, options)
        .unwrap_or_else(|e| panic!("{bdf}: controller bring-up failed: {e}"))
}

/// A queue pair of `depth` entries.
pub fn qpair(ctrl: &Ctrl, depth: u32) -> Qpair {
    ctrl.alloc_qpair(QpairOptions {
        depth,
        ..QpairOptions::default()
    })
    .unwrap_or_else(|e| panic!("creating a queue pair of depth {depth}: {e}"))
}

/// Namespace `nsid`, which the test expects to exist.
pub fn namespace(ctrl: &Ctrl, nsid: u32) -> std::sync::Arc<Namespace> {
    ctrl.namespace(nsid)
        .unwrap_or_else(|| panic!("namespace {nsid} not found by the driver"))
}

/// SplitMix64: small, seeded, reproducible.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Prng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// `len` random bytes from `seed`.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Prng::new(seed).fill(&mut v);
    v
}

/// Panics at the first differing byte (with its offset and LBA), never dumping whole buffers.
pub fn assert_same(expected: &[u8], got: &[u8], lba_size: u32, what: &str) {
    assert_eq!(expected.len(), got.len(), "{what}: lengths differ");
    if let Some(i) = expected.iter().zip(got).position(|(a, b)| a != b) {
        let bad = expected.iter().zip(got).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: first difference at byte {i} (block {} of the request): expected {:#04x}, got {:#04x}; {bad} bytes differ",
            i / lba_size as usize,
            expected[i],
            got[i]
        );
    }
}

fn dma_buffer(ctrl: &Ctrl, len: usize) -> DmaBuffer {
    ctrl.dma()
        .alloc(len)
        .unwrap_or_else(|e| panic!("allocating a {len}-byte DMA buffer: {e}"))
}

fn blocks_of(ns: &Namespace, len: usize) -> u32 {
    let lba = ns.lba_size() as usize;
    assert_eq!(
        len % lba,
        0,
        "{len} bytes is not a whole number of {lba}-byte blocks"
    );
    u32::try_from(len / lba).expect("block count fits in u32")
}

/// Writes `data` (whole blocks) at `lba` and waits for it.
pub fn write(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, data: &[u8]) {
    let mut buf = dma_buffer(ctrl, data.len());
    buf.as_mut_slice().copy_from_slice(data);
    qp.write_sync(ns, lba, blocks_of(ns, data.len()), buf)
        .unwrap_or_else(|e| panic!("write of {} bytes at LBA {lba}: {e}", data.len()));
}

/// Reads `len` bytes (whole blocks) at `lba`.
pub fn read(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, len: usize) -> Vec<u8> {
    let mut buf = dma_buffer(ctrl, len);
    // Poison the buffer so that a read that moved no data cannot pass a check of zeroes.
    buf.as_mut_slice().fill(0xa5);
    let buf = qp
        .read_sync(ns, lba, blocks_of(ns, len), buf)
        .unwrap_or_else(|e| panic!("read of {len} bytes at LBA {lba}: {e}"));
    buf.as_slice().to_vec()
}

/// Writes `data` at `lba`, reads it back and compares every byte.
pub fn write_read_verify(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, data: &[u8]) {
    write(ctrl, qp, ns, lba, data);
    let got = read(ctrl, qp, ns, lba, data.len());
    assert_same(
        data,
        &got,
        ns.lba_size(),
        &format!("ns {} LBA {lba} +{} bytes", ns.nsid(), data.len()),
    );
}

/// Polls until `count` requests completed, failing the test after [`IO_DEADLINE`].
pub fn wait_completions(qp: &mut Qpair, count: usize) -> Vec<IoCompletion> {
    let start = Instant::now();
    let mut done = Vec::with_capacity(count);
    while done.len() < count {
        qp.poll(count - done.len(), |c| done.push(c));
        if start.elapsed() > IO_DEADLINE {
            panic!(
                "only {} of {count} requests completed within {IO_DEADLINE:?}",
                done.len()
            );
        }
        std::hint::spin_loop();
    }
    done
}

/// Waits for one request without data and checks that it succeeded.
pub fn expect_success(qp: &mut Qpair, what: &str) {
    let c = wait_completions(qp, 1);
    for c in c {
        assert!(c.is_ok(), "{what} failed with status {:?}", c.status);
    }
}

/// Submits `count` requests of `len` bytes each at `first_lba` + i * len (I/O `i` gets tag `i`),
/// keeping as many in flight as the queue pair allows, and hands each completion to `done`.
/// `write` chooses the direction; `fill(i, buf)` fills a write's buffer (reads start poisoned).
#[allow(clippy::too_many_arguments)]
pub fn pipelined(
    ctrl: &Ctrl,
    qp: &mut Qpair,
    ns: &Namespace,
    first_lba: u64,
    len: usize,
    count: usize,
    write: bool,
    mut fill: impl FnMut(usize, &mut [u8]),
    mut done: impl FnMut(IoCompletion),
) {
    let blocks = blocks_of(ns, len);
    let start = Instant::now();
    let mut next = 0usize;
    let mut completed = 0usize;
    while completed < count {
        while next < count && qp.free_slots() > 0 {
            let mut buf = dma_buffer(ctrl, len);
            if write {
                fill(next, buf.as_mut_slice());
            } else {
                buf.as_mut_slice().fill(0xa5);
            }
            let lba = first_lba + next as u64 * u64::from(blocks);
            let r = if write {
                qp.write(ns, lba, blocks, buf, next as u64)
            } else {
                qp.read(ns, lba, blocks, buf, next as u64)
            };
            r.unwrap_or_else(|e| panic!("submitting I/O {next} at LBA {lba}: {}", e.kind));
            next += 1;
        }
        completed += qp.poll(usize::MAX, &mut done);
        if start.elapsed() > IO_DEADLINE {
            panic!("only {completed} of {count} requests completed within {IO_DEADLINE:?}");
        }
    }
}

/// Writes `count` random chunks of `len` bytes from `seed` (chunk `i` from `seed + i`) at
/// `first_lba` onwards, pipelined, then reads them back pipelined and compares every byte.
pub fn pipelined_write_read_verify(
    ctrl: &Ctrl,
    qp: &mut Qpair,
    ns: &Namespace,
    first_lba: u64,
    len: usize,
    count: usize,
    seed: u64,
) {
    pipelined(
        ctrl,
        qp,
        ns,
        first_lba,
        len,
        count,
        true,
        |i, buf| Prng::new(seed + i as u64).fill(buf),
        |c| assert!(c.is_ok(), "write {} failed: {:?}", c.tag, c.status),
    );
    verify_pipelined(ctrl, qp, ns, first_lba, len, count, seed);
}

/// Reads back what [`pipelined_write_read_verify`] wrote with `seed` and compares every byte.
pub fn verify_pipelined(
    ctrl: &Ctrl,
    qp: &mut Qpair,
    ns: &Namespace,
    first_lba: u64,
    len: usize,
    count: usize,
    seed: u64,
) {
    let lba_size = ns.lba_size();
    let mut seen = vec![false; count];
    pipelined(
        ctrl,
        qp,
        ns,
        first_lba,
        len,
        count,
        false,
        |_, _| {},
        |c| {
            assert!(c.is_ok(), "read {} failed: {:?}", c.tag, c.status);
            let i = c.tag as usize;
            let buf = c.buffer.as_ref().expect("a read gives its buffer back");
            let expected = random_bytes(len, seed + i as u64);
            assert_same(
                &expected,
                buf.as_slice(),
                lba_size,
                &format!("chunk {i} of {len} bytes at LBA {first_lba}+"),
            );
            let slot = seen.get_mut(i).expect("tag within the submitted range");
            assert!(!*slot, "completion for I/O {i} delivered twice");
            *slot = true;
        },
    );
    assert!(seen.iter().all(|s| *s), "a read completion is missing");
}
