//! Builders on the NRI messages a plugin answers with, so that an adjustment or an update is a
//! few chained calls.

use crate::api::{
    ContainerAdjustment, ContainerUpdate, CreateContainerResponse, KeyValue,
    LinuxContainerAdjustment, LinuxContainerUpdate, LinuxCpu, LinuxResources, Mount,
};

impl From<ContainerAdjustment> for CreateContainerResponse {
    /// The reply that adjusts the new container by `adjust` and changes nothing else.
    fn from(adjust: ContainerAdjustment) -> CreateContainerResponse {
        CreateContainerResponse {
            adjust: Some(adjust),
            update: Vec::new(),
            evict: Vec::new(),
        }
    }
}

impl Mount {
    /// A read-only bind mount of host path `source` at `destination` in the container.
    pub fn bind_ro(source: impl Into<String>, destination: impl Into<String>) -> Mount {
        Mount {
            destination: destination.into(),
            r#type: "bind".into(),
            source: source.into(),
            options: ["rbind", "ro", "nosuid", "nodev", "noexec"]
                .map(String::from)
                .to_vec(),
        }
    }
}

impl LinuxResources {
    /// The resources' CPU part, created empty when absent.
    pub fn cpu_mut(&mut self) -> &mut LinuxCpu {
        self.cpu.get_or_insert_with(LinuxCpu::default)
    }
}

impl ContainerAdjustment {
    /// Whether the adjustment changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == ContainerAdjustment::default()
    }

    /// Sets environment variable `key` to `value` in the container.
    pub fn add_env(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.env.push(KeyValue {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Removes environment variable `key` from the container (NRI's `-KEY` marker).
    pub fn remove_env(&mut self, key: &str) -> &mut Self {
        self.env.push(KeyValue {
            key: format!("-{key}"),
            value: String::new(),
        });
        self
    }

    /// Adds `mount` to the container.
    pub fn add_mount(&mut self, mount: Mount) -> &mut Self {
        self.mounts.push(mount);
        self
    }

    /// Sets annotation `key` to `value` on the container.
    pub fn add_annotation(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> &mut Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Sets the container's cpuset (`linux.resources.cpu.cpus`, e.g. `"2-5,8"`).
    pub fn set_cpus(&mut self, cpus: impl Into<String>) -> &mut Self {
        self.resources_mut().cpu_mut().cpus = cpus.into();
        self
    }

    /// Sets the container's cpuset memory nodes (`linux.resources.cpu.mems`).
    pub fn set_mems(&mut self, mems: impl Into<String>) -> &mut Self {
        self.resources_mut().cpu_mut().mems = mems.into();
        self
    }

    /// The adjustment's Linux resources, created empty when absent.
    pub fn resources_mut(&mut self) -> &mut LinuxResources {
        self.linux
            .get_or_insert_with(LinuxContainerAdjustment::default)
            .resources
            .get_or_insert_with(LinuxResources::default)
    }

    /// The cpuset the adjustment sets, if any.
    pub fn cpus(&self) -> Option<&str> {
        let cpus = &self.linux.as_ref()?.resources.as_ref()?.cpu.as_ref()?.cpus;
        (!cpus.is_empty()).then_some(cpus.as_str())
    }
}

impl ContainerUpdate {
    /// An update of container `id`'s cpuset to `cpus`.
    pub fn cpus(id: impl Into<String>, cpus: impl Into<String>) -> ContainerUpdate {
        let mut resources = LinuxResources::default();
        resources.cpu_mut().cpus = cpus.into();
        ContainerUpdate {
            container_id: id.into(),
            linux: Some(LinuxContainerUpdate {
                resources: Some(resources),
            }),
            ignore_failure: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn builders_fill_nris_fields() {
        let mut a = ContainerAdjustment::default();
        assert!(a.is_empty());
        a.add_env("OMP_NUM_THREADS", "4")
            .remove_env("GOMP_CPU_AFFINITY")
            .add_annotation("cpuplan.io/plan", "p1")
            .add_mount(Mount::bind_ro("/var/lib/cpuplan/c1", "/run/cpuplan"))
            .set_cpus("2-5");
        assert!(!a.is_empty());
        assert_eq!(a.env[0].key, "OMP_NUM_THREADS");
        assert_eq!(a.env[1].key, "-GOMP_CPU_AFFINITY");
        assert_eq!(a.annotations["cpuplan.io/plan"], "p1");
        assert_eq!(a.mounts[0].r#type, "bind");
        assert!(a.mounts[0].options.iter().any(|o| o == "ro"));
        assert_eq!(a.cpus(), Some("2-5"));
        a.set_mems("0");
        assert_eq!(a.cpus(), Some("2-5"), "mems keeps the cpus");
        let back = ContainerAdjustment::decode(a.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn cpus_update_names_the_container() {
        let u = ContainerUpdate::cpus("c1", "0-1");
        assert_eq!(u.container_id, "c1");
        let cpu = u.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!(cpu.cpus, "0-1");
        assert_eq!(cpu.mems, "");
    }
}
