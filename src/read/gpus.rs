//! The container's GPUs: everything in its devices, its `/dev`, its mounts and
//! `NVIDIA_VISIBLE_DEVICES` that names one, counted once, each with every source that names it.
//!
//! Which GPU a device, an id or an env names is the vendor seam's
//! ([`cpuplan::gpu::Inventory`]); this module tags each with its source (the spec's
//! `linux.devices`, the runtime's or the tenant's device node, the device plugin's or the
//! tenant's volume-mount, the env), keeps what names no GPU as a note, and merges the GPUs in PCI
//! address order (the worker order). Nothing a tenant can write fails the read: an id of the env
//! or of a mount that names no GPU is a note on that id.
//!
//! **The volume-mounts strategy** of NVIDIA's device plugin gives a container one mount per GPU,
//! the host's `/dev/null` at `/var/run/nvidia-container-devices/<id>` (`<id>` a `GPU-<uuid>`,
//! an index or a MIG id), and sets `NVIDIA_VISIBLE_DEVICES` to that directory. Such a mount is
//! the operator's ([`GpuSource::Mounts`]) when it is a bind (type `bind`, or none with a
//! `bind`/`rbind` option as CRI-O writes it) whose source is the host's `/dev/null`: kubelet
//! gives a pod's own volumes sources under `/var/lib/kubelet/pods/<uid>/` (emptyDir, configMap,
//! secret, projected, CSI, any `subPath`), so only the device plugin or a hostPath volume can
//! bind `/dev/null`, and the Baseline and Restricted Pod Security Standards forbid hostPath
//! volumes. Any other mount at that path (an emptyDir's directory or file) is the tenant's
//! look-alike ([`GpuSource::TenantMount`]): planned for, never claimed. The NVIDIA toolkit
//! applies the same rule (source `/dev/null`, destination under that directory).

use cpuplan::gpu::nvidia::VOLUME_MOUNTS_DIR;
use cpuplan::gpu::{CharDevice, DeviceError, Inventory, Named, Vendor};
use cpuplan::{quoted, PciAddress};

use crate::config::GpuSource;
use crate::logging::escape;
use crate::read::nodes::Node;
use crate::read::spec::SpecMount;

/// One of the container's GPUs: its PCI address and what named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// PCI address, lowercase `0000:2a:00.0`.
    pub address: String,
    /// Every source that names it, in [`GpuSource`] order.
    pub sources: Vec<GpuSource>,
}

/// The container's GPUs and what was left out, with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Its GPUs in PCI address order, each counted once with every source that names it.
    pub gpus: Vec<Gpu>,
    /// Devices and ids that name no GPU (a NIC's RDMA device, a node the driver does not list,
    /// an unknown uuid, a partition no topology places), parts of GPUs, and why.
    pub notes: Vec<String>,
}

/// The container's GPUs in PCI address order, each counted once with every source that names
/// it, asked of `inventory`.
///
/// `devices` are the char devices of `linux.devices`, `nodes` the GPU device nodes present in
/// its `/dev` (those not the runtime's name their GPUs as [`GpuSource::TenantNode`]), `mounts`
/// the spec's mounts (those under `/var/run/nvidia-container-devices`: the volume-mounts
/// strategy); `visible` is `NVIDIA_VISIBLE_DEVICES` from `process.env` (`None` when unset). A
/// device of another PCI class than display or processing accelerator is no GPU (an RDMA
/// device of a NIC beside a GPU): it is left out with a note. Only a host file that cannot be
/// read, or a GPU node of the operator's spec the driver does not list, is an error.
pub fn container_gpus(
    inventory: &mut Inventory,
    devices: &[CharDevice],
    nodes: &[Node],
    mounts: &[SpecMount],
    visible: Option<&str>,
) -> Result<Found, DeviceError> {
    let mut found: Vec<(String, GpuSource)> = Vec::new();
    let mut notes = Vec::new();
    let mut nvidia_named = false;

    let tagged = devices
        .iter()
        .map(|d| (d, GpuSource::Devices))
        .chain(nodes.iter().map(|n| match n.untrusted {
            None => (&n.device, GpuSource::Nodes),
            Some(_) => (&n.device, GpuSource::TenantNode),
        }));
    for (d, source) in tagged {
        let node = || format!("{} ({}:{})", escape(&d.path), d.major, d.minor);
        match inventory.device(d)? {
            Named::Gpu { address, vendor } => {
                nvidia_named |= vendor == Vendor::Nvidia;
                found.push((address, source));
            }
            Named::Part {
                address,
                vendor,
                part,
            } => {
                nvidia_named |= vendor == Vendor::Nvidia;
                notes.push(format!("{} is {part} of GPU {address}", node()));
                found.push((address, source));
            }
            Named::Nothing => {}
            Named::NotGpu { address, class } => notes.push(format!(
                "{} {}:{} ({}) is PCI function {address} of class {}, not a GPU: ignored",
                source,
                d.major,
                d.minor,
                escape(&d.path),
                class.map_or_else(|| "unknown".into(), |c| format!("0x{c:02x}"))
            )),
            Named::Unplaced(why) => notes.push(escape(&why).into_owned()),
            // The operator's spec names a GPU the driver does not have: the read fails.
            Named::Unlisted(e) if source == GpuSource::Devices => return Err(e),
            Named::Unlisted(_) => notes.push(format!(
                "{} is {}:{}, which no GPU of the driver has: ignored",
                escape(&d.path),
                d.major,
                d.minor
            )),
        }
    }
    for m in mounts {
        let Some(id) = volume_mount_id(m) else {
            continue;
        };
        let mount = format!("mount {}", quoted(&m.destination));
        let source = match m.binds_dev_null() {
            true => GpuSource::Mounts,
            false => GpuSource::TenantMount,
        };
        if id.contains('/') {
            notes.push(format!(
                "{mount} names no GPU (an IMEX channel or a CDI name): ignored"
            ));
            continue;
        }
        match inventory.gpu_id(id, nvidia_named)? {
            Ok(Some(address)) => {
                if source == GpuSource::TenantMount {
                    // Its source (a host path) is not the tenant's to read: not quoted.
                    notes.push(format!(
                        "{mount} is not a bind of the host's /dev/null: it names {address} as the tenant's, not the device plugin's"
                    ));
                }
                found.push((address, source));
            }
            Ok(None) => {}
            Err(why) => notes.push(format!("{mount}: {} {why}: ignored", quoted(id))),
        }
    }
    let env = inventory.visible(visible, nvidia_named)?;
    found.extend(env.gpus.into_iter().map(|a| (a, GpuSource::Env)));
    notes.extend(env.notes.iter().map(|n| escape(n).into_owned()));
    Ok(Found {
        gpus: merge(found),
        notes,
    })
}

/// The id a mount at `/var/run/nvidia-container-devices/<id>` names (all that follows the
/// directory), if it is one.
fn volume_mount_id(m: &SpecMount) -> Option<&str> {
    let id = m.clean.strip_prefix(VOLUME_MOUNTS_DIR)?.strip_prefix('/')?;
    (!id.is_empty()).then_some(id)
}

/// `found` in PCI address order, one [`Gpu`] per address with its sources in order.
fn merge(mut found: Vec<(String, GpuSource)>) -> Vec<Gpu> {
    found.sort_by_key(|(a, s)| (PciAddress::parse(a), *s));
    let mut gpus: Vec<Gpu> = Vec::new();
    for (address, source) in found {
        match gpus.last_mut() {
            Some(g) if g.address == address => {
                if !g.sources.contains(&source) {
                    g.sources.push(source);
                }
            }
            _ => gpus.push(Gpu {
                address,
                sources: vec![source],
            }),
        }
    }
    gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture host: 8 NVIDIA H100s, an AMD GPU and a few other char devices.
    fn inventory() -> Inventory {
        Inventory::new(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/devices/host"),
        )
    }

    fn c(major: i64, minor: i64) -> CharDevice {
        CharDevice {
            major,
            minor,
            path: format!("/dev/char-{major}-{minor}"),
        }
    }

    #[test]
    fn each_gpu_records_every_source_that_names_it() {
        let list = container_gpus(
            &mut inventory(),
            &[c(195, 2)],
            &[],
            &[],
            Some("2,GPU-9c41e2b7-5f08-4d1a-b6c3-e8a27d4f1033"),
        )
        .unwrap()
        .gpus;
        let env = |a: &str| Gpu {
            address: a.into(),
            sources: vec![GpuSource::Env],
        };
        assert_eq!(
            list,
            vec![
                env("0000:3a:00.0"),
                Gpu {
                    address: "0000:5d:00.0".into(),
                    sources: vec![GpuSource::Devices],
                },
            ]
        );
        let node = |untrusted: Option<&str>| Node {
            device: c(195, 0),
            untrusted: untrusted.map(String::from),
        };
        let both = container_gpus(
            &mut inventory(),
            &[c(195, 0)],
            &[node(None)],
            &[],
            Some("0"),
        );
        assert_eq!(
            both.unwrap().gpus[0].sources,
            [GpuSource::Devices, GpuSource::Nodes, GpuSource::Env]
        );
        // A node that is not the runtime's names its GPU as the tenant's, never a trusted source.
        let tenant = container_gpus(&mut inventory(), &[], &[node(Some("a volume"))], &[], None);
        assert_eq!(tenant.unwrap().gpus[0].sources, [GpuSource::TenantNode]);
    }

    #[test]
    fn what_names_no_gpu_is_a_note_and_an_unlisted_node_only_a_spec_s_error() {
        // GPUDirect: GPU 0 and the RDMA device of the NIC on its PCIe switch.
        let found = container_gpus(&mut inventory(), &[c(195, 0), c(231, 192)], &[], &[], None);
        let found = found.unwrap();
        assert_eq!(found.gpus.len(), 1);
        assert_eq!(found.notes.len(), 1, "{:?}", found.notes);
        let note = &found.notes[0];
        assert!(
            note.contains("linux.devices 231:192")
                && note.contains("0000:19:00.0")
                && note.contains("class 0x02"),
            "{note}"
        );
        // A minor the driver does not list: the spec's is an error, a node in /dev a note.
        let e = container_gpus(&mut inventory(), &[c(195, 9)], &[], &[], None).unwrap_err();
        assert!(e.to_string().contains("Device Minor 9"), "{e}");
        let node = Node {
            device: CharDevice {
                path: "/dev/nvidia9".into(),
                ..c(195, 9)
            },
            untrusted: None,
        };
        let found = container_gpus(&mut inventory(), &[], &[node], &[], None).unwrap();
        assert!(found.gpus.is_empty());
        assert!(
            found.notes[0].contains("/dev/nvidia9 is 195:9, which no GPU of the driver has"),
            "{:?}",
            found.notes
        );
    }

    /// A mount at `destination` of `kind` binding `source`, with `options`.
    fn mount(destination: &str, kind: &str, source: &str, options: &[&str]) -> SpecMount {
        let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        SpecMount::new(destination, kind, &options).with_source(source)
    }

    const VM: &str = "/var/run/nvidia-container-devices";
    /// The fixture's GPU 0000:3a:00.0.
    const UUID_3A: &str = "GPU-9c41e2b7-5f08-4d1a-b6c3-e8a27d4f1033";

    #[test]
    fn a_dev_null_bind_under_the_volume_mounts_path_is_the_device_plugin_s() {
        let found = |mounts: &[SpecMount]| {
            container_gpus(&mut inventory(), &[], &[], mounts, Some(VM)).unwrap()
        };
        // containerd's form, CRI-O's (no type), and an index id.
        for m in [
            mount(
                &format!("{VM}/{UUID_3A}"),
                "bind",
                "/dev/null",
                &["rbind", "rprivate", "rw"],
            ),
            mount(
                &format!("{VM}/{UUID_3A}"),
                "",
                "/dev/null",
                &["rbind", "rw"],
            ),
            mount(&format!("{VM}//./2"), "bind", "/dev/null", &["rbind"]),
        ] {
            let f = found(std::slice::from_ref(&m));
            assert_eq!(
                f.gpus,
                [Gpu {
                    address: "0000:3a:00.0".into(),
                    sources: vec![GpuSource::Mounts],
                }],
                "{m:?}"
            );
            // The env names the directory: a note on it, never a failure.
            assert!(
                f.notes.iter().any(|n| n.contains("volume-mounts strategy")),
                "{f:?}"
            );
        }
        // Look-alikes: an emptyDir's directory or file, a tmpfs, a bind of another char device,
        // a relative source, a non-bind with /dev/null as its source: the tenant's.
        let empty = "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/fake";
        for m in [
            mount(&format!("{VM}/{UUID_3A}"), "bind", empty, &["rbind"]),
            mount(
                &format!("{VM}/{UUID_3A}"),
                "bind",
                &format!("{empty}/file"),
                &["rbind"],
            ),
            mount(&format!("{VM}/{UUID_3A}"), "tmpfs", "tmpfs", &[]),
            mount(&format!("{VM}/{UUID_3A}"), "bind", "/dev/zero", &["rbind"]),
            mount(&format!("{VM}/{UUID_3A}"), "bind", "dev/null", &["rbind"]),
            mount(&format!("{VM}/{UUID_3A}"), "", "/dev/null", &["ro"]),
        ] {
            let f = found(std::slice::from_ref(&m));
            assert_eq!(f.gpus[0].sources, [GpuSource::TenantMount], "{m:?}");
            assert!(
                f.notes
                    .iter()
                    .any(|n| n.contains("is not a bind of the host's /dev/null")),
                "{f:?}"
            );
        }
        // The device plugin's mount and a tenant's at the same path: the GPU is the plugin's.
        let both = found(&[
            mount(&format!("{VM}/{UUID_3A}"), "bind", "/dev/null", &["rbind"]),
            mount(&format!("{VM}/{UUID_3A}"), "bind", empty, &["rbind"]),
        ]);
        assert_eq!(
            both.gpus[0].sources,
            [GpuSource::Mounts, GpuSource::TenantMount]
        );
        // Ids that name no GPU, IMEX channels, and mounts elsewhere: notes, or nothing.
        let f = found(&[
            mount(
                &format!("{VM}/GPU-00000000-0000-0000-0000-000000000000"),
                "bind",
                "/dev/null",
                &["rbind"],
            ),
            mount(&format!("{VM}/imex/0"), "bind", "/dev/null", &["rbind"]),
            mount(
                &format!("{VM}/MIG-ab12cd34-0000-1111-2222-333344445555"),
                "bind",
                "/dev/null",
                &["rbind"],
            ),
            mount(VM, "bind", "/dev/null", &["rbind"]),
            mount(
                "/var/run/nvidia-container-devices-x/0",
                "bind",
                "/dev/null",
                &["rbind"],
            ),
        ]);
        assert!(f.gpus.is_empty(), "{f:?}");
        assert_eq!(f.notes.len(), 4, "{:?}", f.notes);
        assert!(f.notes[0].contains("matches no GPU"), "{:?}", f.notes);
        assert!(f.notes[1].contains("IMEX"), "{:?}", f.notes);
        assert!(f.notes[2].contains("is a MIG uuid"), "{:?}", f.notes);
        // A bare MIG id beside its parent's node counts through the node.
        let f = container_gpus(
            &mut inventory(),
            &[c(195, 3)],
            &[],
            &[mount(
                &format!("{VM}/MIG-ab12cd34-0000-1111-2222-333344445555"),
                "bind",
                "/dev/null",
                &["rbind"],
            )],
            None,
        )
        .unwrap();
        assert_eq!((f.gpus.len(), f.notes.len()), (1, 0), "{f:?}");
    }

    #[test]
    fn parts_of_gpus_are_their_gpu_with_a_note_and_unplaced_ones_a_note() {
        let cap = |minor: i64| CharDevice {
            major: 237,
            minor,
            path: format!("/dev/nvidia-caps/nvidia-cap{minor}"),
        };
        let f = container_gpus(
            &mut inventory(),
            &[c(195, 3), cap(30), cap(31), cap(111)],
            &[],
            &[],
            None,
        )
        .unwrap();
        assert_eq!(f.gpus.len(), 1);
        assert_eq!(f.gpus[0].address, "0000:3a:00.0");
        assert_eq!(f.notes.len(), 3, "{:?}", f.notes);
        assert!(
            f.notes[0].contains("is MIG instance gpu3/gi1 of GPU 0000:3a:00.0"),
            "{:?}",
            f.notes
        );
        assert!(
            f.notes[2].contains("nvidia-cap111") && f.notes[2].contains("not placed"),
            "{:?}",
            f.notes
        );
    }
}
