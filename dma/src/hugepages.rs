//! Hugepage reservations: how many 2 MiB and 1 GiB pages the kernel holds, and reserving more
//! (for the CLI's `setup`).

use crate::error::DmaError;
use crate::memory::PageSize;
use crate::sys_paths::{io_error, SysPaths};
use std::path::Path;

/// The kernel's pool of one hugepage size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugepageStatus {
    /// The page size.
    pub size: PageSize,
    /// Pages reserved (`nr_hugepages`).
    pub total: u64,
    /// Pages not in use (`free_hugepages`).
    pub free: u64,
}

fn size_kb(size: PageSize) -> u64 {
    size.bytes() as u64 / 1024
}

fn read_count(path: &Path) -> Result<u64, DmaError> {
    let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
    text.trim().parse().map_err(|_| DmaError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("expected a number, found {:?}", text.trim()),
        ),
    })
}

/// The pool of `size` pages under `paths`, or `None` when the kernel has no such hugepage
/// size (or `size` is 4 KiB).
pub fn status_in(paths: &SysPaths, size: PageSize) -> Result<Option<HugepageStatus>, DmaError> {
    if size == PageSize::Small4K {
        return Ok(None);
    }
    let dir = paths.hugepages(size_kb(size));
    if !dir.exists() {
        return Ok(None);
    }
    Ok(Some(HugepageStatus {
        size,
        total: read_count(&dir.join("nr_hugepages"))?,
        free: read_count(&dir.join("free_hugepages"))?,
    }))
}

/// The system's pool of `size` pages, or `None` when the kernel has no such hugepage size.
pub fn status(size: PageSize) -> Result<Option<HugepageStatus>, DmaError> {
    status_in(&SysPaths::default(), size)
}

/// Makes the pool of `size` pages under `paths` hold at least `count` pages. Returns the
/// number the kernel holds afterwards; fails with [`DmaError::Hugepages`] if it reserved fewer.
pub fn reserve_in(paths: &SysPaths, size: PageSize, count: u64) -> Result<u64, DmaError> {
    let kb = size_kb(size);
    let Some(now) = status_in(paths, size)? else {
        return Err(DmaError::Hugepages {
            size_kb: kb,
            wanted: count,
            got: 0,
        });
    };
    if now.total >= count {
        return Ok(now.total);
    }
    let nr = paths.hugepages(kb).join("nr_hugepages");
    std::fs::write(&nr, format!("{count}\n")).map_err(|e| io_error(&nr, e))?;
    let got = read_count(&nr)?;
    if got < count {
        return Err(DmaError::Hugepages {
            size_kb: kb,
            wanted: count,
            got,
        });
    }
    Ok(got)
}

/// Makes the system hold at least `count` 2 MiB hugepages; returns the number it holds.
pub fn reserve_hugepages(count: u64) -> Result<u64, DmaError> {
    reserve_in(&SysPaths::default(), PageSize::Huge2M, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_sysfs::FakeSys;

    fn pool(fake: &FakeSys, kb: u64, nr: u64, free: u64) {
        let d = fake.path(&format!("sys/kernel/mm/hugepages/hugepages-{kb}kB"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("nr_hugepages"), format!("{nr}\n")).unwrap();
        std::fs::write(d.join("free_hugepages"), format!("{free}\n")).unwrap();
    }

    #[test]
    fn reads_both_sizes() {
        let fake = FakeSys::new();
        pool(&fake, 2048, 256, 200);
        let p = fake.paths();
        assert_eq!(
            status_in(&p, PageSize::Huge2M).unwrap(),
            Some(HugepageStatus {
                size: PageSize::Huge2M,
                total: 256,
                free: 200
            })
        );
        assert_eq!(status_in(&p, PageSize::Huge1G).unwrap(), None);
        pool(&fake, 1048576, 2, 1);
        assert_eq!(status_in(&p, PageSize::Huge1G).unwrap().unwrap().free, 1);
    }

    #[test]
    fn reserving_writes_nr_hugepages() {
        let fake = FakeSys::new();
        pool(&fake, 2048, 0, 0);
        assert_eq!(reserve_in(&fake.paths(), PageSize::Huge2M, 64).unwrap(), 64);
        let text = std::fs::read_to_string(
            fake.path("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        )
        .unwrap();
        assert_eq!(text.trim(), "64");
    }

    #[test]
    fn missing_size_and_garbage_are_typed_errors() {
        let fake = FakeSys::new();
        let err = reserve_in(&fake.paths(), PageSize::Huge1G, 1).unwrap_err();
        assert!(matches!(err, DmaError::Hugepages { got: 0, .. }), "{err}");
        assert!(err.to_string().contains("hugepages=N"), "{err}");
        let d = fake.path("sys/kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("nr_hugepages"), "lots\n").unwrap();
        std::fs::write(d.join("free_hugepages"), "0\n").unwrap();
        let err = status_in(&fake.paths(), PageSize::Huge2M).unwrap_err();
        assert!(matches!(err, DmaError::Io { .. }), "{err}");
    }
}
