"""A job's calls go to its own cluster: ``@in_job_cluster`` on a function that takes the job
(``job=``) or its id (``job_id=``) binds the Kubernetes adapter to ``Job.cluster`` for the
call, so its objects, pods and logs are read and written where the job runs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from cluster.services import on_cluster_row
from jobs.models import Job

P = ParamSpec("P")
R = TypeVar("R")


def in_job_cluster(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        job: Any = kwargs.get("job")
        if job is not None:
            cluster_id = job.cluster_id
        else:
            job_id: Any = kwargs["job_id"]
            cluster_id = Job.objects.filter(pk=job_id).values_list("cluster_id", flat=True).first()
        with on_cluster_row(cluster_id):
            return fn(*args, **kwargs)

    return bound
