//! Helpers of the guest tests on namespaces formatted with metadata and protection information
//! (scenarios `meta` and `pi`): the scenario's formats, requests with metadata waited for, the
//! image files QEMU stores the namespaces in, and the guest kernel's IOMMU (DMAR) faults.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use vfnvme::hal::pi::{PiFormat, PiLocation, PiType};
use vfnvme::hal::DmaBuffer;
use vfnvme::namespace::MetadataFormat;
use vfnvme::queue::{metadata_transfer, Op, PiChecks, PiOptions, Request};
use vfnvme::spec::Status;
use vfnvme::Namespace;

use crate::guest;
use crate::guest_io::{Ctrl, Qpair, IO_DEADLINE};

/// The kernel log lines of IOMMU (DMAR) faults.
pub fn dmar_faults() -> Vec<String> {
    let out = Command::new("dmesg")
        .output()
        .unwrap_or_else(|e| panic!("running dmesg in the guest: {e}"));
    assert!(out.status.success(), "dmesg failed: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DMAR") && (l.contains("fault") || l.contains("Request device")))
        .map(str::to_string)
        .collect()
}

/// Fails if the kernel logged a DMAR fault after `before` (what [`dmar_faults`] returned then).
pub fn assert_no_new_dmar_faults(before: &[String]) {
    let after = dmar_faults();
    let new: Vec<&String> = after.iter().skip(before.len()).collect();
    assert!(
        new.is_empty(),
        "the IOMMU logged DMA faults during the test:\n{}",
        new.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The `nsid:ms:mset:pi:pil` items of `VFNVME_EXPECT_METADATA`: the first controller's
/// namespaces formatted with metadata, in nsid order.
pub fn expected_metadata() -> Vec<(u32, MetadataFormat)> {
    guest::expect_var("VFNVME_EXPECT_METADATA")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|item| {
            let f: Vec<u32> = item
                .split(':')
                .map(|x| x.parse().unwrap_or_else(|e| panic!("{item:?}: {e}")))
                .collect();
            assert_eq!(f.len(), 5, "{item:?} is not nsid:ms:mset:pi:pil");
            let md = MetadataFormat {
                size: f[1] as u16,
                extended: f[2] == 1,
                protection_type: f[3] as u8,
                protection_first: f[4] == 1,
            };
            (f[0], md)
        })
        .collect()
}

/// The host-side PI geometry of `ns` (vfnvme::hal::pi), PI `None` for metadata without it.
pub fn pi_format(ns: &Namespace) -> PiFormat {
    let id = ns.identity();
    let pi = PiType::from_code(id.protection_type).map(|t| {
        let at = if id.protection_first {
            PiLocation::First
        } else {
            PiLocation::Last
        };
        (t, at)
    });
    PiFormat::new(ns.lba_size(), id.metadata_size, id.metadata_extended, pi)
        .unwrap_or_else(|e| panic!("ns {}: {e}", ns.nsid()))
}

/// The checks a namespace's PI type allows: all, without the reference tag for type 3.
pub fn all_checks(ns: &Namespace) -> PiChecks {
    PiChecks {
        reference: ns.identity().protection_type != 3,
        ..PiChecks::ALL
    }
}

/// A request's buffer for `blocks` blocks of `ns` with `pi`: its length, and the offset of the
/// separate metadata in it (`None` when no metadata moves separately).
pub fn layout(ns: &Namespace, blocks: u32, pi: &PiOptions) -> (usize, Option<usize>) {
    let (data, md) = metadata_transfer(ns, blocks, pi);
    let data = usize::try_from(data).expect("fits");
    let md = usize::try_from(md).expect("fits");
    if md == 0 {
        (data, None)
    } else {
        // MPTR must be 4-byte aligned: data lengths are whole blocks, so it is.
        (data + md, Some(data))
    }
}

/// A DMA buffer of `len` bytes filled with `fill`.
pub fn buffer(ctrl: &Ctrl, len: usize, fill: u8) -> DmaBuffer {
    let mut b = ctrl
        .dma()
        .alloc(len)
        .unwrap_or_else(|e| panic!("allocating a {len}-byte DMA buffer: {e}"));
    b.as_mut_slice().fill(fill);
    b
}

/// Submits a read or write with metadata and waits for it: its status and buffer.
#[allow(clippy::too_many_arguments)]
pub fn md_io(
    qp: &mut Qpair,
    ns: &Namespace,
    op: Op,
    lba: u64,
    blocks: u32,
    buf: DmaBuffer,
    md_offset: Option<usize>,
    pi: PiOptions,
) -> (Status, DmaBuffer) {
    let req =
        Request::with_metadata(op, ns, lba, blocks, buf, md_offset, pi, 0).unwrap_or_else(|e| {
            panic!(
                "ns {} {op:?} of {blocks} blocks at LBA {lba} refused: {}",
                ns.nsid(),
                e.kind
            )
        });
    qp.submit(req)
        .unwrap_or_else(|e| panic!("ns {} submitting: {}", ns.nsid(), e.kind));
    let start = Instant::now();
    let mut out = None;
    while out.is_none() {
        qp.poll(usize::MAX, |c| out = Some((c.status, c.buffer)));
        assert!(
            start.elapsed() < IO_DEADLINE,
            "ns {} {op:?} at LBA {lba}: no completion within {IO_DEADLINE:?}",
            ns.nsid()
        );
    }
    let (status, buf) = out.expect("completed");
    (status, buf.expect("the buffer comes back"))
}

/// The image file of namespace `nsid` of the scenario's first controller (`c0n<nsid>.img` in
/// `$VFNVME_IMAGE_DIR`).
pub fn image_path(nsid: u32) -> PathBuf {
    PathBuf::from(guest::expect_var("VFNVME_IMAGE_DIR")).join(format!("c0n{nsid}.img"))
}

/// `len` bytes of namespace `nsid`'s image at byte `offset`.
pub fn read_image(nsid: u32, offset: u64, len: usize) -> Vec<u8> {
    let path = image_path(nsid);
    let f = File::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut out = vec![0u8; len];
    f.read_exact_at(&mut out, offset)
        .unwrap_or_else(|e| panic!("reading {len} bytes at {offset} of {}: {e}", path.display()));
    out
}

/// Data and metadata of `blocks` blocks at `lba` of `ns` as QEMU stores them: all data first
/// (LBA n's at `n * lba_size`), then all metadata (LBA n's at `nsze * lba_size + n * ms`).
pub fn image_blocks(ns: &Namespace, lba: u64, blocks: u32) -> (Vec<u8>, Vec<u8>) {
    let bs = u64::from(ns.lba_size());
    let ms = u64::from(ns.identity().metadata_size);
    let data = read_image(
        ns.nsid(),
        lba * bs,
        usize::try_from(u64::from(blocks) * bs).expect("fits"),
    );
    let md = read_image(
        ns.nsid(),
        ns.blocks() * bs + lba * ms,
        usize::try_from(u64::from(blocks) * ms).expect("fits"),
    );
    (data, md)
}

/// Splits an extended buffer (`lba_size + ms` bytes per block) into its data and metadata.
pub fn split_extended(buf: &[u8], lba_size: usize, ms: usize) -> (Vec<u8>, Vec<u8>) {
    let mut data = Vec::with_capacity(buf.len());
    let mut md = Vec::with_capacity(buf.len());
    for e in buf.chunks_exact(lba_size + ms) {
        data.extend_from_slice(&e[..lba_size]);
        md.extend_from_slice(&e[lba_size..]);
    }
    (data, md)
}

/// The data and metadata of a request buffer of `blocks` blocks on `ns`: taken at `md_offset` (separate metadata),
/// split from an extended buffer, or all data (a buffer of whole blocks only: PRACT with
/// 8-byte metadata moves none).
pub fn data_and_md(
    ns: &Namespace,
    buf: &[u8],
    blocks: u32,
    md_offset: Option<usize>,
) -> (Vec<u8>, Vec<u8>) {
    let bs = ns.lba_size() as usize;
    let ms = usize::from(ns.identity().metadata_size);
    match md_offset {
        Some(off) => (buf[..off].to_vec(), buf[off..].to_vec()),
        None if buf.len() == blocks as usize * (bs + ms) => split_extended(buf, bs, ms),
        None => (buf.to_vec(), Vec::new()),
    }
}
