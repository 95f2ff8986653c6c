use super::*;
use crate::{AnaState, ModelAnaGroup, ModelSubsystem, ModelSubsystemConfig};

/// AER DW0 of an ANA change: Notice, info 03h, log page 0Ch.
const ANA_CHANGE: u32 = 0x000C_0302;

fn subsystem() -> ModelSubsystem {
    ModelSubsystem::new(ModelSubsystemConfig {
        controllers: 2,
        base: ModelConfig {
            namespaces: vec![ram_ns(1, 64, 512), ram_ns(2, 64, 512), ram_ns(3, 64, 512)],
            ..config()
        },
        ana_groups: vec![
            ModelAnaGroup {
                id: 1,
                nsids: vec![1, 3],
                state: AnaState::Optimized,
            },
            ModelAnaGroup {
                id: 4,
                nsids: vec![2],
                state: AnaState::NonOptimized,
            },
        ],
        ..ModelSubsystemConfig::default()
    })
    .unwrap()
}

/// Reads log page 0Ch (`lsp` bit 0 = RGO).
fn ana_log(b: &mut Bench, rae: bool, rgo: bool) -> (Cqe, Vec<u8>) {
    let buf = b.p.dma().alloc(4096).unwrap();
    let cdw10 = 0x0C | u32::from(rgo) << 8 | u32::from(rae) << 15 | 1023 << 16;
    let c = b.admin(0x02, 0xFFFF_FFFF, buf.iova(), 0, [cdw10, 0, 0, 0, 0, 0]);
    (c, buf.as_slice().to_vec())
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn ana_log_page_lists_groups_states_and_namespaces() {
    let sub = subsystem();
    let mut b = Bench::on(sub.controller(1).unwrap().clone());
    let (c, page) = ana_log(&mut b, false, false);
    assert_eq!(c.status, 0);
    assert_eq!(le64(&page, 0), 0, "no change yet");
    assert_eq!(u16::from_le_bytes([page[8], page[9]]), 2);
    // Group 1: nsids 1 and 3, optimized.
    assert_eq!((le32(&page, 16), le32(&page, 20), page[32]), (1, 2, 0x01));
    assert_eq!((le32(&page, 48), le32(&page, 52)), (1, 3));
    // Group 4: nsid 2, non-optimized.
    assert_eq!((le32(&page, 56), le32(&page, 60), page[72]), (4, 1, 0x02));
    assert_eq!(le32(&page, 88), 2);
    // A change bumps the page's and the group's change count, on this controller only.
    sub.set_ana_state(1, 4, AnaState::Inaccessible).unwrap();
    let (_, page) = ana_log(&mut b, false, false);
    assert_eq!(le64(&page, 0), 1);
    assert_eq!((le64(&page, 64), page[72]), (1, 0x03));
    assert_eq!(
        sub.controller(0).unwrap().ana_state(4).unwrap(),
        AnaState::NonOptimized
    );
    // Retrieve Groups Only: no namespace lists.
    let (_, page) = ana_log(&mut b, false, true);
    assert_eq!((le32(&page, 16), le32(&page, 20)), (1, 0));
    assert_eq!((le32(&page, 48), le32(&page, 52), page[64]), (4, 0, 0x03));
    // Identify: ANAGRPID and NMIC per namespace.
    let (_, id) = b.identify(0, 2);
    assert_eq!((le32(id.as_slice(), 92), id.as_slice()[30]), (4, 1));
}

#[test]
fn ana_change_event_is_masked_until_the_log_is_read_without_rae() {
    let sub = subsystem();
    let p = sub.controller(0).unwrap().clone();
    let mut b = Bench::on(p.clone());
    b.admin.submit(&b.p, sqe(0x0C, 900, 0, 0, 0, [0; 6]));
    p.set_ana_state(1, AnaState::Change).unwrap();
    let c = b.admin.wait(&b.p);
    assert_eq!((c.cid, c.dw0), (900, ANA_CHANGE));
    // Masked: a second change completes nothing, even after a read with RAE.
    b.admin.submit(&b.p, sqe(0x0C, 901, 0, 0, 0, [0; 6]));
    p.set_ana_state(1, AnaState::Optimized).unwrap();
    assert!(b.admin.reap(&b.p).is_none());
    let (c, _) = ana_log(&mut b, true, false);
    assert_eq!(c.status, 0);
    p.set_ana_state(1, AnaState::Inaccessible).unwrap();
    assert!(b.admin.reap(&b.p).is_none(), "RAE keeps the event masked");
    // Read without RAE: unmasked, the next change completes AER 901.
    ana_log(&mut b, false, false);
    p.set_ana_state(1, AnaState::NonOptimized).unwrap();
    let c = b.admin.wait(&b.p);
    assert_eq!((c.cid, c.dw0), (901, ANA_CHANGE));
}

#[test]
fn io_to_an_unusable_group_gets_the_path_status() {
    let sub = subsystem();
    let p = sub.controller(0).unwrap().clone();
    let mut b = Bench::on(p.clone());
    let mut q = b.qpair(1, 8);
    let buf = p.dma().alloc(512).unwrap();
    for (state, status) in [
        (AnaState::Inaccessible, 0x302),
        (AnaState::PersistentLoss, 0x301),
        (AnaState::Change, 0x303),
        (AnaState::NonOptimized, 0),
        (AnaState::Optimized, 0),
    ] {
        p.set_ana_state(1, state).unwrap();
        let c = q.run(&p, sqe(0x02, 7, 3, buf.iova(), 0, [0; 6]));
        assert_eq!(c.status, status, "{state:?}");
        let c = q.run(&p, sqe(0x02, 8, 2, buf.iova(), 0, [0; 6]));
        assert_eq!(c.status, 0, "another group is not affected");
    }
}

#[test]
fn a_lone_controller_has_no_ana_log() {
    let mut b = Bench::new(config());
    let (c, _) = ana_log(&mut b, false, false);
    assert_eq!(c.status, sc::INVALID_LOG_PAGE);
    let (_, id) = b.identify(1, 0);
    assert_eq!(id.as_slice()[76], 0, "CMIC");
    assert!(b.p.set_ana_state(1, AnaState::Optimized).is_err());
}
