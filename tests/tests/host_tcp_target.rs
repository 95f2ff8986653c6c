//! Host tests (model): `vfnvme-target` over a model controller, driven by the test client
//! (`vfnvme_tests::tcp_client`) through a real TCP socket on 127.0.0.1: bring-up as Linux's
//! initiator does it, Identify, write then read back (in-capsule and by R2T, with and without
//! digests), a refused host NQN, garbage that ends only its own connection, discovery, and a
//! shutdown that answers what is outstanding. The target polls on its own thread; the client
//! waits with socket timeouts (deadlines), never sleeps.

use vfnvme_tests::tcp_client::{Client, Received, DISCOVERY_NQN};
use vfnvme_tests::tcp_target::{
    bring_up, start, start_heads, start_model_with, start_with, HOST, OTHER_HOST, SUBNQN,
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn identify_reports_what_linux_checks() {
    let t = start();
    let (mut admin, _io, cntlid) = bring_up(t.addr, false);
    let (c, id) = admin.admin_read(0x06, 0, 0x01, 0, 4096);
    assert_eq!(c.status, 0);
    assert_eq!(id.len(), 4096);
    assert_eq!(
        u16::from_le_bytes([id[78], id[79]]),
        cntlid,
        "CNTLID matches Connect's"
    );
    assert_ne!(u16::from_le_bytes([id[320], id[321]]), 0, "KAS");
    assert_eq!(id[111], 1, "CNTRLTYPE I/O");
    assert_eq!(&id[768..768 + SUBNQN.len()], SUBNQN.as_bytes(), "SUBNQN");
    assert_eq!(id[768 + SUBNQN.len()], 0);
    let ioccsz = u32::from_le_bytes(id[1792..1796].try_into().expect("4"));
    assert_eq!(ioccsz * 16 - 64, 8192, "IOCCSZ: 8 KiB in-capsule");
    assert_eq!(u16::from_le_bytes([id[1800], id[1801]]), 0, "ICDOFF");
    assert_ne!(
        u32::from_le_bytes(id[536..540].try_into().expect("4")) & 3,
        0,
        "SGLS"
    );
    assert_eq!(
        u32::from_le_bytes(id[516..520].try_into().expect("4")),
        2,
        "NN"
    );
    // Active namespaces, descriptors, namespace data.
    let (c, list) = admin.admin_read(0x06, 0, 0x02, 0, 4096);
    assert_eq!(c.status, 0);
    assert_eq!(&list[..12], &[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
    let (c, d) = admin.admin_read(0x06, 2, 0x03, 0, 4096);
    assert_eq!(c.status, 0);
    assert_eq!((d[0], d[1]), (2, 16), "NGUID descriptor");
    assert_ne!(&d[4..20], &[0; 16], "NGUID");
    let (c, ns) = admin.admin_read(0x06, 2, 0x00, 0, 4096);
    assert_eq!(c.status, 0);
    assert_eq!(
        u64::from_le_bytes(ns[0..8].try_into().expect("8")),
        1 << 12,
        "NSZE"
    );
    assert_eq!(ns[130], 12, "LBADS 4 KiB");
    let (c, _) = admin.admin_read(0x06, 9, 0x00, 0, 4096);
    assert_eq!(
        c.status & 0xff,
        0x0B,
        "an nsid not exported: invalid namespace"
    );
    // ANA log: a group per namespace (1 and 2), both optimized.
    let numd = (16 + 2 * 36) / 4 - 1;
    let (c, ana) = admin.admin_read(0x02, 0xFFFF_FFFF, 0x0C | (numd << 16), 0, 88);
    assert_eq!(c.status, 0);
    assert_eq!(u16::from_le_bytes([ana[8], ana[9]]), 2, "descriptors");
    assert_eq!(
        (ana[16], ana[32], ana[48]),
        (1, 1, 1),
        "group 1 optimized, nsid 1"
    );
    assert_eq!(
        (ana[52], ana[68], ana[84]),
        (2, 1, 2),
        "group 2 optimized, nsid 2"
    );
    assert_eq!(
        u32::from_le_bytes(ns[92..96].try_into().expect("4")),
        2,
        "ANAGRPID of ns 2"
    );
    // Number of Queues granted 4 I/O queues: queue 5 is refused, queue 1 twice too.
    for qid in [5u16, 1] {
        let mut extra = Client::open(t.addr).expect("connect");
        extra.icreq(false, false);
        let r = extra.connect(qid, 31, cntlid, SUBNQN, HOST);
        assert_eq!(r.status & 0x7ff, 0x182, "I/O queue {qid}: {r:?}");
    }
    // Keep Alive and an unknown opcode.
    assert_eq!(admin.admin(0x18, 0, 0).status, 0);
    assert_eq!(
        admin.admin(0xC5, 0, 0).status & 0xff,
        0x01,
        "invalid opcode"
    );
}

fn write_read_back(digests: bool) {
    let t = start();
    let (_admin, mut io, _) = bring_up(t.addr, digests);
    // In-capsule (4 KiB on 512 B blocks), then by R2T: 64 KiB in 16 KiB H2CData pieces
    // (MAXH2CDATA), on both namespaces.
    for (nsid, bs) in [(1u32, 512u32), (2, 4096)] {
        for (lba, len, seed) in [(8u64, 4096usize, 1u8), (64, 64 * 1024, 2), (1000, 8192, 3)] {
            let data = pattern(len, seed ^ nsid as u8);
            let w = io.write(nsid, lba, &data, bs);
            assert_eq!(w.status, 0, "write ns {nsid} lba {lba} len {len}: {w:?}");
            let (r, back) = io.read(nsid, lba, (len / bs as usize) as u32, bs);
            assert_eq!(r.status, 0, "read: {r:?}");
            assert!(
                back == data,
                "ns {nsid} lba {lba}: the data read back differs"
            );
        }
    }
    // A range past the end, and a flush.
    let (r, _) = io.read(2, (1 << 12) - 1, 2, 4096);
    assert_eq!(r.status & 0xff, 0x80, "LBA out of range: {r:?}");
    let mut sqe = [0u8; 64];
    sqe[4] = 1;
    sqe[39] = 0x5A;
    let cid = io.send_cmd(sqe, &[]);
    assert_eq!(io.wait(cid).0.status, 0, "flush");
}

#[test]
fn write_then_read_back_without_digests() {
    write_read_back(false);
}

#[test]
fn write_then_read_back_with_header_and_data_digests() {
    write_read_back(true);
}

#[test]
fn a_host_not_on_the_list_is_refused() {
    let t = start();
    let mut c = Client::open(t.addr).expect("connect");
    c.icreq(false, false);
    let r = c.connect(0, 31, 0xFFFF, SUBNQN, OTHER_HOST);
    assert_eq!(r.status & 0x7ff, 0x184, "Connect Invalid Host: {r:?}");
    // An unknown subsystem: invalid parameters pointing at SUBNQN in the data.
    let mut c = Client::open(t.addr).expect("connect");
    c.icreq(false, false);
    let r = c.connect(0, 31, 0xFFFF, "nqn.2026-12.io.vfnvme:nope", HOST);
    assert_eq!(r.status & 0x7ff, 0x182, "{r:?}");
    assert_eq!(r.result & 0x1_ffff, (1 << 16) | 256, "IATTR/IPO");
    // An I/O queue for a controller the host doesn't have.
    let mut c = Client::open(t.addr).expect("connect");
    c.icreq(false, false);
    let r = c.connect(1, 31, 77, SUBNQN, HOST);
    assert_eq!(r.status & 0x7ff, 0x182, "{r:?}");
}

#[test]
fn garbage_ends_only_its_own_connection() {
    let t = start();
    let (_admin, mut io, _) = bring_up(t.addr, false);
    let data = pattern(4096, 9);
    assert_eq!(io.write(1, 0, &data, 512).status, 0);
    // Garbage before ICReq, and a bad PDU after it.
    let mut bad = Client::open(t.addr).expect("connect");
    bad.send_raw(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8])
        .expect("send");
    match bad.try_recv() {
        Ok(Received::Term { fes }) => assert_eq!(fes, 1, "invalid header field"),
        other => panic!("expected C2HTermReq, got {other:?}"),
    }
    assert!(
        bad.closed(),
        "the connection is closed after the C2HTermReq"
    );
    let mut bad = Client::open(t.addr).expect("connect");
    bad.icreq(false, false);
    // A capsule with HLEN 70 instead of 72.
    let mut p = vec![4u8, 0, 70, 0];
    p.extend_from_slice(&72u32.to_le_bytes());
    p.resize(72, 0);
    bad.send_raw(&p).expect("send");
    assert!(matches!(bad.try_recv(), Ok(Received::Term { fes: 1 })));
    // H2CData nobody asked for, on a connected I/O queue of another controller.
    let (_a2, mut io2, _) = bring_up(t.addr, false);
    let mut p = vec![6u8, 0x04, 24, 24];
    p.extend_from_slice(&(24u32 + 8).to_le_bytes());
    p.extend_from_slice(&[1, 0, 3, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]);
    p.extend_from_slice(&[0xaa; 8]);
    io2.send_raw(&p).expect("send");
    assert!(
        matches!(io2.try_recv(), Ok(Received::Term { fes: 2 })),
        "PDU sequence error"
    );
    // The first host's queue still works.
    let (r, back) = io.read(1, 0, 8, 512);
    assert_eq!(r.status, 0);
    assert!(back == data);
}

#[test]
fn discovery_lists_the_subsystem_for_an_allowed_host_only() {
    let t = start();
    for (host, expect) in [(HOST, 1u64), (OTHER_HOST, 0)] {
        let mut d = Client::open(t.addr).expect("connect");
        d.icreq(false, false);
        let c = d.connect(0, 31, 0xFFFF, DISCOVERY_NQN, host);
        assert_eq!(c.status, 0, "discovery Connect: {c:?}");
        let (c, id) = d.admin_read(0x06, 0, 0x01, 0, 4096);
        assert_eq!(c.status, 0);
        assert_eq!(id[111], 2, "CNTRLTYPE discovery");
        let numd = 2048 / 4 - 1;
        let (c, log) = d.admin_read(0x02, 0, 0x70 | (numd << 16), 0, 2048);
        assert_eq!(c.status, 0);
        assert_eq!(
            u64::from_le_bytes(log[8..16].try_into().expect("8")),
            expect,
            "NUMREC for {host}"
        );
        if expect == 1 {
            let e = &log[1024..];
            assert_eq!((e[0], e[1], e[2]), (3, 1, 2), "TCP, IPv4, NVM subsystem");
            assert_eq!(&e[256..256 + SUBNQN.len()], SUBNQN.as_bytes());
            assert_eq!(&e[512..521], b"127.0.0.1");
            let port = t.addr.port().to_string();
            assert_eq!(&e[32..32 + port.len()], port.as_bytes());
        }
        // The discovery controller has no I/O queues.
        let mut io = Client::open(t.addr).expect("connect");
        io.icreq(false, false);
        let r = io.connect(1, 31, c.sqid, DISCOVERY_NQN, host);
        assert_ne!(r.status, 0);
    }
}

#[test]
fn shutdown_answers_a_write_still_waiting_for_data() {
    let t = start();
    let (_admin, mut io, _) = bring_up(t.addr, false);
    let mut sqe = [0u8; 64];
    sqe[0] = 0x01;
    sqe[4] = 1;
    sqe[48..52].copy_from_slice(&127u32.to_le_bytes()); // 128 blocks: 64 KiB, by R2T
    sqe[32..36].copy_from_slice(&(64u32 * 1024).to_le_bytes());
    sqe[39] = 0x5A;
    let cid = io.send_cmd(sqe, &[]);
    assert!(matches!(io.recv(), Received::R2t { cid: c, offset: 0, .. } if c == cid));
    let report = t.stop();
    assert_eq!(report.aborted, 1, "{report:?}");
    assert_eq!(report.abandoned, 0, "{report:?}");
    match io.recv() {
        Received::Resp(c) => {
            assert_eq!(c.cid, cid);
            assert_eq!(c.status, 0x0008, "aborted due to SQ deletion");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_controller_without_keep_alive_ends_with_its_queues() {
    let t = start();
    let mut admin = Client::open(t.addr).expect("connect");
    admin.icreq(false, false);
    // KATO 1 ms: the host never sends Keep Alive in time. The test waits for the target to
    // close the connection (a socket read with a deadline), not for a clock.
    let c = admin.connect_kato(0, 31, 0xFFFF, SUBNQN, HOST, 1);
    assert_eq!(c.status, 0);
    let cntlid = c.result as u16;
    let mut io = Client::open(t.addr).expect("connect I/O");
    io.icreq(false, false);
    let c = io.connect(1, 31, cntlid, SUBNQN, HOST);
    // The controller may already be gone (then the I/O Connect is refused and that connection
    // stays, free to try again); if not, its I/O queue ends with it.
    assert!(admin.closed(), "the admin queue ends");
    if c.status == 0 {
        assert!(io.closed(), "its I/O queue ends");
    } else {
        assert_eq!(c.status & 0x7ff, 0x182, "{c:?}");
    }
    // Another host's controller with a sane KATO is unaffected.
    let (mut a, mut io, _) = bring_up(t.addr, false);
    assert_eq!(a.admin(0x18, 0, 0).status, 0, "Keep Alive");
    let (r, _) = io.read(1, 0, 1, 512);
    assert_eq!(r.status, 0);
}

#[test]
fn silent_sockets_time_out_and_connections_are_limited() {
    // A socket that never sends ICReq is closed after the connect timeout (the client waits
    // for the close with a read deadline).
    let t = start_with(|c| c.connect_timeout = std::time::Duration::from_millis(50));
    let mut silent = Client::open(t.addr).expect("connect");
    assert!(silent.closed(), "a silent socket is closed");
    drop(t);
    // Two connections at most: a third is closed at once, the first two keep working.
    let t = start_with(|c| c.max_connections = 2);
    let (_admin, mut io, _) = bring_up(t.addr, false);
    let mut third = Client::open(t.addr).expect("connect");
    assert!(third.closed(), "the third connection is closed");
    let (r, _) = io.read(1, 0, 1, 512);
    assert_eq!(r.status, 0);
}

#[test]
fn queues_are_no_larger_than_the_backend_holds() {
    // A controller whose queues take 33 entries (32 commands): hosts are offered 32.
    let t = start_model_with(|m| m.max_queue_entries = 33, |_| {});
    let mut admin = Client::open(t.addr).expect("connect");
    admin.icreq(false, false);
    assert_eq!(admin.connect(0, 31, 0xFFFF, SUBNQN, HOST).status, 0);
    let cap = admin.prop_get(0x00, true);
    assert_eq!(cap.result & 0xffff, 31, "CAP.MQES: 32 entries");
    let (_, id) = admin.admin_read(0x06, 0, 0x01, 0, 4096);
    assert_eq!(u16::from_le_bytes([id[514], id[515]]), 32, "MAXCMD");
    // A 32-entry I/O queue with 31 writes sent at once: all complete.
    assert_eq!(admin.prop_set(0x14, 0x0046_0001).status, 0);
    let mut io = Client::open(t.addr).expect("connect");
    io.icreq(false, false);
    assert_eq!(io.connect(1, 31, 1, SUBNQN, HOST).status, 0);
    let cids: Vec<u16> = (0..31u64)
        .map(|i| {
            let mut sqe = [0u8; 64];
            sqe[0] = 0x01;
            sqe[4] = 1;
            sqe[40..48].copy_from_slice(&(i * 8).to_le_bytes());
            sqe[48..52].copy_from_slice(&7u32.to_le_bytes());
            sqe[32..36].copy_from_slice(&4096u32.to_le_bytes());
            sqe[39] = 0x01;
            io.send_cmd(sqe, &[i as u8; 4096])
        })
        .collect();
    let mut done = Vec::new();
    while done.len() < cids.len() {
        match io.recv() {
            Received::Resp(c) => {
                assert_eq!(c.status, 0, "{c:?}");
                done.push(c.cid);
            }
            other => panic!("{other:?}"),
        }
    }
    done.sort_unstable();
    assert_eq!(done, cids);
    let mut big = Client::open(t.addr).expect("connect");
    big.icreq(false, false);
    let r = big.connect(2, 32, 1, SUBNQN, HOST);
    assert_eq!(r.status & 0x7ff, 0x182, "SQSIZE beyond MQES: {r:?}");
}

#[test]
fn a_multipath_head_keeps_serving_when_one_path_goes_inaccessible() {
    let (t, model) = start_heads();
    let (_admin, mut io, _) = bring_up(t.addr, false);
    let data = pattern(64 * 1024, 7);
    assert_eq!(io.write(1, 128, &data, 512).status, 0);
    // Path 0 inaccessible, then path 1 while path 0 is back: the host sees no error.
    for (down, up) in [(0usize, 1usize), (1, 0)] {
        model
            .set_ana_state(up, 1, vfnvme_model::AnaState::Optimized)
            .expect("ANA state");
        model
            .set_ana_state(down, 1, vfnvme_model::AnaState::Inaccessible)
            .expect("ANA state");
        for _ in 0..8 {
            let (r, back) = io.read(1, 128, 128, 512);
            assert_eq!(r.status, 0, "path {down} inaccessible: {r:?}");
            assert!(back == data);
        }
        assert_eq!(io.write(1, 256, &data[..4096], 512).status, 0);
    }
    // Both inaccessible: the head queues the read (queue-if-no-path) until a path returns.
    model
        .set_ana_state(0, 1, vfnvme_model::AnaState::Inaccessible)
        .expect("ANA state");
    let mut sqe = [0u8; 64];
    sqe[0] = 0x02;
    sqe[4] = 1;
    sqe[40..48].copy_from_slice(&128u64.to_le_bytes());
    sqe[48..52].copy_from_slice(&127u32.to_le_bytes());
    sqe[32..36].copy_from_slice(&(64u32 * 1024).to_le_bytes());
    sqe[39] = 0x5A;
    let cid = io.send_cmd(sqe, &[]);
    model
        .set_ana_state(0, 1, vfnvme_model::AnaState::Optimized)
        .expect("ANA state");
    let (r, back) = io.wait(cid);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(back == data);
}

#[test]
fn the_ana_state_follows_the_head_and_is_announced() {
    let (t, model) = start_heads();
    let (mut admin, mut io, _) = bring_up(t.addr, false);
    let ana_state = |admin: &mut Client| {
        let (c, log) = admin.admin_read(0x02, 0xFFFF_FFFF, 0x0C | ((52 / 4 - 1) << 16), 0, 52);
        assert_eq!(c.status, 0);
        (
            u64::from_le_bytes(log[0..8].try_into().expect("8")),
            log[32],
        )
    };
    let (changes, state) = ana_state(&mut admin);
    assert_eq!(state, 1, "optimized");
    assert_eq!(
        admin.admin(0x09, 0x0B, 1 << 11).status,
        0,
        "AEC: ANA change notices"
    );
    let mut sqe = [0u8; 64];
    sqe[0] = 0x0C;
    let aer = admin.send_cmd(sqe, &[]);
    // Both paths inaccessible: the AER completes with the ANA change notice, the log says
    // inaccessible with a new change count.
    model
        .set_ana_state_all(1, vfnvme_model::AnaState::Inaccessible)
        .expect("ANA state");
    let (c, _) = admin.wait(aer);
    assert_eq!(
        (c.status, c.result),
        (0, 0x000C_0302),
        "ANA change AER: {c:?}"
    );
    let (changes2, state) = ana_state(&mut admin);
    assert_eq!(state, 3, "inaccessible");
    assert!(changes2 > changes);
    // Back to optimized: announced again, I/O works.
    let aer = admin.send_cmd(sqe, &[]);
    model
        .set_ana_state_all(1, vfnvme_model::AnaState::Optimized)
        .expect("ANA state");
    let (c, _) = admin.wait(aer);
    assert_eq!(c.result, 0x000C_0302);
    assert_eq!(ana_state(&mut admin).1, 1);
    let (r, _) = io.read(1, 0, 8, 512);
    assert_eq!(r.status, 0);
}

#[test]
fn write_zeroes_and_deallocate_reach_the_controller() {
    let t = start();
    let (mut admin, mut io, _) = bring_up(t.addr, false);
    let (_, id) = admin.admin_read(0x06, 0, 0x01, 0, 4096);
    assert_eq!(
        u16::from_le_bytes([id[520], id[521]]) & 0x0C,
        0x0C,
        "ONCS: DSM and Write Zeroes"
    );
    let data = pattern(8192, 5);
    // Write Zeroes over the second half of 16 blocks.
    assert_eq!(io.write(1, 512, &data, 512).status, 0);
    let mut sqe = [0u8; 64];
    sqe[0] = 0x08;
    sqe[4] = 1;
    sqe[39] = 0x5A;
    sqe[40..48].copy_from_slice(&520u64.to_le_bytes());
    sqe[48..52].copy_from_slice(&7u32.to_le_bytes());
    let cid = io.send_cmd(sqe, &[]);
    assert_eq!(io.wait(cid).0.status, 0, "Write Zeroes");
    let (_, back) = io.read(1, 512, 16, 512);
    assert!(back[..4096] == data[..4096] && back[4096..].iter().all(|&b| b == 0));
    // Dataset Management, deallocate: two ranges, in-capsule; read back as zeroes.
    assert_eq!(io.write(1, 512, &data, 512).status, 0);
    let mut ranges = Vec::new();
    for (slba, blocks) in [(512u64, 4u32), (524, 4)] {
        ranges.extend_from_slice(&0u32.to_le_bytes());
        ranges.extend_from_slice(&blocks.to_le_bytes());
        ranges.extend_from_slice(&slba.to_le_bytes());
    }
    let mut sqe = [0u8; 64];
    sqe[0] = 0x09;
    sqe[4] = 1;
    sqe[32..36].copy_from_slice(&32u32.to_le_bytes());
    sqe[39] = 0x01;
    sqe[40..44].copy_from_slice(&1u32.to_le_bytes()); // NR: 2 ranges
    sqe[44..48].copy_from_slice(&(1u32 << 2).to_le_bytes()); // AD
    let cid = io.send_cmd(sqe, &ranges);
    assert_eq!(io.wait(cid).0.status, 0, "deallocate");
    let (_, back) = io.read(1, 512, 16, 512);
    assert!(back[..2048].iter().all(|&b| b == 0), "range 1 reads zeroes");
    assert!(
        back[2048..6144] == data[2048..6144],
        "between the ranges: kept"
    );
    assert!(back[6144..].iter().all(|&b| b == 0), "range 2 reads zeroes");
    // As Linux sends it: room for 256 ranges (4 KiB of data) whatever NR says.
    assert_eq!(io.write(1, 512, &data, 512).status, 0);
    let mut linux = ranges.clone();
    linux.resize(4096, 0);
    let mut sqe4k = sqe;
    sqe4k[32..36].copy_from_slice(&4096u32.to_le_bytes());
    let cid = io.send_cmd(sqe4k, &linux);
    assert_eq!(io.wait(cid).0.status, 0, "deallocate with 4 KiB of data");
    let (_, back) = io.read(1, 512, 16, 512);
    assert!(back[..2048].iter().all(|&b| b == 0) && back[2048..6144] == data[2048..6144]);
    // A range past the end of the namespace.
    let mut bad = ranges.clone();
    bad[8..16].copy_from_slice(&((1u64 << 16) - 2).to_le_bytes());
    let cid = io.send_cmd(sqe, &bad);
    assert_eq!(io.wait(cid).0.status & 0xff, 0x80, "LBA out of range");
}
