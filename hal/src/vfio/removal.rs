//! The VFIO device request interrupt: the kernel asking for the device back.
//!
//! When a device bound to vfio-pci is unbound, removed through sysfs or hot-unplugged, the
//! kernel cannot finish until every fd and mapping of the device is closed; it signals the
//! eventfd registered for `VFIO_PCI_REQ_IRQ_INDEX` (at once, then every 10 s). Without one it
//! logs "No device request channel registered, blocked until released by user" and waits.
//! [`RemovalNotice`] registers such an eventfd ([`super::VfioDevice::removal_notice`]) and lets
//! the driver notice the request cheaply: a watcher thread blocks on the eventfd and latches the
//! request, so [`RemovalNotice::requested`] is one atomic load, no system call. See docs/hot-removal.md.

use super::container::ioctl_error;
use super::ioctls;
use crate::error::HalError;
use crate::pci::address::PciAddress;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::{
    vfio_irq_info, vfio_irq_set, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_REQ_IRQ_INDEX,
};

/// An eventfd with a latch: once signalled, it stays "requested". A watcher thread blocks in
/// `poll(2)` on it and sets the latch, so that asking costs one atomic load and no system call
/// (queue pairs ask from their poll loop).
#[derive(Debug)]
struct LatchedEvent {
    fd: OwnedFd,
    /// Written by `drop` to end the watcher.
    stop: OwnedFd,
    seen: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

/// A new non-blocking eventfd.
fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads and clears eventfd `fd`; returns its counter (0 if it was not signalled).
fn drain(fd: RawFd) -> u64 {
    let mut count = 0u64;
    // SAFETY: reads at most 8 bytes into `count`, which is 8 bytes long.
    let n = unsafe { libc::read(fd, (&mut count as *mut u64).cast::<libc::c_void>(), 8) };
    if n == 8 {
        count
    } else {
        0
    }
}

/// The watcher: waits for `event` (sets `seen`) or `stop`, whichever comes first.
fn watch(event: RawFd, stop: RawFd, seen: &AtomicBool) {
    loop {
        let mut pfds = [
            libc::pollfd {
                fd: event,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds; EINTR loops.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            log::error!(
                "device request eventfd: poll failed: {}",
                std::io::Error::last_os_error()
            );
            return;
        }
        if pfds[0].revents != 0 && drain(event) > 0 {
            seen.store(true, Ordering::Release);
            return;
        }
        if pfds[1].revents != 0 {
            return;
        }
    }
}

impl LatchedEvent {
    fn new() -> std::io::Result<Self> {
        let fd = eventfd()?;
        let stop = eventfd()?;
        let seen = Arc::new(AtomicBool::new(false));
        let (e, st, flag) = (fd.as_raw_fd(), stop.as_raw_fd(), seen.clone());
        // The watcher uses the fds until `drop` joins it, before they are closed.
        let watcher = std::thread::Builder::new()
            .name("vfnvme-removal".into())
            .spawn(move || watch(e, st, &flag))?;
        Ok(LatchedEvent {
            fd,
            stop,
            seen,
            watcher: Some(watcher),
        })
    }

    /// Whether the event was ever signalled: one atomic load, no system call.
    fn requested(&self) -> bool {
        self.seen.load(Ordering::Acquire)
    }

    /// Waits up to `timeout` for the event (control path: checks every millisecond); returns
    /// [`LatchedEvent::requested`].
    fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.requested() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(Duration::from_millis(1)));
        }
        true
    }

    #[cfg(test)]
    fn signal(&self, value: u64) {
        // SAFETY: writes 8 bytes from `value`.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&value as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
        assert_eq!(n, 8);
    }
}

impl Drop for LatchedEvent {
    fn drop(&mut self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to the stop eventfd, still open.
        unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

/// The eventfd the kernel signals when it wants the device back (unbind, sysfs `remove`, PCIe
/// hot-unplug). Made by [`super::VfioDevice::removal_notice`]; unregistered when the last clone
/// of its `Arc` is dropped. It holds its own handle on the device file, so the kernel's removal
/// completes only once it, the [`super::VfioDevice`] and every [`super::Bar`] are dropped.
#[derive(Debug)]
pub struct RemovalNotice {
    event: LatchedEvent,
    device: File,
    address: PciAddress,
}

/// VFIO_DEVICE_SET_IRQS's argument with room for one eventfd after the header.
#[repr(C)]
struct IrqSetOne {
    head: vfio_irq_set,
    fd: i32,
}

const _: () = assert!(std::mem::offset_of!(IrqSetOne, fd) == std::mem::size_of::<vfio_irq_set>());

impl RemovalNotice {
    /// Registers a new eventfd as `device`'s request interrupt. Fails with
    /// [`HalError::NoRequestIrq`] when the kernel offers none.
    pub(crate) fn register(device: &File, address: PciAddress) -> Result<Self, HalError> {
        let fd = device.as_raw_fd();
        let mut info = vfio_irq_info {
            argsz: std::mem::size_of::<vfio_irq_info>() as u32,
            index: VFIO_PCI_REQ_IRQ_INDEX,
            ..Default::default()
        };
        // SAFETY: `info` is a valid vfio_irq_info with argsz set; the kernel fills it in.
        let answer = unsafe { ioctls::vfio_device_get_irq_info(fd, &mut info) };
        check_request_irq(answer.map(|_| info), address)?;
        let event = LatchedEvent::new().map_err(|source| HalError::Io {
            path: format!("{address} device request eventfd"),
            source,
        })?;
        let device = device.try_clone().map_err(|source| HalError::Io {
            path: format!("{address} VFIO device fd"),
            source,
        })?;
        let notice = RemovalNotice {
            event,
            device,
            address,
        };
        notice.set_trigger(Some(notice.event.fd.as_raw_fd()))?;
        log::debug!("{address}: device request eventfd registered");
        Ok(notice)
    }

    /// VFIO_DEVICE_SET_IRQS on the request index: trigger `fd`, or nothing.
    fn set_trigger(&self, fd: Option<RawFd>) -> Result<(), HalError> {
        let data = if fd.is_some() {
            VFIO_IRQ_SET_DATA_EVENTFD
        } else {
            VFIO_IRQ_SET_DATA_NONE
        };
        let arg = IrqSetOne {
            head: vfio_irq_set {
                argsz: std::mem::size_of::<IrqSetOne>() as u32,
                flags: data | VFIO_IRQ_SET_ACTION_TRIGGER,
                index: VFIO_PCI_REQ_IRQ_INDEX,
                start: 0,
                count: u32::from(fd.is_some()),
                ..Default::default()
            },
            fd: fd.unwrap_or(-1),
        };
        // SAFETY: `arg` is a vfio_irq_set followed by `count` eventfds (0 or 1), `argsz` bytes
        // in all; the kernel only reads it.
        unsafe { ioctls::vfio_device_set_irqs(self.device.as_raw_fd(), &arg.head) }
            .map_err(|e| ioctl_error("DEVICE_SET_IRQS", e))?;
        Ok(())
    }

    /// The device this notice is for.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// Whether the kernel has asked for the device back: one atomic load (a watcher thread
    /// blocks on the eventfd and latches the request), cheap enough for the I/O path. When it
    /// is true, fail outstanding I/O and drop the device, its BAR and this notice so that the
    /// kernel's removal can finish.
    pub fn requested(&self) -> bool {
        self.event.requested()
    }

    /// Blocks up to `timeout` for the request; returns [`RemovalNotice::requested`].
    pub fn wait(&self, timeout: Duration) -> bool {
        self.event.wait(timeout)
    }
}

/// Whether `VFIO_DEVICE_GET_IRQ_INFO`'s answer for the request index offers an eventfd.
fn check_request_irq(
    answer: nix::Result<vfio_irq_info>,
    address: PciAddress,
) -> Result<(), HalError> {
    let none = || HalError::NoRequestIrq {
        address: address.to_string(),
    };
    match answer {
        // Kernels before the request interrupt refuse the index as out of range.
        Err(nix::Error::EINVAL) => Err(none()),
        Err(e) => Err(ioctl_error("DEVICE_GET_IRQ_INFO", e)),
        Ok(info) if info.count < 1 || info.flags & VFIO_IRQ_INFO_EVENTFD == 0 => Err(none()),
        Ok(_) => Ok(()),
    }
}

impl Drop for RemovalNotice {
    fn drop(&mut self) {
        if let Err(e) = self.set_trigger(None) {
            // The device may be half gone already; closing the fds below releases it anyway.
            log::debug!("{}: unregistering the request eventfd: {e}", self.address);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_latches_once_signalled() {
        let ev = LatchedEvent::new().unwrap();
        assert!(!ev.requested());
        assert!(!ev.wait(Duration::from_millis(5)), "nothing signalled yet");
        ev.signal(1);
        assert!(ev.wait(Duration::from_secs(60)), "the watcher latched it");
        // The counter was consumed by the watcher, but the answer stays.
        assert!(ev.requested());
        let mut pfd = libc::pollfd {
            fd: ev.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0, "read cleared it");
    }

    #[test]
    fn dropping_an_unsignalled_event_ends_its_watcher() {
        let ev = LatchedEvent::new().unwrap();
        drop(ev); // joins the watcher: would hang if it did not end
    }

    #[test]
    fn wait_returns_when_signalled_or_at_the_timeout() {
        let ev = std::sync::Arc::new(LatchedEvent::new().unwrap());
        assert!(!ev.wait(Duration::from_millis(1)));
        let other = ev.clone();
        let t = std::thread::spawn(move || other.signal(2));
        assert!(ev.wait(Duration::from_secs(60)));
        t.join().unwrap();
        assert!(ev.wait(Duration::ZERO));
    }

    #[test]
    fn a_kernel_without_the_request_interrupt_gets_a_typed_error() {
        let addr = PciAddress::parse("0000:00:10.0").unwrap();
        let info = |count, flags| vfio_irq_info {
            argsz: 16,
            flags,
            index: VFIO_PCI_REQ_IRQ_INDEX,
            count,
        };
        assert!(check_request_irq(Ok(info(1, VFIO_IRQ_INFO_EVENTFD)), addr).is_ok());
        for answer in [
            Ok(info(0, VFIO_IRQ_INFO_EVENTFD)),
            Ok(info(1, 0)),
            Err(nix::Error::EINVAL),
        ] {
            let err = check_request_irq(answer, addr).unwrap_err();
            assert!(
                matches!(&err, HalError::NoRequestIrq { address } if address == "0000:00:10.0"),
                "{err}"
            );
            assert!(err.to_string().contains("Linux 4.1"), "{err}");
        }
        assert!(matches!(
            check_request_irq(Err(nix::Error::EBADF), addr),
            Err(HalError::Ioctl {
                op: "DEVICE_GET_IRQ_INFO",
                ..
            })
        ));
    }

    #[test]
    fn a_file_that_is_not_a_vfio_device_fails_cleanly() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let err =
            RemovalNotice::register(&f, PciAddress::parse("0000:00:10.0").unwrap()).unwrap_err();
        assert!(matches!(err, HalError::Ioctl { .. }), "{err}");
    }

    #[test]
    fn the_set_irqs_argument_is_a_header_and_one_fd() {
        assert_eq!(std::mem::size_of::<IrqSetOne>(), 24);
    }
}
