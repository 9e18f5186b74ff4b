"""Offline batch jobs through kip: ``kip batch run`` for files (kip/batch/command.py),
and the same engine for jobs that are code::

    from kip.batch import BatchRun, Chunk
    run = BatchRun(client, "minilm", job_id="nightly-42")
    async for outcome in run.outcomes(Chunk(i, i * 32, len(rows), inputs) for ...):
        ...   # in input order; outcome.result is the InferenceResult when ok

``rows_in_chunks`` cuts an iterable of rows (dicts of input name -> value) into chunks.
The file tools need the ``batch`` extra (pyarrow, rich); the engine does not.
"""

from kip.batch.engine import BatchRun, Chunk, Outcome, rows_in_chunks

__all__ = ["BatchRun", "Chunk", "Outcome", "rows_in_chunks"]
