//! An ELF file's program headers, enough to tell a static binary from one that asks for a dynamic
//! loader (`PT_INTERP`).
//!
//! One parser for `install` (which refuses a dynamically linked hook) and the tests that check
//! static builds; the shim's tests include this file with `#[path]`, so it depends on `std` only.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// ELF `PT_INTERP`: the program asks for a dynamic loader, named in the segment.
pub const PT_INTERP: u32 = 3;
/// ELF `PT_DYNAMIC`: the file has dynamic linking information (static-pie binaries have it too).
pub const PT_DYNAMIC: u32 = 2;

/// One program header: its type and where its bytes are in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHeader {
    /// `p_type` (e.g. [`PT_INTERP`]).
    pub kind: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`.
    pub size: u64,
}

/// Why a file's program headers cannot be read.
#[derive(Debug)]
pub enum ElfError {
    /// Reading the file failed (or it is shorter than its headers say).
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not an ELF file, or not one this parser reads (64-bit little-endian only).
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ElfError::Format { path, why } => write!(f, "{}: {why}", path.display()),
        }
    }
}

impl std::error::Error for ElfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ElfError::Io { source, .. } => Some(source),
            ElfError::Format { .. } => None,
        }
    }
}

/// The most program headers read (real binaries have about a dozen).
const MAX_HEADERS: usize = 256;

/// The program headers of the ELF file at `path` (64-bit little-endian).
pub fn program_headers(path: &Path) -> Result<Vec<ProgramHeader>, ElfError> {
    let io = |source| ElfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let format = |why| ElfError::Format {
        path: path.to_path_buf(),
        why,
    };
    let file = File::open(path).map_err(io)?;
    let mut head = [0u8; 64];
    file.read_exact_at(&mut head, 0).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            format("shorter than an ELF header")
        } else {
            io(e)
        }
    })?;
    if &head[..4] != b"\x7fELF" {
        return Err(format("not an ELF file"));
    }
    if (head[4], head[5]) != (2, 1) {
        return Err(format("not a 64-bit little-endian ELF file"));
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(w)
    };
    let (phoff, phentsize, phnum) = (
        u64_at(&head, 0x20),
        usize::from(u16_at(&head, 0x36)),
        usize::from(u16_at(&head, 0x38)),
    );
    if phnum > MAX_HEADERS {
        return Err(format("too many program headers"));
    }
    if phnum > 0 && phentsize < 56 {
        return Err(format("program header entries shorter than 56 bytes"));
    }
    let mut table = vec![0u8; phnum * phentsize];
    file.read_exact_at(&mut table, phoff).map_err(io)?;
    Ok(table
        .chunks_exact(phentsize.max(1))
        .map(|e| ProgramHeader {
            kind: u32_at(e, 0),
            offset: u64_at(e, 8),
            size: u64_at(e, 32),
        })
        .collect())
}

/// The dynamic loader the ELF file at `path` asks for (its `PT_INTERP`), or `None` for a static
/// binary.
pub fn interpreter(path: &Path) -> Result<Option<String>, ElfError> {
    let Some(h) = program_headers(path)?
        .into_iter()
        .find(|h| h.kind == PT_INTERP)
    else {
        return Ok(None);
    };
    let mut bytes = vec![0u8; h.size.min(4096) as usize];
    File::open(path)
        .and_then(|f| f.read_exact_at(&mut bytes, h.offset))
        .map_err(|source| ElfError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let name = bytes.split(|b| *b == 0).next().unwrap_or_default();
    Ok(Some(String::from_utf8_lossy(name).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_binary_names_its_loader_and_a_non_elf_file_is_an_error() {
        // The test binary itself is a dynamically linked executable.
        let me = std::env::current_exe().unwrap();
        let interp = interpreter(&me).unwrap().expect("a PT_INTERP");
        assert!(interp.contains("ld-linux"), "{interp}");
        let kinds: Vec<u32> = program_headers(&me)
            .unwrap()
            .iter()
            .map(|h| h.kind)
            .collect();
        assert!(
            kinds.contains(&PT_INTERP) && kinds.contains(&PT_DYNAMIC),
            "{kinds:?}"
        );

        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("script");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        let e = interpreter(&script).unwrap_err().to_string();
        assert!(e.contains("script") && e.contains("shorter than"), "{e}");
        std::fs::write(&script, [b'#'; 100]).unwrap();
        let e = interpreter(&script).unwrap_err().to_string();
        assert!(e.contains("not an ELF file"), "{e}");
        let mut elf32 = b"\x7fELF\x01\x01".to_vec();
        elf32.resize(64, 0);
        std::fs::write(&script, elf32).unwrap();
        let e = interpreter(&script).unwrap_err().to_string();
        assert!(e.contains("64-bit"), "{e}");
        assert!(matches!(
            interpreter(&d.path().join("none")),
            Err(ElfError::Io { .. })
        ));
    }
}
