//! The two text formats `/metrics` serves, chosen by the request's `Accept` header: OpenMetrics
//! 1.0 (what `prometheus-client` encodes) where the client asks for it, else Prometheus's text
//! format 0.0.4, derived from it line by line.

/// A text format of the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`: Prometheus's own, what a client gets unless it asks for
    /// OpenMetrics.
    Prometheus,
}

impl Format {
    /// The format for a request whose `Accept` header is `accept`: OpenMetrics where a media
    /// range of `application/openmetrics-text` has a non-zero quality at least that of the
    /// best range the Prometheus format matches (`text/plain`, `text/*`, `*/*`), else
    /// Prometheus (also with no header, or one that cannot be read).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut open, mut plain) = (0.0_f32, 0.0_f32);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
                .unwrap_or(0.0);
            match media.as_str() {
                "application/openmetrics-text" => open = open.max(q),
                "text/plain" | "text/*" | "*/*" => plain = plain.max(q),
                _ => {}
            }
        }
        if open > 0.0 && open >= plain {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// `openmetrics` (OpenMetrics text, as `prometheus-client` encodes it) in `format`. For the
/// Prometheus format: no `# EOF` and no `# UNIT` lines; a counter's `HELP` and `TYPE` name
/// the family with its `_total`, as its samples do; an info family is a gauge named with its
/// `_info`; `unknown` is `untyped`; `_created` samples (none here) are left out.
pub fn convert(openmetrics: &str, format: Format) -> String {
    if format == Format::OpenMetrics {
        return openmetrics.to_string();
    }
    let types: std::collections::HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let renamed = |name: &str| -> String {
        match types.get(name) {
            Some(&"counter") => format!("{name}_total"),
            Some(&"info") => format!("{name}_info"),
            _ => name.to_string(),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!("# HELP {} {help}\n", renamed(name)));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = match kind {
                "info" => "gauge",
                "unknown" => "untyped",
                k => k,
            };
            out.push_str(&format!("# TYPE {} {kind}\n", renamed(name)));
        } else if is_created(line, &types) {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Whether `line` is the `_created` sample of a counter or histogram family.
fn is_created(line: &str, types: &std::collections::HashMap<&str, &str>) -> bool {
    let name = line.split(['{', ' ']).next().unwrap_or_default();
    name.strip_suffix("_created")
        .and_then(|family| types.get(family))
        .is_some_and(|t| matches!(*t, "counter" | "histogram" | "summary"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_choose_the_format() {
        use Format::*;
        // Prometheus's own scrape header (OpenMetrics first), and its 0.0.4-only one.
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::negotiate(Some(prometheus)), OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4;q=1,*/*;q=0.1")),
            Prometheus
        );
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
            OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Prometheus
        );
        assert_eq!(
            Format::negotiate(Some("text/plain, application/openmetrics-text;q=0.5")),
            Prometheus
        );
        assert_eq!(Format::negotiate(Some("*/*")), Prometheus);
        assert_eq!(Format::negotiate(None), Prometheus);
        assert_eq!(Format::negotiate(Some(";;,q=,")), Prometheus);
    }

    #[test]
    fn the_prometheus_format_names_families_as_their_samples() {
        let om = "\
# HELP a_build The version.
# TYPE a_build info
a_build_info{version=\"1\"} 1
# HELP a_runs Runs.
# TYPE a_runs counter
a_runs_total 3
a_runs_created 1.7e9
# HELP a_took_seconds Time.
# TYPE a_took_seconds histogram
# UNIT a_took_seconds seconds
a_took_seconds_bucket{le=\"+Inf\"} 0
a_took_seconds_sum 0.0
a_took_seconds_count 0
# HELP a_up Up.
# TYPE a_up gauge
a_up 1
# EOF
";
        assert_eq!(convert(om, Format::OpenMetrics), om);
        assert_eq!(
            convert(om, Format::Prometheus),
            "\
# HELP a_build_info The version.
# TYPE a_build_info gauge
a_build_info{version=\"1\"} 1
# HELP a_runs_total Runs.
# TYPE a_runs_total counter
a_runs_total 3
# HELP a_took_seconds Time.
# TYPE a_took_seconds histogram
a_took_seconds_bucket{le=\"+Inf\"} 0
a_took_seconds_sum 0.0
a_took_seconds_count 0
# HELP a_up Up.
# TYPE a_up gauge
a_up 1
"
        );
    }
}
