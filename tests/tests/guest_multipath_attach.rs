//! Scenario `multipath`: Namespace Attachment (which QEMU 7.2 implements): namespace 2 is
//! detached from controller B only; before B rescans, the device fails B's I/O to it with a
//! status; after the rescan the driver refuses it with a typed error, while A keeps it; attached
//! again, B finds it and reads A's data.

use vfnvme::namespace::NamespaceState;
use vfnvme::spec::status::generic;
use vfnvme::SubmitErrorKind;
use vfnvme_tests::{guest, guest_io};

fn attachment(ctrl: &guest_io::Ctrl, nsid: u32, attach: bool, cntlid: u16) {
    ctrl.namespace_attachment(nsid, attach, &[cntlid])
        .unwrap_or_else(|e| panic!("Namespace Attachment (attach {attach}) of ns {nsid}: {e}"));
}

#[test]
fn detach_from_one_controller_then_attach_again() {
    if !guest::in_guest("guest_multipath_attach::detach_from_one_controller_then_attach_again") {
        return;
    }
    let devices = guest::vfio_devices();
    let a = guest_io::open(&devices[0]);
    let b = guest_io::open(&devices[1]);
    let b_id = b.identify().identify.cntlid;
    let ns_a = guest_io::namespace(&a, 2);
    let ns_b = guest_io::namespace(&b, 2);
    let mut qa = guest_io::qpair(&a, 8);
    let mut qb = guest_io::qpair(&b, 8);
    let lba = ns_a.lba_size() as usize;

    attachment(&a, 2, false, b_id);
    // B's namespace handle before B rescans: the driver still submits, the device refuses the
    // I/O (inactive nsid).
    let buf = b.dma().alloc(lba).expect("DMA buffer");
    qb.read(&ns_b, 0, 1, buf, 1)
        .expect("the driver does not know yet");
    let c = guest_io::wait_completions(&mut qb, 1)
        .pop()
        .expect("completion");
    assert_eq!(
        (c.status.sct(), c.status.sc()),
        (0, generic::INVALID_FIELD),
        "{:?}",
        c.status
    );
    b.rescan().expect("rescan of B");
    let nsids = |c: &guest_io::Ctrl| c.namespaces().iter().map(|n| n.nsid()).collect::<Vec<_>>();
    assert_eq!(nsids(&b), [1], "B after the detach");
    assert_ne!(
        ns_b.state(),
        NamespaceState::Active,
        "B's handle is retired"
    );
    let buf = b.dma().alloc(lba).expect("DMA buffer");
    let err = qb.read(&ns_b, 0, 1, buf, 2).expect_err("removed namespace");
    assert!(
        matches!(
            err.kind,
            SubmitErrorKind::NamespaceNotActive { nsid: 2, .. }
        ),
        "{err}"
    );
    a.rescan().expect("rescan of A");
    assert_eq!(nsids(&a), [1, 2], "A keeps both");
    // A goes on writing to it meanwhile.
    let data = guest_io::random_bytes(16 * lba, 0xa77);
    guest_io::write_read_verify(&a, &mut qa, &ns_a, 100, &data);

    attachment(&a, 2, true, b_id);
    b.rescan().expect("rescan of B");
    assert_eq!(nsids(&b), [1, 2], "B after the attach");
    let ns_b = guest_io::namespace(&b, 2);
    assert_eq!(ns_b.identity(), ns_a.identity());
    let got = guest_io::read(&b, &mut qb, &ns_b, 100, data.len());
    guest_io::assert_same(
        &data,
        &got,
        ns_b.lba_size(),
        "A's data through B after re-attach",
    );
}
