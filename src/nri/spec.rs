//! A container as NRI describes it at CreateContainer, read into the runtime-neutral
//! [`ContainerSpec`] the planner takes (the same fields a bundle's `config.json` gives the hook).

use std::collections::BTreeMap;

use nri_plugin::api::{Container, PodSandbox};

use crate::read::spec::{
    env_of_interest, CharDevice, ContainerSpec, SpecError, SpecMount, ANNOTATION_PREFIX,
};

/// The spec of `container` in `pod`: its env (the variables of interest), its CPU quota,
/// period and cpus, its char devices, its mounts, its cgroups path, and the `cpuplan.*` annotations of the
/// pod and the container (the container's win). NRI passes a pod's annotations whatever
/// containerd's `pod_annotations` says. The quota, period and cpus go through
/// [`ContainerSpec::with_cpu`], the one rule the bundle reader follows too (an absent, `0` or
/// `-1` quota is none, a period of `0` is 100000 µs); a value it refuses is an error naming the
/// field and quoting the value.
pub fn container_spec(pod: &PodSandbox, container: &Container) -> Result<ContainerSpec, SpecError> {
    let source = format!(
        "NRI container {} ({}/{})",
        container.id, pod.namespace, container.name
    );
    let mut env = BTreeMap::new();
    for kv in &container.env {
        if let Some((k, v)) = kv.split_once('=') {
            if env_of_interest(k) {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    let annotations: BTreeMap<String, String> = pod
        .annotations
        .iter()
        .chain(&container.annotations)
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Borrowed, not cloned: the request's whole `linux` (namespaces, resources, seccomp...)
    // is far more than the few fields read here.
    let linux = container.linux.as_ref();
    let cpu = linux
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref());
    // The one validating constructor the bundle reader goes through too.
    let spec = ContainerSpec::new(source).with_cpu(
        cpu.and_then(|c| c.quota.as_ref()).map(|q| q.value),
        cpu.and_then(|c| c.period.as_ref()).map(|p| p.value),
        Some(cpu.map_or("", |c| c.cpus.as_str())),
    )?;
    let devices = linux
        .into_iter()
        .flat_map(|l| &l.devices)
        .filter(|d| matches!(d.r#type.as_str(), "c" | "u"))
        .map(|d| CharDevice {
            major: d.major,
            minor: d.minor,
            path: d.path.clone(),
        })
        .collect();
    Ok(ContainerSpec {
        devices,
        env,
        annotations,
        cgroups_path: linux
            .map(|l| l.cgroups_path.clone())
            .filter(|p| !p.is_empty()),
        // The runtime's mounts as CreateContainer shows them (kubelet's, the device plugin's,
        // CDI's): what the volume-mounts strategy gives a GPU through.
        mounts: container
            .mounts
            .iter()
            .map(|m| SpecMount::new(&m.destination, &m.r#type, &m.options).with_source(&m.source))
            .collect(),
        ..spec
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_plugin::api::{
        LinuxContainer, LinuxCpu, LinuxDevice, LinuxResources, OptionalInt64, OptionalUInt64,
    };

    fn container() -> Container {
        Container {
            id: "c1".into(),
            name: "srv".into(),
            env: vec![
                "PATH=/bin".into(),
                "OMP_NUM_THREADS=3".into(),
                "NVIDIA_VISIBLE_DEVICES=0".into(),
            ],
            annotations: BTreeMap::from([("cpuplan.step-thread-core".into(), "off".into())]),
            linux: Some(LinuxContainer {
                cgroups_path: "/kubepods/burstable/pod1/c1".into(),
                devices: vec![
                    LinuxDevice {
                        path: "/dev/nvidia0".into(),
                        r#type: "c".into(),
                        major: 195,
                        minor: 0,
                        ..LinuxDevice::default()
                    },
                    LinuxDevice {
                        path: "/dev/sda".into(),
                        r#type: "b".into(),
                        major: 8,
                        minor: 0,
                        ..LinuxDevice::default()
                    },
                ],
                resources: Some(LinuxResources {
                    cpu: Some(LinuxCpu {
                        quota: Some(OptionalInt64 { value: 150_000 }),
                        period: Some(OptionalUInt64 { value: 100_000 }),
                        cpus: "0-3".into(),
                        ..LinuxCpu::default()
                    }),
                    ..LinuxResources::default()
                }),
                ..LinuxContainer::default()
            }),
            ..Container::default()
        }
    }

    #[test]
    fn the_fields_the_planner_reads() {
        let pod = PodSandbox {
            namespace: "default".into(),
            annotations: BTreeMap::from([
                ("cpuplan.step-thread-core".into(), "auto".into()),
                ("cpuplan.other".into(), "x".into()),
                ("unrelated".into(), "y".into()),
            ]),
            ..PodSandbox::default()
        };
        let s = container_spec(&pod, &container()).unwrap();
        assert_eq!(s.quota, Some(1.5));
        assert_eq!(s.cpus.unwrap().to_string(), "0-3");
        assert_eq!(s.devices.len(), 1);
        assert_eq!(s.devices[0].path, "/dev/nvidia0");
        assert_eq!(s.env.get("OMP_NUM_THREADS").map(String::as_str), Some("3"));
        assert!(!s.env.contains_key("PATH"));
        assert_eq!(
            s.annotations["cpuplan.step-thread-core"], "off",
            "the container's wins"
        );
        assert_eq!(s.annotations["cpuplan.other"], "x");
        assert!(!s.annotations.contains_key("unrelated"));
        assert_eq!(
            s.cgroups_path.as_deref(),
            Some("/kubepods/burstable/pod1/c1")
        );
        assert!(s.source.contains("c1") && s.source.contains("default/srv"));
        assert!(s.mounts.is_empty());
        // The runtime's mounts: what the volume-mounts strategy gives a GPU through.
        let mut c = container();
        c.mounts.push(nri_plugin::api::Mount {
            destination: "/var/run/nvidia-container-devices/GPU-abc".into(),
            r#type: "bind".into(),
            source: "/dev/null".into(),
            options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
        });
        let s = container_spec(&pod, &c).unwrap();
        assert_eq!(s.mounts.len(), 1);
        let m = &s.mounts[0];
        assert_eq!(m.clean, "/var/run/nvidia-container-devices/GPU-abc");
        assert!(m.binds_dev_null(), "{m:?}");
    }

    fn cpu_of(c: &mut Container) -> &mut LinuxCpu {
        let linux = c.linux.as_mut().unwrap();
        linux.resources.as_mut().unwrap().cpu.as_mut().unwrap()
    }

    #[test]
    fn no_quota_and_bad_cpus() {
        let mut c = container();
        let cpu = cpu_of(&mut c);
        cpu.quota = Some(OptionalInt64 { value: -1 });
        cpu.cpus = String::new();
        let s = container_spec(&PodSandbox::default(), &c).unwrap();
        assert_eq!((s.quota, s.cpus), (None, None));
        // The bundle reader's rule: 0 is unset, a period of 0 is 100000 µs, -2 no value.
        for (quota, period, want) in [(0, 100_000, None), (150_000, 0, Some(1.5))] {
            let cpu = cpu_of(&mut c);
            cpu.quota = Some(OptionalInt64 { value: quota });
            cpu.period = Some(OptionalUInt64 { value: period });
            let s = container_spec(&PodSandbox::default(), &c).unwrap();
            assert_eq!(s.quota, want, "{quota}/{period}");
        }
        cpu_of(&mut c).quota = Some(OptionalInt64 { value: -2 });
        let e = container_spec(&PodSandbox::default(), &c)
            .unwrap_err()
            .to_string();
        assert!(e.contains("linux.resources.cpu.quota: -2"), "{e}");
        let cpu = cpu_of(&mut c);
        cpu.quota = None;
        cpu.cpus = "3-1".into();
        let e = container_spec(&PodSandbox::default(), &c)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("linux.resources.cpu.cpus") && e.contains("3-1"),
            "{e}"
        );
    }
}
