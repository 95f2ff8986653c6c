//! Scenario `media`: media errors from QEMU's NVMe device, through the driver API.
//! Namespace 1 sits on `blkdebug`, whose rules fail every read covering one 512-byte sector
//! and every write covering another (`VFNVME_EXPECT_MEDIA_ERRORS`). QEMU completes those with
//! SCT 2h (media and data integrity): SC 81h Unrecovered Read Error for reads, SC 80h Write
//! Fault for writes. The driver must hand that status to the caller (type, code, DNR, More),
//! with the buffer back, fail only the I/Os that touch the sector, and keep the queue pair
//! working; everything around the bad sectors keeps its data. Prints `MEDIA-ERRORS` lines.

use std::sync::Arc;

use vfnvme::hal::DmaBuffer;
use vfnvme::spec::status::sct;
use vfnvme::spec::Status;
use vfnvme::{Error, Namespace};
use vfnvme_tests::guest;
use vfnvme_tests::guest_io::{self, Ctrl, Qpair};

/// QEMU 7.2 sets neither Do Not Retry nor More on these (a retry may succeed on a real drive).
const EXPECT_DNR: bool = false;
const EXPECT_MORE: bool = false;

/// `(nsid, read_error_sector, write_error_sector)` of the scenario's blkdebug namespace.
fn faulty() -> (u32, u64, u64) {
    let text = guest::expect_var("VFNVME_EXPECT_MEDIA_ERRORS");
    let item = text
        .split(',')
        .next()
        .filter(|s| !s.is_empty())
        .expect("the scenario declares a blkdebug namespace");
    let v: Vec<u64> = item
        .split(':')
        .map(|x| {
            x.parse()
                .expect("VFNVME_EXPECT_MEDIA_ERRORS is nsid:read:write")
        })
        .collect();
    assert_eq!(v.len(), 3, "{item}");
    (v[0] as u32, v[1], v[2])
}

fn buffer(ctrl: &Ctrl, len: usize, fill: u8) -> DmaBuffer {
    let mut b = ctrl.dma().alloc(len).expect("DMA buffer");
    b.as_mut_slice().fill(fill);
    b
}

/// The status a synchronous call failed with (the test fails if it succeeded or failed
/// otherwise).
fn failed_status(r: Result<DmaBuffer, Error>, what: &str) -> Status {
    match r {
        Err(Error::IoFailed { status }) => status,
        Err(e) => panic!("{what}: failed without a device status: {e}"),
        Ok(_) => panic!("{what}: succeeded, but it covers a sector blkdebug fails"),
    }
}

fn assert_media(status: Status, sc: u8, name: &str, what: &str) {
    println!(
        "MEDIA-ERRORS {what}: sct {:#x} sc {:#04x} dnr {} more {} ({status})",
        status.sct(),
        status.sc(),
        status.dnr(),
        status.more()
    );
    assert_eq!(
        (status.sct(), status.sc()),
        (sct::MEDIA, sc),
        "{what}: {status}"
    );
    assert_eq!(status.dnr(), EXPECT_DNR, "{what}: DNR of {status}");
    assert_eq!(status.more(), EXPECT_MORE, "{what}: More of {status}");
    assert_eq!(status.name(), Some(name), "{what}");
    assert!(!status.is_host_failure(), "{what}: the device's own status");
}

fn read_ok(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, blocks: u32) -> Vec<u8> {
    guest_io::read(ctrl, qp, ns, lba, blocks as usize * ns.lba_size() as usize)
}

#[test]
fn media_errors_carry_sct_sc_and_dnr_and_only_the_bad_sectors_fail() {
    if !guest::in_guest(
        "guest_media_errors::media_errors_carry_sct_sc_and_dnr_and_only_the_bad_sectors_fail",
    ) {
        return;
    }
    let (nsid, read_sector, write_sector) = faulty();
    let bdf = guest::vfio_devices()[0].clone();
    let ctrl = guest_io::open(&bdf);
    let ns: Arc<Namespace> = guest_io::namespace(&ctrl, nsid);
    let bs = ns.lba_size() as usize;
    let per_block = bs as u64 / 512;
    let (r_lba, w_lba) = (read_sector / per_block, write_sector / per_block);
    let mut qp = guest_io::qpair(&ctrl, 32);

    // Around the read-error sector: writing is fine; reading the sector is not, its
    // neighbours read back.
    let around = guest_io::random_bytes(16 * bs, 0x6d65_6469);
    guest_io::write(&ctrl, &mut qp, &ns, r_lba - 8, &around);
    let st = failed_status(
        qp.read_sync(&ns, r_lba, 1, buffer(&ctrl, bs, 0xa5)),
        "read of the bad block",
    );
    assert_media(st, 0x81, "Unrecovered Read Error", "read of the bad block");
    let st = failed_status(
        qp.read_sync(&ns, r_lba - 8, 16, buffer(&ctrl, 16 * bs, 0xa5)),
        "16-block read across the bad block",
    );
    assert_media(
        st,
        0x81,
        "Unrecovered Read Error",
        "16-block read across it",
    );
    let before = read_ok(&ctrl, &mut qp, &ns, r_lba - 8, 8);
    guest_io::assert_same(
        &around[..8 * bs],
        &before,
        bs as u32,
        "blocks before the bad one",
    );
    let after = read_ok(&ctrl, &mut qp, &ns, r_lba + 1, 7);
    guest_io::assert_same(
        &around[9 * bs..],
        &after,
        bs as u32,
        "blocks after the bad one",
    );

    // The write-error sector: writes covering it fail, writes next to it land.
    let st = failed_status(
        qp.write_sync(&ns, w_lba, 1, buffer(&ctrl, bs, 0x11)),
        "write of the bad block",
    );
    assert_media(st, 0x80, "Write Fault", "write of the bad block");
    let st = failed_status(
        qp.write_sync(&ns, w_lba - 4, 8, buffer(&ctrl, 8 * bs, 0x22)),
        "8-block write across the bad block",
    );
    assert_media(st, 0x80, "Write Fault", "8-block write across it");
    let next = guest_io::random_bytes(8 * bs, 0x7772_6974);
    guest_io::write_read_verify(&ctrl, &mut qp, &ns, w_lba + 1, &next);
    // Reading the write-error block works: it never got data, so it reads zeroes.
    let zero = read_ok(&ctrl, &mut qp, &ns, w_lba, 1);
    assert!(
        zero.iter().all(|&b| b == 0),
        "the failed writes left no data"
    );

    // Asynchronously, 32 reads in flight, one of them on the bad block: that one alone ends
    // with the media error, each exactly once, every buffer handed back.
    let first = r_lba - 16;
    let mut errors = Vec::new();
    let mut ok = 0;
    let mut seen = [false; 32];
    guest_io::pipelined(
        &ctrl,
        &mut qp,
        &ns,
        first,
        bs,
        32,
        false,
        |_, _| {},
        |c| {
            let i = c.tag as usize;
            assert!(!seen[i], "read {i} completed twice");
            seen[i] = true;
            assert!(c.buffer.is_some(), "read {i}: the buffer comes back");
            if c.status.is_success() {
                ok += 1;
            } else {
                errors.push((first + i as u64, c.status));
            }
        },
    );
    println!("MEDIA-ERRORS pipelined: 32 reads, {ok} ok, errors {errors:?}");
    assert_eq!(ok, 31);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].0, r_lba,
        "the failing read is the one on the bad block"
    );
    assert_media(
        errors[0].1,
        0x81,
        "Unrecovered Read Error",
        "pipelined read",
    );

    // The queue pair and the controller carry on; the other namespace has no faults.
    let again = guest_io::random_bytes(4096, 0x61_6761_696e);
    guest_io::write_read_verify(&ctrl, &mut qp, &ns, 4 * 2048 / per_block, &again);
    if let Some(other) = ctrl.namespace(nsid + 1) {
        let data = guest_io::random_bytes(64 * 1024, 0x6f74_6865);
        guest_io::write_read_verify(&ctrl, &mut qp, &other, 0, &data);
    }
    ctrl.process_admin_completions()
        .expect("the admin queue works after media errors");
    println!("MEDIA-ERRORS ok: ns {nsid} read sector {read_sector}, write sector {write_sector}");
}
