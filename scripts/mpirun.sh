#!/usr/bin/env bash
# mpirun with what this kind of machine needs: permission to run as root
# (only when uid is 0), --oversubscribe (more ranks than cores is fine for
# tests), --bind-to none (hpctrain places its own threads) and a TCP
# keepalive on Open MPI's own connections that notices a lost host (below).
#   scripts/mpirun.sh -np 2 ./hpctrain train -epochs 1
if [ "$(id -u)" -eq 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if ! command -v mpirun >/dev/null; then
	echo "mpirun.sh: no mpirun on PATH: make build (scripts/setup.sh) installs Open MPI, or load an Open MPI module" >&2
	exit 1
fi

# A host that vanishes mid-run (power lost, link down) leaves mpirun
# waiting for its daemon (orted) on a TCP connection that nothing closes.
# Once mpirun has sent on it, Linux retransmits for tcp_retries2 (15 by
# default: ~15 min) before the socket fails; until then, only a keepalive
# notices: after oob_tcp_keepalive_time s of silence, and then _probes
# unanswered probes _intvl s apart. Open MPI 4.1's own 300 + 9 x 20 = 480 s
# comes after the trainer's watchdog (-collective-timeout, default 5 min),
# whose abort is sent to the lost orted: 1228 s in all, measured. With
# 20 + 8 x 5 = 60 s, mpirun says "ORTE has lost communication with a remote
# daemon ... on node NAME" and ends the job about a minute after the host
# went (TestHostLostKernelRetries: 62 s). Why these: a probe goes only on a
# connection with nothing unacknowledged, one per ~25 s of silence, and one
# answer resets the count, so a healthy job dies only if 8 probes in a row,
# or their answers, are lost: at 5% loss each way ~1e-8 per round, and a
# blackout shorter than ~35 s (a switch reboot, a spanning-tree change)
# passes. Shorter would risk those; a -collective-timeout under a minute
# aborts first, and the wait is tcp_retries2's again.
# Each is set (OMPI_MCA_*, which mpirun passes on to the remote orteds) only
# where the user has not set it: in the environment, as --mca/--gmca NAME
# VALUE on this command line (which Open MPI takes before the environment
# anyway), or in an MCA params file (ompi_info's "source" is not
# "default": ~/.openmpi/mca-params.conf, the site's openmpi-mca-params.conf).
# slurm.Render (slurm/render.go) writes the same values into sbatch scripts
# (TestRenderKeepaliveAsLauncher checks that they agree).
keepalive=(oob_tcp_keepalive_time=20 oob_tcp_keepalive_intvl=5 oob_tcp_keepalive_probes=8)
filed=
if command -v ompi_info >/dev/null; then
	filed=$(ompi_info --param oob tcp --level 9 --parsable 2>/dev/null |
		awk -F: '$6 == "source" && $7 != "default" { printf " %s ", $5 }')
fi
for kv in "${keepalive[@]}"; do
	name=${kv%%=*} given=
	var=OMPI_MCA_$name
	[ -z "${!var+x}" ] || given=1
	case "$filed" in *" $name "*) given=1 ;; esac
	prev=
	for a in "$@"; do
		case "$prev" in --mca | -mca | --gmca | -gmca) [ "$a" != "$name" ] || given=1 ;; esac
		prev=$a
	done
	[ -n "$given" ] || export "$var=${kv#*=}"
done
exec mpirun --oversubscribe --bind-to none "$@"
