//! containerd's config.toml for the node (config version 2 for 1.7, 3 for 2.x).

use super::*;

impl CriNode {
    pub(super) fn config_toml(&self, opts: &NodeOptions) -> String {
        let t = self.root().display().to_string();
        let plugin_dir = opts
            .nri_plugin_dir
            .clone()
            .unwrap_or_else(|| self.path("opt/nri/plugins"));
        let plugin_conf = opts
            .nri_config_dir
            .clone()
            .unwrap_or_else(|| self.path("etc/nri/conf.d"));
        let (version, cri) = match opts.containerd {
            Containerd::V17 => (2, Self::cri_v2(&t, opts)),
            Containerd::V2 => (3, Self::cri_v3(&t, opts)),
        };
        format!(
            r#"version = {version}
root = "{t}/var/lib/containerd"
state = "{t}/run/containerd"

[grpc]
  address = "{t}/run/containerd/containerd.sock"

[ttrpc]
  address = "{t}/run/containerd/containerd.sock.ttrpc"

[plugins]
{cri}
  [plugins."io.containerd.internal.v1.opt"]
    path = "{t}/opt/containerd"
  [plugins."io.containerd.nri.v1.nri"]
    disable = {nri_off}
    socket_path = "{t}/run/nri/nri.sock"
    plugin_path = "{plugin_dir}"
    plugin_config_path = "{plugin_conf}"
{nri_keys}
{extra}
"#,
            nri_off = opts.nri_disabled,
            plugin_dir = plugin_dir.display(),
            plugin_conf = plugin_conf.display(),
            nri_keys = opts.nri_keys,
            extra = opts.extra_config,
        )
        .replace("@ROOT@", &t)
    }

    /// A runc v2 runtime's tables under `table` (`...containerd.runtimes`): `name` with `extra`.
    fn runtime_toml(table: &str, t: &str, name: &str, extra: &str) -> String {
        format!(
            "      [{table}.{name}]\n        runtime_type = \"io.containerd.runc.v2\"\n{extra}\n\
             \x20       [{table}.{name}.options]\n          SystemdCgroup = false\n          Root = \"{t}/run/runc\"\n"
        )
    }

    /// The CRI plugin's tables in config version 2 (containerd 1.7).
    fn cri_v2(t: &str, opts: &NodeOptions) -> String {
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        let table = format!("{cri}.containerd.runtimes");
        let mut runtimes = Self::runtime_toml(&table, t, "runc", "");
        for (name, extra) in &opts.runtimes {
            runtimes.push_str(&Self::runtime_toml(&table, t, name, extra));
        }
        format!(
            r#"  [{cri}]
    sandbox_image = "{PAUSE_IMAGE}"
    restrict_oom_score_adj = true
{cri_keys}
    [{cri}.cni]
      bin_dir = "{t}/opt/cni/bin"
      conf_dir = "{t}/etc/cni/net.d"
    [{cri}.containerd]
      snapshotter = "native"
      default_runtime_name = "runc"
{runtimes}"#,
            cri_keys = opts.cri_keys,
        )
    }

    /// The CRI plugins' tables in config version 3 (containerd 2.x): images (the snapshotter,
    /// the sandbox image) and the runtime (everything else; [`NodeOptions::cri_keys`] too).
    fn cri_v3(t: &str, opts: &NodeOptions) -> String {
        let images = "plugins.'io.containerd.cri.v1.images'";
        let cri = "plugins.'io.containerd.cri.v1.runtime'";
        let table = format!("{cri}.containerd.runtimes");
        let mut runtimes = Self::runtime_toml(&table, t, "runc", "");
        for (name, extra) in &opts.runtimes {
            runtimes.push_str(&Self::runtime_toml(&table, t, name, extra));
        }
        // ctr 2.x imports through the transfer service, which unpacks only for the platforms
        // and snapshotters its unpack_config lists (none by default with `--snapshotter native`).
        format!(
            r#"  [plugins.'io.containerd.transfer.v1.local']
    [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
      platform = "linux/amd64"
      snapshotter = "native"
  [{images}]
    snapshotter = "native"
    [{images}.pinned_images]
      sandbox = "{PAUSE_IMAGE}"
  [{cri}]
    restrict_oom_score_adj = true
{cri_keys}
    [{cri}.cni]
      bin_dirs = ["{t}/opt/cni/bin"]
      conf_dir = "{t}/etc/cni/net.d"
    [{cri}.containerd]
      default_runtime_name = "runc"
{runtimes}"#,
            cri_keys = opts.cri_keys,
        )
    }
}
