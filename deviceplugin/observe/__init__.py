"""What an operator sees of the daemon: log lines, Prometheus metrics, allocations named after the fact."""
