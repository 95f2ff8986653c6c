use super::*;

const NS_CHANGED: u32 = 0x0004_0002;

fn changed_list(b: &mut Bench, rae: bool) -> Vec<u32> {
    let buf = b.p.dma().alloc(4096).unwrap();
    let cdw10 = 0x04 | u32::from(rae) << 15 | 1023 << 16;
    let c = b.admin(0x02, 0, buf.iova(), 0, [cdw10, 0, 0, 0, 0, 0]);
    assert_eq!(c.status, 0);
    buf.as_slice()
        .chunks_exact(4)
        .map(|d| u32::from_le_bytes(d.try_into().unwrap()))
        .take_while(|&n| n != 0)
        .collect()
}

fn submit_aer(b: &mut Bench, cid: u16) {
    b.admin.submit(&b.p, sqe(0x0C, cid, 0, 0, 0, [0; 6]));
}

#[test]
fn aer_attach_event_and_changed_list() {
    let mut b = Bench::new(ModelConfig { nn: 64, ..config() });
    submit_aer(&mut b, 900);
    for _ in 0..20 {
        assert!(b.admin.reap(&b.p).is_none(), "AER is held until an event");
        b.p.relax();
    }
    b.p.attach_namespace(ram_ns(5, 100, 4096)).unwrap();
    let c = b.admin.wait(&b.p);
    assert_eq!((c.cid, c.status, c.dw0), (900, 0, NS_CHANGED));
    let (_, buf) = b.identify(2, 0);
    assert_eq!(&buf.as_slice()[..12], &[1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);

    // Masked until the log is read: more changes only grow the list.
    submit_aer(&mut b, 901);
    b.p.resize_namespace(1, 5).unwrap();
    b.p.change_identity(5).unwrap();
    assert!(b.admin.reap(&b.p).is_none());
    assert_eq!(changed_list(&mut b, false), [1, 5]);
    assert_eq!(
        changed_list(&mut b, false),
        Vec::<u32>::new(),
        "cleared on read"
    );
    // Unmasked now: the held AER 901 fires on the next change.
    b.p.detach_namespace(5).unwrap();
    let c = b.admin.wait(&b.p);
    assert_eq!((c.cid, c.dw0), (901, NS_CHANGED));
    let (c, buf) = b.identify(0, 5);
    assert_eq!(c.status, 0);
    assert!(buf.as_slice().iter().all(|&x| x == 0), "detached: inactive");
    let (_, buf) = b.identify(0, 1);
    assert_eq!(buf.as_slice()[0], 5, "resized");
    assert_eq!(changed_list(&mut b, false), [5]);

    // No AER outstanding: the event is queued and completes the next AER at once.
    b.p.attach_namespace(ram_ns(6, 10, 512)).unwrap();
    submit_aer(&mut b, 902);
    let c = b.admin.wait(&b.p);
    assert_eq!((c.cid, c.dw0), (902, NS_CHANGED));

    b.p.set_changed_list_overflow(true);
    assert_eq!(changed_list(&mut b, false), [u32::MAX]);
    assert!(b.p.detach_namespace(99).is_err());
    assert!(
        b.p.attach_namespace(ram_ns(6, 10, 512)).is_err(),
        "already attached"
    );
    assert!(
        b.p.attach_namespace(ram_ns(65, 10, 512)).is_err(),
        "above NN"
    );
}

#[test]
fn aer_limit() {
    let mut b = Bench::new(ModelConfig {
        aerl: 1,
        ..config()
    });
    submit_aer(&mut b, 1);
    submit_aer(&mut b, 2);
    submit_aer(&mut b, 3);
    let c = b.admin.wait(&b.p);
    assert_eq!((c.cid, c.status), (3, sc::AER_LIMIT));
}

#[test]
fn namespace_attachment_command() {
    let mut b = Bench::new(ModelConfig {
        namespaces: vec![ram_ns(1, 100, 512), ram_ns(2, 100, 512)],
        ..config()
    });
    let mut list = b.p.dma().alloc(4096).unwrap();
    list.as_mut_slice()[..4].copy_from_slice(&[1, 0, 1, 0]); // one controller: cntlid 1
    assert_eq!(
        b.admin(0x15, 2, list.iova(), 0, [0, 0, 0, 0, 0, 0]).status,
        sc::NS_ALREADY_ATTACHED
    );
    assert_eq!(
        b.admin(0x15, 2, list.iova(), 0, [1, 0, 0, 0, 0, 0]).status,
        0,
        "detach"
    );
    let (_, ids) = b.identify(2, 0);
    assert_eq!(&ids.as_slice()[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(changed_list(&mut b, false), [2]);
    list.as_mut_slice()[2] = 9;
    assert_eq!(
        b.admin(0x15, 2, list.iova(), 0, [0, 0, 0, 0, 0, 0]).status,
        0x11C,
        "not our controller"
    );
    list.as_mut_slice()[2] = 1;
    assert_eq!(
        b.admin(0x15, 2, list.iova(), 0, [0, 0, 0, 0, 0, 0]).status,
        0,
        "attach again"
    );
    assert_eq!(
        b.admin(0x15, 3, list.iova(), 0, [0, 0, 0, 0, 0, 0]).status,
        sc::INVALID_NAMESPACE
    );
}

#[test]
fn reset_drops_outstanding_aers() {
    let mut b = Bench::new(config());
    submit_aer(&mut b, 5);
    poke32(b.p.regs(), 0x14, 0);
    b.admin = Ring::new(&b.p, 0, 32);
    enable(&b.p, &b.admin);
    b.p.change_identity(1).unwrap();
    for _ in 0..10 {
        assert!(b.admin.reap(&b.p).is_none(), "the old AER is gone");
        b.p.relax();
    }
    submit_aer(&mut b, 6);
    assert_eq!(
        b.admin.wait(&b.p).cid,
        6,
        "the queued event completes the new AER"
    );
}

#[test]
fn namespace_management_create_attach_delete() {
    let mut b = Bench::new(ModelConfig {
        namespaces: vec![ram_ns(1, 100, 512), ram_ns(3, 100, 512)],
        nn: 4,
        ..config()
    });
    let mut data = b.p.dma().alloc(4096).unwrap();
    data.as_mut_slice()[..8].copy_from_slice(&4242u64.to_le_bytes());
    data.as_mut_slice()[26] = 1; // 4 KiB format
    let c = b.admin(0x0D, 0, data.iova(), 0, [0, 0, 0, 0, 0, 0]);
    assert_eq!((c.status, c.dw0), (0, 2), "lowest free nsid");
    let (_, active) = b.identify(2, 0);
    assert_eq!(
        &active.as_slice()[..12],
        &[1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0],
        "created detached"
    );
    let (_, allocated) = b.identify(0x10, 0);
    assert_eq!(allocated.as_slice()[4], 2);
    let (_, ns) = b.identify(0x11, 2);
    assert_eq!(ns.as_slice()[..2], 4242u16.to_le_bytes());
    let mut list = b.p.dma().alloc(4096).unwrap();
    list.as_mut_slice()[..4].copy_from_slice(&[1, 0, 1, 0]);
    assert_eq!(b.admin(0x15, 2, list.iova(), 0, [0; 6]).status, 0);
    assert_eq!(changed_list(&mut b, false), [2]);
    let c = b.admin(0x0D, 0, data.iova(), 0, [0; 6]);
    assert_eq!(c.dw0, 4);
    assert_eq!(
        b.admin(0x0D, 0, data.iova(), 0, [0; 6]).status,
        0x116,
        "NN reached"
    );
    assert_eq!(b.admin(0x0D, 2, 0, 0, [1, 0, 0, 0, 0, 0]).status, 0);
    assert_eq!(
        changed_list(&mut b, false),
        [2],
        "deleting an attached namespace"
    );
    assert_eq!(
        b.admin(0x0D, 2, 0, 0, [1, 0, 0, 0, 0, 0]).status,
        sc::INVALID_NAMESPACE
    );
    data.as_mut_slice()[26] = 5;
    assert_eq!(
        b.admin(0x0D, 0, data.iova(), 0, [0; 6]).status,
        0x0A,
        "invalid format"
    );
}
