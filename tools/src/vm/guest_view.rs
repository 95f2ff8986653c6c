//! What of the host the guest can see: refusing, on the host and before any boot, a run whose
//! folders or command the guest's own tmpfs mounts would hide.
//!
//! The guest mounts the host's root read-only and covers `/tmp`, `/var/tmp` and `/run` with empty
//! tmpfs mounts (`init_script::GUEST_TMPFS`). A checkout under `/tmp` would otherwise boot a guest
//! that fails to mount its output share or to find its command, with nothing saying why.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::init_script::GUEST_TMPFS;

/// The folder of `GUEST_TMPFS` that holds the absolute path `path`, if one does.
pub fn covering_tmpfs(path: &Path) -> Option<&'static str> {
    GUEST_TMPFS
        .iter()
        .copied()
        .find(|dir| path.starts_with(dir))
}

/// Fails when `path` (absolute; `what` names it in the message) is hidden in the guest.
pub fn require_visible(what: &str, path: &Path) -> Result<()> {
    let Some(dir) = covering_tmpfs(path) else {
        return Ok(());
    };
    let covered = GUEST_TMPFS.join(", ");
    bail!(
        "{what}, {}, is under {dir}, which the guest covers with an empty tmpfs (it shares the \
         host's root read-only and needs {covered} writable), so the guest would not see it. Use \
         a checkout and a working folder outside {covered}, e.g. under /root or /srv, or set \
         VFNVME_VM_DIR to a folder there",
        path.display(),
    )
}

/// Fails when the command's program is a path (it holds a `/`) that resolves, from `cwd`, to a
/// file the guest can't see. A bare name is looked up on the guest's PATH and is not checked.
pub fn require_visible_program(program: &str, cwd: &Path) -> Result<()> {
    if !program.contains('/') {
        return Ok(());
    }
    require_visible(
        &format!("the command {program:?}"),
        &resolved(&cwd.join(program)),
    )
}

/// The absolute form of `path` with symbolic links resolved, or `path` itself if that fails.
pub fn resolved(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_under_the_guest_tmpfs_are_hidden() {
        assert_eq!(covering_tmpfs(Path::new("/tmp/ci/target/vm")), Some("/tmp"));
        assert_eq!(covering_tmpfs(Path::new("/tmp")), Some("/tmp"));
        assert_eq!(covering_tmpfs(Path::new("/var/tmp/x")), Some("/var/tmp"));
        assert_eq!(covering_tmpfs(Path::new("/run/user/0")), Some("/run"));
    }

    #[test]
    fn other_folders_are_seen() {
        for p in [
            "/work/ci/target/vm",
            "/tmpfoo/x",
            "/var/lib/x",
            "/runner/x",
            "/",
            "/root",
        ] {
            assert_eq!(covering_tmpfs(Path::new(p)), None, "{p}");
            assert!(require_visible("the folder", Path::new(p)).is_ok(), "{p}");
        }
    }

    #[test]
    fn refusal_names_the_path_the_tmpfs_and_a_way_out() {
        let err = require_visible("the VM folder", Path::new("/tmp/ci/target/vm"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the VM folder, /tmp/ci/target/vm, is under /tmp,"),
            "{err}"
        );
        assert!(err.contains("VFNVME_VM_DIR"), "{err}");
        assert!(err.contains("/var/tmp"), "{err}");
    }

    #[test]
    fn programs_given_as_paths_are_checked_from_the_working_folder() {
        let work = Path::new("/work/nowhere");
        assert!(require_visible_program("fio", Path::new("/tmp")).is_ok());
        assert!(require_visible_program("target/debug/x", work).is_ok());
        let err = require_visible_program("/tmp/ci/target/debug/x", work).unwrap_err();
        assert!(err.to_string().contains("under /tmp"), "{err}");
        let err = require_visible_program("./x", Path::new("/var/tmp/y")).unwrap_err();
        assert!(err.to_string().contains("under /var/tmp,"), "{err}");
    }
}
