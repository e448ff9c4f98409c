"""Background controllers: Job, Deployment/ReplicaSet, scheduler, kubelet, GC, quota."""
