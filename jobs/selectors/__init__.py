"""The jobs app's reads: jobs and quota use as a user sees them, cohorts, templates, a job
as it is now in the cluster (pods, logs), its place in the queue, and "will it fit?".

Import the function from its module (``from jobs.selectors.jobs import jobs_for_user``)."""
