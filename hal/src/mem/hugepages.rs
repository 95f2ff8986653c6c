//! Hugepage reservations: how many 2 MiB and 1 GiB pages the kernel holds, and reserving more
//! (for the CLI's `setup`).

use crate::error::HalError;
use crate::mem::pool::PageSize;
use crate::pci::paths::{io_error, SysPaths};
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

fn read_count(path: &Path) -> Result<u64, HalError> {
    let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
    text.trim().parse().map_err(|_| HalError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("expected a number, found {:?}", text.trim()),
        ),
    })
}

/// The pool of `size` pages under `paths`, or `None` when the kernel has no such hugepage
/// size (or `size` is 4 KiB).
pub fn status_in(paths: &SysPaths, size: PageSize) -> Result<Option<HugepageStatus>, HalError> {
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
pub fn status(size: PageSize) -> Result<Option<HugepageStatus>, HalError> {
    status_in(&SysPaths::default(), size)
}

/// The memory figures of `/proc/meminfo` a reservation is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`, in KiB.
    pub total_kb: u64,
    /// `MemAvailable`, in KiB: what the kernel could give without swapping.
    pub available_kb: u64,
}

impl MemInfo {
    /// Parses the text of `/proc/meminfo`; `None` if `MemTotal` or `MemAvailable` is missing.
    pub fn parse(text: &str) -> Option<MemInfo> {
        let field = |name: &str| {
            text.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
        };
        Some(MemInfo {
            total_kb: field("MemTotal")?,
            available_kb: field("MemAvailable")?,
        })
    }

    /// Reads `/proc/meminfo`.
    pub fn read() -> Result<MemInfo, HalError> {
        let path = Path::new("/proc/meminfo");
        let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
        MemInfo::parse(&text).ok_or_else(|| HalError::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no MemTotal or MemAvailable line",
            ),
        })
    }

    /// The memory a reservation must leave available, in KiB: the larger of 512 MiB and an
    /// eighth of `MemTotal` (the system keeps room for its page cache, its daemons and the
    /// process that will use the hugepages).
    pub fn floor_kb(&self) -> u64 {
        (512 << 10).max(self.total_kb / 8)
    }

    /// The most pages of `size` the pool may hold, now holding `now`, so that `MemAvailable`
    /// stays at or above [`MemInfo::floor_kb`] (pages already reserved are not counted twice).
    pub fn max_pages(&self, size: PageSize, now: u64) -> u64 {
        let spare_kb = self.available_kb.saturating_sub(self.floor_kb());
        now.saturating_add(spare_kb / size_kb(size))
    }
}

/// Fails with [`HalError::HugepagesLeaveTooLittle`] if growing the pool of `size` pages from
/// `now` to `count` pages would leave less than the floor of [`MemInfo::floor_kb`] available.
pub fn check_count(mem: &MemInfo, size: PageSize, now: u64, count: u64) -> Result<(), HalError> {
    let max = mem.max_pages(size, now);
    if count > now && count > max {
        return Err(HalError::HugepagesLeaveTooLittle {
            size_kb: size_kb(size),
            wanted: count,
            now,
            max,
            available_mib: mem.available_kb >> 10,
            floor_mib: mem.floor_kb() >> 10,
            total_mib: mem.total_kb >> 10,
        });
    }
    Ok(())
}

/// Makes the pool of `size` pages under `paths` hold at least `count` pages, if that leaves
/// enough of `mem` available (see [`check_count`]). Returns the number the kernel holds
/// afterwards. If the kernel reserves fewer, or anything fails after the count was written,
/// the previous count is written back and the error says so ([`HalError::Hugepages`]).
pub fn reserve_in(
    paths: &SysPaths,
    mem: &MemInfo,
    size: PageSize,
    count: u64,
) -> Result<u64, HalError> {
    reserve_with(paths, mem, size, count, &|p, t| std::fs::write(p, t))
}

/// [`reserve_in`] with the write to `nr_hugepages` done by `write` (tests stand in for a
/// kernel that reserves fewer pages than asked).
fn reserve_with(
    paths: &SysPaths,
    mem: &MemInfo,
    size: PageSize,
    count: u64,
    write: &dyn Fn(&Path, &str) -> std::io::Result<()>,
) -> Result<u64, HalError> {
    let kb = size_kb(size);
    let Some(now) = status_in(paths, size)? else {
        return Err(HalError::Hugepages {
            size_kb: kb,
            wanted: count,
            got: 0,
            restored: format!(" (this kernel has no {kb} KiB hugepages)"),
        });
    };
    if now.total >= count {
        return Ok(now.total);
    }
    check_count(mem, size, now.total, count)?;
    let nr = paths.hugepages(kb).join("nr_hugepages");
    let restore = || match write(&nr, &format!("{}\n", now.total)) {
        Ok(()) => format!("; the count is back to {}", now.total),
        Err(e) => format!(
            "; putting the count back to {} failed too ({e}): write it to {} by hand",
            now.total,
            nr.display()
        ),
    };
    if let Err(e) = write(&nr, &format!("{count}\n")) {
        // A partial reservation may have happened before the error.
        let _ = restore();
        return Err(io_error(&nr, e));
    }
    let got = match read_count(&nr) {
        Ok(got) => got,
        Err(e) => {
            let _ = restore();
            return Err(e);
        }
    };
    if got < count {
        return Err(HalError::Hugepages {
            size_kb: kb,
            wanted: count,
            got,
            restored: restore(),
        });
    }
    Ok(got)
}

/// Makes the system hold at least `count` 2 MiB hugepages (checked against `/proc/meminfo`,
/// see [`reserve_in`]); returns the number it holds.
pub fn reserve_hugepages(count: u64) -> Result<u64, HalError> {
    reserve_in(
        &SysPaths::default(),
        &MemInfo::read()?,
        PageSize::Huge2M,
        count,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::test_sysfs::FakeSys;

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

    /// 4 GiB of memory, 3 GiB available.
    const MEM: MemInfo = MemInfo {
        total_kb: 4 << 20,
        available_kb: 3 << 20,
    };

    #[test]
    fn reserving_writes_nr_hugepages() {
        let fake = FakeSys::new();
        pool(&fake, 2048, 0, 0);
        assert_eq!(
            reserve_in(&fake.paths(), &MEM, PageSize::Huge2M, 64).unwrap(),
            64
        );
        let text = std::fs::read_to_string(
            fake.path("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        )
        .unwrap();
        assert_eq!(text.trim(), "64");
    }

    #[test]
    fn missing_size_and_garbage_are_typed_errors() {
        let fake = FakeSys::new();
        let err = reserve_in(&fake.paths(), &MEM, PageSize::Huge1G, 1).unwrap_err();
        assert!(matches!(err, HalError::Hugepages { got: 0, .. }), "{err}");
        assert!(err.to_string().contains("hugepages=N"), "{err}");
        let d = fake.path("sys/kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("nr_hugepages"), "lots\n").unwrap();
        std::fs::write(d.join("free_hugepages"), "0\n").unwrap();
        let err = status_in(&fake.paths(), PageSize::Huge2M).unwrap_err();
        assert!(matches!(err, HalError::Io { .. }), "{err}");
    }

    #[test]
    fn meminfo_parses_and_the_floor_is_an_eighth_or_512_mib() {
        let text = "MemTotal:        2014824 kB\nMemFree:          54272 kB\nMemAvailable:    1500000 kB\n";
        let m = MemInfo::parse(text).unwrap();
        assert_eq!(
            m,
            MemInfo {
                total_kb: 2014824,
                available_kb: 1500000
            }
        );
        // 2 GiB: the 512 MiB minimum wins.
        assert_eq!(m.floor_kb(), 512 << 10);
        // 64 GiB: an eighth, 8 GiB.
        let big = MemInfo {
            total_kb: 64 << 20,
            available_kb: 60 << 20,
        };
        assert_eq!(big.floor_kb(), 8 << 20);
        assert_eq!(MemInfo::parse("MemTotal: 5 kB\n"), None);
        // (1500000 - 524288) KiB spare / 2048 = 476 more pages.
        assert_eq!(m.max_pages(PageSize::Huge2M, 256), 256 + 476);
        assert_eq!(m.max_pages(PageSize::Huge1G, 0), 0);
    }

    #[test]
    fn a_count_that_leaves_too_little_is_refused_and_nothing_is_written() {
        let fake = FakeSys::new();
        pool(&fake, 2048, 256, 256);
        let mem = MemInfo {
            total_kb: 2 << 20,
            available_kb: 1 << 20,
        };
        let err = reserve_in(&fake.paths(), &mem, PageSize::Huge2M, 99_999_999_999).unwrap_err();
        assert!(
            matches!(
                err,
                HalError::HugepagesLeaveTooLittle {
                    max: 512,
                    floor_mib: 512,
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("512 MiB") && text.contains("--hugepages 512"),
            "{text}"
        );
        let nr = fake.path("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
        assert_eq!(std::fs::read_to_string(&nr).unwrap().trim(), "256");
        // Within the floor it goes through; shrinking is never refused.
        assert_eq!(
            reserve_in(&fake.paths(), &mem, PageSize::Huge2M, 512).unwrap(),
            512
        );
        assert!(check_count(&mem, PageSize::Huge2M, 600, 300).is_ok());
    }

    #[test]
    fn a_short_reservation_puts_the_previous_count_back() {
        let fake = FakeSys::new();
        pool(&fake, 2048, 100, 100);
        let nr = fake.path("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
        // A kernel that finds room for only 150 of the 200 pages asked for.
        let short_kernel = |p: &Path, t: &str| {
            let asked: u64 = t.trim().parse().unwrap();
            std::fs::write(p, format!("{}\n", asked.min(150)))
        };
        let err =
            reserve_with(&fake.paths(), &MEM, PageSize::Huge2M, 200, &short_kernel).unwrap_err();
        assert!(
            matches!(
                &err,
                HalError::Hugepages {
                    wanted: 200,
                    got: 150,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("back to 100"), "{err}");
        assert_eq!(std::fs::read_to_string(&nr).unwrap().trim(), "100");
    }
}
