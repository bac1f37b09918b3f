//! The embedded `.sql` files, in apply order. (Being written.)
