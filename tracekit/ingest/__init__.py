"""`tracekit ingest`: trace files from many jobs into one dataset (see tracekit.ingest.run).

`tracekit.ingest` names both this package and its function: importing the package (as
`tracekit.generate` and `tracekit.report` do) makes Python set the package as the attribute
`tracekit.ingest`, over the function the top-level module gives, so the package calls it too.
"""

import sys
import types

from tracekit.ingest.report import IngestReport
from tracekit.ingest.run import ingest

__all__ = ["IngestReport", "ingest"]


class _CallablePackage(types.ModuleType):
    __call__ = staticmethod(ingest)  # the function's own signature, to callers and type checkers


sys.modules[__name__].__class__ = _CallablePackage
