"""The batch-log recorder lives in :mod:`lrdoctor.runtime.record`; this documented path stays."""

from lrdoctor.runtime.record import COLUMNS, BatchLogRecorder, tokens_per_sample

__all__ = ["COLUMNS", "BatchLogRecorder", "tokens_per_sample"]
