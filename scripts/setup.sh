#!/usr/bin/env bash
# Installs what hpctrain needs to build, train and test, and nothing that is
# already there. On a cluster where mpicc/mpirun come from environment
# modules and the data and OpenBLAS exist, it installs nothing.
#
#   scripts/setup.sh            build + train + tests (python3-onnx and
#                               python3-torch for the export checks and the
#                               PyTorch peer benchmarks)
set -euo pipefail

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pc() { have_cmd pkg-config && pkg-config --exists "$1"; }

have_cmd pkg-config || need+=(pkg-config)
if ! { have_cmd mpirun && have_cmd mpicc && { have_pc ompi || have_pc mpich || have_pc mpi; }; }; then
	need+=(openmpi-bin libopenmpi-dev)
fi
have_pc openblas || need+=(libopenblas-dev)
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || need+=(dataset-fashion-mnist)
# The export tests check hpctrain's ONNX and safetensors files with ONNX's
# checker and PyTorch: Debian's packages, which install into /usr/bin/python3.
# (--torch, once the only way to get PyTorch, is still accepted.)
/usr/bin/python3 -c 'import onnx' 2>/dev/null || need+=(python3-onnx)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing ${need[*]}; install them (as root: apt-get install ${need[*]}) or load the matching modules" >&2
		exit 1
	fi
	echo "setup: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# go.mod asks for Go 1.27; GOTOOLCHAIN=auto fetches it through the module proxy.
export GOTOOLCHAIN=auto
go version >/dev/null
