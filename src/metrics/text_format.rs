//! The text formats of `GET /metrics`: OpenMetrics as rendered, or the
//! classic Prometheus text format 0.0.4 rewritten from it.

/// The content type of [`Metrics::render`](super::Metrics::render)'s output.
pub(crate) fn content_type(openmetrics: bool) -> &'static str {
    if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    }
}

/// Rewrites OpenMetrics text as the classic Prometheus text format: a
/// counter's `HELP` and `TYPE` name its `_total` series, and the
/// OpenMetrics-only lines (`# UNIT`, `# EOF`) go.
pub(super) fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        openmetrics.lines().filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut text = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let described = line.strip_prefix("# HELP ").map(|rest| ("# HELP ", rest));
        let described = described.or_else(|| line.strip_prefix("# TYPE ").map(|rest| ("# TYPE ", rest)));
        match described {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                text.push_str(prefix);
                text.push_str(name);
                if counters.contains(name) {
                    text.push_str("_total");
                }
                text.push(' ');
                text.push_str(tail);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_format_names_counters_by_their_total_series_and_drops_openmetrics_lines() {
        let open = "# HELP subagentd_tasks_started Tasks started.\n# TYPE subagentd_tasks_started counter\n\
                    subagentd_tasks_started_total 3\n# HELP subagentd_outbox_queued_bytes Bytes.\n\
                    # TYPE subagentd_outbox_queued_bytes gauge\n# UNIT subagentd_outbox_queued_bytes bytes\n\
                    subagentd_outbox_queued_bytes 0\n# EOF\n";
        let classic = classic_text(open);
        assert_eq!(
            classic,
            "# HELP subagentd_tasks_started_total Tasks started.\n# TYPE subagentd_tasks_started_total counter\n\
             subagentd_tasks_started_total 3\n# HELP subagentd_outbox_queued_bytes Bytes.\n\
             # TYPE subagentd_outbox_queued_bytes gauge\nsubagentd_outbox_queued_bytes 0\n"
        );
    }
}
