"""`tracekit ingest`: trace files from many jobs into one dataset (see tracekit.ingest.run)."""

from tracekit.ingest.run import IngestReport, ingest

__all__ = ["IngestReport", "ingest"]
