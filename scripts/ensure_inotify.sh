#!/usr/bin/env bash
# inotify instances for the local clusters. Each local cluster's components watch their
# certificate and config files through inotify: about 14 instances per cluster (kube-apiserver
# 6, Kueue 4, the others 1 each). Debian's default of 128 per user lets 9 run at once, and the
# suite's six processes run up to 12 (their shared clusters, plus those a module stops or
# breaks), with Chromium and JupyterLab beside them: a component that gets no instance exits
# with "too many open files". kind's documentation gives the same advice for the same reason.
# Raised to 1024 when lower and this user may (root); otherwise says how, and goes on.
set -uo pipefail
want=1024
key=fs.inotify.max_user_instances
have=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo "$want")
if [ "$have" -lt "$want" ]; then
  if sysctl -q -w "$key=$want" >/dev/null 2>&1 || echo "$want" > /proc/sys/fs/inotify/max_user_instances 2>/dev/null; then
    echo "$key raised from $have to $want (local clusters need about 14 each)"
  else
    echo "warning: $key is $have; local clusters need about 14 each and this many runs only" \
      "$((have / 14)) at once. Raise it: sudo sysctl -w $key=$want" >&2
  fi
fi
