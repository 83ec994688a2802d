//! The NRI plugin's socket driven with hostile ids: a fake runtime (the stub crate's runtime
//! end, `nri_plugin::runtime`) registers `cpuplan-nri`, configures it as NRI v0.12 does
//! (so RemoveContainer comes as its own call and as a state change), and sends StopContainer
//! and RemoveContainer for `../victim`, absolute paths, empty and dot ids, and without a
//! container at all. Nothing but the named container's own plan and record may go, and
//! Synchronize removes only what carries the plugin's record.
//!
//! `CPUPLAN_NRI_BIN` runs another build of the plugin under the same test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nri_plugin::api::{
    ConfigureRequest, ConfigureResponse, Container, Empty, Event, RemoveContainerRequest,
    RemoveContainerResponse, StateChangeEvent, StopContainerRequest, StopContainerResponse,
    SynchronizeRequest, SynchronizeResponse,
};
use nri_plugin::runtime::{Listener, Session};

fn bin() -> String {
    std::env::var("CPUPLAN_NRI_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cpuplan-nri").into())
}

/// The plugin process, killed when dropped.
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn container(id: &str) -> Container {
    Container {
        id: id.into(),
        name: "x".into(),
        ..Default::default()
    }
}

/// A container's plan directory and record, as the plugin writes them.
fn planned(plans: &Path, id: &str) {
    std::fs::create_dir_all(plans.join(id)).unwrap();
    std::fs::write(plans.join(id).join("plan.env"), "CPUPLAN_USABLE='1'\n").unwrap();
    std::fs::write(plans.join(format!("{id}.claims.json")), r#"{"claims":[]}"#).unwrap();
}

/// Every file under `dir`, for before/after comparisons.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out.sort();
    out
}

fn sync(s: &Session, ids: &[&str]) {
    let req = SynchronizeRequest {
        containers: ids.iter().map(|id| container(id)).collect(),
        ..Default::default()
    };
    let _: SynchronizeResponse = s.call("Synchronize", &req).expect("Synchronize");
}

#[test]
fn hostile_ids_remove_nothing_but_the_named_container_s_own_files() {
    let t = common::operator_dir::tempdir();
    let t = t.path();
    let plans = t.join("plans");
    let config = t.join("hook.json");
    std::fs::write(
        &config,
        serde_json::json!({"log": "stderr", "nri_dir": plans, "claims_dir": t.join("claims")})
            .to_string(),
    )
    .unwrap();
    // What must stay: a sibling of nri_dir, a directory named by absolute path, an operator's
    // directory and a record-less one inside nri_dir, the claims, another container's plan.
    for d in [
        "victim",
        "abs",
        "claims",
        "plans/operator-notes",
        "plans/orphan",
    ] {
        std::fs::create_dir_all(t.join(d)).unwrap();
        std::fs::write(t.join(d).join("keep"), "x").unwrap();
    }
    for id in ["c1", "c2", "c3"] {
        planned(&plans, id);
    }

    let listener = Listener::bind(&t.join("nri.sock")).unwrap();
    let log = std::fs::File::create(t.join("plugin.stderr")).unwrap();
    let _plugin = Plugin(
        Command::new(bin())
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(listener.path())
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let s = listener.accept().unwrap();
    let reg = s.registered(Duration::from_secs(10)).expect("registered");
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("cpuplan", "10")
    );
    let configure = ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v2.3.4".into(),
        nri_version: "v0.12.1".into(),
        ..Default::default()
    };
    let events = s
        .call::<ConfigureResponse>("Configure", &configure)
        .unwrap()
        .events;
    assert_ne!(events, 0);
    sync(&s, &["c1", "c2", "c3"]);
    let before = files(t);

    let abs = t.join("abs").display().to_string();
    let long = "a".repeat(300);
    let hostile = [
        "../victim",
        abs.as_str(),
        "",
        ".",
        "..",
        "../plans",
        "c1/../c2",
        "operator-notes",
        "orphan",
        "c1\n",
        long.as_str(),
    ];
    for id in hostile {
        let stop = StopContainerRequest {
            pod: None,
            container: Some(container(id)),
        };
        let _ = s.call::<StopContainerResponse>("StopContainer", &stop);
        let remove = RemoveContainerRequest {
            pod: None,
            container: Some(container(id)),
        };
        let _ = s.call::<RemoveContainerResponse>("RemoveContainer", &remove);
        let event = StateChangeEvent {
            event: Event::RemoveContainer as i32,
            pod: None,
            container: Some(container(id)),
        };
        let _ = s.call::<Empty>("StateChange", &event);
    }
    // Without a container at all.
    let _ = s.call::<StopContainerResponse>("StopContainer", &StopContainerRequest::default());
    let _ =
        s.call::<RemoveContainerResponse>("RemoveContainer", &RemoveContainerRequest::default());
    let bare = StateChangeEvent {
        event: Event::RemoveContainer as i32,
        ..Default::default()
    };
    let _ = s.call::<Empty>("StateChange", &bare);
    let stderr = || std::fs::read_to_string(t.join("plugin.stderr")).unwrap_or_default();
    let gone = |before: &[PathBuf]| -> Vec<PathBuf> {
        before.iter().filter(|p| !p.exists()).cloned().collect()
    };
    assert_eq!(
        gone(&before),
        Vec::<PathBuf>::new(),
        "nothing removed\n{}",
        stderr()
    );
    assert!(
        stderr().contains("is not a file name: nothing released or removed"),
        "each refusal is logged:\n{}",
        stderr()
    );

    // The named container's own files go, and only they.
    let stop = StopContainerRequest {
        pod: None,
        container: Some(container("c1")),
    };
    s.call::<StopContainerResponse>("StopContainer", &stop)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while plans.join("c1").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let gone: Vec<PathBuf> = before.iter().filter(|p| !p.exists()).cloned().collect();
    assert_eq!(
        gone,
        [
            plans.join("c1"),
            plans.join("c1/plan.env"),
            plans.join("c1.claims.json"),
        ],
        "{}",
        stderr()
    );

    // RemoveContainer as NRI v0.12 sends it, its own call: served (not "does not exist").
    let remove = RemoveContainerRequest {
        pod: None,
        container: Some(container("c2")),
    };
    s.call::<RemoveContainerResponse>("RemoveContainer", &remove)
        .expect("RemoveContainer is served");
    assert!(!plans.join("c2").exists() && !plans.join("c2.claims.json").exists());

    // Synchronize with nothing running: c3's plan (with its record) goes, what has no record
    // of the plugin stays.
    sync(&s, &[]);
    for kept in [
        "plans/operator-notes/keep",
        "plans/orphan/keep",
        "victim/keep",
        "abs/keep",
    ] {
        assert!(t.join(kept).exists(), "{kept} kept\n{}", stderr());
    }
    assert!(!plans.join("c3").exists() && !plans.join("c3.claims.json").exists());
    // Still serving.
    s.call::<ConfigureResponse>("Configure", &configure)
        .unwrap();
}
