//! The push matrix, shared by `push` and `ceiling` so that every push figure
//! has a ceiling figure of the same shape: messages per request (per segment
//! for the ceiling) x partitions x concurrent producers (writers).

/// One shape of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Shape {
    /// Messages per push request; messages per segment for the ceiling.
    pub(crate) batch: usize,
    pub(crate) partitions: usize,
    /// Concurrent producers (push) or writers (ceiling).
    pub(crate) concurrency: usize,
}

impl Shape {
    pub(crate) const fn new(batch: usize, partitions: usize, concurrency: usize) -> Shape {
        Shape {
            batch,
            partitions,
            concurrency,
        }
    }

    /// `b1000 p100 c16`.
    pub(crate) fn name(self) -> String {
        format!("b{} p{} c{}", self.batch, self.partitions, self.concurrency)
    }
}

/// The product: batch x partitions x concurrency.
pub(crate) const BATCHES: &[usize] = &[1, 100, 1000];
pub(crate) const PARTITIONS: &[usize] = &[1, 100];
pub(crate) const CONCURRENCY: &[usize] = &[1, 16];

/// Beyond the product: 10,000 partitions (a target compares them with 100).
pub(crate) const WIDE: &[Shape] = &[
    Shape::new(1000, 10_000, 1),
    Shape::new(1000, 10_000, 16),
    Shape::new(100, 10_000, 16),
];

/// Single-message producers, 50 at once (web handlers emitting events): the
/// shapes the single-message targets are about.
pub(crate) const SINGLE: &[Shape] = &[Shape::new(1, 1, 50), Shape::new(1, 100, 50)];

/// The `--quick` shapes: a smoke test that still feeds every push target.
pub(crate) const QUICK: &[Shape] = &[
    Shape::new(1, 1, 1),
    Shape::new(1, 1, 50),
    Shape::new(1, 100, 50),
    Shape::new(100, 100, 16),
    Shape::new(1000, 1, 1),
    Shape::new(1000, 100, 16),
    Shape::new(1000, 10_000, 16),
];

/// The axes as given on the command line (empty: not given).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Axes {
    /// Messages per request (per segment for the ceiling), comma-separated
    /// [default: 1,100,1000, plus 10,000-partition shapes].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) batches: Vec<usize>,
    /// Partition counts [default: 1,100, plus 10,000 for batch 100 and 1000].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) partitions: Vec<usize>,
    /// Concurrent producers (writers for the ceiling) [default: 1,16].
    #[arg(long, value_name = "N,..", value_delimiter = ',', alias = "writers")]
    pub(crate) producers: Vec<usize>,
}

impl Axes {
    /// True when any axis was given: the run is then exactly their product.
    pub(crate) fn explicit(&self) -> bool {
        !(self.batches.is_empty() && self.partitions.is_empty() && self.producers.is_empty())
    }

    /// The shapes to run: the product of the given axes (defaults for the
    /// others) when any is given; otherwise [`QUICK`] with `quick`, else the
    /// default product plus [`SINGLE`] and [`WIDE`].
    pub(crate) fn shapes(&self, quick: bool) -> Vec<Shape> {
        if !self.explicit() {
            if quick {
                return QUICK.to_vec();
            }
            let mut shapes = product(BATCHES, PARTITIONS, CONCURRENCY);
            shapes.extend_from_slice(SINGLE);
            shapes.extend_from_slice(WIDE);
            return shapes;
        }
        let or = |given: &Vec<usize>, default: &[usize]| {
            if given.is_empty() {
                default.to_vec()
            } else {
                given.clone()
            }
        };
        product(
            &or(&self.batches, BATCHES),
            &or(&self.partitions, PARTITIONS),
            &or(&self.producers, CONCURRENCY),
        )
    }
}

fn product(batches: &[usize], partitions: &[usize], concurrency: &[usize]) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for &batch in batches {
        for &p in partitions {
            for &c in concurrency {
                shapes.push(Shape::new(batch, p, c));
            }
        }
    }
    shapes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_product_plus_wide_shapes_and_axes_replace_them() {
        let axes = Axes::default();
        let shapes = axes.shapes(false);
        assert_eq!(shapes.len(), 12 + SINGLE.len() + WIDE.len());
        assert!(shapes.contains(&Shape::new(1, 1, 50)));
        assert!(shapes.contains(&Shape::new(1000, 10_000, 16)));
        assert_eq!(axes.shapes(true), QUICK.to_vec());
        let axes = Axes {
            batches: vec![1000],
            partitions: vec![10_000],
            producers: Vec::new(),
        };
        assert_eq!(
            axes.shapes(true),
            vec![Shape::new(1000, 10_000, 1), Shape::new(1000, 10_000, 16)]
        );
        assert_eq!(Shape::new(1, 100, 16).name(), "b1 p100 c16");
    }
}
