#!/usr/bin/env bash
# mpirun with what this kind of machine needs: permission to run as root
# (only when uid is 0), --oversubscribe (more ranks than cores is fine for
# tests) and --bind-to none (hpctrain places its own threads).
#   scripts/mpirun.sh -np 2 ./hpctrain train -epochs 1
if [ "$(id -u)" -eq 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if ! command -v mpirun >/dev/null; then
	echo "mpirun.sh: no mpirun on PATH: make build (scripts/setup.sh) installs Open MPI, or load an Open MPI module" >&2
	exit 1
fi
exec mpirun --oversubscribe --bind-to none "$@"
