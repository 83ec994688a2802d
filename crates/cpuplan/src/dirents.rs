//! A directory's entries, from a descriptor the caller opened by its own rules (below a root,
//! no link followed): `fdopendir` on a duplicate of it, through nix's `Dir`.

use std::ops::ControlFlow;
use std::os::fd::AsFd;

/// Calls `entry` with every entry's name and inode of the open directory `dir` (not `.` and
/// `..`) until it breaks. A failed read ends the listing with its error, after the entries read
/// before it. `dir` is read from where its offset stands (a fresh descriptor: the start), and
/// stays open; the listing reads a duplicate of it, which shares its offset.
pub fn each(
    dir: impl AsFd,
    mut entry: impl FnMut(&[u8], u64) -> ControlFlow<()>,
) -> std::io::Result<()> {
    let mut listing = nix::dir::Dir::from(dir.as_fd().try_clone_to_owned()?)?;
    for e in listing.iter() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if entry(name, e.ino()).is_break() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn every_name_of_a_directory_once_without_the_dots_across_small_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut want: Vec<String> = (0..40)
            .map(|i| format!("entry-{i:02}-{}", "x".repeat(i)))
            .collect();
        for n in &want {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        let f = File::open(dir.path()).unwrap();
        let mut got = Vec::new();
        each(&f, |name, ino| {
            assert_ne!(ino, 0);
            got.push(String::from_utf8(name.to_vec()).unwrap());
            ControlFlow::Continue(())
        })
        .unwrap();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn a_break_ends_the_listing_there() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..30 {
            std::fs::write(dir.path().join(format!("n{i}")), "").unwrap();
        }
        let f = File::open(dir.path()).unwrap();
        let mut seen = 0;
        each(&f, |_, _| {
            seen += 1;
            if seen == 7 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(seen, 7);
    }
}
