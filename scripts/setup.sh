#!/usr/bin/env bash
# Installs what hpctrain needs to build, train and test, and nothing that is
# already there. On a cluster where mpicc/mpirun come from environment
# modules and the data and OpenBLAS exist, it installs nothing.
#
#   scripts/setup.sh --build    build + train (make build, make demo)
#   scripts/setup.sh            also what the tests need: python3-onnx and
#                               python3-torch for the export checks and the
#                               PyTorch peer benchmarks
#   scripts/setup.sh --cuda     also NVRTC (CUDA 11.8, Debian non-free:
#                               libnvrtc11.2 libnvrtc-builtins11.8) for the
#                               kernel compile check; not the CUDA toolkit
set -euo pipefail

cuda=0 python=1
for arg in "$@"; do
	case $arg in
	--build) python=0 ;;
	--cuda) cuda=1 ;;
	--torch) ;; # once the only way to get PyTorch; now always installed
	*)
		echo "setup: unknown option $arg (known: --build, --cuda)" >&2
		exit 2
		;;
	esac
done

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pc() { have_cmd pkg-config && pkg-config --exists "$1"; }

have_cmd pkg-config || need+=(pkg-config)
# cgo's C compiler ($CC, else gcc): without it Go turns cgo off and make
# build stops at cgo-check.
cc=${CC:-gcc}
have_cmd "${cc%% *}" || need+=(gcc)
# Open MPI itself: package mpi links with pkg-config's ompi (an MPICH's mpi.pc
# or mpich.pc does not build it, and its mpirun has no --oversubscribe).
if ! { have_cmd mpirun && have_cmd mpicc && have_pc ompi; }; then
	need+=(openmpi-bin libopenmpi-dev)
fi
have_pc openblas || need+=(libopenblas-dev)
# oneDNN (internal/dnnl's convolutions and matmuls): Debian ships no
# dnnl.pc, so ask the C compiler cgo uses whether it finds the header, as
# the build will (CPATH or CGO_CFLAGS: a cluster's oneDNN module); without
# a compiler yet, look where Debian puts it.
have_dnnl() {
	if have_cmd "${cc%% *}"; then
		# shellcheck disable=SC2086 # CC and CGO_CFLAGS are word lists
		printf '#include <oneapi/dnnl/dnnl.h>\n' | $cc ${CGO_CFLAGS:-} -E -x c - >/dev/null 2>&1
	else
		[ -e /usr/include/oneapi/dnnl/dnnl.h ]
	fi
}
have_dnnl || need+=(libdnnl-dev)
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || need+=(dataset-fashion-mnist)
# The export tests check hpctrain's ONNX and safetensors files with ONNX's
# checker and PyTorch: Debian's packages, which install into /usr/bin/python3.
# (--torch, once the only way to get PyTorch, is still accepted.)
# Building and training need neither (--build).
if [ "$python" -eq 1 ]; then
	/usr/bin/python3 -c 'import onnx' 2>/dev/null || need+=(python3-onnx)
	/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
fi

if [ ${#need[@]} -gt 0 ]; then
	if ! have_cmd apt-get; then
		echo "setup: missing ${need[*]}, and no apt-get to install it with (not Debian): install the equivalents or load modules that provide them" >&2
		exit 1
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing ${need[*]}: as root run apt-get update && apt-get install --no-install-recommends ${need[*]}, or load modules that provide them" >&2
		exit 1
	fi
	echo "setup: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --cuda: the kernel compile check (gpu/kernels/compile_test.go) needs only
# NVRTC, which Debian 12 ships from CUDA 11.8 in its non-free component. Nothing
# is installed when an NVRTC is already loadable (a cluster's CUDA module).
have_nvrtc() {
	local d
	for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
		[ -e "$d/libnvrtc.so.12" ] || [ -e "$d/libnvrtc.so.11.2" ] && return 0
	done
	# ldconfig is in /sbin, which a user's PATH does not have. Its list is read
	# whole: grep -q's early exit would end ldconfig on SIGPIPE and, under
	# pipefail, fail the pipeline whatever grep found.
	local cache
	cache=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null)
	grep -Eq 'libnvrtc\.so\.(12|11\.2) ' <<<"$cache"
}
have_deb() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

# add_nonfree adds Debian's non-free component (where NVRTC is, in
# bookworm/non-free: contrib only holds packages that depend on it) to
# Debian's own apt sources, once: the Components lines of the deb822 file
# (Debian 12) or the deb lines of a one-line sources.list (older releases).
# "non-free-firmware" is another component and does not count.
add_nonfree() {
	local f nf='(^|[[:space:]])non-free([[:space:]]|$)'
	f=/etc/apt/sources.list.d/debian.sources
	if [ -f "$f" ] && grep -E '^Components:.*\bmain\b' "$f" | grep -Evq "$nf"; then
		sed -i -E "/^Components:.*\bmain\b/{/$nf/!s/\$/ non-free/}" "$f"
		echo "setup: added non-free to $f"
	fi
	f=/etc/apt/sources.list
	if [ -f "$f" ] && grep -E '^deb(-src)? .*debian.* main' "$f" | grep -Evq "$nf"; then
		sed -i -E "/^deb(-src)? .*debian.* main/{/$nf/!s/\$/ non-free/}" "$f"
		echo "setup: added non-free to $f"
	fi
}

if [ "$cuda" -eq 1 ] && ! have_nvrtc; then
	nv=()
	have_deb libnvrtc11.2 || nv+=(libnvrtc11.2)
	have_deb libnvrtc-builtins11.8 || nv+=(libnvrtc-builtins11.8)
	if [ ${#nv[@]} -gt 0 ]; then
		if [ "$(id -u)" -ne 0 ] || ! have_cmd apt-get; then
			echo "setup: --cuda: no NVRTC (libnvrtc.so.12 or .so.11.2); install ${nv[*]} from Debian non-free as root, or load a CUDA module" >&2
			exit 1
		fi
		echo "setup: installing ${nv[*]} (Debian non-free)"
		add_nonfree
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${nv[@]}" >/dev/null
	fi
fi

# go.mod asks for Go 1.27; GOTOOLCHAIN=auto fetches it through the module
# proxy, which any Go from 1.21 on does by itself (Debian 12's golang-go is
# 1.19, too old). go env GOVERSION, in the module, is the Go it will build with.
export GOTOOLCHAIN=auto
cd "$(dirname "$0")/.."
want=$(sed -n 's/^go //p' go.mod)
if ! have_cmd go; then
	echo "setup: no go command on PATH: install Go 1.21 or newer (https://go.dev/dl/), which fetches go.mod's Go $want itself" >&2
	exit 1
fi
got=$(go env GOVERSION) || exit 1 # go's own line says why the fetch failed
if [ "$(printf '%s\n' "go$want" "$got" | sort -V | head -1)" != "go$want" ]; then
	echo "setup: $got on PATH cannot fetch go.mod's Go $want (GOTOOLCHAIN needs Go 1.21 or newer): install a newer Go (https://go.dev/dl/) first on PATH" >&2
	exit 1
fi
