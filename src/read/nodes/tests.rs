use super::*;
use std::os::fd::AsFd;
use std::path::Path;

fn mknod(dev: &Path, name: &str, kind: SFlag, maj: u64, min: u64) {
    nix::sys::stat::mknod(
        &dev.join(name),
        kind,
        Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(maj, min),
    )
    .unwrap()
}

fn m(destination: &str, kind: &str) -> SpecMount {
    SpecMount::new(destination, kind, &[] as &[&str])
}

/// The runtime's own `/dev`, as runc's and containerd's default specs mount it.
fn runtime_dev() -> Vec<SpecMount> {
    vec![
        m("/proc", "proc"),
        m("/dev", "tmpfs"),
        m("/dev/pts", "devpts"),
        m("/dev/shm", "tmpfs"),
    ]
}

#[test]
fn only_nvidia_char_devices_count_and_links_are_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    mknod(&dev, "nvidia1", SFlag::S_IFCHR, 195, 1);
    mknod(&dev, "nvidia0", SFlag::S_IFCHR, 195, 0);
    mknod(&dev, "nvidiactl", SFlag::S_IFCHR, 195, 255);
    mknod(&dev, "nvidia2", SFlag::S_IFCHR, 10, 2);
    mknod(&dev, "nvidia3", SFlag::S_IFBLK, 195, 3);
    std::fs::write(dev.join("nvidia4"), "not a device").unwrap();
    std::os::unix::fs::symlink("/dev/null", dev.join("nvidia5")).unwrap();
    let fd = std::fs::File::open(root.path()).unwrap();
    let nodes = gpu_nodes(fd.as_fd(), &runtime_dev(), None);
    let minors: Vec<i64> = nodes.iter().map(|n| n.device.minor).collect();
    assert_eq!(minors, [0, 1]);
    assert_eq!(nodes[0].device.path, "/dev/nvidia0");
    assert!(nodes.iter().all(|n| n.untrusted.is_none()), "{nodes:?}");
    // A /dev that is a link is not followed.
    let other = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&dev, other.path().join("dev")).unwrap();
    let fd = std::fs::File::open(other.path()).unwrap();
    assert!(gpu_nodes(fd.as_fd(), &runtime_dev(), None).is_empty());
}

#[test]
fn a_node_is_the_runtime_s_only_on_its_own_dev_tmpfs_with_no_mount_on_it() {
    let tenant = |mounts: &[SpecMount]| spec_untrusted(mounts, "/dev/nvidia1");
    assert_eq!(tenant(&runtime_dev()), None);
    let with = |extra: SpecMount| {
        let mut v = runtime_dev();
        v.push(extra);
        tenant(&v)
    };
    // Mounts below /dev that do not cover the node, and ones elsewhere, change nothing.
    for fine in [
        "/dev/nvidia10",
        "/dev/nvidia1x",
        "/devices",
        "/run",
        "/dev/shm/x",
    ] {
        assert_eq!(with(m(fine, "bind")), None, "{fine}");
    }
    for (mounts, why) in [
        (vec![m("/proc", "proc")], "mounts no tmpfs on /dev"),
        (vec![m("/dev", "bind")], "/dev is a \"bind\" mount"),
        (vec![m("/dev/", "")], "/dev is a no type mount"),
        // Bound from a host directory whatever the type says: runc ignores it under MS_BIND.
        (
            vec![SpecMount::new("/dev", "tmpfs", &["rbind"]).with_source("/srv/gpus")],
            "from \"/srv/gpus\" as a bind (a bind option typed \"tmpfs\")",
        ),
        (
            vec![SpecMount::new("/dev", "tmpfs", &["nosuid", "bind"]).with_source("tmpfs")],
            "as a bind (a bind option",
        ),
        (
            vec![m("/dev", "tmpfs").with_source("/srv/gpus")],
            "as a bind (a path as source typed \"tmpfs\")",
        ),
        (
            vec![m("/dev", "tmpfs"), m("/dev", "bind")],
            "\"bind\" mount",
        ),
        (vec![m("/dev", "tmpfs"), m("/", "bind")], "over /dev"),
        (
            vec![SpecMount::new("/dev", "tmpfs", &["tmpcopyup"])],
            "tmpcopyup",
        ),
        (
            vec![m("/dev", "tmpfs"), m("/dev/nvidia1", "bind")],
            "mounts \"/dev/nvidia1\" (\"bind\") on it",
        ),
        (
            vec![m("/dev", "tmpfs"), m("/dev/../dev/./nvidia1", "bind")],
            "on it",
        ),
        // A node mounted before the tmpfs is hidden by it, but the rule has no exceptions.
        (vec![m("/dev/nvidia1", "bind"), m("/dev", "tmpfs")], "on it"),
    ] {
        let got = tenant(&mounts).unwrap_or_else(|| panic!("{mounts:?} trusted"));
        assert!(got.contains(why), "{mounts:?}: {got}");
    }
    // A directory above the node below /dev.
    assert!(spec_untrusted(
        &[m("/dev", "tmpfs"), m("/dev/gpu", "bind")],
        "/dev/gpu/nvidia1"
    )
    .is_some_and(|w| w.contains("on it")));
}

#[test]
fn a_mount_that_lands_on_dev_or_the_node_through_a_link_makes_it_the_tenant_s() {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    mknod(&dev, "nvidia1", SFlag::S_IFCHR, 195, 1);
    mknod(&dev, "nvidia0", SFlag::S_IFCHR, 195, 0);
    // The image's /x -> /dev: the runtime mounts /x/... within /dev.
    std::os::unix::fs::symlink("/dev", root.path().join("x")).unwrap();
    std::os::unix::fs::symlink("loop", root.path().join("loop")).unwrap();
    let fd = std::fs::File::open(root.path()).unwrap();
    let nodes = |extra: &[SpecMount]| {
        let mut v = runtime_dev();
        v.extend_from_slice(extra);
        gpu_nodes(fd.as_fd(), &v, None)
    };
    // Absent destinations cover nothing.
    let n = nodes(&[m("/etc/hosts", "bind"), m("/run/gone/x", "bind")]);
    assert!(n.iter().all(|n| n.untrusted.is_none()), "{n:?}");
    // On the node through the link: that node only.
    let n = nodes(&[m("/x/nvidia1", "bind")]);
    assert_eq!(n[0].untrusted, None);
    let why = n[1].untrusted.as_deref().unwrap();
    assert!(
        why.contains("\"/x/nvidia1\" (\"bind\") lands on it"),
        "{why}"
    );
    // On /dev itself through the link: every node.
    let n = nodes(&[m("/x", "bind")]);
    assert!(
        n.iter().all(|n| n
            .untrusted
            .as_deref()
            .unwrap()
            .contains("\"/x\" (\"bind\") lands on /dev")),
        "{n:?}"
    );
    // A destination the hook cannot resolve (the runtime could follow 255 links, openat2 40).
    let n = nodes(&[m("/loop/a", "bind")]);
    assert!(
        n.iter().all(|n| n
            .untrusted
            .as_deref()
            .unwrap()
            .contains("cannot be resolved")),
        "{n:?}"
    );
}

#[test]
fn dri_card_and_render_nodes_count_and_a_mount_on_dev_dri_makes_them_the_tenant_s() {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev");
    let dri = dev.join("dri");
    std::fs::create_dir_all(&dri).unwrap();
    mknod(&dev, "nvidia0", SFlag::S_IFCHR, 195, 0);
    mknod(&dri, "renderD128", SFlag::S_IFCHR, 226, 128);
    mknod(&dri, "card0", SFlag::S_IFCHR, 226, 0);
    mknod(&dri, "card1", SFlag::S_IFCHR, 195, 1); // not a DRM major
    std::fs::create_dir(dri.join("by-path")).unwrap();
    let fd = std::fs::File::open(root.path()).unwrap();
    let nodes = gpu_nodes(fd.as_fd(), &runtime_dev(), None);
    let paths: Vec<&str> = nodes.iter().map(|n| n.device.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/dev/nvidia0", "/dev/dri/card0", "/dev/dri/renderD128"]
    );
    assert!(nodes.iter().all(|n| n.untrusted.is_none()), "{nodes:?}");
    // A volume at /dev/dri: its nodes are the tenant's, /dev/nvidia0 stays the runtime's.
    let mut mounts = runtime_dev();
    mounts.push(m("/dev/dri", "bind"));
    let nodes = gpu_nodes(fd.as_fd(), &mounts, None);
    let tenant: Vec<bool> = nodes.iter().map(|n| n.untrusted.is_some()).collect();
    assert_eq!(tenant, [false, true, true], "{nodes:?}");
    // Through a link of the image (/x -> /dev): the mount lands on /dev/dri.
    std::os::unix::fs::symlink("/dev", root.path().join("x")).unwrap();
    let mut mounts = runtime_dev();
    mounts.push(m("/x/dri", "bind"));
    let nodes = gpu_nodes(fd.as_fd(), &mounts, None);
    let tenant: Vec<bool> = nodes.iter().map(|n| n.untrusted.is_some()).collect();
    assert_eq!(tenant, [false, true, true], "{nodes:?}");
    // A /dev/dri that is a link is not followed.
    std::fs::remove_dir_all(&dri).unwrap();
    std::os::unix::fs::symlink("/dev", &dri).unwrap();
    let nodes = gpu_nodes(fd.as_fd(), &runtime_dev(), None);
    assert_eq!(nodes.len(), 1);
}

#[test]
fn the_runtime_s_tmpfs_source_is_no_bind() {
    let dev = SpecMount::new("/dev", "tmpfs", &["nosuid", "strictatime", "mode=755"]);
    assert_eq!(
        spec_untrusted(&[dev.with_source("tmpfs")], "/dev/nvidia0"),
        None
    );
}

/// A mount table line of device `dev` (as `fstat` gives it) of `fs` with mount root `root` at
/// `at`.
fn table_line(id: u32, dev: u64, root: &str, at: &str, fs: &str) -> String {
    format!(
        "{id} 1 {}:{} {root} {at} rw,nosuid - {fs} {fs} rw\n",
        major(dev),
        minor(dev)
    )
}

#[test]
fn dev_is_the_runtime_s_only_where_its_mount_table_shows_a_fresh_tmpfs() {
    let t = tempfile::tempdir().unwrap();
    let st = nix::sys::stat::stat(t.path()).unwrap();
    let table = t.path().join("mountinfo");
    let judge = |text: &str| {
        std::fs::write(&table, text).unwrap();
        table_untrusted(&table, &st)
    };
    let other = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n";
    let fresh = table_line(90, st.st_dev, "/", "/b/rootfs/dev", "tmpfs");
    assert_eq!(judge(&format!("{other}{fresh}")), None);
    assert_eq!(
        judge(&table_line(90, st.st_dev, "/", "/dev", "tmpfs")),
        None
    );
    for (text, why) in [
        (other.to_string(), "is on no mount of its mount table"),
        (
            table_line(90, st.st_dev, "/gpus", "/b/rootfs/dev", "tmpfs"),
            "as \"/gpus\" of a tmpfs",
        ),
        (
            table_line(90, st.st_dev, "/", "/b/rootfs/devices", "tmpfs"),
            "of a tmpfs at \"/b/rootfs/devices\"",
        ),
        (
            table_line(90, st.st_dev, "/", "/b/rootfs/dev", "ext4"),
            "on a \"ext4\" filesystem",
        ),
        // A bind of a whole host tmpfs: the same filesystem is mounted on the host too.
        (
            format!(
                "{}{fresh}",
                table_line(30, st.st_dev, "/", "/dev/shm", "tmpfs")
            ),
            "mounted 2 times: a bind",
        ),
    ] {
        let got = judge(&text).unwrap_or_else(|| panic!("{text} trusted"));
        assert!(got.contains(why), "{text}: {got}");
    }
    std::fs::remove_file(&table).unwrap();
    let got = table_untrusted(&table, &st).unwrap();
    assert!(got.contains("cannot be read"), "{got}");
    // A FIFO there is refused at once, never waited on.
    nix::unistd::mkfifo(&table, Mode::from_bits_truncate(0o600)).unwrap();
    let got = table_untrusted(&table, &st).unwrap();
    assert!(got.contains("cannot be read"), "{got}");
}

#[test]
fn a_node_the_spec_trusts_is_the_tenant_s_where_the_mount_table_shows_a_bind() {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    mknod(&dev, "nvidia0", SFlag::S_IFCHR, 195, 0);
    let st = nix::sys::stat::stat(&dev).unwrap();
    let table = root.path().join("mountinfo");
    let fd = std::fs::File::open(root.path()).unwrap();
    std::fs::write(&table, table_line(90, st.st_dev, "/", "/r/dev", "tmpfs")).unwrap();
    let nodes = gpu_nodes(fd.as_fd(), &runtime_dev(), Some(&table));
    assert_eq!(nodes[0].untrusted, None, "a fresh tmpfs");
    std::fs::write(
        &table,
        table_line(90, st.st_dev, "/srv/gpus", "/r/dev", "ext4"),
    )
    .unwrap();
    let nodes = gpu_nodes(fd.as_fd(), &runtime_dev(), Some(&table));
    let why = nodes[0].untrusted.as_deref().unwrap();
    assert!(
        why.contains("its mount table shows its /dev on a \"ext4\""),
        "{why}"
    );
    // The spec's own rule names the cause first.
    let bound = vec![SpecMount::new("/dev", "tmpfs", &["rbind"]).with_source("/srv/gpus")];
    let nodes = gpu_nodes(fd.as_fd(), &bound, Some(&table));
    let why = nodes[0].untrusted.as_deref().unwrap();
    assert!(why.contains("the spec mounts /dev from"), "{why}");
}
