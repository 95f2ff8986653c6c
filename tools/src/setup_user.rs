//! `setup --user USER` (setup.sh's `TARGET_USER`): lets a user who is not root run vfnvme on
//! the controllers setup bound. It gives the user the controller's VFIO group file, and the
//! locked-memory limit DMA needs (a limits.d entry for their next login); hugepages need no
//! mount, vfnvme maps them anonymously, which the memlock limit allows.

use crate::output::say;
use anyhow::{bail, Context, Result};
use nix::unistd::{chown, Gid, Uid, User};
use std::path::{Path, PathBuf};
use vfnvme::hal::pci::sysfs as pci_sysfs;
use vfnvme::hal::{PciAddress, SysPaths};

/// The user to hand controllers to: a name from the password database, or a numeric uid (its
/// group: the user's, or the same number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUser {
    /// Its name (the uid as text when it has no entry).
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

impl TargetUser {
    /// Resolves `who` (name or uid).
    pub fn resolve(who: &str) -> Result<TargetUser> {
        if let Ok(uid) = who.parse::<u32>() {
            let entry = User::from_uid(Uid::from_raw(uid)).ok().flatten();
            return Ok(TargetUser {
                name: entry.as_ref().map_or(who.to_string(), |u| u.name.clone()),
                uid,
                gid: entry.map_or(uid, |u| u.gid.as_raw()),
            });
        }
        match User::from_name(who) {
            Ok(Some(u)) => Ok(TargetUser {
                name: u.name,
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            }),
            Ok(None) => bail!("--user/TARGET_USER {who:?}: no such user; give a user name from /etc/passwd or a numeric uid"),
            Err(e) => bail!("--user/TARGET_USER {who:?}: looking it up: {e}"),
        }
    }
}

/// The limits.d file that gives `user` an unlimited locked-memory limit.
pub const LIMITS_DIR: &str = "/etc/security/limits.d";

fn limits_file(user: &TargetUser) -> PathBuf {
    Path::new(LIMITS_DIR).join(format!("60-vfnvme-{}.conf", user.name))
}

/// Hands the VFIO group files of `bound` to `user` and sets their memlock limit.
pub fn grant(
    paths: &SysPaths,
    bound: &[PciAddress],
    user: &TargetUser,
    dry_run: bool,
) -> Result<()> {
    for addr in bound {
        let group = pci_sysfs::iommu_group(paths, addr)
            .with_context(|| format!("{addr}: its IOMMU group (--user needs vfio-pci)"))?;
        let node = paths.vfio_group(group);
        if dry_run {
            say!("{addr}: would give {} to {}", node.display(), user.name);
            continue;
        }
        chown(
            &node,
            Some(Uid::from_raw(user.uid)),
            Some(Gid::from_raw(user.gid)),
        )
        .with_context(|| format!("giving {} to {}", node.display(), user.name))?;
        say!("{addr}: {} now belongs to {}", node.display(), user.name);
    }
    let file = limits_file(user);
    let line = format!("{} - memlock unlimited\n", user.name);
    if dry_run {
        say!("would write {line:?} to {}", file.display());
    } else {
        match std::fs::write(&file, &line) {
            Ok(()) => say!(
                "{}: memlock unlimited for {} (from their next login)",
                file.display(),
                user.name
            ),
            Err(e) => say!(
                "could not write {} ({e}): give {} a large locked-memory limit another way, e.g. `prlimit --memlock=unlimited:unlimited` around their command, or LimitMEMLOCK=infinity in a systemd unit",
                file.display(),
                user.name
            ),
        }
    }
    if let Some(addr) = bound.first() {
        say!(
            "as {}: vfnvme identify {addr}; vfnvme perf --device {addr} --qd 32 --time 5; the fio engine (setup, --reset and format still need root)",
            user.name
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_by_name_or_number() {
        let root = TargetUser::resolve("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let n = TargetUser::resolve("54321").unwrap();
        assert_eq!((n.uid, n.gid), (54321, 54321));
        assert!(TargetUser::resolve("no-such-user-vfnvme")
            .unwrap_err()
            .to_string()
            .contains("no such user"));
        assert_eq!(
            limits_file(&root),
            Path::new("/etc/security/limits.d/60-vfnvme-root.conf")
        );
    }
}
