//! Surviving a BAR that vanishes under the process: a SIGBUS handler scoped to our BAR mappings.
//!
//! vfio-pci revokes a BAR mapping when the device's memory decoding is turned off (a reset, a
//! `setpci`, a removal in progress) and an access then raises SIGBUS; by default that kills the
//! process. Like SPDK (`nvme_sigbus_fault_sighandler`), every BAR mapping is recorded in a
//! process-wide registry, and a handler installed once with `sigaction(SIGBUS, SA_SIGINFO)`:
//!
//! - a fault inside a registered mapping: anonymous memory is mapped over the *whole* mapping
//!   (`MAP_FIXED`) and filled with `0xFF`, the mapping is marked removed, and the handler returns.
//!   The faulting access is retried and reads all ones, so CSTS reads `0xFFFFFFFF`, which the
//!   driver takes for "device gone"; [`GuardedMap::removed`] says so directly. Writes land in the
//!   anonymous memory and are lost, as writes to a missing device are.
//! - any other SIGBUS goes to the handler that was installed before ours (`SA_SIGINFO` or plain);
//!   if that was the default action (or "ignore", which the kernel does not honour for a fault),
//!   the default is restored and the signal raised again, so the process dies of SIGBUS as it
//!   would have without us.
//!
//! The registry is a fixed array of atomics: registering and unregistering take no lock and
//! allocate nothing, and the handler only loads atomics, so it is safe at any point of the
//! program. See docs/hot-removal.md.

use memmap2::MmapRaw;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

/// How many BAR mappings can be live at once in a process (one per controller in practice).
pub const MAX_MAPPINGS: usize = 256;

/// Slot states. A slot is found by the handler only in `ACTIVE`, `REMAPPING` or `REMOVED`.
const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const ACTIVE: u8 = 2;
const REMAPPING: u8 = 3;
const REMOVED: u8 = 4;

struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
}

impl Slot {
    const fn new() -> Self {
        Slot {
            state: AtomicU8::new(FREE),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
        }
    }
}

/// The registered mappings: a fixed array of slots, claimed and freed with atomics only.
struct Registry {
    slots: [Slot; MAX_MAPPINGS],
}

impl Registry {
    const fn new() -> Self {
        Registry {
            slots: [const { Slot::new() }; MAX_MAPPINGS],
        }
    }

    /// Claims a free slot for `start..start + len`; `None` when all are taken.
    fn claim(&self, start: usize, len: usize) -> Option<usize> {
        self.slots.iter().position(|slot| {
            if slot
                .state
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                return false;
            }
            slot.start.store(start, Ordering::Relaxed);
            slot.len.store(len, Ordering::Relaxed);
            slot.state.store(ACTIVE, Ordering::Release);
            true
        })
    }

    /// Frees slot `i`. Its mapping must no longer be accessed (so no handler runs on it).
    fn release(&self, i: usize) {
        let slot = &self.slots[i];
        slot.state.store(CLAIMED, Ordering::Release);
        slot.start.store(0, Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
    }

    /// The slot whose range holds `addr`, if any (only atomic loads: async-signal-safe).
    fn find(&self, addr: usize) -> Option<&Slot> {
        self.slots.iter().find(|slot| {
            slot.state.load(Ordering::Acquire) >= ACTIVE && {
                let start = slot.start.load(Ordering::Relaxed);
                let len = slot.len.load(Ordering::Relaxed);
                addr >= start && addr - start < len
            }
        })
    }

    /// How many slots hold a mapping.
    fn registered(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) >= ACTIVE)
            .count()
    }
}

static REGISTRY: Registry = Registry::new();

/// The SIGBUS action that was in place when ours was installed, written once before
/// `PREV_READY` is set and only read after it.
struct PrevAction(UnsafeCell<MaybeUninit<libc::sigaction>>);
// SAFETY: written once, inside `INSTALL`, before `PREV_READY` is released; read only after
// `PREV_READY` is acquired.
unsafe impl Sync for PrevAction {}

static PREV: PrevAction = PrevAction(UnsafeCell::new(MaybeUninit::uninit()));
static PREV_READY: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// A memory mapping of a BAR registered with the SIGBUS handler for as long as it lives. It
/// dereferences to the mapping; dropping it unregisters the range, then unmaps it.
pub struct GuardedMap {
    slot: usize,
    // Dropped after `Drop::drop` has unregistered the slot.
    raw: MmapRaw,
}

impl std::fmt::Debug for GuardedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMap")
            .field("raw", &self.raw)
            .field("removed", &self.removed())
            .finish()
    }
}

impl GuardedMap {
    /// Registers `raw` with the SIGBUS handler (installing the handler on first use). Fails when
    /// [`MAX_MAPPINGS`] mappings are registered already, or when `sigaction` fails.
    pub(crate) fn new(raw: MmapRaw) -> std::io::Result<Self> {
        install()?;
        let page = page_size();
        let addr = raw.as_ptr() as usize;
        let start = addr & !(page - 1);
        let len = (addr - start + raw.len()).next_multiple_of(page);
        let slot = REGISTRY.claim(start, len).ok_or_else(|| {
            std::io::Error::other(format!(
                "more than {MAX_MAPPINGS} BAR mappings in this process: close some controllers"
            ))
        })?;
        Ok(GuardedMap { slot, raw })
    }

    /// Whether the mapping was revoked under us (a SIGBUS on it was caught): the registers now
    /// read all ones and writes go nowhere. The device is gone or being reset by someone else.
    pub fn removed(&self) -> bool {
        REGISTRY.slots[self.slot].state.load(Ordering::Acquire) == REMOVED
    }
}

impl Deref for GuardedMap {
    type Target = MmapRaw;

    fn deref(&self) -> &MmapRaw {
        &self.raw
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        // Nothing can be accessing the mapping now (this is its last owner), so no handler runs
        // on it. `raw` unmaps next.
        REGISTRY.release(self.slot);
    }
}

/// The number of BAR mappings registered with the SIGBUS handler in this process.
pub fn registered() -> usize {
    REGISTRY.registered()
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Installs the handler once per process, remembering the action it replaces.
fn install() -> std::io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is valid (no handler, empty mask, no flags); the fields
        // that matter are set below.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            on_sigbus;
        action.sa_sigaction = handler as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is a valid sigaction; `PREV` is writable static storage for the old
        // one, read by the handler only once `PREV_READY` is set below.
        let rc = unsafe { libc::sigaction(libc::SIGBUS, &action, (*PREV.0.get()).as_mut_ptr()) };
        if rc == 0 {
            PREV_READY.store(true, Ordering::Release);
        } else {
            result = Err(std::io::Error::last_os_error());
        }
    });
    if result.is_ok() && !PREV_READY.load(Ordering::Acquire) {
        return Err(std::io::Error::other(
            "the SIGBUS handler for BAR mappings could not be installed",
        ));
    }
    result
}

/// Maps anonymous memory full of `0xFF` over the slot's whole range, once. Returns whether the
/// faulting access can be retried.
fn remap(slot: &Slot) -> bool {
    loop {
        match slot
            .state
            .compare_exchange(ACTIVE, REMAPPING, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => break,
            // Another thread is remapping it: wait for it to finish, then retry the access.
            Err(REMAPPING) => std::hint::spin_loop(),
            Err(REMOVED) => return true,
            Err(_) => return false,
        }
    }
    let start = slot.start.load(Ordering::Relaxed);
    let len = slot.len.load(Ordering::Relaxed);
    // SAFETY: `start..start + len` is a live mapping of ours (registered, page aligned, whole
    // pages); replacing it with anonymous memory keeps the range mapped, so every pointer into
    // it stays valid. mmap is not on POSIX's async-signal-safe list but is a plain system call
    // on Linux and safe to call here in practice; SPDK's SIGBUS handler does the same.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        slot.state.store(ACTIVE, Ordering::Release);
        return false;
    }
    // SAFETY: `p..p + len` was just mapped readable and writable; memset is async-signal-safe
    // (POSIX.1-2016).
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0xFF, len) };
    slot.state.store(REMOVED, Ordering::Release);
    true
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some(slot) = REGISTRY.find(addr) {
        if remap(slot) {
            return;
        }
    }
    chain(sig, info, ctx);
}

/// Hands a SIGBUS that is not ours to the previous action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if PREV_READY.load(Ordering::Acquire) {
        // SAFETY: `PREV` was written before `PREV_READY` was released and is never written again.
        let prev = unsafe { (*PREV.0.get()).assume_init_ref() };
        let handler = prev.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous action was installed as an SA_SIGINFO handler, so
                // `handler` is such a function; it gets this signal's own arguments.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the previous handler is a plain `fn(int)`.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            return;
        }
    }
    // The default action (SIG_IGN is not honoured for a fault either): restore it and raise the
    // signal again; it is delivered, and kills the process, when this handler returns.
    // SAFETY: signal and raise are async-signal-safe and take no pointers.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap2::MmapOptions;
    use std::io::Write;

    fn temp_file(len: usize, tag: &str) -> (std::fs::File, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("vfnvme-sigbus-{}-{tag}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(&vec![0x11u8; len]).unwrap();
        (f, path)
    }

    #[test]
    fn a_vanished_mapping_reads_all_ones_and_is_marked_removed() {
        let (f, path) = temp_file(0x3000, "remap");
        let map = GuardedMap::new(MmapOptions::new().len(0x3000).map_raw(&f).unwrap()).unwrap();
        let at = |off: usize| map.as_ptr().wrapping_add(off).cast::<u32>();
        // SAFETY: inside the live mapping, aligned.
        assert_eq!(unsafe { at(0x1004).read_volatile() }, 0x1111_1111);
        assert!(!map.removed());
        // The file shrinks: the pages are no longer backed, the next access raises SIGBUS.
        f.set_len(0).unwrap();
        // SAFETY: still inside the mapping; the handler makes the access succeed.
        assert_eq!(unsafe { at(0x1004).read_volatile() }, u32::MAX);
        assert!(map.removed());
        // The whole mapping was replaced, not just the faulting page.
        // SAFETY: as above.
        assert_eq!(unsafe { at(0).read_volatile() }, u32::MAX);
        // SAFETY: as above.
        assert_eq!(unsafe { at(0x2ffc).read_volatile() }, u32::MAX);
        // A write (a doorbell) lands in the anonymous memory: no fault, nothing reaches a device.
        // SAFETY: as above; the range is mapped writable.
        unsafe { at(0x1008).cast_mut().write_volatile(5) };
        // SAFETY: as above.
        assert_eq!(unsafe { at(0x100c).read_volatile() }, u32::MAX);
        drop(map);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_bar_whose_backing_vanished_reads_all_ones_and_says_removed() {
        let (f, path) = temp_file(0x4000, "bar");
        let bar = crate::vfio::Bar::map(&f, 0, 0x4000, 0).unwrap();
        assert_eq!(bar.read32(0x1c), 0x1111_1111);
        assert!(!bar.removed());
        f.set_len(0).unwrap();
        // CSTS after the device vanished: all ones, and the process is still here.
        assert_eq!(bar.read32(0x1c), u32::MAX);
        assert!(bar.removed());
        assert_eq!(bar.read64(0), u64::MAX);
        assert_eq!(bar.read32(0x3ffc), u32::MAX, "the last register too");
        drop(bar);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn slots_are_claimed_found_and_given_back() {
        let reg = Registry::new();
        let a = reg.claim(0x10000, 0x4000).unwrap();
        let b = reg.claim(0x20000, 0x1000).unwrap();
        assert_ne!(a, b);
        assert_eq!(reg.registered(), 2);
        assert!(std::ptr::eq(reg.find(0x10000).unwrap(), &reg.slots[a]));
        assert!(std::ptr::eq(reg.find(0x13fff).unwrap(), &reg.slots[a]));
        assert!(reg.find(0x14000).is_none(), "one past the end");
        assert!(reg.find(0xffff).is_none());
        assert!(std::ptr::eq(reg.find(0x20800).unwrap(), &reg.slots[b]));
        reg.release(a);
        assert!(reg.find(0x10000).is_none());
        assert_eq!(reg.registered(), 1);
        // Every slot can be taken, then the registry refuses; a freed slot is reused.
        let rest: Vec<usize> = std::iter::from_fn(|| reg.claim(0x100000, 0x1000)).collect();
        assert_eq!(rest.len(), MAX_MAPPINGS - 1);
        assert_eq!(reg.claim(0x200000, 0x1000), None);
        reg.release(b);
        assert_eq!(reg.claim(0x200000, 0x1000), Some(b));
    }

    #[test]
    fn a_guarded_map_registers_its_whole_range() {
        let (f, path) = temp_file(0x2000, "register");
        let map = GuardedMap::new(MmapOptions::new().len(0x2000).map_raw(&f).unwrap()).unwrap();
        let addr = map.as_ptr() as usize;
        let slot = map.slot;
        assert!(std::ptr::eq(
            REGISTRY.find(addr + 0x1fff).unwrap(),
            &REGISTRY.slots[slot]
        ));
        assert!(std::ptr::eq(
            REGISTRY.find(addr).unwrap(),
            &REGISTRY.slots[slot]
        ));
        assert!(REGISTRY.registered() >= 1);
        drop(map);
        let _ = std::fs::remove_file(path);
    }
}
