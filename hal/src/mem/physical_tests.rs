//! The DMA pool over the no-IOMMU physical-address mapper: hugepages only, one translation per
//! page, the same spans and bounds as over an IOMMU.

use crate::iommu::pagemap::{FrameReader, ProcPagemap};
use crate::iommu::physical::PhysicalMapper;
use crate::mem::hugepages;
use crate::{DmaPool, HalError, PageSize};
use std::sync::Arc;

/// Whether at least `n` hugepages of `size` are free now.
fn free_hugepages(size: PageSize) -> u64 {
    hugepages::status(size).ok().flatten().map_or(0, |s| s.free)
}

/// Skips (loudly) when the host has no free 2 MiB hugepages, unless
/// VFNVME_REQUIRE_HUGEPAGES=1 makes that a failure.
fn hugepages_or_skip(test: &str) -> bool {
    if free_hugepages(PageSize::Huge2M) >= 2 {
        return true;
    }
    let msg = format!(
        "SKIPPED {test}: no free 2 MiB hugepages (HugePages_Free < 2 in /proc/meminfo); reserve some with `echo 8 > /proc/sys/vm/nr_hugepages` to run it"
    );
    assert!(
        std::env::var("VFNVME_REQUIRE_HUGEPAGES").as_deref() != Ok("1"),
        "{msg}"
    );
    eprintln!("{msg}");
    false
}

#[test]
fn a_real_hugepage_translates_through_pagemap() {
    if !hugepages_or_skip("a_real_hugepage_translates_through_pagemap") {
        return;
    }
    let mapper = match PhysicalMapper::new() {
        Ok(m) => Arc::new(m),
        Err(e) => panic!("opening /proc/self/pagemap: {e}"),
    };
    let pool = DmaPool::new(mapper.clone(), PageSize::Huge2M);
    let a = match pool.alloc(4096) {
        Ok(a) => a,
        // Not root: the kernel hides frame numbers; that is the error the mode must give.
        Err(HalError::PagemapNoFrames) => {
            eprintln!("SKIPPED: not CAP_SYS_ADMIN, pagemap shows PFN 0 (the refusal was right)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let b = pool.alloc(8192).unwrap();
    assert_eq!(
        mapper.mapped_bytes(),
        4 << 20,
        "one hugepage per size class"
    );
    let pagemap = ProcPagemap::open().unwrap();
    for buf in [&a, &b] {
        let region = pool.region_of(buf.as_ptr()).unwrap();
        assert_eq!(region.len(), 2 << 20, "a region is one hugepage");
        assert_eq!(
            region.iova() % (2 << 20),
            0,
            "a hugepage's frame is aligned"
        );
        // Every 4 KiB piece of the hugepage is at the region's address plus its offset: one
        // translation per page was enough.
        for off in [0usize, 4096, 1 << 20, (2 << 20) - 4096] {
            let va = region.va() + off;
            let entry = pagemap.entry(va).unwrap();
            let pa = crate::iommu::pagemap::physical_address(va, entry).unwrap();
            assert_eq!(pa, region.iova() + off as u64, "offset {off:#x}");
        }
        assert_eq!(pool.translate(buf.as_ptr()), Some(buf.iova()));
        assert_ne!(
            buf.iova(),
            buf.as_ptr() as u64,
            "a physical, not a virtual address"
        );
    }
    // The spans' bounds are the pool's, as over an IOMMU.
    assert!(pool.span(a.as_ptr(), 4096).is_some());
    assert!(pool.span(a.as_ptr(), 4097).is_none());
    assert!(pool.is_live_iova_range(b.iova(), 8192));
    drop((a, b));
    drop(pool);
    assert_eq!(
        mapper.mapped_bytes(),
        0,
        "the pool's drop unlocked every page"
    );
}

/// Pagemap entries of one frame number for every page.
struct Pfn(u64);
impl FrameReader for Pfn {
    fn entry(&self, _vaddr: usize) -> std::io::Result<u64> {
        Ok((1 << 63) | self.0)
    }
}

#[test]
fn pfn_zero_makes_the_pool_refuse() {
    if !hugepages_or_skip("pfn_zero_makes_the_pool_refuse") {
        return;
    }
    let pool = DmaPool::new(
        Arc::new(PhysicalMapper::with_reader(Box::new(Pfn(0)))),
        PageSize::Huge2M,
    );
    let err = pool.alloc(4096).unwrap_err();
    assert!(matches!(err, HalError::PagemapNoFrames), "{err}");
    assert_eq!(pool.live_allocations(), 0);
}

#[test]
fn no_fallback_to_small_pages() {
    // 1 GiB hugepages are (almost) never reserved: the pool must refuse, not fall back.
    if free_hugepages(PageSize::Huge1G) > 0 {
        eprintln!("SKIPPED no_fallback_to_small_pages: this host has free 1 GiB hugepages");
        return;
    }
    let pool = DmaPool::new(
        Arc::new(PhysicalMapper::with_reader(Box::new(Pfn(0x40000)))),
        PageSize::Huge1G,
    );
    let err = pool.alloc(4096).unwrap_err();
    assert!(matches!(err, HalError::NoIommuHugepages { .. }), "{err}");
    assert!(err.to_string().contains("--no-iommu --hugepages"), "{err}");
    assert_eq!(pool.page_size(), PageSize::Huge1G, "no fallback recorded");
}

#[test]
fn a_buffer_larger_than_a_hugepage_is_refused() {
    let pool = DmaPool::new(
        Arc::new(PhysicalMapper::with_reader(Box::new(Pfn(0x400)))),
        PageSize::Huge2M,
    );
    let err = pool.alloc(4 << 20).unwrap_err();
    assert!(
        matches!(err, HalError::NoIommuBufferTooLarge { len, page } if len == 4 << 20 && page == 2 << 20),
        "{err}"
    );
}
