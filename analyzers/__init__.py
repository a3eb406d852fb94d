"""Pure analysis of training curves: arrays in, findings out (no files, HTTP or database)."""
