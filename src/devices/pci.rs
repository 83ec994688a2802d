//! PCI addresses: the forms container runtimes and nvidia-smi write, and their numeric order.

/// `addr` as `dddd:bb:dd.f` lowercase (domains of more than 4 digits kept, leading zeros past 4 dropped),
/// from `0000:2a:00.0`, `00000000:2A:00.0` or `2a:00.0`; `None` if it is not a PCI address.
pub fn normalize_pci(addr: &str) -> Option<String> {
    let addr = addr.trim().to_ascii_lowercase();
    let parts: Vec<&str> = addr.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (*d, *b, *df),
        [b, df] => ("0000", *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let hex = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|c| c.is_ascii_hexdigit())
    };
    if !hex(domain, 8)
        || !hex(bus, 2)
        || !hex(dev, 2)
        || func.len() != 1
        || !matches!(func.as_bytes()[0], b'0'..=b'7')
    {
        return None;
    }
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    if dev > 0x1f {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func}"))
}

/// The numeric order of PCI addresses (domain, bus, device, function); unparsable ones last.
pub fn pci_sort_key(addr: &str) -> (u64, u64, u64, u64, String) {
    let parse = || -> Option<(u64, u64, u64, u64)> {
        let (domain, rest) = addr.split_once(':')?;
        let (bus, devfn) = rest.split_once(':')?;
        let (dev, func) = devfn.split_once('.')?;
        Some((
            u64::from_str_radix(domain, 16).ok()?,
            u64::from_str_radix(bus, 16).ok()?,
            u64::from_str_radix(dev, 16).ok()?,
            u64::from_str_radix(func, 16).ok()?,
        ))
    };
    match parse() {
        Some((a, b, c, d)) => (a, b, c, d, String::new()),
        None => (u64::MAX, 0, 0, 0, addr.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_runtime_and_smi_forms() {
        assert_eq!(
            normalize_pci("0000:2a:00.0").as_deref(),
            Some("0000:2a:00.0")
        );
        assert_eq!(
            normalize_pci("00000000:2A:00.0").as_deref(),
            Some("0000:2a:00.0")
        );
        assert_eq!(normalize_pci("2a:00.1").as_deref(), Some("0000:2a:00.1"));
        assert_eq!(
            normalize_pci("10000:01:00.0").as_deref(),
            Some("10000:01:00.0")
        );
        for bad in [
            "",
            "2a",
            "0000:2a:00",
            "0000:2a:00.8",
            "zz:00.0",
            "0000:2a:20.0",
            "0000:2a:00.0.0",
            "../x:00.0",
        ] {
            assert_eq!(normalize_pci(bad), None, "{bad}");
        }
    }

    #[test]
    fn sorts_numerically() {
        let mut v = vec![
            "10000:00:00.0",
            "0000:9a:00.0",
            "0000:18:00.0",
            "0001:00:00.0",
        ];
        v.sort_by_key(|a| pci_sort_key(a));
        assert_eq!(
            v,
            [
                "0000:18:00.0",
                "0000:9a:00.0",
                "0001:00:00.0",
                "10000:00:00.0"
            ]
        );
    }
}
