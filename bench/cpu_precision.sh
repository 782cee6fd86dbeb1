#!/usr/bin/env bash
# CPU kernels and precision, measured side by side in one run: the figures
# of README's "CPU kernels and bf16" tables, written to
# out/cpu_precision.json for bench/readme_tables.py.
#
#   bench/cpu_precision.sh [ROUNDS]        (default 3; or ROUNDS=N in the environment)
#
# 1. Step rate: for each MODEL (MODELS, default "cnn resnet8") and 1 and 2
#    threads, ROUNDS rounds of `hpctrain bench step -kernels
#    blas,dnnl,dnnl-bf16` (the three kernels alternate inside each run, and
#    each run measures OpenBLAS's SGEMM 2048^3 with as many threads);
#    samples/s = batch / median step, the median over rounds reported.
# 2. Accuracy: `hpctrain train` with 2 ranks x 1 thread on all of
#    Fashion-MNIST for EPOCHS (5) epochs, fp32 and bf16 with the same seed,
#    for each seed of SEEDS (default "1 2 3"); the test accuracy after
#    epoch 1 and after the last, and the end-to-end samples/s (samples /
#    training-loop seconds). One seed's fp32 and bf16 runs differ by
#    rounding and by the chaos it sets off; the spread of fp32 over seeds
#    shows how large that alone is. A third run per seed and model, fp32
#    on the blas kernels (im2col and OpenBLAS: the same arithmetic as
#    oneDNN's in other orders and, on 3x3 layers, without Winograd), shows
#    how far fp32's rounding alone moves the same seed: the floor under
#    any bf16 - fp32 difference. FLOOR=0 skips that run; ACCURACY=0 skips
#    all of part 2.
#    SCHEDULE=cosine (any -schedule) trains each arm to the end of that
#    schedule instead: one run per epoch count of EPOCHS_LIST (default "1
#    EPOCHS"), each annealed over its own length, and compares the final
#    accuracies: what a finished training delivers, not a snapshot at full
#    learning rate. ROUNDS 0 skips part 1. Written to
#    out/cpu_precision_SCHEDULE.json unless JSON says otherwise.
# 3. End to end, in rounds: E2E_ROUNDS (default 0: skipped) rounds, each
#    one fp32 and one bf16 `hpctrain train` of every model, alternating,
#    2 ranks x 1 thread, 1 epoch of the first E2E_LIMIT (25600) training
#    samples (the issue's measurement), seed 1; samples/s as in part 2. A
#    single run moves 5-10% with this shared VM, so one pair's ratio swings
#    by 0.1 and more; the median over rounds of each arm, and their ratio,
#    are the figures to compare. `ROUNDS=0 ACCURACY=0 E2E_ROUNDS=7
#    JSON=out/cpu_precision_e2e.json bench/cpu_precision.sh 0` runs this part
#    alone.
# Needs ./hpctrain (make build) and mpirun.
set -euo pipefail
# The commit the run measures is the one checked out when it starts; a
# commit or an edit during the run marks the JSON dirty.
export START_REV=$(git rev-parse --short HEAD 2>/dev/null || true)
export START_DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null || true)
rounds=${1:-${ROUNDS:-3}}
models=${MODELS:-cnn resnet8}
epochs=${EPOCHS:-5}
seeds=${SEEDS:-1 2 3}
accuracy=${ACCURACY:-1}
floor=${FLOOR:-1}
e2e_rounds=${E2E_ROUNDS:-0}
e2e_limit=${E2E_LIMIT:-25600}
schedule=${SCHEDULE:-}
epoch_list=${EPOCHS_LIST:-1 $epochs}
[ -n "$schedule" ] || epoch_list=$epochs
py=/usr/bin/python3
cd "$(dirname "$0")/.."
[ -x ./hpctrain ] || { echo "cpu_precision: build ./hpctrain first (make build)" >&2; exit 1; }
mkdir -p out
json=${JSON:-out/cpu_precision${schedule:+_$schedule}.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/steps.jsonl"
: >"$tmp/acc.jsonl"
: >"$tmp/e2e.jsonl"
cmds=()

for m in $models; do
	for t in 1 2; do
		for r in $(seq "$rounds"); do
			c="./hpctrain bench step -model $m -threads $t -steps 40 -kernels blas,dnnl,dnnl-bf16"
			[ "$r" = 1 ] && cmds+=("$c")
			echo "round $r: $c" >&2
			$c -json "$tmp/s.json" >/dev/null
			$py -c 'import json,sys; [print(json.dumps(dict(r, round=int(sys.argv[2])))) for r in json.load(open(sys.argv[1]))]' "$tmp/s.json" "$r" >>"$tmp/steps.jsonl"
		done
	done
done

if [ "$accuracy" = 1 ]; then
	for seed in $seeds; do
		for m in $models; do
			arms="fp32 bf16"
			[ "$floor" != 1 ] || arms+=" fp32-blas"
			for e in $epoch_list; do
				for arm in $arms; do
					p=${arm%-blas} kern=dnnl
					[ "$arm" = "$p" ] || kern=blas
					c="scripts/mpirun.sh -np 2 ./hpctrain train -model $m -device cpu -threads 1 -precision $p -epochs $e -seed $seed -progress 0"
					[ -z "$schedule" ] || c+=" -schedule $schedule"
					[ "$kern" = dnnl ] || c+=" -cpu-kernels blas"
					cmds+=("$c")
					echo "$c" >&2
					rm -f "$tmp/m.jsonl"
					$c -metrics "$tmp/m.jsonl" >/dev/null
					$py -c 'import json,sys
ls=[json.loads(l) for l in open(sys.argv[1]) if not json.loads(l).get("final")]
print(json.dumps({"model":sys.argv[2],"precision":sys.argv[3],"kernels":sys.argv[5],"seed":int(sys.argv[4]),"epochs":len(ls),
  "schedule":sys.argv[6] or "constant",
  "accuracy":[l["test_accuracy"] for l in ls],"samples_per_second":[l["samples_per_second"] for l in ls]}))' "$tmp/m.jsonl" "$m" "$p" "$seed" "$kern" "$schedule" >>"$tmp/acc.jsonl"
				done
			done
		done
	done
fi

for r in $(seq "$e2e_rounds"); do
	for m in $models; do
		for p in fp32 bf16; do
			c="scripts/mpirun.sh -np 2 ./hpctrain train -model $m -device cpu -threads 1 -precision $p -epochs 1 -limit $e2e_limit -test-limit 1000 -seed 1 -progress 0"
			[ "$r" = 1 ] && cmds+=("$c")
			echo "round $r: $c" >&2
			rm -f "$tmp/m.jsonl"
			$c -metrics "$tmp/m.jsonl" >/dev/null
			$py -c 'import json,sys
ls=[json.loads(l) for l in open(sys.argv[1]) if not json.loads(l).get("final")]
print(json.dumps({"model":sys.argv[2],"precision":sys.argv[3],"round":int(sys.argv[4]),"samples_per_second":ls[-1]["samples_per_second"]}))' "$tmp/m.jsonl" "$m" "$p" "$r" >>"$tmp/e2e.jsonl"
		done
	done
done

cmdfile=$tmp/cmds
printf '%s\n' "${cmds[@]}" >"$cmdfile"
$py - "$tmp/steps.jsonl" "$tmp/acc.jsonl" "$cmdfile" "$json" "$tmp/e2e.jsonl" <<'PY'
import json, os, statistics, subprocess, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
acc = [json.loads(l) for l in open(sys.argv[2])]
cmds = open(sys.argv[3]).read().splitlines()
e2e = [json.loads(l) for l in open(sys.argv[5])]
e2e_summary = []
for m in dict.fromkeys(r["model"] for r in e2e):
    arm = {p: [r["samples_per_second"] for r in e2e if r["model"] == m and r["precision"] == p] for p in ("fp32", "bf16")}
    pairs = [b / f for f, b in zip(arm["fp32"], arm["bf16"])]
    e2e_summary.append({"model": m, "rounds": len(pairs),
                        "fp32_median": statistics.median(arm["fp32"]), "bf16_median": statistics.median(arm["bf16"]),
                        "ratio_of_medians": statistics.median(arm["bf16"]) / statistics.median(arm["fp32"]),
                        "per_round_ratio": pairs})
def sh(c):
    return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
summary = []
for key in dict.fromkeys((s["model"], s["threads"], s["kernels"]) for s in steps):
    rs = [s for s in steps if (s["model"], s["threads"], s["kernels"]) == key]
    summary.append({"model": key[0], "threads": key[1], "kernels": key[2],
                    "samples_per_second_median": statistics.median(r["samples_per_second"] for r in rs),
                    "fraction_of_sgemm_median": statistics.median(r["fraction_of_sgemm_rate"] for r in rs),
                    "sgemm_gflops_median": statistics.median(r["sgemm_2048_gflops_same_run"] for r in rs),
                    "fraction_of_peak_median": statistics.median(r.get("fraction_of_peak", 0) for r in rs),
                    "peak_gflops_median": statistics.median(r.get("peak_gflops_same_run", 0) for r in rs),
                    "per_round_sps": [round(r["samples_per_second"]) for r in rs]})
flags = open("/proc/cpuinfo").read().split()
doc = {"kind": "cpu_precision",
       "cpu": sh("lscpu | sed -n 's/^Model name: *//p'"), "cpus": int(sh("nproc") or 0),
       "flags": {f: f in flags for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")},
       "dnnl_isa": sh("./hpctrain topo 2>/dev/null | sed -n 's/^cpu kernels: //p' | head -1"),
       "commit": os.environ.get("START_REV") or sh("git rev-parse --short HEAD"),
       "dirty": bool(os.environ.get("START_DIRTY") or sh("git status --porcelain -uno")
                     or sh("git rev-parse --short HEAD") != os.environ.get("START_REV")),
       "schedule": os.environ.get("SCHEDULE") or "constant",
       "statistic": "step rows: batch / median step over 40 steps, median over rounds; accuracy rows: test accuracy after epochs 1 and last, per seed (fp32, bf16 and fp32 on the blas kernels with the same seed), samples/s = the run's samples / training-loop seconds (its last metrics line); end-to-end rounds: the same samples/s, median over rounds per arm, bf16 / fp32 = the ratio of the two medians"
                    + ("; each run trained to the end of its own %s learning-rate schedule, one run per epoch count" % os.environ["SCHEDULE"] if os.environ.get("SCHEDULE") else ""),
       "commands": cmds, "steps": steps, "step_summary": summary, "accuracy": acc,
       "e2e": e2e, "e2e_summary": e2e_summary}
json.dump(doc, open(sys.argv[4], "w"), indent=2)
print("wrote", sys.argv[4])
PY
