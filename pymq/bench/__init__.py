"""pymq-bench: producer, consumer and end-to-end benchmarks against a cluster (or an embedded one)."""
