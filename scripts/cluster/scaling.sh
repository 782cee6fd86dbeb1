#!/usr/bin/env bash
# scaling.sh: check `hpctrain bench scaling` against real training on the
# local test cluster (up.sh), as root. For each link rate (tc tbf on every
# host's eth0, netem.sh rate) and each layout H or HxR (H hosts, R ranks
# per host, 1 when not given):
#   1. hpctrain bench scaling under mpirun on those hosts: the compute step
#      of every rank measured at once (they share this machine's cores as
#      the training ranks will), the all-reduce swept over the limited link
#      and fitted; the prediction for that job with the measured link and
#      with the nominal rate (latency: measured on the unlimited link).
#      With R > 1 the all-reduce is training's default, the node-shared one:
#      the node's sum is measured first by one host of R ranks, and a job
#      across hosts takes it away from its sweep to fit the network;
#   2. hpctrain train on the same hosts, same batch, threads and buckets,
#      on Fashion-MNIST: samples/s from its final metrics line; with R > 1
#      also with -collective mpi (MPI_Allreduce alone), for comparison.
# Writes $OUT/scaling_validation.json and .md and, when OUT is docs/ (its
# default), puts the table into docs/scaling.md between its validation markers.
#
# Environment: HOSTS (default "1 2 4 1x2 2x2"), RATES in Mbit/s (default "1000 200"),
# STEPS training steps (default 40), BATCH (64), MODEL (cnn), BUCKET_MB (0),
# BIN (default: build ./hpctrain from the repository into a temporary dir),
# OUT (default docs/), DATA (default /usr/share/datasets/fashion-mnist),
# HPCT_BTL (default vader,tcp,self: MPI's shared-memory transport between
# ranks of one host, as on a real cluster; mpirun.sh's own default is TCP).
# Exit 2: a bad setting (checked before anything is built or run); 3: the
# kernel has no tbf (nothing to validate against); 1: failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
die() { echo "cluster scaling.sh: $*" >&2; exit 1; }
bad() { echo "cluster scaling.sh: $*" >&2; exit 2; }

HOSTS=${HOSTS:-"1 2 4 1x2 2x2"}
RATES=${RATES:-"1000 200"}
STEPS=${STEPS:-40}
BATCH=${BATCH:-64}
MODEL=${MODEL:-cnn}
BUCKET_MB=${BUCKET_MB:-0}
OUT=${OUT:-$repo/docs}
export HPCT_BTL=${HPCT_BTL:-vader,tcp,self}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}

# The settings are checked before anything is built or measured: a bad one
# found later would cost the runs before it.
# layout TOKEN: "H R" from H or HxR.
layout() {
	case "$1" in
	*x*) echo "${1%%x*} ${1#*x}" ;;
	*) echo "$1 1" ;;
	esac
}
posint() { case "$1" in '' | *[!0-9]* | 0*) return 1 ;; esac; }
[ -n "${HOSTS//[[:space:]]/}" ] || bad "HOSTS: no layout given"
[ -n "${RATES//[[:space:]]/}" ] || bad "RATES: no rate given"
for tok in $HOSTS; do
	read -r h r <<<"$(layout "$tok")"
	{ posint "$h" && posint "$r" && [ "$h" -le 200 ]; } || bad "HOSTS: '$tok' is not H or HxR (H hosts 1..200, R ranks per host from 1)"
done
for rate in $RATES; do
	posint "$rate" || bad "RATES: '$rate' is not a rate in Mbit/s (a whole number from 1)"
done
for v in STEPS BATCH; do posint "${!v}" || bad "$v=${!v}: want a whole number from 1"; done
[[ "$BUCKET_MB" =~ ^[0-9]+(\.[0-9]+)?$ ]] || bad "BUCKET_MB=$BUCKET_MB: want a number of MiB from 0"
{ [ -d "$OUT" ] && [ -w "$OUT" ]; } || bad "OUT=$OUT: not a writable directory"
[ -d "$DATA" ] || bad "DATA=$DATA: no data set there"
[ -z "${BIN:-}" ] || [ -x "$BIN" ] || bad "BIN=$BIN: not an executable"
[ "$(id -u)" -eq 0 ] || die "must run as root"
command -v jq >/dev/null 2>&1 || die "jq missing: apt-get install jq"
command -v mpirun >/dev/null 2>&1 || die "mpirun missing: scripts/setup.sh installs Open MPI"
command -v tc >/dev/null 2>&1 || die "tc missing: scripts/cluster/up.sh installs iproute2"
maxh=$(for tok in $HOSTS 2; do layout "$tok"; done | awk '{print $1}' | sort -n | tail -1)

# The cluster is ours alone for the run: up.sh would tear down one of the
# same name, a test's (they hold this lock, cluster/helpers_test.go) or a
# user's, with its jobs. The lock's holder removes the file before letting
# go, so a lock taken on a file no longer at lockf's path is no lock.
lockf=/run/lock/$HPCT_CLUSTER-cluster.lock
exec 9>>"$lockf"
{ flock -n 9 && [ "$(stat -L -c %d:%i /dev/fd/9)" = "$(stat -c %d:%i "$lockf" 2>/dev/null)" ]; } ||
	die "another process holds $lockf (a cluster test?); wait for it, or set HPCT_CLUSTER to another name"
[ ! -e "$STATE" ] || {
	rm -f "$lockf"
	die "a cluster named $HPCT_CLUSTER is up ($STATE): $here/down.sh it first, or set HPCT_CLUSTER to another name"
}
work=$(mktemp -d /tmp/hpct-scaling.XXXXXX)
trap 'rm -rf "$work"; rm -f "$lockf"' EXIT
if [ -z "${BIN:-}" ]; then
	BIN=$work/hpctrain
	(cd "$repo" && GOTOOLCHAIN=${GOTOOLCHAIN:-auto} go build -o "$BIN" .) || die "go build failed"
fi

"$here/up.sh" "$maxh" >/dev/null
cleanup() {
	"$here/netem.sh" off >/dev/null 2>&1 || true
	"$here/down.sh" >/dev/null 2>&1 || true
	rm -rf "$work"
	rm -f "$lockf"
}
trap cleanup EXIT
rc=0
"$here/netem.sh" check-rate >/dev/null || rc=$?
if [ "$rc" -eq 3 ]; then
	echo "cluster scaling.sh: this kernel has no tbf qdisc (sch_tbf): links cannot be limited, nothing to validate" >&2
	exit 3
fi
[ "$rc" -eq 0 ] || die "netem.sh check-rate failed"

hostlist() { seq -f "node%g:$2" 1 "$1" | paste -sd,; }
common=(-model "$MODEL" -batch "$BATCH" -threads 1 -bind none -bucket-mb "$BUCKET_MB")
run_job() { # hosts ranks-per-host args...: hpctrain on that many hosts
	local h=$1 r=$2
	shift 2
	"$here/mpirun.sh" -np $((h * r)) --host "$(hostlist "$h" "$r")" "$BIN" "$@"
}
# job LOG WHAT hosts ranks-per-host args...: run_job with its output in LOG;
# if it fails, stop naming WHAT, with the exit status and LOG's last lines
# (the caller shows only some of the output: it would fail in silence).
job() {
	local log=$1 what=$2 rc=0
	shift 2
	run_job "$@" >"$log" 2>&1 || rc=$?
	[ "$rc" -eq 0 ] && return
	{
		echo "cluster scaling.sh: $what failed (exit $rc); its last lines:"
		tail -n 15 "$log" | sed 's/^/  /'
	} >&2
	exit 1
}

# Latency of the unlimited link (veth, bridge, TCP): the alpha of the
# nominal-rate predictions.
"$here/netem.sh" off >/dev/null
job "$work/alpha.log" "bench scaling on 2 hosts, unlimited link" 2 1 bench scaling "${common[@]}" -q -nodes 2 -link-gbps "" -json "$work/alpha.json"
alpha=$(jq '.inter_node_measured.alpha_us' "$work/alpha.json")
echo "cluster scaling.sh: unlimited link: alpha $alpha us, $(jq '.inter_node_measured.gbit_s' "$work/alpha.json") Gbit/s"

# The node's shared sum for each R > 1: one host of R ranks (no link in
# it, so measured once, on the unlimited one).
declare -A sum
for tok in $HOSTS; do
	read -r h r <<<"$(layout "$tok")"
	[ "$r" -gt 1 ] && [ -z "${sum[$r]:-}" ] || continue
	job "$work/sum_$r.log" "bench scaling on one host of $r ranks" 1 "$r" bench scaling "${common[@]}" -q -nodes 1 -link-gbps 1 -json "$work/sum_$r.json"
	sum[$r]="-shm-alpha-us $(jq '.intra_node.alpha_us' "$work/sum_$r.json") -shm-gbps $(jq '.intra_node.gbit_s' "$work/sum_$r.json")"
	echo "cluster scaling.sh: the node-shared sum on one host of $r ranks: ${sum[$r]}"
done

results=$work/results.jsonl
for rate in $RATES; do
	gbps=$(awk -v r="$rate" 'BEGIN { printf "%g", r / 1000 }')
	"$here/netem.sh" rate "${rate}mbit" >/dev/null
	for tok in $HOSTS; do
		read -r h r <<<"$(layout "$tok")"
		pred=$work/pred_${rate}_$tok.json
		given=() # across hosts, the node's sum to take away from the sweep
		if [ "$h" -gt 1 ] && [ "$r" -gt 1 ]; then read -ra given <<<"${sum[$r]}"; fi
		log=$work/${rate}_$tok
		job "$log.bench" "bench scaling on $h x $r at $rate Mbit/s" "$h" "$r" bench scaling "${common[@]}" -nodes "$h" -ranks-per-node "$r" \
			-link-gbps "$gbps" -alpha-us "$alpha" "${given[@]}" -json "$pred"
		sed "s/^/[${rate}M $h x $r bench] /" "$log.bench"
		m=$work/train_${rate}_$tok.jsonl
		job "$log.train" "train on $h x $r at $rate Mbit/s" "$h" "$r" train "${common[@]}" -data-dir "$DATA" -epochs 1 -steps "$STEPS" -test-limit 500 -metrics "$m"
		grep -E '^(final|communication)' "$log.train" | sed "s/^/[${rate}M $h x $r train] /"
		mm=$work/train_mpi_${rate}_$tok.jsonl
		if [ "$r" -gt 1 ]; then
			job "$log.mpi" "train -collective mpi on $h x $r at $rate Mbit/s" "$h" "$r" train "${common[@]}" -collective mpi -data-dir "$DATA" -epochs 1 -steps "$STEPS" -test-limit 500 -metrics "$mm"
			grep -E '^final' "$log.mpi" | sed "s/^/[${rate}M $h x $r train -collective mpi] /"
		else
			: >"$mm"
		fi
		jq -c --argjson rate "$rate" --argjson h "$h" --argjson r "$r" --slurpfile m "$m" --slurpfile mm "$mm" '
			($m | map(select(.final)) | .[0]) as $f
			| ($mm | map(select(.final)) | .[0]) as $fm
			| (.rows | map(select(.link == "measured")) | .[0]) as $pm
			| (.rows | map(select(.link != "measured")) | .[0]) as $pn
			| {rate_mbit: $rate, hosts: $h, ranks_per_host: $r, ranks: ($h * $r), collective: .collective, algorithm: $pn.algorithm,
			   compute_ms: .compute_step_ms,
			   node_sum_alpha_us: (if .collective == "shm" and $r > 1 then .intra_node.alpha_us else null end),
			   node_sum_gbit_s: (if .collective == "shm" and $r > 1 then .intra_node.gbit_s else null end),
			   measured_alpha_us: (.inter_node_measured.alpha_us // null), measured_gbit_s: (.inter_node_measured.gbit_s // null),
			   pred_measured: ($pm.samples_per_second // $pn.samples_per_second), pred_nominal: $pn.samples_per_second,
			   pred_comm_ms: ($pm.comm_exposed_ms // $pn.comm_exposed_ms),
			   train: $f.samples_per_second, train_comm_ms: (if $f.step > 0 then 1000 * $f.comm_wait_seconds / $f.step else 0 end),
			   train_mpi: ($fm.samples_per_second // null)}' "$pred" >>"$results"
	done
done
"$here/netem.sh" off >/dev/null

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(lscpu | awk -F: '/^Model name/ { gsub(/^ +/, "", $2); print $2; exit }')
cpus=$(lscpu | awk -F: '/^CPU\(s\)/ { gsub(/ /, "", $2); print $2; exit }')
kernel=$(uname -r)
cmd="HPCT_BTL=$HPCT_BTL HOSTS=\"$HOSTS\" RATES=\"$RATES\" STEPS=$STEPS BATCH=$BATCH MODEL=$MODEL BUCKET_MB=$BUCKET_MB scripts/cluster/scaling.sh"
jq -s --arg commit "$commit" --arg cpu "$cpu" --arg cpus "$cpus" --arg kernel "$kernel" --arg cmd "$cmd" --argjson alpha "$alpha" \
	'{command: $cmd, commit: $commit, cpu: $cpu, cpus: ($cpus | tonumber), kernel: $kernel, unlimited_alpha_us: $alpha, rows: .}' \
	"$results" >"$OUT/scaling_validation.json"

md=$work/table.md
{
	echo "Generated by \`$cmd\` at commit $commit on $cpu ($cpus CPUs, kernel $kernel),"
	echo "model $MODEL, batch $BATCH per rank, 1 thread per rank, bucket_mb $BUCKET_MB, $STEPS training steps, training's default all-reduce"
	echo "(node-shared sum, then MPI between hosts; MPI_Allreduce alone with one rank per host);"
	echo "every host shares this machine's $cpus CPUs. Nominal: the tbf rate with the unlimited link's latency ($(printf %.0f "$alpha") us);"
	echo "measured: the all-reduce swept over the limited link by the same \`bench scaling\` run (with R ranks per host, less the node's sum"
	echo "measured by one host of R ranks). Error: predicted (measured link) / trained - 1. Last column: the same training with \`-collective mpi\`."
	echo
	echo "| link | hosts x ranks | model | compute ms | fitted link (alpha us, Gbit/s) | predicted samples/s (nominal) | predicted samples/s (measured link) | trained samples/s | error | comm exposed ms, predicted / trained | trained, -collective mpi |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	jq -r '"| \(.rate_mbit) Mbit/s | \(.hosts) x \(.ranks_per_host) | \(.algorithm) | \(.compute_ms * 100 | round / 100) | \(if .measured_gbit_s then "\(.measured_alpha_us | round), \(.measured_gbit_s * 1000 | round / 1000)" else "-" end) | \(.pred_nominal | round) | \(.pred_measured | round) | \(.train | round) | \((.pred_measured / .train - 1) * 100 | round)% | \(.pred_comm_ms | round) / \(.train_comm_ms | round) | \(if .train_mpi then .train_mpi | round else "-" end) |"' "$results"
} >"$md"
cp "$md" "$OUT/scaling_validation.md"
doc=$repo/docs/scaling.md
# Only a run that writes to docs/ (OUT's default) is the validation of record.
if [ "$(cd "$OUT" && pwd -P)" = "$(cd "$repo/docs" && pwd -P)" ] && [ -f "$doc" ] && grep -q '<!-- validation:begin -->' "$doc"; then
	awk -v f="$md" '
		/<!-- validation:begin -->/ { print; while ((getline l < f) > 0) print l; skip = 1; next }
		/<!-- validation:end -->/ { skip = 0 }
		!skip' "$doc" >"$work/doc.md" && cat "$work/doc.md" >"$doc"
fi
cat "$md"
