//! The paths of one multipath head must agree on the format. Controllers that report the same
//! namespace in different formats (here 4096-byte blocks on one, 512 on the other; on real
//! hardware, a reformat that one controller has rescanned and another not yet) give the head one
//! usable path: the disagreeing one is kept out (state gone), so that a request made for one
//! format never fails over to a path where its LBAs mean other bytes. Once they agree, every
//! path is used again.

mod mp_util;

use mp_util::rig;
use vfnvme::multipath::{HeadOptions, PathState};

fn states(r: &mp_util::Rig) -> Vec<(usize, PathState, u8)> {
    let heads = r.mp.heads_for(1);
    assert_eq!(heads.len(), 1, "one head: the identifiers agree");
    let mut v: Vec<_> = heads[0]
        .paths()
        .paths
        .iter()
        .map(|p| (p.controller, p.state, p.namespace.lba_shift()))
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

#[test]
fn a_path_in_another_format_is_kept_out_until_every_controller_agrees() {
    let r = rig(2, 1, HeadOptions::default());
    r.mp.poll();
    assert!(states(&r)
        .iter()
        .all(|s| s.1 != PathState::Gone && s.2 == 9));
    // LBA format 1: 4096-byte blocks, through controller 1 only.
    r.ctrls[1].format_nvm(1, 1, 0).expect("format");
    r.ctrls[1].rescan().expect("rescan");
    r.mp.poll();
    let s = states(&r);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!((s[0].2, s[1].2), (9, 12), "each controller's view: {s:?}");
    assert_ne!(
        s[0].1,
        PathState::Gone,
        "controller 0 sets the head's format: {s:?}"
    );
    assert_eq!(
        s[1].1,
        PathState::Gone,
        "4096 B blocks on a 512 B head: {s:?}"
    );
    // Controller 0 in the same format (the model keeps a format per controller): one format,
    // both paths used.
    r.ctrls[0].format_nvm(1, 1, 0).expect("format");
    r.ctrls[0].rescan().expect("rescan");
    r.mp.poll();
    let s = states(&r);
    assert!(
        s.iter().all(|s| s.1 != PathState::Gone && s.2 == 12),
        "{s:?}"
    );
}
