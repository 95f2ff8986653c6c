//! The BAR SIGBUS handler hands every SIGBUS outside our BAR mappings to the handler that was
//! installed before it. Each case runs in a fresh child process (this binary run again with
//! `SIGBUS_CASE` set) so that it controls what is installed before the BAR handler.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use vfnvme_hal::Bar;

const CASE: &str = "SIGBUS_CASE";

/// The fault address the test's own handler saw (0: not called).
static SEEN: AtomicUsize = AtomicUsize::new(0);

fn temp_file(len: usize, tag: &str) -> (std::fs::File, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("vfnvme-chain-{}-{tag}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all(&vec![0x22u8; len]).unwrap();
    (f, path)
}

/// Maps anonymous memory over the page holding `addr`, so the faulting access can go on.
fn patch_page(addr: usize) {
    let page = addr & !0xfff;
    // SAFETY: test code: replaces one page of a file mapping the test made and owns.
    unsafe {
        libc::mmap(
            page as *mut libc::c_void,
            0x1000,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
    }
}

extern "C" fn siginfo_handler(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo.
    let addr = unsafe { (*info).si_addr() } as usize;
    SEEN.store(addr, Ordering::SeqCst);
    patch_page(addr);
}

/// A plain handler gets no address: it patches the one page the test told it about.
static PLAIN_TARGET: AtomicUsize = AtomicUsize::new(0);

extern "C" fn plain_handler(sig: libc::c_int) {
    let addr = PLAIN_TARGET.load(Ordering::SeqCst);
    if addr == 0 {
        // Not the fault this test set up: die of it rather than loop.
        // SAFETY: async-signal-safe, no pointers.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        return;
    }
    SEEN.store(addr, Ordering::SeqCst);
    patch_page(addr);
}

fn install(handler: usize, flags: libc::c_int) {
    // SAFETY: test code: a zeroed sigaction with the given handler and flags.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        a.sa_sigaction = handler;
        a.sa_flags = flags;
        libc::sigemptyset(&mut a.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGBUS, &a, std::ptr::null_mut()), 0);
    }
}

/// A plain file mapping, not registered as a BAR, whose file is then truncated: an access to
/// it raises a SIGBUS that is not ours.
fn foreign_fault_address(tag: &str) -> (*const u32, std::path::PathBuf) {
    let (f, path) = temp_file(0x2000, tag);
    let map = memmap2::MmapOptions::new().len(0x2000).map_raw(&f).unwrap();
    let p = map.as_ptr();
    std::mem::forget(map); // stays mapped for the rest of this short-lived child
    f.set_len(0).unwrap();
    (p.wrapping_add(0x1010).cast::<u32>(), path)
}

/// The BAR handler still does its job for our mapping, without calling the other handler.
fn check_bar_is_handled(tag: &str) {
    let (f, path) = temp_file(0x4000, tag);
    let bar = Bar::map(&f, 0, 0x4000, 0).unwrap();
    assert_eq!(bar.read32(0x1c), 0x2222_2222);
    f.set_len(0).unwrap();
    assert_eq!(bar.read32(0x1c), u32::MAX, "CSTS reads all ones");
    assert!(bar.removed());
    assert_eq!(
        SEEN.load(Ordering::SeqCst),
        0,
        "our fault was not passed on"
    );
    let _ = std::fs::remove_file(path);
    eprintln!("{BAR_OK}");
}

/// Printed by a child once its BAR case passed.
const BAR_OK: &str = "BAR case passed";

fn run_case(case: &str) {
    match case {
        "siginfo" => {
            install(siginfo_handler as *const () as usize, libc::SA_SIGINFO);
            check_bar_is_handled("siginfo-bar");
            let (p, path) = foreign_fault_address("siginfo-foreign");
            // SAFETY: inside a live mapping; the test's handler patches the page.
            let v = unsafe { p.read_volatile() };
            assert_eq!(
                SEEN.load(Ordering::SeqCst),
                p as usize,
                "the previous handler ran"
            );
            assert_eq!(v, 0, "read the page the previous handler mapped");
            let _ = std::fs::remove_file(path);
        }
        "plain" => {
            install(plain_handler as *const () as usize, 0);
            check_bar_is_handled("plain-bar");
            let (p, path) = foreign_fault_address("plain-foreign");
            PLAIN_TARGET.store(p as usize, Ordering::SeqCst);
            // SAFETY: as above.
            let v = unsafe { p.read_volatile() };
            assert_eq!(
                SEEN.load(Ordering::SeqCst),
                p as usize,
                "the previous handler ran"
            );
            assert_eq!(v, 0);
            let _ = std::fs::remove_file(path);
        }
        "default" => {
            install(libc::SIG_DFL, 0);
            check_bar_is_handled("default-bar");
            let (p, path) = foreign_fault_address("default-foreign");
            let _ = std::fs::remove_file(path);
            // SAFETY: as above; this access must kill the process with SIGBUS.
            let v = unsafe { p.read_volatile() };
            panic!("survived a foreign SIGBUS with the default action (read {v:#x})");
        }
        other => panic!("unknown case {other}"),
    }
}

/// Runs this binary again with only the `child` test and `SIGBUS_CASE=case`.
fn spawn(case: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE, case)
        .output()
        .unwrap()
}

#[test]
fn child() {
    if let Ok(case) = std::env::var(CASE) {
        run_case(&case);
    }
}

fn assert_child_passed(case: &str) {
    let out = spawn(case);
    assert!(
        out.status.success(),
        "case {case}: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The child really ran the case (and was not filtered out).
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed")
            && String::from_utf8_lossy(&out.stderr).contains(BAR_OK),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_foreign_sigbus_reaches_the_previous_siginfo_handler() {
    assert_child_passed("siginfo");
}

#[test]
fn a_foreign_sigbus_reaches_the_previous_plain_handler() {
    assert_child_passed("plain");
}

#[test]
fn a_foreign_sigbus_with_the_default_action_still_kills() {
    let out = spawn("default");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // It died at the foreign access, after the BAR case passed.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(BAR_OK),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
