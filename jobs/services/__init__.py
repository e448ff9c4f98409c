"""The jobs app's writes, one module per part of a job's life: submit (check, preview,
submit, cancel), admission, apply, eviction, transitions (the one writer of a job's state),
the timeline and its notices, the idle policy's moves, hardware failures, templates.

Import the function from its module (``from jobs.services.submit import job_submit``)."""
