//! Builds (and caches) the guest's initramfs: busybox, the virtio/9p modules and `/init`.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::cpio::Archive;
use super::init_script::init_script;
use super::install::GuestKernel;

/// The static busybox from Debian's busybox-static.
const BUSYBOX: &str = "/bin/busybox";

/// Modules the initramfs loads (with their dependencies, resolved from modules.dep) so it can
/// mount 9p over virtio-pci.
const ROOT_MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "9pnet",
    "9pnet_virtio",
    "netfs",
    "fscache",
    "9p",
];

/// Returns the cached initramfs for `kernel`, building it when missing.
///
/// The cache key is the kernel version plus a hash of `/init`, the module list and busybox, so
/// editing the init script rebuilds it.
pub fn ensure_initramfs(kernel: &GuestKernel, cache_dir: &Path) -> Result<PathBuf> {
    let init = init_script();
    let busybox = fs::read(BUSYBOX).with_context(|| {
        format!("reading {BUSYBOX}; install it with `apt-get install busybox-static`")
    })?;
    let mut hasher = DefaultHasher::new();
    init.hash(&mut hasher);
    ROOT_MODULES.hash(&mut hasher);
    busybox.hash(&mut hasher);
    let key = format!("{}-{:016x}", kernel.version, hasher.finish());
    let path = cache_dir.join(format!("initramfs-{key}.cpio"));
    if path.is_file() {
        return Ok(path);
    }
    eprintln!("vfnvme vm: building the guest initramfs {}", path.display());
    let modules = resolve_modules(&kernel.modules, ROOT_MODULES)?;
    let mut archive = Archive::new();
    for dir in [
        "bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "host", "tmp", "modules",
    ] {
        archive.dir(dir, 0o755);
    }
    archive.char_device("dev/console", 0o600, 5, 1);
    archive.char_device("dev/null", 0o666, 1, 3);
    archive.file("bin/busybox", 0o755, &busybox);
    archive.symlink("bin/sh", "busybox");
    archive.file("init", 0o755, init.as_bytes());
    let mut order = String::new();
    for (name, file) in &modules {
        let data = read_module(file)?;
        archive.file(&format!("modules/{name}.ko"), 0o644, &data);
        order.push_str(name);
        order.push('\n');
    }
    archive.file("modules/order", 0o644, order.as_bytes());
    fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating cache folder {}", cache_dir.display()))?;
    let tmp = cache_dir.join(format!(".initramfs-{key}.{}.tmp", std::process::id()));
    fs::write(&tmp, archive.finish()).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(path)
}

/// Module names with their files, dependencies first, each once.
fn resolve_modules(module_dir: &Path, roots: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let dep_path = module_dir.join("modules.dep");
    let deps_text =
        fs::read_to_string(&dep_path).with_context(|| format!("reading {}", dep_path.display()))?;
    let builtin = fs::read_to_string(module_dir.join("modules.builtin")).unwrap_or_default();
    let deps = parse_modules_dep(&deps_text);
    let builtin: HashSet<String> = builtin.lines().map(module_name).collect();
    let mut ordered = Vec::new();
    let mut seen = HashSet::new();
    for root in roots {
        let name = normalize(root);
        if !deps.contains_key(&name) {
            if builtin.contains(&name) {
                continue;
            }
            bail!(
                "kernel module {root} is neither in {} nor built in; this guest kernel cannot \
                 mount the host over virtio 9p",
                dep_path.display()
            );
        }
        visit(&name, &deps, &mut seen, &mut ordered);
    }
    Ok(ordered
        .into_iter()
        .filter_map(|name| {
            let (file, _) = deps.get(&name)?;
            Some((name, module_dir.join(file)))
        })
        .collect())
}

type DepMap = HashMap<String, (String, Vec<String>)>;

fn visit(name: &str, deps: &DepMap, seen: &mut HashSet<String>, out: &mut Vec<String>) {
    if !seen.insert(name.to_string()) {
        return;
    }
    if let Some((_, requires)) = deps.get(name) {
        for dep in requires {
            visit(dep, deps, seen, out);
        }
    }
    out.push(name.to_string());
}

/// name → (relative file, names it depends on).
fn parse_modules_dep(text: &str) -> DepMap {
    let mut map = HashMap::new();
    for line in text.lines() {
        let Some((file, rest)) = line.split_once(':') else {
            continue;
        };
        let requires = rest.split_whitespace().map(module_name).collect();
        map.insert(module_name(file), (file.to_string(), requires));
    }
    map
}

/// `kernel/net/9p/9pnet_virtio.ko.xz` → `9pnet_virtio`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    normalize(stem)
}

fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// A module's bytes, decompressed if the kernel package ships it compressed.
fn read_module(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".ko.xz") {
        Some("xz")
    } else if name.ends_with(".ko.zst") {
        Some("zstd")
    } else if name.ends_with(".ko.gz") {
        Some("gzip")
    } else {
        None
    };
    let Some(tool) = tool else {
        return fs::read(path).with_context(|| format!("reading module {}", path.display()));
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .with_context(|| format!("running {tool} to decompress {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "{tool} -dc {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_first_and_once() {
        let dir = std::env::temp_dir().join(format!("vfnvme-moddep-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("modules.dep"),
            "kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/fscache/fscache.ko.xz kernel/fs/netfs/netfs.ko.xz\n\
             kernel/fs/netfs/netfs.ko.xz:\n\
             kernel/fs/fscache/fscache.ko.xz: kernel/fs/netfs/netfs.ko.xz\n\
             kernel/net/9p/9pnet.ko.xz:\n\
             kernel/drivers/vfio/pci/vfio-pci.ko.xz:\n",
        )
        .unwrap();
        fs::write(
            dir.join("modules.builtin"),
            "kernel/drivers/virtio/virtio.ko\n",
        )
        .unwrap();
        let mods = resolve_modules(&dir, &["virtio", "9p", "netfs", "vfio-pci"]).unwrap();
        let names: Vec<&str> = mods.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["9pnet", "netfs", "fscache", "9p", "vfio_pci"]);
        assert!(mods[0].1.ends_with("kernel/net/9p/9pnet.ko.xz"));
        let err = resolve_modules(&dir, &["nosuch"]).unwrap_err().to_string();
        assert!(err.contains("nosuch"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
