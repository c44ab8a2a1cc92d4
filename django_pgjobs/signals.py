"""The one place to observe the queue: metrics, tracing and logging hang off these.

``sender`` is the job type (a str).

- ``job_enqueued(job=Job)``: after enqueue() wrote the row (not yet committed).
- ``job_started(job=JobContext)``: in the executor thread, right before the handler runs.
- ``job_finished(job=JobContext, completion=Completion, applied=bool)``: after the worker
  recorded the outcome; ``applied`` is False when the lease had been lost and nothing was written.
- ``job_reaped(job_id=int, status=str)``: a job whose lease expired was rescued.
"""

from django.dispatch import Signal

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()
job_reaped = Signal()
