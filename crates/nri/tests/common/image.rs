//! The test node's images: OCI image-layout tars built from the host's static busybox.

use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

/// The busybox applets the images link.
const APPLETS: &[&str] = &["sh", "cat", "grep", "sed", "env", "echo", "sleep", "true"];

fn sha256(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

fn add(b: &mut tar::Builder<Vec<u8>>, path: &str, kind: tar::EntryType, data: &[u8], link: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(if kind == tar::EntryType::Regular {
        0o755
    } else {
        0o777
    });
    h.set_size(data.len() as u64);
    if kind == tar::EntryType::Symlink {
        b.append_link(&mut h, path, link).unwrap();
    } else {
        b.append_data(&mut h, path, data).unwrap();
    }
}

/// Writes at `out` an image-layout tar of image `reference`: busybox at `/bin`, the default
/// command `cmd`.
pub fn image_tar(out: &Path, reference: &str, cmd: &[&str]) {
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static at /bin/busybox");
    let mut layer = tar::Builder::new(Vec::new());
    for d in ["bin", "proc", "sys", "dev", "tmp", "run", "etc"] {
        add(&mut layer, d, tar::EntryType::Directory, &[], "");
    }
    add(
        &mut layer,
        "bin/busybox",
        tar::EntryType::Regular,
        &busybox,
        "",
    );
    for a in APPLETS {
        add(
            &mut layer,
            &format!("bin/{a}"),
            tar::EntryType::Symlink,
            &[],
            "busybox",
        );
    }
    let layer = layer.into_inner().unwrap();
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]}
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": sha256(&layer), "size": layer.len()}]
    }))
    .unwrap();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": sha256(&manifest), "size": manifest.len(),
                       "annotations": {"io.containerd.image.name": reference}}]
    }))
    .unwrap();
    let mut outer = tar::Builder::new(Vec::new());
    let file = |b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data).unwrap();
    };
    file(
        &mut outer,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    );
    file(&mut outer, "index.json", &index);
    for blob in [&layer, &config, &manifest] {
        file(
            &mut outer,
            &format!("blobs/sha256/{}", &sha256(blob)[7..]),
            blob,
        );
    }
    std::fs::write(out, outer.into_inner().unwrap()).unwrap();
}
