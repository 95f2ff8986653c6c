//! Guest side of host-side QMP commands: a guest test asks the `vfnvme vm` harness to send a QMP
//! command to this guest's QEMU (e.g. `device_del` of a controller behind a root port) at the
//! moment it chooses, and reads the QMP events QEMU sent (e.g. `DEVICE_DELETED`).
//!
//! The channel is the folder `$VFNVME_QMP_DIR` on the writable output share: a request is a
//! JSON file `NAME.req` (written as `NAME.tmp`, then renamed), the harness answers in
//! `NAME.resp` and appends every QMP event as a line of `events.jsonl` (see
//! tools/src/vm/qmp.rs and docs/testing.md).

use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How often the files are looked at while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Why a host-side QMP command did not succeed.
#[derive(Debug)]
pub enum QmpError {
    /// `VFNVME_QMP_DIR` is not set: not in a `vfnvme vm` guest.
    NoChannel,
    /// Writing the request or reading the reply failed.
    Io(String),
    /// No reply within the time given (is the harness running, is QEMU stuck?).
    NoReply(Duration),
    /// QEMU (class from QEMU) or the harness (`HarnessError`) refused the command.
    Refused {
        /// The QMP error class.
        class: String,
        /// The error's description.
        desc: String,
    },
}

impl fmt::Display for QmpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QmpError::NoChannel => write!(
                f,
                "VFNVME_QMP_DIR is not set: run this in the guest through `vfnvme vm`"
            ),
            QmpError::Io(e) => write!(f, "QMP request channel: {e}"),
            QmpError::NoReply(d) => write!(
                f,
                "the harness sent no QMP reply within {d:?} (see the host side of the run's log)"
            ),
            QmpError::Refused { class, desc } => write!(f, "QMP error {class}: {desc}"),
        }
    }
}

impl std::error::Error for QmpError {}

fn dir() -> Result<PathBuf, QmpError> {
    std::env::var_os("VFNVME_QMP_DIR")
        .map(PathBuf::from)
        .ok_or(QmpError::NoChannel)
}

/// Has the host send `{"execute": execute, "arguments": arguments}` to QEMU (without
/// `arguments` when it is `null`) and waits up to `timeout` for the reply; returns the value of
/// its `return`.
pub fn execute(execute: &str, arguments: Value, timeout: Duration) -> Result<Value, QmpError> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = dir()?;
    let name = format!(
        "{}-{:04}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let cmd = if arguments.is_null() {
        serde_json::json!({ "execute": execute })
    } else {
        serde_json::json!({"execute": execute, "arguments": arguments})
    };
    let tmp = dir.join(format!("{name}.tmp"));
    let req = dir.join(format!("{name}.req"));
    let resp = dir.join(format!("{name}.resp"));
    fs::write(&tmp, cmd.to_string())
        .map_err(|e| QmpError::Io(format!("{}: {e}", tmp.display())))?;
    fs::rename(&tmp, &req).map_err(|e| QmpError::Io(format!("{}: {e}", req.display())))?;
    let deadline = Instant::now() + timeout;
    let text = loop {
        match fs::read_to_string(&resp) {
            Ok(t) if t.ends_with('\n') => break t,
            _ if Instant::now() >= deadline => return Err(QmpError::NoReply(timeout)),
            _ => std::thread::sleep(POLL),
        }
    };
    let reply: Value = serde_json::from_str(text.trim())
        .map_err(|e| QmpError::Io(format!("the reply is not JSON ({e}): {text:?}")))?;
    if let Some(r) = reply.get("return") {
        return Ok(r.clone());
    }
    let err = &reply["error"];
    Err(QmpError::Refused {
        class: err["class"].as_str().unwrap_or("?").to_string(),
        desc: err["desc"].as_str().unwrap_or("?").to_string(),
    })
}

/// The QMP events QEMU has sent so far (each a JSON object with `event`, `data`, `timestamp`).
pub fn events() -> Result<Vec<Value>, QmpError> {
    let path = dir()?.join("events.jsonl");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(QmpError::Io(format!("{}: {e}", path.display()))),
    };
    // Only whole lines: the harness may be appending the last one.
    Ok(text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect())
}

/// Waits up to `timeout` for an event named `name` whose `data` satisfies `matches`; returns it.
pub fn wait_event(
    name: &str,
    matches: impl Fn(&Value) -> bool,
    timeout: Duration,
) -> Result<Option<Value>, QmpError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(e) = events()?
            .into_iter()
            .find(|e| e["event"] == name && matches(&e["data"]))
        {
            return Ok(Some(e));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// The QEMU device id of the controller at `bdf` (from `VFNVME_QEMU_IDS`, `id=bdf,...`).
pub fn qemu_id_of(bdf: &str) -> Option<String> {
    std::env::var("VFNVME_QEMU_IDS")
        .ok()?
        .split(',')
        .filter_map(|item| item.split_once('='))
        .find(|(_, b)| *b == bdf)
        .map(|(id, _)| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The harness end is tested in tools/src/vm/qmp.rs; here the guest end against a stand-in
    // that answers like the relay.
    #[test]
    fn request_reply_and_events_through_the_folder() {
        let d = std::env::temp_dir().join(format!("vfnvme-host-qmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        // The only test of this crate that sets or reads the variable.
        std::env::set_var("VFNVME_QMP_DIR", &d);
        let relay_dir = d.clone();
        let relay = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut answered = 0;
            while answered < 2 && Instant::now() < deadline {
                for e in fs::read_dir(&relay_dir).unwrap().flatten() {
                    let p = e.path();
                    if p.extension().is_some_and(|x| x == "req") {
                        let cmd: Value =
                            serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
                        let reply = if cmd["execute"] == "device_del" {
                            fs::write(
                                relay_dir.join("events.jsonl"),
                                "{\"event\":\"DEVICE_DELETED\",\"data\":{\"device\":\"c0\"}}\n{\"event\":\"PARTIAL",
                            )
                            .unwrap();
                            "{\"return\": {}}\n".to_string()
                        } else {
                            "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}}\n"
                                .to_string()
                        };
                        fs::write(p.with_extension("resp"), reply).unwrap();
                        fs::remove_file(&p).unwrap();
                        answered += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let r = execute(
            "device_del",
            serde_json::json!({"id": "c0"}),
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(r, serde_json::json!({}));
        let e = wait_event(
            "DEVICE_DELETED",
            |d| d["device"] == "c0",
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(e.is_some());
        assert_eq!(events().unwrap().len(), 1, "the partial line is left out");
        let err = execute("stop", Value::Null, Duration::from_secs(20)).unwrap_err();
        assert!(matches!(err, QmpError::Refused { ref class, .. } if class == "GenericError"));
        relay.join().unwrap();
        fs::remove_dir_all(&d).unwrap();
    }
}
