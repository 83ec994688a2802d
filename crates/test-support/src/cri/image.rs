//! The node's images: OCI image-layout tars built from /bin/busybox (no registry).

use super::*;

fn sha256(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

fn tar_dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

fn tar_file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_mode(mode);
    h.set_size(data.len() as u64);
    b.append_data(&mut h, path, data).unwrap();
}

/// What an image holds besides busybox: volumes its config declares, char devices and
/// symbolic links in its layer.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageExtra<'a> {
    /// The config's `Volumes` (containerd copies the image's content there into each).
    pub volumes: &'a [&'a str],
    /// Char devices in the layer: path (relative), major, minor.
    pub char_devices: &'a [(&'a str, u32, u32)],
    /// Symbolic links in the layer: path (relative), target.
    pub links: &'a [(&'a str, &'a str)],
    /// Regular files in the layer: path (relative), bytes.
    pub files: &'a [(&'a str, &'a [u8])],
}

/// The char devices a `/dev` needs for a container to start when the runtime makes none (a
/// volume at `/dev`): null, zero, full, random, urandom, tty.
pub const STANDARD_NODES: &[(&str, u32, u32)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// Writes an OCI image-layout tar at `out`: one layer with `/bin/busybox` and its applets, the
/// image `reference` (annotated for `ctr images import`) running `cmd`.
pub fn image_tar(out: &Path, reference: &str, cmd: &[&str]) {
    image_tar_with(out, reference, cmd, ImageExtra::default())
}

/// [`image_tar`] with `extra` in its config and layer.
pub fn image_tar_with(out: &Path, reference: &str, cmd: &[&str], extra: ImageExtra<'_>) {
    let busybox = std::fs::read(which("busybox")).expect("read busybox");
    let mut layer = tar::Builder::new(Vec::new());
    for d in ["bin", "proc", "sys", "dev", "tmp", "run", "etc"] {
        tar_dir(&mut layer, d);
    }
    for (path, major, minor) in extra.char_devices {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Char);
        h.set_mode(0o666);
        h.set_size(0);
        h.set_device_major(*major).unwrap();
        h.set_device_minor(*minor).unwrap();
        layer.append_data(&mut h, path, std::io::empty()).unwrap();
    }
    for (path, target) in extra.links {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        layer.append_link(&mut h, path, target).unwrap();
    }
    tar_file(&mut layer, "bin/busybox", &busybox, 0o755);
    for (path, data) in extra.files {
        tar_file(&mut layer, path, data, 0o644);
    }
    for a in APPLETS {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        layer
            .append_link(&mut h, format!("bin/{a}"), "busybox")
            .unwrap();
    }
    let layer = layer.into_inner().unwrap();
    let mut config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]}
    });
    if !extra.volumes.is_empty() {
        let volumes: serde_json::Map<String, Value> = extra
            .volumes
            .iter()
            .map(|v| (v.to_string(), json!({})))
            .collect();
        config["config"]["Volumes"] = Value::Object(volumes);
    }
    let config = serde_json::to_vec(&config).unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256(&layer), "size": layer.len()}]
    }))
    .unwrap();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256(&manifest),
                       "size": manifest.len(), "annotations": {"io.containerd.image.name": reference}}]
    }))
    .unwrap();
    let mut outer = tar::Builder::new(Vec::new());
    tar_file(
        &mut outer,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    );
    tar_file(&mut outer, "index.json", &index, 0o644);
    for blob in [&layer, &config, &manifest] {
        let name = format!("blobs/sha256/{}", &sha256(blob)[7..]);
        tar_file(&mut outer, &name, blob, 0o644);
    }
    std::fs::write(out, outer.into_inner().unwrap()).unwrap();
}
