"""tracekit: what distributed training sends over the wire, fleet-wide."""

__version__ = "0.1.0"
