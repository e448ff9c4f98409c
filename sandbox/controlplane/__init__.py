"""The local cluster's control plane: the real kube-apiserver, etcd, kube-controller-manager,
kube-scheduler, Kueue, JobSet, Trainer and the training operator (built by
``localcluster/build.sh``), started as local processes on loopback."""
