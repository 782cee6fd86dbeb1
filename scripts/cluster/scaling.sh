#!/usr/bin/env bash
# scaling.sh: check `hpctrain bench scaling` against real training on the
# local test cluster (up.sh), as root. For each link rate (tc tbf on every
# host's eth0, netem.sh rate) and each number of hosts (1 rank per host):
#   1. hpctrain bench scaling under mpirun on those hosts: the compute step
#      of every rank measured at once (they share this machine's cores as
#      the training ranks will), the all-reduce swept over the limited link
#      and fitted; the prediction for that job with the measured link and
#      with the nominal rate (latency: measured on the unlimited link);
#   2. hpctrain train on the same hosts, same batch, threads and buckets,
#      on Fashion-MNIST: samples/s from its final metrics line.
# Writes $OUT/scaling_validation.json and .md, and puts the table into
# docs/scaling.md between its validation markers.
#
# Environment: HOSTS (default "1 2 4"), RATES in Mbit/s (default "1000 200"),
# STEPS training steps (default 40), BATCH (64), MODEL (cnn), BUCKET_MB (0),
# BIN (default: build ./hpctrain from the repository into a temporary dir),
# OUT (default docs/), DATA (default /usr/share/datasets/fashion-mnist).
# Exit 3: the kernel has no tbf (nothing to validate against); 1: failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
die() { echo "cluster scaling.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root"
for c in jq mpirun tc; do command -v "$c" >/dev/null 2>&1 || die "$c missing (scripts/setup.sh installs it)"; done

HOSTS=${HOSTS:-"1 2 4"}
RATES=${RATES:-"1000 200"}
STEPS=${STEPS:-40}
BATCH=${BATCH:-64}
MODEL=${MODEL:-cnn}
BUCKET_MB=${BUCKET_MB:-0}
OUT=${OUT:-$repo/docs}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$DATA" ] || die "no data set at $DATA"
work=$(mktemp -d /tmp/hpct-scaling.XXXXXX)
if [ -z "${BIN:-}" ]; then
	BIN=$work/hpctrain
	(cd "$repo" && GOTOOLCHAIN=${GOTOOLCHAIN:-auto} go build -o "$BIN" .) || die "go build failed"
fi
maxh=$(printf '%s\n' $HOSTS 2 | sort -n | tail -1)

"$here/up.sh" "$maxh" >/dev/null
cleanup() {
	"$here/netem.sh" off >/dev/null 2>&1 || true
	"$here/down.sh" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
rc=0
"$here/netem.sh" check-rate >/dev/null || rc=$?
if [ "$rc" -eq 3 ]; then
	echo "cluster scaling.sh: this kernel has no tbf qdisc (sch_tbf): links cannot be limited, nothing to validate" >&2
	exit 3
fi
[ "$rc" -eq 0 ] || die "netem.sh check-rate failed"

hostlist() { seq -f 'node%g' 1 "$1" | paste -sd,; }
common=(-model "$MODEL" -batch "$BATCH" -threads 1 -bind none -bucket-mb "$BUCKET_MB")
run_job() { # hosts args...: hpctrain on that many hosts, one rank each
	local h=$1
	shift
	"$here/mpirun.sh" -np "$h" --host "$(hostlist "$h")" "$BIN" "$@"
}

# Latency of the unlimited link (veth, bridge, TCP): the alpha of the
# nominal-rate predictions.
"$here/netem.sh" off >/dev/null
run_job 2 bench scaling "${common[@]}" -q -nodes 2 -link-gbps "" -json "$work/alpha.json" >/dev/null
alpha=$(jq '.inter_node_measured.alpha_us' "$work/alpha.json")
echo "cluster scaling.sh: unlimited link: alpha $alpha us, $(jq '.inter_node_measured.gbit_s' "$work/alpha.json") Gbit/s"

results=$work/results.jsonl
for rate in $RATES; do
	gbps=$(awk -v r="$rate" 'BEGIN { printf "%g", r / 1000 }')
	"$here/netem.sh" rate "${rate}mbit" >/dev/null
	for h in $HOSTS; do
		pred=$work/pred_${rate}_$h.json
		run_job "$h" bench scaling "${common[@]}" -nodes "$h" -ranks-per-node 1 -link-gbps "$gbps" -alpha-us "$alpha" -json "$pred" |
			sed "s/^/[${rate}M x$h bench] /"
		m=$work/train_${rate}_$h.jsonl
		run_job "$h" train "${common[@]}" -data-dir "$DATA" -epochs 1 -steps "$STEPS" -test-limit 500 -metrics "$m" 2>&1 |
			grep -E '^(final|communication)' | sed "s/^/[${rate}M x$h train] /"
		jq -c --argjson rate "$rate" --argjson h "$h" --slurpfile m "$m" '
			($m | map(select(.final)) | .[0]) as $f
			| (.rows | map(select(.link == "measured")) | .[0]) as $pm
			| (.rows | map(select(.link != "measured")) | .[0]) as $pn
			| {rate_mbit: $rate, hosts: $h, ranks: $h, compute_ms: .compute_step_ms,
			   measured_alpha_us: (.inter_node_measured.alpha_us // null), measured_gbit_s: (.inter_node_measured.gbit_s // null),
			   pred_measured: ($pm.samples_per_second // $pn.samples_per_second), pred_nominal: $pn.samples_per_second,
			   pred_comm_ms: ($pm.comm_exposed_ms // $pn.comm_exposed_ms),
			   train: $f.samples_per_second, train_comm_ms: (if $f.step > 0 then 1000 * $f.comm_wait_seconds / $f.step else 0 end)}' "$pred" >>"$results"
	done
done
"$here/netem.sh" off >/dev/null

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(lscpu | awk -F: '/^Model name/ { gsub(/^ +/, "", $2); print $2; exit }')
cpus=$(lscpu | awk -F: '/^CPU\(s\)/ { gsub(/ /, "", $2); print $2; exit }')
kernel=$(uname -r)
cmd="HOSTS=\"$HOSTS\" RATES=\"$RATES\" STEPS=$STEPS BATCH=$BATCH MODEL=$MODEL BUCKET_MB=$BUCKET_MB scripts/cluster/scaling.sh"
jq -s --arg commit "$commit" --arg cpu "$cpu" --arg cpus "$cpus" --arg kernel "$kernel" --arg cmd "$cmd" --argjson alpha "$alpha" \
	'{command: $cmd, commit: $commit, cpu: $cpu, cpus: ($cpus | tonumber), kernel: $kernel, unlimited_alpha_us: $alpha, rows: .}' \
	"$results" >"$OUT/scaling_validation.json"

md=$work/table.md
{
	echo "Generated by \`$cmd\` at commit $commit on $cpu ($cpus CPUs, kernel $kernel),"
	echo "model $MODEL, batch $BATCH per rank, 1 thread per rank, bucket_mb $BUCKET_MB, $STEPS training steps, one rank per host;"
	echo "every host shares this machine's $cpus CPUs. Nominal: the tbf rate with the unlimited link's latency ($alpha us);"
	echo "measured: the all-reduce swept over the limited link by the same \`bench scaling\` run. Error: predicted (measured link) / trained - 1."
	echo
	echo "| link | hosts x ranks | compute ms | fitted link (alpha us, Gbit/s) | predicted samples/s (nominal) | predicted samples/s (measured link) | trained samples/s | error | comm exposed ms, predicted / trained |"
	echo "|---|---|---|---|---|---|---|---|---|"
	jq -r '"| \(.rate_mbit) Mbit/s | \(.hosts) x 1 | \(.compute_ms * 100 | round / 100) | \(if .measured_gbit_s then "\(.measured_alpha_us | round), \(.measured_gbit_s * 1000 | round / 1000)" else "-" end) | \(.pred_nominal | round) | \(.pred_measured | round) | \(.train | round) | \((.pred_measured / .train - 1) * 100 | round)% | \(.pred_comm_ms | round) / \(.train_comm_ms | round) |"' "$results"
} >"$md"
cp "$md" "$OUT/scaling_validation.md"
doc=$repo/docs/scaling.md
if [ -f "$doc" ] && grep -q '<!-- validation:begin -->' "$doc"; then
	awk -v f="$md" '
		/<!-- validation:begin -->/ { print; while ((getline l < f) > 0) print l; skip = 1; next }
		/<!-- validation:end -->/ { skip = 0 }
		!skip' "$doc" >"$work/doc.md" && cat "$work/doc.md" >"$doc"
fi
cat "$md"
