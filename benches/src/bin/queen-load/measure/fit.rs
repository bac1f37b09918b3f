//! Trends: a least-squares line through a series of samples.

use serde::Serialize;

/// A least-squares line `y = intercept + slope x`, and the slope's standard
/// error (0 with fewer than 3 points).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Fit {
    pub(crate) slope: f64,
    pub(crate) intercept: f64,
    pub(crate) slope_stderr: f64,
}

/// The least-squares line through `points`; `None` with fewer than two
/// distinct x values.
pub(crate) fn least_squares(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let slope_stderr = if points.len() > 2 {
        let residuals: f64 = points
            .iter()
            .map(|p| (p.1 - intercept - slope * p.0).powi(2))
            .sum();
        (residuals / (n - 2.0) / sxx).sqrt()
    } else {
        0.0
    };
    Some(Fit {
        slope,
        intercept,
        slope_stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_finds_the_line() {
        let fit = least_squares(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]).map(|f| f.slope);
        assert_eq!(fit, Some(2.0));
        assert!(least_squares(&[(1.0, 1.0)]).is_none());
    }
}
