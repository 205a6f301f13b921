"""CPU pools as kubelet device plugins: the node daemon and its tools."""

__version__ = "0.1.0"
