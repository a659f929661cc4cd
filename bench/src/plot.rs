//! Plots of benchmark reports, as SVG: what `styx bench plot` draws.
//!
//! - `latency-WORKLOAD.svg`: latency p50 and p99 (log scale) against the
//!   offered rate, one point per open-loop run, a series per shard count;
//! - `timeline-WORKLOAD-closed-IN_FLIGHT.svg`: committed per second in
//!   100 ms buckets over the last closed-loop run of that workload with that
//!   many requests in flight per lane, the end of its warm-up marked.
//!
//! Only plotters' SVG backend is used, without its font features: text
//! goes into the SVG as `<text>` elements that the viewer renders with its
//! own fonts, and plotters sizes labels by a character-count estimate, so
//! nothing here needs fontconfig or a font file.

use crate::report::Report;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Image size in pixels.
const SIZE: (u32, u32) = (800, 480);
/// Reports read from one file, at most.
pub const REPORTS_MAX: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: more than {REPORTS_MAX} reports")]
    TooMany { path: PathBuf },
    #[error("cannot draw {path}: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("{0}: no report to plot (open-loop runs make latency plots, closed-loop runs timelines)")]
    Nothing(PathBuf),
}

/// The benchmark reports among the JSON lines of `path`; lines that are not
/// a run of the in-process runner (other systems' figures, blank lines) are
/// skipped.
pub fn read_reports(path: &Path) -> Result<Vec<Report>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(r) = serde_json::from_str::<Report>(line) else {
            continue;
        };
        if r.workload.is_empty() || r.mode.is_empty() {
            continue;
        }
        if out.len() == REPORTS_MAX {
            return Err(Error::TooMany { path: path.to_owned() });
        }
        out.push(r);
    }
    Ok(out)
}

/// Draws every plot the reports allow into `out_dir`; returns the files.
pub fn plot_all(reports: &[Report], out_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Read {
        path: out_dir.to_owned(),
        source,
    })?;
    let mut files = Vec::new();
    let mut open: BTreeMap<&str, Vec<&Report>> = BTreeMap::new();
    let mut last: BTreeMap<(&str, usize), &Report> = BTreeMap::new();
    for r in reports {
        if r.mode == "open" && r.offered_tps.is_some() {
            open.entry(&r.workload).or_default().push(r);
        }
        if let (Some(in_flight), false) = (r.in_flight, r.timeline.is_empty()) {
            last.insert((&r.workload, in_flight), r);
        }
    }
    for (workload, runs) in open {
        let path = out_dir.join(format!("latency-{workload}.svg"));
        latency(&path, workload, &runs).map_err(|e| draw_error(&path, e))?;
        files.push(path);
    }
    for ((workload, in_flight), r) in last {
        let path = out_dir.join(format!("timeline-{workload}-closed-{in_flight}.svg"));
        timeline(&path, r).map_err(|e| draw_error(&path, e))?;
        files.push(path);
    }
    Ok(files)
}

fn draw_error(path: &Path, e: Box<dyn std::error::Error>) -> Error {
    Error::Draw {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

const PALETTE: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Latency p50 and p99 against the offered rate.
pub fn latency(path: &Path, workload: &str, runs: &[&Report]) -> Result<(), Box<dyn std::error::Error>> {
    // A series per shard count, points sorted by offered rate.
    let mut series: BTreeMap<u16, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for r in runs {
        let rate = r.offered_tps.unwrap_or(0.0);
        let (p50, p99) = (r.latency_us.p50.max(1) as f64, r.latency_us.p99.max(1) as f64);
        series.entry(r.shards).or_default().push((rate, p50, p99));
    }
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let x_max = runs.iter().filter_map(|r| r.offered_tps).fold(1.0, f64::max) * 1.05;
    let y_max = runs.iter().map(|r| r.latency_us.p99.max(1) as f64).fold(10.0, f64::max) * 2.0;
    let y_min = runs
        .iter()
        .map(|r| r.latency_us.p50.max(1) as f64)
        .fold(f64::MAX, f64::min)
        / 2.0;

    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{workload}: latency against offered load (open loop)"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, (y_min.max(1.0)..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("offered load (transactions/s)")
        .y_desc("latency (µs, log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, (shards, points)) in series.iter().enumerate() {
        let p50 = PALETTE[(2 * i) % PALETTE.len()];
        let p99 = PALETTE[(2 * i + 1) % PALETTE.len()];
        for (color, pick, name) in [(p50, 1, "p50"), (p99, 2, "p99")] {
            let xy: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }))
                .collect();
            chart
                .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))?
                .label(format!("{name}, {shards} shards"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            chart.draw_series(xy.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Committed per second over a run, the end of the warm-up marked.
pub fn timeline(path: &Path, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let xy: Vec<(f64, f64)> = r.timeline.iter().map(|(t, c)| (*t as f64 / 1_000.0, *c)).collect();
    let x_max = xy.last().map_or(1.0, |p| p.0) + r.timeline_bucket_ms as f64 / 1_000.0;
    let y_max = xy.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{} closed loop, {} shards, {} in flight per lane: committed/s per {} ms",
                r.workload,
                r.shards,
                r.in_flight.unwrap_or(0),
                r.timeline_bucket_ms
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time since the start of the warm-up (s)")
        .y_desc("committed transactions/s")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    chart
        .draw_series(LineSeries::new(xy, PALETTE[0].stroke_width(2)))?
        .label(format!("committed/s (mean {:.0}/s measured)", r.tps))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[0].stroke_width(2)));
    let warm = r.warmup_s;
    chart
        .draw_series(LineSeries::new(
            vec![(warm, 0.0), (warm, y_max)],
            PALETTE[1].stroke_width(2),
        ))?
        .label("end of warm-up")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[1].stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    fn report(mode: &str, rate: Option<f64>, p50: u64) -> Report {
        Report {
            workload: "ycsbt".into(),
            mode: mode.into(),
            shards: 2,
            offered_tps: rate,
            in_flight: rate.is_none().then_some(250),
            warmup_s: 0.2,
            timeline_bucket_ms: 100,
            timeline: vec![(0, 100.0), (100, 200.0), (200, 150.0)],
            latency_us: Latency {
                p50,
                p99: p50 * 4,
                ..Latency::default()
            },
            ..Report::default()
        }
    }

    #[test]
    fn plots_draw_as_svg_without_fonts() {
        let dir = std::env::temp_dir().join(format!("styx-plot-{}", std::process::id()));
        let reports = [
            report("open", Some(1_000.0), 100),
            report("open", Some(5_000.0), 300),
            report("closed", None, 900),
        ];
        let jsonl = dir.join("r.jsonl");
        std::fs::create_dir_all(&dir).unwrap();
        let mut text: String = reports.iter().map(|r| r.to_json() + "\n").collect();
        text.push_str("{\"system\":\"redis\",\"tps\":1.0}\n\n");
        std::fs::write(&jsonl, text).unwrap();
        let read = read_reports(&jsonl).unwrap();
        assert_eq!(read.len(), 3, "the other system's line is skipped");
        let files = plot_all(&read, &dir).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["latency-ycsbt.svg", "timeline-ycsbt-closed-250.svg"]);
        let svg = std::fs::read_to_string(dir.join("latency-ycsbt.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<text") && svg.contains("p99, 2 shards"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
