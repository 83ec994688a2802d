//! `inventory`: the host inventory the hook keeps, and what the stamp sees now.

use std::io::Write;

use cpuplan::inventory::store::obtain;

use super::inspect::{config_with_roots, print_json};
use super::{Args, CliError, Command, Context, Exit};

/// `inventory`.
pub const INVENTORY: Command = Command {
    name: "inventory",
    summary: "the host inventory the hook keeps (read once per boot), and its stamp",
    usage: "\
usage: cpuplan inventory [--refresh] [--root DIR] [--topology-root DIR] [--config PATH] [--json]

The host-wide facts the hook takes from its inventory file in the config's inventory_dir
(default /run/cpuplan/inventory): online CPUs, cores, NUMA nodes, the PCI functions that may be
GPUs, what the NVIDIA driver lists, the cgroup mounts; how it came (the file used, or read and
written now, and why), and what the stamp checked at every start sees now. The file is read and
written as a start would (as root); --refresh reads the host again whatever the file holds.
",
    valued: &["root", "topology-root"],
    switches: &["refresh", "json"],
    run: inventory,
};

fn inventory(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let config = config_with_roots(ctx, a)?;
    let got = obtain(
        &config.inventory_dir,
        &config.root,
        &config.topology_root,
        a.switch("refresh"),
    );
    if a.switch("json") {
        let doc = serde_json::json!({
            "path": got.path,
            "used": got.describe(),
            "stamp": got.stamp,
            "inventory": got.inventory,
        });
        print_json(out, &doc)?;
        return Ok(Exit::Ok);
    }
    let mut s = format!("{}\n", got.describe());
    let st = &got.stamp;
    s.push_str(&format!(
        "stamp now: online CPUs {:?}{}; PCI devices {} entries (hash {:016x}); NVIDIA driver {}; mounts {}\n",
        st.online,
        if st.running.is_empty() { String::new() } else { format!(", host online {:?}", st.running) },
        st.pci.entries,
        st.pci.names,
        if st.driver.present { format!("{} entries (inode {})", st.driver.entries, st.driver.ino) } else { "absent".into() },
        st.mounts
    ));
    if let Some(inv) = &got.inventory {
        s.push_str(&format!(
            "boot {}\nroot {}  topology root {}\nonline CPUs {} ({} cores); host online {}\n",
            if inv.boot_id.is_empty() {
                "(no boot id)"
            } else {
                &inv.boot_id
            },
            inv.root.display(),
            inv.topology_root.display(),
            inv.online,
            inv.cores.len(),
            inv.running
        ));
        for n in &inv.nodes {
            s.push_str(&format!("node {}: CPUs {}\n", n.id, n.cpus));
        }
        for f in inv.pci.iter().filter(|f| f.vendor.is_some()) {
            s.push_str(&format!(
                "PCI {} class {:#08x} vendor {:#06x} node {} local CPUs {}\n",
                f.address,
                f.class.unwrap_or_default(),
                f.vendor.unwrap_or_default(),
                f.node.map_or("-".to_string(), |n| n.to_string()),
                f.local.as_ref().map_or("-".to_string(), |l| l.to_string())
            ));
        }
        let others = inv.pci.iter().filter(|f| f.vendor.is_none()).count();
        s.push_str(&format!("{others} other PCI functions (class only)\n"));
        for g in &inv.nvidia {
            s.push_str(&format!(
                "NVIDIA {} minor {} uuid {}\n",
                g.address,
                g.minor.map_or("-".to_string(), |m| m.to_string()),
                g.uuid.as_deref().unwrap_or("-")
            ));
        }
        s.push_str(&format!(
            "nvidia-caps major {}\n",
            inv.caps_major.map_or("-".to_string(), |m| m.to_string())
        ));
        match &inv.cgroup_mounts {
            Some(mounts) => {
                for m in mounts {
                    s.push_str(&format!(
                        "cgroup mount {} {} (root {}) {}\n",
                        m.fs_type, m.mount_point, m.root, m.super_options
                    ));
                }
            }
            None => s.push_str("no mount table under the root\n"),
        }
    }
    out.write_all(s.as_bytes())?;
    Ok(Exit::Ok)
}
