#!/usr/bin/env bash
# A real single-node SLURM cluster for the SLURM integration test (Debian's slurmctld/slurmd/munge).
#   cluster.sh install          apt-get install the daemons (needs root and Debian's registry)
#   cluster.sh start STATE_DIR  write slurm.conf under STATE_DIR, start munged, slurmctld, slurmd,
#                               wait until the node is idle; prints `export SLURM_CONF=...`
#   cluster.sh stop STATE_DIR   stop exactly the daemons this script started (by recorded PID)
set -euo pipefail

command=${1:?usage: cluster.sh install|start|stop [STATE_DIR]}

install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

start() {
  local state=$1 host cpus mem
  mkdir -p "$state"/{spool,ctld,log}
  state=$(cd "$state" && pwd)
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  cat > "$state/slurm.conf" <<CONF
ClusterName=sinkscope-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:fake:1 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
CONF
  # one GPU of type "fake" that SLURM schedules (--gpus=fake:1) but that no device backs: a job
  # placed there sees no CUDA device, as on a node whose GPU torch cannot use
  cat > "$state/gres.conf" <<CONF
NodeName=$host Name=gpu Type=fake File=/dev/null Count=1
CONF
  # The config must also sit where SLURM clients look by default: the slurm-jobstep plugin strips
  # SLURM_CONF (with every other SLURM_* variable) from the environment of the `srun` it runs
  # inside each job, as real clusters keep their config in /etc/slurm. A config there that this
  # script did not write is never touched.
  if [ -e /etc/slurm/slurm.conf ] && ! grep -q "^# written by sinkscope" /etc/slurm/slurm.conf; then
    echo "/etc/slurm/slurm.conf exists and was not written by this script; not starting" >&2
    return 1
  fi
  mkdir -p /etc/slurm
  { echo "# written by sinkscope tests/slurm/cluster.sh for $state"; cat "$state/slurm.conf"; } \
    > /etc/slurm/slurm.conf
  if [ -e /etc/slurm/gres.conf ] && ! grep -q "^# written by sinkscope" /etc/slurm/gres.conf; then
    echo "/etc/slurm/gres.conf exists and was not written by this script; not starting" >&2
    return 1
  fi
  { echo "# written by sinkscope tests/slurm/cluster.sh for $state"; cat "$state/gres.conf"; } \
    > /etc/slurm/gres.conf
  export SLURM_CONF=$state/slurm.conf
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
  runuser -u munge -- munged --foreground > "$state/log/munged.out" 2>&1 &
  echo $! > "$state/runuser.started"
  for _ in $(seq 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.2; done
  pgrep -P "$(cat "$state/runuser.started")" -x munged > "$state/munged.started"
  slurmctld -D -f "$SLURM_CONF" > "$state/log/slurmctld.out" 2>&1 &
  echo $! > "$state/slurmctld.started"
  sleep 1
  slurmd -D -f "$SLURM_CONF" > "$state/log/slurmd.out" 2>&1 &
  echo $! > "$state/slurmd.started"
  for _ in $(seq 120); do
    if sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; then
      echo "export SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.5
  done
  echo "SLURM node never became idle; logs in $state/log" >&2
  sinfo >&2 || true
  return 1
}

stop() {
  local state=$1 name pid
  for name in slurmd slurmctld munged runuser; do
    if [ -f "$state/$name.started" ]; then
      pid=$(cat "$state/$name.started")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$state/$name.started"
    fi
  done
  for name in slurm.conf gres.conf; do
    if grep -qs "^# written by sinkscope tests/slurm/cluster.sh for $state" "/etc/slurm/$name"; then
      rm -f "/etc/slurm/$name"
    fi
  done
}

case "$command" in
  install) install ;;
  start) start "${2:?STATE_DIR}" ;;
  stop) stop "${2:?STATE_DIR}" ;;
  *) echo "unknown command $command" >&2; exit 2 ;;
esac
