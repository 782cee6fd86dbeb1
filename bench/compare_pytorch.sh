#!/usr/bin/env bash
# hpctrain and PyTorch on the same network, batch and cores, alternating in
# one run (shared machines are noisy: compare the ratio, not the absolutes).
#   bench/compare_pytorch.sh [MODEL] [ROUNDS] [INPUT]      e.g. resnet20 3 32x32x3
# MODEL: cnn, mlp, resnet8, resnet20 (default cnn); ROUNDS default 3; INPUT
# one sample's HxWxC (default 28x28x1).
#
# First both networks are compared layer by layer (names, output shapes,
# parameters; bench/pytorch_models.py --check against `hpctrain summary
# -json`). Then each round times, for 1 and 2 threads in one process,
# `hpctrain bench step` and bench/pytorch_models.py: forward, loss,
# backward and SGD (lr 0.01, momentum 0.9) on batches of 64, training-mode
# batch norm; samples/s = 64 / MEDIAN step time on both sides. Which side
# goes first alternates from round to round. With INPUT 28x28x1 (the data
# set on disk, Fashion-MNIST) and mpirun present, each round also trains
# 2 ranks x 1 thread: `hpctrain train` against PyTorch DDP (gloo,
# bench/pytorch_ddp.py), each rank pinned to a core, LIMIT (12800) samples,
# one epoch; there samples/s is both sides' samples / training-loop seconds
# (hpctrain's metrics statistic; it has no per-step times). DDP=0 skips it.
# STEPS (40) sets the timed steps of the single-process rows.
#
# Prints a row per round and configuration, then the median of each side
# over the rounds and the ratio of the medians, and writes it all as JSON
# to out/compare_MODEL.json (out/compare_MODEL_INPUT.json for another INPUT).
# Needs python3-torch (scripts/setup.sh --torch) and ./hpctrain (make build).
set -euo pipefail
model=${1:-cnn}
rounds=${2:-3}
input=${3:-28x28x1}
steps=${STEPS:-40}
limit=${LIMIT:-12800}
py=/usr/bin/python3
cd "$(dirname "$0")/.."
$py -c 'import torch' 2>/dev/null || { echo "compare: python3-torch missing (scripts/setup.sh --torch)" >&2; exit 1; }
[ -x ./hpctrain ] || { echo "compare: build ./hpctrain first (make build)" >&2; exit 1; }
mkdir -p out
json=out/compare_$model.json
[ "$input" = 28x28x1 ] || json=out/compare_${model}_$input.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ddp=${DDP:-1}
if [ "$input" != 28x28x1 ] || ! command -v mpirun >/dev/null; then ddp=0; fi

# The same network on both sides, or stop.
./hpctrain summary -model "$model" -input "$input" -json >"$tmp/summary.json"
check=$($py bench/pytorch_models.py --model "$model" --input "$input" --check "$tmp/summary.json" --steps 0)
$py -c 'import json,sys; d=json.loads(sys.argv[1]); print("%s %s: parameters PyTorch %d, hpctrain %d (layer by layer equal)" % (d["model"], d["input"], d["params"], d["hpctrain_params"]))' "$check"

rows=$tmp/rows.jsonl
: >"$rows"
pt_step() { # threads
	$py bench/pytorch_models.py --model "$model" --input "$input" --threads "$1" --steps "$steps" >"$tmp/pt.json"
}
hp_step() { # threads
	./hpctrain bench step -model "$model" -input "$input" -threads "$1" -steps "$steps" -json "$tmp/hp.json" >/dev/null
}
pt_ddp() {
	scripts/mpirun.sh -np 2 $py bench/pytorch_ddp.py --model "$model" --threads 1 --limit "$limit" >"$tmp/pt.json"
}
hp_ddp() {
	rm -f "$tmp/m.jsonl"
	scripts/mpirun.sh -np 2 ./hpctrain train -model "$model" -threads 1 -limit "$limit" -test-limit 1000 \
		-progress 0 -metrics "$tmp/m.jsonl" >/dev/null
	grep '"final":true' "$tmp/m.jsonl" >"$tmp/hp.json"
}
row() { # round config: appends the row from pt.json and hp.json and prints it
	$py - "$1" "$2" "$tmp/pt.json" "$tmp/hp.json" >>"$rows" <<'PY'
import json, sys
r, cfg, pt, hp = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
row = {"round": int(r), "config": cfg, "pytorch_sps": pt["samples_per_second"], "hpctrain_sps": hp["samples_per_second"],
       "pytorch_step_ms_median": pt.get("step_ms_median"), "hpctrain_step_ms_median": hp.get("step_ms_median"),
       "ratio": hp["samples_per_second"] / pt["samples_per_second"]}
if cfg == "2x1":  # throughput over the training loop on both sides, no step times
    row["pytorch_ddp_step_ms_median"] = row.pop("pytorch_step_ms_median")
    row["hpctrain_step_ms_median"] = None
if "sgemm_2048_gflops_same_run" in hp:
    row["hpctrain_sgemm_2048_gflops"] = hp["sgemm_2048_gflops_same_run"]
print(json.dumps(row))
PY
	tail -n 1 "$rows" | $py -c 'import json,sys; d=json.load(sys.stdin); ms=lambda v: "-" if v is None else "%.1f" % v; print("%-6d %-7s %10s %12.0f %10s %12.0f %7.2f" % (d["round"], d["config"], ms(d.get("pytorch_step_ms_median")), d["pytorch_sps"], ms(d["hpctrain_step_ms_median"]), d["hpctrain_sps"], d["ratio"]))'
}

echo "model $model, input $input, batch 64, $steps timed steps (median), threads in one process; 2x1: $limit samples, 2 ranks x 1 thread"
printf '%-6s %-7s %10s %12s %10s %12s %7s\n' round config pt_ms pytorch_sps hp_ms hpctrain_sps ratio
for r in $(seq "$rounds"); do
	for t in 1 2; do
		if [ $((r % 2)) = 1 ]; then pt_step "$t"; hp_step "$t"; else hp_step "$t"; pt_step "$t"; fi
		row "$r" "1x$t"
	done
	if [ "$ddp" = 1 ]; then
		if [ $((r % 2)) = 1 ]; then pt_ddp; hp_ddp; else hp_ddp; pt_ddp; fi
		row "$r" "2x1"
	fi
done

$py - "$rows" "$json" "$model" "$input" "$steps" "$limit" "$check" <<'PY'
import json, platform, statistics, subprocess, sys
rows_path, out, model, inp, steps, limit, check = sys.argv[1:8]
rows = [json.loads(l) for l in open(rows_path)]
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
summary = []
print("median over rounds (samples/s):")
print("%-7s %12s %12s %7s %s" % ("config", "pytorch", "hpctrain", "ratio", "per-round ratios"))
for cfg in dict.fromkeys(r["config"] for r in rows):
    rs = [r for r in rows if r["config"] == cfg]
    pt = statistics.median(r["pytorch_sps"] for r in rs)
    hp = statistics.median(r["hpctrain_sps"] for r in rs)
    ratios = [round(r["ratio"], 3) for r in rs]
    summary.append({"config": cfg, "pytorch_sps_median": pt, "hpctrain_sps_median": hp, "ratio_of_medians": hp / pt, "ratios": ratios})
    print("%-7s %12.0f %12.0f %7.2f %s" % (cfg, pt, hp, hp / pt, " / ".join("%.2f" % x for x in ratios)))
c = json.loads(check)
doc = {"model": model, "input": inp, "batch": 64, "steps": int(steps), "ddp_limit": int(limit),
       "params": {"pytorch": c["params"], "hpctrain": c["hpctrain_params"]}, "pytorch": c["framework"],
       "cpu": sh("lscpu | sed -n 's/^Model name: *//p'"), "commit": sh("git rev-parse --short HEAD"),
       "statistic": "1xT rows: 64 / median step (both sides); 2x1 rows: samples / training-loop seconds (both sides)",
       "rows": rows, "summary": summary}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print("wrote", out)
PY
