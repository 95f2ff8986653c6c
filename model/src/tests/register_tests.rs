use super::*;
use crate::ModelError;

#[test]
fn cap_vs_and_unknown_offsets() {
    let p = ModelPlatform::new(config()).unwrap();
    let r = p.regs();
    let cap = r.read64(0);
    assert_eq!(cap & 0xFFFF, 1023, "MQES");
    assert_eq!((cap >> 16) & 1, 1, "CQR");
    assert_eq!((cap >> 24) & 0xFF, 20, "TO");
    assert_eq!((cap >> 32) & 0xF, 0, "DSTRD");
    assert_eq!((cap >> 37) & 1, 1, "CSS NVM");
    assert_eq!((cap >> 48) & 0xF, 0, "MPSMIN");
    assert_eq!(u64::from(r.read32(4)), cap >> 32, "CAP high half");
    assert_eq!(r.read32(0x08), 0x0002_0000);
    assert_eq!(r.read32(0x40), u32::MAX);
    assert_eq!(r.read32(0x1000_0000), u32::MAX);
    assert_eq!(r.read32(0x15), u32::MAX, "unaligned");
    poke32(r, 0x40, 7);
    assert_eq!(r.read32(0x40), u32::MAX);
}

#[test]
fn enable_becomes_ready_after_the_delay_in_virtual_time() {
    let p = ModelPlatform::new(ModelConfig {
        ready_delay_ns: 3_000_000,
        ..config()
    })
    .unwrap();
    let admin = Ring::new(&p, 0, 16);
    let t0 = p.now_ns();
    enable(&p, &admin);
    assert!(p.now_ns() - t0 >= 3_000_000);
    assert_eq!(p.regs().read32(0x1C) & 0b11, 1, "RDY, no CFS");
    assert_eq!(p.regs().read64(0x28), admin.sq.iova());
    // Disable: RDY drops and the admin queue is gone (a doorbell is ignored).
    poke32(p.regs(), 0x14, 0);
    assert_eq!(p.regs().read32(0x1C) & 1, 0);
    poke32(p.regs(), 0x1000, 1);
    assert_eq!(p.stats().invalid_doorbell_writes, 1);
}

#[test]
fn bad_enable_sets_cfs() {
    let p = ModelPlatform::new(config()).unwrap();
    let admin = Ring::new(&p, 0, 16);
    let r = p.regs();
    poke32(r, 0x24, 15 << 16 | 15);
    poke64(r, 0x28, admin.sq.iova());
    poke64(r, 0x30, admin.cq.iova());
    poke32(r, 0x14, 1 | 7 << 16 | 4 << 20); // IOSQES = 7: wrong
    for _ in 0..10 {
        p.relax();
    }
    assert_eq!(r.read32(0x1C) & 0b11, 0b10, "CFS, not ready");
    poke32(r, 0x14, 0);
    assert_eq!(r.read32(0x1C) & 0b11, 0, "reset clears CFS");
    poke64(r, 0x28, admin.sq.iova() + 8); // misaligned ASQ
    poke32(r, 0x14, CC_READY_BITS);
    assert_eq!(r.read32(0x1C) & 0b10, 0b10);
}

#[test]
fn never_ready_lets_a_timeout_pass_quickly() {
    let p = ModelPlatform::new(ModelConfig {
        never_ready: true,
        ..config()
    })
    .unwrap();
    let admin = Ring::new(&p, 0, 16);
    let r = p.regs();
    poke32(r, 0x24, 15 << 16 | 15);
    poke64(r, 0x28, admin.sq.iova());
    poke64(r, 0x30, admin.cq.iova());
    poke32(r, 0x14, CC_READY_BITS);
    let mut loops = 0u64;
    while p.now_ns() < 10_000_000_000 {
        assert_eq!(r.read32(0x1C) & 1, 0);
        p.relax();
        loops += 1;
    }
    assert!(loops < 20_000, "idle relax steps grow: {loops} loops");
}

#[test]
fn shutdown_reports_complete_after_a_delay() {
    let b = Bench::new(config());
    let r = b.p.regs();
    poke32(r, 0x14, CC_READY_BITS | 1 << 14);
    assert_eq!((r.read32(0x1C) >> 2) & 3, 1, "in progress");
    for _ in 0..10 {
        p_relax(&b.p);
    }
    assert_eq!((r.read32(0x1C) >> 2) & 3, 2, "complete");
}

fn p_relax(p: &ModelPlatform) {
    p.relax();
}

#[test]
fn random_register_writes_never_panic() {
    let p = ModelPlatform::new(config()).unwrap();
    let admin = Ring::new(&p, 0, 16);
    enable(&p, &admin);
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x as usize >> 8) % 0x1100;
        let v = (x >> 32) as u32;
        if off == 0x14 {
            continue; // CC: covered by the other tests; keep the controller alive
        }
        poke32(p.regs(), off & !3, v);
        poke64(p.regs(), off & !7, x);
        let _ = p.regs().read32(off);
        p.before_poll((v % 10) as u16);
    }
}

#[test]
fn config_is_validated() {
    let bad = |c: ModelConfig| ModelPlatform::new(c).err();
    assert!(matches!(
        bad(ModelConfig {
            namespaces: vec![ram_ns(1, 10, 1024)],
            ..config()
        }),
        Some(ModelError::BadLbaSize { .. })
    ));
    assert!(matches!(
        bad(ModelConfig {
            namespaces: vec![ram_ns(0, 10, 512)],
            ..config()
        }),
        Some(ModelError::BadNsid { .. })
    ));
    assert!(matches!(
        bad(ModelConfig {
            namespaces: vec![ram_ns(3, 10, 512), ram_ns(3, 10, 512)],
            ..config()
        }),
        Some(ModelError::DuplicateNsid { nsid: 3 })
    ));
    assert!(matches!(
        bad(ModelConfig {
            namespaces: vec![ram_ns(9, 10, 512)],
            nn: 8,
            ..config()
        }),
        Some(ModelError::BadNsid { nsid: 9, nn: 8 })
    ));
    let many = (1..=4097).map(|i| ram_ns(i, 1, 512)).collect();
    assert!(matches!(
        bad(ModelConfig {
            namespaces: many,
            ..config()
        }),
        Some(ModelError::TooManyNamespaces { count: 4097 })
    ));
    assert!(matches!(
        bad(ModelConfig {
            max_queue_entries: 1,
            ..config()
        }),
        Some(ModelError::BadLimit { .. })
    ));
    let ok = (1..=4096).map(|i| ram_ns(i * 2, 1, 512)).collect();
    assert!(ModelPlatform::new(ModelConfig {
        namespaces: ok,
        ..config()
    })
    .is_ok());
}
