//! A [`SpecEdit`] as NRI's [`ContainerAdjustment`]: the environment to add, the cpuset, the plan
//! directory (written on the host) bind-mounted read-only at the plan directory, and the
//! annotations. Pure: the files are written by [`super::plandir`].

use std::path::Path;

use nri_plugin::api::{ContainerAdjustment, Mount};

use crate::edit::SpecEdit;

/// The adjustment that applies `edit` to a container whose plan files are in `host_dir`
/// (`None`: no plan mount, the container has its own there).
pub fn adjustment(edit: &SpecEdit, host_dir: Option<&Path>) -> ContainerAdjustment {
    let mut adj = ContainerAdjustment::default();
    for (k, v) in &edit.env {
        adj.add_env(k, v);
    }
    if let Some(cpus) = &edit.cpus {
        adj.set_cpus(cpus.to_string());
    }
    if let Some(host_dir) = host_dir {
        adj.add_mount(Mount::bind_ro(
            host_dir.display().to_string(),
            edit.dir.display().to_string(),
        ));
    }
    for (k, v) in &edit.annotations {
        adj.add_annotation(k, v);
    }
    adj
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HookConfig;
    use crate::decide::decide;
    use crate::edit::PLAN_ANNOTATION;
    use crate::read::testkit::inputs;
    use cpuplan::Setting;

    #[test]
    fn every_part_of_the_edit_and_nothing_else() {
        let mut i = inputs(Setting::Auto, &["18"], "0-15", 4);
        i.spec.env.insert("OMP_NUM_THREADS".into(), "7".into());
        let config = HookConfig::default();
        let edit = SpecEdit::new(&i, &decide(&i, &config), &config);
        let adj = adjustment(&edit, Some(Path::new("/run/cpuplan/nri/c1")));
        let env: Vec<(String, String)> = adj
            .env
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        assert_eq!(env, edit.env);
        assert!(
            !env.iter().any(|(k, _)| k == "OMP_NUM_THREADS"),
            "never a variable the container sets"
        );
        assert!(
            env.iter().any(|(k, v)| k == "MKL_NUM_THREADS" && v == "1"),
            "{env:?}"
        );
        assert_eq!(adj.cpus(), Some("0-3,8-11"), "the numa cpuset");
        assert_eq!(adj.mounts.len(), 1);
        assert_eq!(adj.mounts[0].source, "/run/cpuplan/nri/c1");
        assert_eq!(adj.mounts[0].destination, "/run/cpuplan");
        assert!(adj.mounts[0].options.iter().any(|o| o == "ro"), "read-only");
        let plan: serde_json::Value =
            serde_json::from_str(&adj.annotations[PLAN_ANNOTATION]).unwrap();
        assert_eq!(plan["mask"], "0-3,8-11");
        let unmounted = adjustment(&edit, None);
        assert!(unmounted.mounts.is_empty(), "no plan mount");
        assert_eq!((&unmounted.env, unmounted.cpus()), (&adj.env, adj.cpus()));
        let kept = SpecEdit { cpus: None, ..edit };
        assert_eq!(
            adjustment(&kept, Some(Path::new("/d"))).cpus(),
            None,
            "no cpuset, none set"
        );
    }
}
