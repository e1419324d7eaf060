"""The checks' toolbox: the harness every check receives (build, run, compare with the
oracle), what a check records, private copies of inputs and outputs, the careful run,
input edits and deltas, instance makers, config spaces, hypothesis strategies, the
facts that make a comparison count, and the vocabulary of a result."""
