#!/usr/bin/env bash
# down.sh DIR: stop the cluster that scripts/slurm/up.sh DIR started: cancel
# its jobs, stop slurmd and slurmctld (and munged if up.sh started it), and
# make sure none of their processes is left. Removes nothing; DIR keeps the
# logs. Safe to run twice, or on a DIR where up.sh failed half way.
set -uo pipefail

die() { echo "slurm down.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: down.sh DIR"
[ -d "$1" ] || { echo "slurm down.sh: $1: no such directory; nothing to stop" >&2; exit 0; }
DIR=$(cd "$1" && pwd)
export SLURM_CONF=$DIR/slurm.conf

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop PIDFILE NAME: SIGTERM, wait up to 10 s, then SIGKILL.
stop() {
	alive "$1" || return 0
	local pid
	pid=$(cat "$1")
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "slurm down.sh: $2 (pid $pid) ignored SIGTERM; killing" >&2
	kill -KILL "$pid" 2>/dev/null || true
}

# Cancel jobs first so slurmstepd ends them and their processes cleanly.
if alive "$DIR/slurmctld.pid" && [ -s "$SLURM_CONF" ]; then
	jobs=$(squeue -h -o %i 2>/dev/null || true)
	if [ -n "$jobs" ]; then
		# shellcheck disable=SC2086
		scancel $jobs 2>/dev/null || true
		for _ in $(seq 50); do
			[ -z "$(squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
			sleep 0.2
		done
	fi
fi
stop "$DIR/slurmd.pid" slurmd
stop "$DIR/slurmctld.pid" slurmctld

# Anything still carrying this cluster's mark (slurmstepd, slurmscriptd).
mark="HPCTRAIN_SLURM_DIR=$DIR"
for env in /proc/[0-9]*/environ; do
	pid=${env#/proc/}
	pid=${pid%/environ}
	[ "$pid" = "$$" ] && continue
	if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qxF "$mark"; then
		echo "slurm down.sh: killing leftover $({ tr '\0' ' ' </proc/"$pid"/cmdline; } 2>/dev/null) (pid $pid)" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
done

if [ -s "$DIR/munged.pid" ]; then
	stop "$DIR/munged.pid" munged
	rm -f "$DIR/munged.pid"
fi
echo "slurm down.sh: stopped cluster in $DIR" >&2
