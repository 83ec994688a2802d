use super::*;
use crate::proc_stat::{is_other_thread, live_start_time, parse_stat};

#[test]
fn pci_addresses() {
    for ok in ["0000:2a:00.0", "0000:00:1f.7", "10000:01:00.1"] {
        assert!(is_pci_address(ok), "{ok}");
    }
    for bad in [
        "",
        "0000:2A:00.0",
        "2a:00.0",
        "000:2a:00.0",
        "0000:2a:00.8",
        "0000:2a:00.00",
        "0000:2a:0.0",
        "0000:2a:00:00.0",
        "../../etc/passwd",
        "0000:2a:00.0/../x",
        "0000:2a:00.0.json",
        "0000:2g:00.0",
    ] {
        assert!(!is_pci_address(bad), "{bad}");
    }
}

#[test]
fn state_and_start_time_after_the_last_paren() {
    let stat =
        "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(parse_stat(stat), Some(('S', 987654)));
    let plain = "1 (systemd) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 17 2 3";
    assert_eq!(parse_stat(plain), Some(('S', 17)));
    let zombie = "7 (sh) Z 1 7 7 0 -1 4227084 1 2 3 4 5 6 7 8 20 0 1 0 99 0 0";
    assert_eq!(parse_stat(zombie), Some(('Z', 99)));
    assert_eq!(parse_stat("1 (x) S 0 1"), None);
    assert_eq!(parse_stat("no paren at all 1 2 3"), None);
    let junk = "1 (x) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 abc 2 3";
    assert_eq!(parse_stat(junk), None);
    let long_state = "1 (x) SS 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 17 2 3";
    assert_eq!(parse_stat(long_state), None);
}

#[test]
fn a_zombie_or_dead_state_is_no_live_start_time() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("proc/7");
    std::fs::create_dir_all(&d).unwrap();
    for (state, live) in [
        ("S", true),
        ("R", true),
        ("D", true),
        ("Z", false),
        ("X", false),
    ] {
        let stat = format!("7 (sh) {state} 1 7 7 0 -1 0 1 2 3 4 5 6 7 8 20 0 1 0 99 0 0\n");
        std::fs::write(d.join("stat"), stat).unwrap();
        let want = live.then_some(99);
        assert_eq!(live_start_time(root.path(), 7).unwrap(), want, "{state}");
    }
}

proptest::proptest! {
    #[test]
    fn any_text_parses_without_panic(s in "\\PC*") {
        let _ = parse_stat(&s);
        let _ = is_pci_address(&s);
    }

    #[test]
    fn the_start_time_survives_any_comm(comm in "\\PC*", start in 0u64..u64::MAX) {
        let stat = format!("9 ({comm}) S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 2");
        proptest::prop_assert_eq!(parse_stat(&stat), Some(('S', start)));
    }
}

#[test]
fn own_start_time_is_read() {
    let t = live_start_time(Path::new("/"), std::process::id()).unwrap();
    assert!(t.is_some_and(|t| t > 0), "{t:?}");
}

#[test]
fn a_thread_id_is_no_live_process_whatever_its_start_time() {
    // Field 38 (the exit signal): -1 for a thread that does not lead its group, 17 or 0 else.
    let fields = |exit: &str| {
        format!("9 (a b) S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 1 2 3 4 5 6 7 8 9 0 0 0 0 0 0 {exit} 1 0 0")
    };
    assert!(is_other_thread(&fields("-1")));
    assert!(!is_other_thread(&fields("17")) && !is_other_thread(&fields("0")));
    assert!(!is_other_thread(
        "9 (sh) S 1 9 9 0 -1 0 1 2 3 4 5 6 7 8 20 0 1 0 99 0 0"
    ));
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("proc/9")).unwrap();
    std::fs::write(root.path().join("proc/9/stat"), fields("-1")).unwrap();
    assert_eq!(live_start_time(root.path(), 9).unwrap(), None);
    std::fs::write(root.path().join("proc/9/stat"), fields("17")).unwrap();
    assert_eq!(live_start_time(root.path(), 9).unwrap(), Some(77));

    // A live thread of this process: /proc/<tid>/stat answers, yet it is no holder's pid.
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
        let _ = stop_rx.recv();
    });
    let tid = rx.recv().unwrap();
    assert!(Path::new(&format!("/proc/{tid}/stat")).exists());
    assert_eq!(
        live_start_time(Path::new("/"), tid).unwrap(),
        None,
        "thread {tid}"
    );
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).unwrap();
    let (_, start) = parse_stat(&stat).unwrap();
    let h = Holder {
        container: "c".into(),
        scope: "s".into(),
        pid: tid,
        start_time: start,
        pid_ns: own_pid_ns(),
    };
    assert!(
        !h.is_live(Path::new("/")).unwrap(),
        "a thread id judged a live holder"
    );
    stop_tx.send(()).unwrap();
    t.join().unwrap();
}
