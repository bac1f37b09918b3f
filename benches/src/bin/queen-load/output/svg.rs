//! SVG plots: panels of line series over a shared x axis (minutes), linear
//! or log y axes with 1-2-5 ticks, a legend per panel; and the UTC date their
//! titles carry.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) const WIDTH: f64 = 1000.0;
pub(crate) const LEFT: f64 = 85.0;
pub(crate) const PLOT_WIDTH: f64 = 690.0;
pub(crate) const PANEL_HEIGHT: f64 = 190.0;
pub(crate) const PANEL_GAP: f64 = 75.0;
pub(crate) const TOP: f64 = 125.0;
pub(crate) const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) color: &'static str,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) dashed: bool,
}

impl Series {
    pub(crate) fn new(name: &str, color: &'static str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_owned(),
            color,
            points,
            dashed: false,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Scale {
    Linear,
    Log,
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mut power = 1.0;
    while power * 10.0 <= raw {
        power *= 10.0;
    }
    while power > raw {
        power /= 10.0;
    }
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// A tick label: as many decimals as the step needs.
fn tick_label(value: f64, step: f64) -> String {
    let mut decimals = 0;
    let mut scaled = step;
    while scaled < 0.999 && decimals < 6 {
        scaled *= 10.0;
        decimals += 1;
    }
    format!("{value:.decimals$}")
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One panel of the plot.
pub(crate) struct Panel<'a> {
    pub(crate) title: &'a str,
    /// The y axis label.
    pub(crate) unit: &'a str,
    pub(crate) series: &'a [Series],
    pub(crate) scale: Scale,
    /// Grey the x range up to this (the warm-up).
    pub(crate) shade: Option<f64>,
}

/// A y value to its pixel row.
type Mapping = Box<dyn Fn(f64) -> f64>;

/// Draw one panel at `top`: frame, grid, ticks, axis labels, the series and
/// a legend.
pub(crate) fn panel(out: &mut String, top: f64, x_max: f64, spec: &Panel<'_>) {
    let Panel {
        title,
        unit,
        series,
        scale,
        shade,
    } = *spec;
    let bottom = top + PANEL_HEIGHT;
    let x_px = |x: f64| LEFT + x / x_max * PLOT_WIDTH;
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        top - 10.0,
        escape(title)
    );
    if let Some(until) = shade.filter(|&u| u > 0.0) {
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{:.1}" height="{PANEL_HEIGHT}" fill="#eeeeee"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#777">warm-up</text>"##,
            x_px(until.min(x_max)) - LEFT,
            LEFT + 4.0,
            top + 12.0
        );
    }
    // The y mapping and its ticks.
    let (y_px, ticks): (Mapping, Vec<(f64, String)>) = match scale {
        Scale::Linear => {
            let max = values().fold(0.0_f64, f64::max);
            let step = nice_step(if max > 0.0 { max * 1.05 / 5.0 } else { 0.2 });
            let y_max = (max * 1.05 / step).ceil().max(1.0) * step;
            let mut ticks = Vec::new();
            let mut value = 0.0;
            while value <= y_max * 1.0001 {
                ticks.push((value, tick_label(value, step)));
                value += step;
            }
            (
                Box::new(move |y: f64| bottom - y / y_max * PANEL_HEIGHT),
                ticks,
            )
        }
        Scale::Log => {
            let positive = || values().filter(|v| *v > 0.0);
            let min = positive().fold(f64::INFINITY, f64::min);
            let max = positive().fold(0.0_f64, f64::max);
            let (min, max) = if min.is_finite() && max > 0.0 {
                (min, max)
            } else {
                (0.01, 1.0)
            };
            let mut lo = 1.0;
            while lo > min {
                lo /= 10.0;
            }
            while lo * 10.0 <= min {
                lo *= 10.0;
            }
            let mut hi = lo * 10.0;
            while hi < max {
                hi *= 10.0;
            }
            let mut ticks = Vec::new();
            let mut value = lo;
            while value <= hi * 1.0001 {
                ticks.push((value, tick_label(value, value)));
                value *= 10.0;
            }
            let (log_lo, log_hi) = (lo.log10(), hi.log10());
            (
                Box::new(move |y: f64| {
                    bottom - (y.max(lo).log10() - log_lo) / (log_hi - log_lo) * PANEL_HEIGHT
                }),
                ticks,
            )
        }
    };
    for (value, label) in &ticks {
        let y = y_px(*value);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{label}</text>"##,
            LEFT + PLOT_WIDTH,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let x_step = nice_step(x_max / 8.0);
    let mut x = 0.0;
    while x <= x_max * 1.0001 {
        let px = x_px(x);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{bottom}" stroke="#eeeeee"/><text x="{px:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            bottom + 15.0,
            tick_label(x, x_step)
        );
        x += x_step;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top}" width="{PLOT_WIDTH}" height="{PANEL_HEIGHT}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">minutes since the soak started</text>"#,
        LEFT + PLOT_WIDTH / 2.0,
        bottom + 32.0
    );
    let mid = top + PANEL_HEIGHT / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="22" y="{mid:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 22 {mid:.1})">{}</text>"#,
        escape(unit)
    );
    for (i, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|p| scale == Scale::Linear || p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", x_px(x), y_px(y)))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="6,4""#
        } else {
            ""
        };
        if points.len() == 1 {
            let _ = writeln!(
                out,
                r#"<circle cx="{}" r="2.5" fill="{}"/>"#,
                points[0].replace(',', "\" cy=\""),
                s.color
            );
        } else if !points.is_empty() {
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{dash} points="{}"/>"#,
                s.color,
                points.join(" ")
            );
        }
        let legend_y = top + 14.0 + 18.0 * i as f64;
        let legend_x = LEFT + PLOT_WIDTH + 15.0;
        let _ = writeln!(
            out,
            r#"<line x1="{legend_x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{legend_y:.1}" font-size="11">{}</text>"#,
            legend_y - 4.0,
            legend_x + 22.0,
            legend_y - 4.0,
            s.color,
            legend_x + 28.0,
            escape(&s.name)
        );
    }
}

pub(crate) fn utc_date(at: SystemTime) -> String {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let secs = i64::try_from(secs).unwrap_or(0);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(30.0), 50.0);
        assert_eq!(tick_label(0.25, 0.05), "0.25");
    }

    #[test]
    fn dates_are_civil_utc() {
        let at = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29 12:34:56
        assert_eq!(utc_date(at), "2024-02-29 12:34 UTC");
    }
}
