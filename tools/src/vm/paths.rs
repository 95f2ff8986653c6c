//! The folders under `target/vm/`: cache, per-run outputs, per-run images.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// Run folders kept in `out/` (older ones are deleted).
const KEEP_RUNS: usize = 20;

/// `target/vm/` and its fixed subfolders.
pub struct VmDirs {
    /// `target/vm/`: initramfs cache, kernel path, KVM probe answer.
    pub root: PathBuf,
    /// `target/vm/out/`: shared writable with the guest, one folder per run.
    pub out: PathBuf,
    /// `target/vm/images/`: one folder of image files per run, deleted after it.
    pub images: PathBuf,
}

/// One run's folders and nonce.
pub struct RunDirs {
    /// Outputs: run.sh, console.log, dmesg.txt, and whatever the command writes to
    /// `$VFNVME_OUT_DIR`.
    pub out: PathBuf,
    /// Image files of this run.
    pub images: PathBuf,
    /// Unique token in this run's exit marker.
    pub nonce: String,
}

impl VmDirs {
    /// Finds `target/vm/` (`$VFNVME_VM_DIR`, else next to the running binary's target folder,
    /// else `./target/vm`), creates its subfolders and prunes old runs.
    pub fn prepare() -> Result<Self> {
        let root = match std::env::var_os("VFNVME_VM_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => target_dir().join("vm"),
        };
        fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        // The guest sees host paths verbatim: they must be absolute.
        let root =
            fs::canonicalize(&root).with_context(|| format!("resolving {}", root.display()))?;
        super::guest_view::require_visible(
            "the VM folder shared with the guest (target/vm, or $VFNVME_VM_DIR)",
            &root,
        )?;
        let dirs = Self {
            out: root.join("out"),
            images: root.join("images"),
            root,
        };
        for d in [&dirs.root, &dirs.out, &dirs.images] {
            fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        prune(&dirs.out, KEEP_RUNS);
        remove_orphaned_images(&dirs.images);
        Ok(dirs)
    }

    /// Fresh folders for one run.
    pub fn new_run(&self) -> Result<RunDirs> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let id = format!(
            "{}-{:09}-{}",
            now.as_secs(),
            now.subsec_nanos(),
            std::process::id()
        );
        let run = RunDirs {
            out: self.out.join(&id),
            images: self.images.join(&id),
            nonce: format!("{:08x}{:08x}", now.subsec_nanos(), std::process::id()),
        };
        fs::create_dir_all(&run.out).with_context(|| format!("creating {}", run.out.display()))?;
        Ok(run)
    }
}

impl RunDirs {
    /// The console log of this run.
    pub fn console_log(&self) -> PathBuf {
        self.out.join("console.log")
    }

    /// Deletes this run's image files.
    pub fn remove_images(&self) {
        let _ = fs::remove_dir_all(&self.images);
    }
}

/// The cargo target folder holding the running binary, else ./target. Cargo marks a target folder
/// with a CACHEDIR.TAG when it creates it, and always writes `.rustc_info.json` there (a target
/// folder another tool created first has no tag).
fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe
            .ancestors()
            .skip(1)
            .find(|d| d.join("CACHEDIR.TAG").is_file() || d.join(".rustc_info.json").is_file())
        {
            return dir.to_path_buf();
        }
    }
    PathBuf::from("target")
}

/// Keeps the newest `keep` folders of `dir` (names sort by time).
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    let excess = names.len().saturating_sub(keep);
    for old in names.iter().take(excess) {
        let _ = fs::remove_dir_all(old);
    }
}

/// Deletes image folders of runs whose process is gone (killed before it could clean up).
/// A run folder's name ends with `-<pid>`.
fn remove_orphaned_images(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
