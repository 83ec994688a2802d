//! The GPU device nodes a container has in its `/dev` at createRuntime: NVIDIA's legacy hook
//! and runtime inject GPUs that way without touching `config.json`.

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, major, minor, Mode, SFlag};

use super::devices::NVIDIA_MAJOR;
use super::spec::CharDevice;

/// The most entries of the container's `/dev` looked at (a runtime's `/dev` holds a few dozen).
const MAX_ENTRIES: usize = 4096;

/// The `/dev/nvidiaN` char devices (major 195) under `rootfs` (an fd on the container's root
/// as the hook opened it): `dev` is opened without following a link, each entry is
/// `fstatat`ed without following one, and only char devices count. Nothing readable: none.
pub fn gpu_nodes(rootfs: BorrowedFd<'_>) -> Vec<CharDevice> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(mut dir) = Dir::openat(Some(rootfs.as_raw_fd()), "dev", flags, Mode::empty()) else {
        return Vec::new();
    };
    let dirfd = dir.as_raw_fd();
    let mut nodes = Vec::new();
    for entry in dir.iter().take(MAX_ENTRIES).flatten() {
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        let Some(n) = name.strip_prefix("nvidia") else {
            continue;
        };
        if n.is_empty() || n.len() > 3 || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(st) = fstatat(Some(dirfd), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let is_char = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
        if is_char && major(st.st_rdev) as i64 == NVIDIA_MAJOR {
            nodes.push(CharDevice {
                major: NVIDIA_MAJOR,
                minor: minor(st.st_rdev) as i64,
                path: format!("/dev/{name}"),
            });
        }
    }
    nodes.sort_by_key(|d| d.minor);
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn only_nvidia_char_devices_count_and_links_are_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let dev = root.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        let mknod = |name: &str, kind: SFlag, maj: u64, min: u64| {
            nix::sys::stat::mknod(
                &dev.join(name),
                kind,
                Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(maj, min),
            )
            .unwrap()
        };
        mknod("nvidia1", SFlag::S_IFCHR, 195, 1);
        mknod("nvidia0", SFlag::S_IFCHR, 195, 0);
        mknod("nvidiactl", SFlag::S_IFCHR, 195, 255);
        mknod("nvidia2", SFlag::S_IFCHR, 10, 2);
        mknod("nvidia3", SFlag::S_IFBLK, 195, 3);
        std::fs::write(dev.join("nvidia4"), "not a device").unwrap();
        std::os::unix::fs::symlink("/dev/null", dev.join("nvidia5")).unwrap();
        let fd = std::fs::File::open(root.path()).unwrap();
        let nodes = gpu_nodes(fd.as_fd());
        let minors: Vec<i64> = nodes.iter().map(|n| n.minor).collect();
        assert_eq!(minors, [0, 1]);
        assert_eq!(nodes[0].path, "/dev/nvidia0");
        // A /dev that is a link is not followed.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&dev, other.path().join("dev")).unwrap();
        let fd = std::fs::File::open(other.path()).unwrap();
        assert!(gpu_nodes(fd.as_fd()).is_empty());
    }
}
