//! Small helpers over CRI's types and a probe's output.

use super::*;

/// `config` with a CPU quota of `quota`/`period` µs.
pub fn quota(mut config: cri::ContainerConfig, quota: i64, period: i64) -> cri::ContainerConfig {
    let linux = config.linux.get_or_insert_with(Default::default);
    let r = linux.resources.get_or_insert_with(Default::default);
    r.cpu_quota = quota;
    r.cpu_period = period;
    config
}

/// A 2-CPU host with two GPUs under `root/gpu-host` (made once): 0000:3b:00.0 (`/dev/nvidia0`,
/// local CPUs 0-1, node 0) and 0000:86:00.0 (`/dev/nvidia1`, local CPU 1, no node), built from
/// `tests/fixtures/e2e-host`; a `topology_root`.
pub fn gpu_host(root: &Path) -> PathBuf {
    let g = root.join("gpu-host");
    if g.exists() {
        return g;
    }
    copy_tree(&fixtures().join("e2e-host"), &g);
    let a = g.join("sys/bus/pci/devices/0000:3b:00.0");
    std::fs::write(a.join("local_cpulist"), "0-1\n").unwrap();
    let b = g.join("sys/bus/pci/devices/0000:86:00.0");
    copy_tree(&a, &b);
    std::fs::write(b.join("local_cpulist"), "1\n").unwrap();
    std::fs::write(b.join("numa_node"), "-1\n").unwrap();
    let info = g.join("proc/driver/nvidia/gpus");
    let text = std::fs::read_to_string(info.join("0000:3b:00.0/information")).unwrap();
    std::fs::create_dir_all(info.join("0000:86:00.0")).unwrap();
    std::fs::write(
        info.join("0000:86:00.0/information"),
        text.replace("0000:3b:00.0", "0000:86:00.0")
            .replace("Device Minor: \t 0", "Device Minor: \t 1"),
    )
    .unwrap();
    g
}

/// Copies the tree `from` to `to` (directories and regular files).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// The lines of `out` after the line `--- NAME` up to the next `--- ` line (a probe's section).
pub fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let Some(i) = out.find(&format!("--- {name}\n")) else {
        panic!("no section {name} in:\n{out}");
    };
    let rest = &out[i + name.len() + 5..];
    let end = if rest.starts_with("--- ") {
        0
    } else {
        rest.find("\n--- ").map(|i| i + 1).unwrap_or(rest.len())
    };
    &rest[..end]
}

/// `KEY -> VALUE` of an annotations map, for building configs tersely.
pub fn annotations(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every file below `dir` with its bytes.
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut acc = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                acc.push((e.path(), Vec::new()));
                stack.push(e.path());
            } else {
                acc.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    acc.sort();
    acc
}
