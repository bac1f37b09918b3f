//! Text tables: a row of column titles, then one row per case, and the
//! cell formats every table uses.

use std::fmt::{Display, Write as _};

use crate::measure::per;

/// A text table: a row of column titles, then one row per case; the first
/// column left-aligned, the others right-aligned, one space apart.
pub(crate) struct Table {
    widths: Vec<usize>,
    out: String,
}

impl Table {
    /// A table of `columns`: each a title and a width (a wider cell takes
    /// more room and shifts the rest of its row).
    pub(crate) fn new(columns: &[(&str, usize)]) -> Table {
        let mut table = Table {
            widths: columns.iter().map(|&(_, width)| width).collect(),
            out: String::new(),
        };
        table.row(columns.iter().map(|&(title, _)| title));
        table
    }

    /// Add a row: one cell per column.
    pub(crate) fn row<C: Display>(&mut self, cells: impl IntoIterator<Item = C>) {
        for (index, (cell, &width)) in cells.into_iter().zip(&self.widths).enumerate() {
            let _ = if index == 0 {
                write!(self.out, "{cell:<width$}")
            } else {
                write!(self.out, " {cell:>width$}")
            };
        }
        self.out.push('\n');
    }

    /// The table's text.
    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// `value` with `decimals` digits after the point, for a table cell.
pub(crate) fn fixed(value: f64, decimals: usize) -> String {
    format!("{value:.decimals$}")
}

/// A fraction as a whole percentage: `0.634` is `63%`.
pub(crate) fn percent(fraction: f64) -> String {
    format!("{:.0}%", fraction * 100.0)
}

/// A figure for a table cell: `-` when absent.
pub(crate) fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| fixed(v, decimals))
}

/// A table of figures: a name column, then one column per `columns` title.
pub(crate) fn figures(columns: &[&str]) -> Table {
    let mut titles = vec![("figure", 44)];
    titles.extend(columns.iter().map(|&title| (title, 14)));
    Table::new(&titles)
}

/// Add a row comparing a `big` and a `small` figure, with `big / small`.
pub(crate) fn compare(
    table: &mut Table,
    name: &str,
    big: Option<f64>,
    small: Option<f64>,
    decimals: usize,
) {
    table.row([
        name.to_owned(),
        cell(big, decimals),
        cell(small, decimals),
        cell(per(big, small), 2),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_its_cells_as_the_column_widths_say() {
        let mut table = Table::new(&[("case", 6), ("msg/s", 9), ("ratio", 4), ("n", 3)]);
        table.row([
            "b1 p1".to_owned(),
            fixed(1234.567, 0),
            percent(0.634),
            "-".to_owned(),
        ]);
        table.row([
            "b1000 p100".to_owned(),
            fixed(0.5, 2),
            percent(12.5),
            1234.to_string(),
        ]);
        assert_eq!(
            table.finish(),
            "case       msg/s ratio   n\n\
             b1 p1       1235  63%   -\n\
             b1000 p100      0.50 1250% 1234\n"
        );
    }
}
