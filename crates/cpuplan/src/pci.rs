//! PCI addresses: the spellings runtimes, nvidia-smi and sysfs use, the canonical form, and their numeric order.

/// A PCI address's numeric order: (domain, bus, device, function).
pub type PciKey = (u32, u8, u8, u8);

/// A PCI function's address (`0000:18:00.0`), ordered numerically, printed in the canonical
/// lowercase form sysfs uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress(PciKey);

impl PciAddress {
    /// `0000:2a:00.0`, nvidia-smi's `00000000:2A:00.0` or the short `2a:00.0`; `None` if `id` is no PCI bus id.
    pub fn parse(id: &str) -> Option<PciAddress> {
        pci_parts(id).map(PciAddress)
    }

    /// Its numbers: (domain, bus, device, function).
    pub fn key(&self) -> (u32, u8, u8, u8) {
        self.0
    }

    /// The canonical spelling of `id`, or `None` if it is no PCI bus id.
    pub fn canonical(id: &str) -> Option<String> {
        Self::parse(id).map(|a| a.to_string())
    }
}

impl std::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (domain, bus, device, function) = self.0;
        write!(f, "{domain:04x}:{bus:02x}:{device:02x}.{function}")
    }
}

/// `0000:2a:00.0`, `00000000:2A:00.0` or `2a:00.0` as the canonical lowercase `dddd:bb:dd.f`; `None` if it is no PCI bus id.
pub fn normalize_pci(id: &str) -> Option<String> {
    PciAddress::canonical(id)
}

/// The numeric sort key of a PCI address (domains may have more than four hex digits); `None` if it is no PCI bus id.
pub fn pci_key(id: &str) -> Option<PciKey> {
    pci_parts(id)
}

/// Whether `s` is a PCI address in the canonical form sysfs uses (safe as a file name).
pub fn is_pci_address(s: &str) -> bool {
    normalize_pci(s).as_deref() == Some(s)
}

/// The numbers of `[domain:]bus:device.function`: a 4 to 8 hex digit domain (0 if absent), two hex digits each for bus and device, function 0 to 7.
fn pci_parts(id: &str) -> Option<PciKey> {
    let (rest, function) = id.rsplit_once('.')?;
    let mut parts: Vec<&str> = rest.split(':').collect();
    let domain = match parts.len() {
        2 => 0,
        3 => {
            let d = parts.remove(0);
            if !(4..=8).contains(&d.len()) {
                return None;
            }
            hex(d)?
        }
        _ => return None,
    };
    let byte = |s: &str| (s.len() == 2).then(|| hex(s)).flatten().map(|v| v as u8);
    let bus = byte(parts[0])?;
    let device = byte(parts[1])?;
    let function = match function.as_bytes() {
        [f @ b'0'..=b'7'] => f - b'0',
        _ => return None,
    };
    Some((domain, bus, device, function))
}

/// A string of hex digits (nothing else, not even a sign) as a number.
fn hex(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_normalizes_to_one() {
        for id in [
            "0000:2a:00.0",
            "00000000:2A:00.0",
            "2a:00.0",
            "2A:00.0",
            "000000:2a:00.0",
        ] {
            assert_eq!(normalize_pci(id).as_deref(), Some("0000:2a:00.0"), "{id}");
        }
        assert_eq!(
            normalize_pci("0001:db:1f.7").as_deref(),
            Some("0001:db:1f.7")
        );
        assert_eq!(
            normalize_pci("10000:01:00.1").as_deref(),
            Some("10000:01:00.1")
        );
    }

    #[test]
    fn junk_is_no_pci_id() {
        for id in [
            "",
            "0",
            "2a:00",
            "2a:00.8",
            "2a:0.0",
            "2a:000.0",
            "000:2a:00.0",
            "000000000:2a:00.0",
            "0000:2a:00:00.0",
            "0000:2g:00.0",
            "+000:2a:00.0",
            "0000:2a:00.0 ",
            "GPU-2a:00.0",
            "renderD128",
            "0000:2a:00.01",
        ] {
            assert_eq!(normalize_pci(id), None, "{id:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn normalizing_is_total_and_idempotent(s in "\\PC*") {
            if let Some(n) = normalize_pci(&s) {
                proptest::prop_assert_eq!(normalize_pci(&n), Some(n.clone()));
                proptest::prop_assert_eq!(pci_key(&n), pci_key(&s));
            }
        }

        #[test]
        fn every_address_round_trips(d in 0u32..=0xffff, b: u8, dev: u8, f in 0u8..8) {
            let upper = format!("{d:08X}:{b:02X}:{dev:02X}.{f}");
            let want = format!("{d:04x}:{b:02x}:{dev:02x}.{f}");
            proptest::prop_assert_eq!(normalize_pci(&upper), Some(want));
        }
    }

    #[test]
    fn keys_order_by_number_not_by_text() {
        let mut ids = vec![
            "0000:db:00.0",
            "10000:01:00.0",
            "0000:18:00.1",
            "0000:18:00.0",
            "0001:00:00.0",
        ];
        ids.sort_by_key(|id| pci_key(id));
        assert_eq!(
            ids,
            [
                "0000:18:00.0",
                "0000:18:00.1",
                "0000:db:00.0",
                "0001:00:00.0",
                "10000:01:00.0"
            ]
        );
    }
}
