//! A writer for the cpio "newc" format, the format of a Linux initramfs.
//!
//! Writing the archive ourselves lets it hold device nodes (`/dev/console`) without root
//! privileges or a `cpio` binary. Timestamps are zero, so the same input gives the same bytes.

const MODE_DIR: u32 = 0o040_000;
const MODE_FILE: u32 = 0o100_000;
const MODE_SYMLINK: u32 = 0o120_000;
const MODE_CHAR: u32 = 0o020_000;

/// An in-memory newc archive under construction.
#[derive(Default)]
pub struct Archive {
    bytes: Vec<u8>,
    next_ino: u32,
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Self {
        Self {
            bytes: Vec::new(),
            next_ino: 1,
        }
    }

    /// Adds a directory (`perm` e.g. 0o755).
    pub fn dir(&mut self, path: &str, perm: u32) {
        self.entry(path, MODE_DIR | perm, &[], 0);
    }

    /// Adds a regular file.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.entry(path, MODE_FILE | perm, data, 0);
    }

    /// Adds a symbolic link pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, MODE_SYMLINK | 0o777, target.as_bytes(), 0);
    }

    /// Adds a character device node.
    pub fn char_device(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.entry(path, MODE_CHAR | perm, &[], (major << 16) | minor);
    }

    /// Appends the trailer and returns the archive's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], 0);
        self.bytes
    }

    fn entry(&mut self, path: &str, mode: u32, data: &[u8], rdev: u32) {
        let ino = self.next_ino;
        self.next_ino += 1;
        let name = path.trim_start_matches('/');
        let nlink = if mode & MODE_DIR == MODE_DIR { 2 } else { 1 };
        let fields: [u32; 13] = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            u32::try_from(data.len()).unwrap_or(u32::MAX),
            0, // devmajor
            0, // devminor
            rdev >> 16,
            rdev & 0xffff,
            u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
            0, // check
        ];
        self.bytes.extend_from_slice(b"070701");
        for f in fields {
            self.bytes.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.bytes.len() & 3 != 0 {
            self.bytes.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(header: &[u8], index: usize) -> u32 {
        let start = 6 + index * 8;
        u32::from_str_radix(std::str::from_utf8(&header[start..start + 8]).unwrap(), 16).unwrap()
    }

    #[test]
    fn file_entry_layout() {
        let mut a = Archive::new();
        a.file("/init", 0o755, b"hello");
        let bytes = a.finish();
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(field(&bytes, 1), MODE_FILE | 0o755);
        assert_eq!(field(&bytes, 6), 5);
        assert_eq!(field(&bytes, 11), 5); // "init" + NUL
                                          // header (110) + name (5) = 115, padded to 116; data follows.
        assert_eq!(&bytes[110..115], b"init\0");
        assert_eq!(&bytes[116..121], b"hello");
        assert_eq!(bytes.len() % 4, 0);
        let trailer = bytes.windows(10).position(|w| w == b"TRAILER!!!");
        assert_eq!(trailer, Some(124 + 110));
    }

    #[test]
    fn char_device_has_rdev() {
        let mut a = Archive::new();
        a.char_device("dev/console", 0o600, 5, 1);
        let bytes = a.finish();
        assert_eq!(field(&bytes, 1), MODE_CHAR | 0o600);
        assert_eq!(field(&bytes, 9), 5);
        assert_eq!(field(&bytes, 10), 1);
    }
}
