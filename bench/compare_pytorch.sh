#!/usr/bin/env bash
# hpctrain and PyTorch on the same network, batch, cores and precision,
# alternating in one run (shared machines are noisy: compare the ratio, not
# the absolutes).
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
# 2 ranks x 1 thread (the "2x1" rows): `hpctrain train` against PyTorch DDP
# (gloo, bench/pytorch_ddp.py), batch 64 per rank, each rank pinned to a
# core, the first LIMIT samples, one epoch; there samples/s is both sides'
# samples / training-loop seconds (hpctrain's metrics statistic; it has no
# per-step times), i.e. end-to-end training throughput. DDP=0 skips it.
#
# Environment:
#   PRECISION  fp32 (default) or bf16. bf16 is CPU mixed precision on both
#              sides: hpctrain `bench step -kernels dnnl-bf16` and `train
#              -precision bf16` (bf16 operands in convolutions and linear
#              layers, fp32 accumulation, master weights and the rest), PyTorch
#              torch.autocast("cpu", dtype=torch.bfloat16) around forward and
#              loss (--precision bf16; conv and linear in bf16, fp32 master
#              weights; autocast leaves batch norm, ReLU and pooling in the
#              dtype they get, bf16). Needs AVX512-BF16 or AMX-BF16 to be fast.
#   KERNELS    hpctrain's CPU kernels: empty (default: hpctrain's own default),
#              dnnl or blas (today's im2col + OpenBLAS); passed as -kernels to
#              bench step and -cpu-kernels to train. blas is fp32 only.
#   ISA        caps the instruction set on both sides, to see what a CPU
#              without AVX-512 (or without bf16) would get: avx2 or
#              avx512_core. It sets DNNL_MAX_CPU_ISA for oneDNN, which both
#              sides load (Debian's torch links the system's libdnnl.so.2, as
#              hpctrain does), and with avx2 OPENBLAS_CORETYPE=Haswell for
#              OpenBLAS (PyTorch's fp32 linear layers, hpctrain's SGEMM
#              reference). hpctrain's own C kernels go no further than AVX2
#              but for the optimizer's memory-bound AVX-512 clone; PyTorch's
#              own (ATen) report their level as pytorch_build.cpu_capability.
#              The JSON records the cap and the ISA oneDNN ran on each side.
#              fp32 only (bf16 needs avx512_core_bf16).
#   LIMIT      samples of the 2x1 rows (default 12800). The issue's figure
#              (#16) is LIMIT=25600: 2 x 1 threads, batch 64 per rank, 25,600
#              samples, 1 epoch, end-to-end train samples/s.
#   STEPS      timed steps of the single-process rows (default 40).
#   DDP        0 skips the 2x1 rows.
#   HPCTRAIN   the binary (default ./hpctrain).
#   JSON       where to write the JSON instead (e.g. for a trial run that
#              must not replace out/compare_MODEL.json).
#
# Prints a row per round and configuration, then the median of each side
# over the rounds and the ratio of the medians, and writes it all as JSON
# (precision, kernels, machine, commit, the exact commands, the statistic)
# to out/compare_MODEL[_INPUT][_KERNELS][_bf16].json: _INPUT when INPUT is
# not 28x28x1, _KERNELS when KERNELS is set, _bf16 when PRECISION=bf16.
# bench/readme_tables.py renders such files into README.md.
# Needs python3-torch (scripts/setup.sh --torch) and ./hpctrain (make build).
#   PRECISION=bf16 LIMIT=25600 bench/compare_pytorch.sh cnn 3
#   KERNELS=blas bench/compare_pytorch.sh resnet8 3
#   ISA=avx2 LIMIT=25600 bench/compare_pytorch.sh cnn 5
set -euo pipefail
model=${1:-cnn}
rounds=${2:-3}
input=${3:-28x28x1}
steps=${STEPS:-40}
limit=${LIMIT:-12800}
precision=${PRECISION:-fp32}
kernels=${KERNELS:-}
isa=${ISA:-}
py=/usr/bin/python3
cd "$(dirname "$0")/.."
hp=${HPCTRAIN:-./hpctrain}
case $precision in fp32 | bf16) ;; *) echo "compare: PRECISION=$precision: want fp32 or bf16" >&2; exit 2 ;; esac
case $kernels in '' | dnnl | blas) ;; *) echo "compare: KERNELS=$kernels: want dnnl, blas or empty" >&2; exit 2 ;; esac
if [ "$precision" = bf16 ] && [ "$kernels" = blas ]; then
	echo "compare: PRECISION=bf16 needs the oneDNN kernels (KERNELS=dnnl or empty): OpenBLAS has no bf16 GEMM" >&2
	exit 2
fi
case $isa in
'') ;;
avx2) export DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell ;;
avx512_core) export DNNL_MAX_CPU_ISA=AVX512_CORE ;;
*) echo "compare: ISA=$isa: want avx2, avx512_core or empty" >&2; exit 2 ;;
esac
if [ -n "$isa" ] && [ "$precision" = bf16 ]; then
	echo "compare: ISA=$isa caps oneDNN below bf16's avx512_core_bf16: PRECISION=bf16 cannot run" >&2
	exit 2
fi
$py -c 'import torch' 2>/dev/null || { echo "compare: python3-torch missing (scripts/setup.sh --torch)" >&2; exit 1; }
[ -x "$hp" ] || { echo "compare: build $hp first (make build)" >&2; exit 1; }
# The commit the run measures is the one checked out when it starts; a
# commit or an edit during the run marks the JSON dirty.
export START_REV=$(git rev-parse --short HEAD 2>/dev/null || true)
export START_DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null || true)

# hpctrain's flags for PRECISION and KERNELS: bench step, train; PyTorch's.
step_flags=() train_flags=() pt_flags=(--precision "$precision")
if [ "$precision" = bf16 ]; then
	step_flags=(-kernels dnnl-bf16)
	train_flags=(-precision bf16)
	[ -z "$kernels" ] || train_flags+=(-cpu-kernels "$kernels")
elif [ -n "$kernels" ]; then
	step_flags=(-kernels "$kernels")
	train_flags=(-cpu-kernels "$kernels")
fi
has_flags() { # command-words... -- flags...: stops when the binary's help lacks a flag
	local cmd=() help
	while [ "$1" != -- ]; do cmd+=("$1"); shift; done
	shift
	help=$("$hp" "${cmd[@]}" -h 2>&1 || true)
	for f; do
		grep -q -- "^ *$f " <<<"$help" || { echo "compare: $hp ${cmd[*]} has no $f flag (rebuild: make build)" >&2; exit 1; }
	done
}

mkdir -p out
json=out/compare_$model
[ "$input" = 28x28x1 ] || json+=_$input
[ -z "$kernels" ] || json+=_$kernels
[ -z "$isa" ] || json+=_$isa
[ "$precision" = fp32 ] || json+=_$precision
json+=.json
json=${JSON:-$json}
mkdir -p "$(dirname "$json")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ddp=${DDP:-1}
if [ "$input" != 28x28x1 ] || ! command -v mpirun >/dev/null; then ddp=0; fi
has_flags bench step -- "${step_flags[@]:0:1}"
[ "$ddp" != 1 ] || has_flags train -- "${train_flags[@]:0:1}" "${train_flags[@]:2:1}"
cmds=$tmp/commands.tsv
: >"$cmds"
logged() { # key command...: runs the command, recording its first use under key
	grep -q "^$1	" "$cmds" || printf '%s\t%s\n' "$1" "$(printf '%q ' "${@:2}" | sed "s|$tmp/|\$TMP/|g; s/ $//")" >>"$cmds"
	"${@:2}"
}

# The same network on both sides, or stop.
logged summary "$hp" summary -model "$model" -input "$input" -json >"$tmp/summary.json"
check=$(logged check $py bench/pytorch_models.py --model "$model" --input "$input" --check "$tmp/summary.json" --steps 0 "${pt_flags[@]}")
$py -c 'import json,sys; d=json.loads(sys.argv[1]); print("%s %s: parameters PyTorch %d, hpctrain %d (layer by layer equal)" % (d["model"], d["input"], d["params"], d["hpctrain_params"]))' "$check"

# The ISA oneDNN runs on each side: with ISA set, both must be at the cap.
hp_isa=$("$hp" topo 2>/dev/null | sed -n 's/.*oneDNN: \([a-z0-9_]*\).*/\1/p' | head -n 1)
pt_isa=$($py -c 'import json,sys; print((json.loads(sys.argv[1]).get("pytorch_build") or {}).get("onednn_isa"))' "$check")
if [ -n "$isa" ] && { [ "$hp_isa" != "$isa" ] || [ "$pt_isa" != "$isa" ]; }; then
	echo "compare: ISA=$isa, but oneDNN runs $hp_isa in hpctrain and $pt_isa in PyTorch" >&2
	exit 1
fi
# hpctrain's own C kernels follow the same cap (DNNL_MAX_CPU_ISA).
hp_own=$("$hp" topo 2>/dev/null | sed -n "s/.*hpctrain's own: \([a-z0-9_]*\).*/\1/p" | head -n 1)
if [ "$isa" = avx2 ] && [ "$hp_own" = avx512 ]; then
	echo "compare: ISA=avx2, but hpctrain's own kernels run avx512" >&2
	exit 1
fi
echo "oneDNN ISA: hpctrain ${hp_isa:-?} (its own kernels ${hp_own:-?}), PyTorch $pt_isa${isa:+ (capped: DNNL_MAX_CPU_ISA=$DNNL_MAX_CPU_ISA${OPENBLAS_CORETYPE:+ OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE})}"

rows=$tmp/rows.jsonl
: >"$rows"
pt_step() { # threads
	logged "pytorch 1x$1" $py bench/pytorch_models.py --model "$model" --input "$input" --threads "$1" --steps "$steps" "${pt_flags[@]}" >"$tmp/pt.json"
}
hp_step() { # threads
	logged "hpctrain 1x$1" "$hp" bench step -model "$model" -input "$input" -threads "$1" -steps "$steps" "${step_flags[@]}" -json "$tmp/hp.json" >/dev/null
}
pt_ddp() {
	logged "pytorch 2x1" scripts/mpirun.sh -np 2 $py bench/pytorch_ddp.py --model "$model" --threads 1 --batch 64 --epochs 1 --limit "$limit" \
		"${pt_flags[@]}" >"$tmp/pt.json"
}
hp_ddp() {
	rm -f "$tmp/m.jsonl"
	logged "hpctrain 2x1" scripts/mpirun.sh -np 2 "$hp" train -model "$model" -device cpu -threads 1 -batch 64 -epochs 1 -limit "$limit" -test-limit 1000 \
		-progress 0 "${train_flags[@]}" -metrics "$tmp/m.jsonl" >"$tmp/train.out"
	grep '"final":true' "$tmp/m.jsonl" >"$tmp/hp.json"
}
row() { # round config: appends the row from pt.json and hp.json (and train.out) and prints it
	$py - "$1" "$2" "$tmp/pt.json" "$tmp/hp.json" "$tmp/train.out" "$precision" >>"$rows" <<'PY'
import json, os, sys
r, cfg, pt, hp, train_out, precision = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), json.load(open(sys.argv[4])), sys.argv[5], sys.argv[6]
if isinstance(hp, list):  # bench step -json with a -kernels list writes a list: one kernel here
    hp = hp[0]
row = {"round": int(r), "config": cfg, "pytorch_sps": pt["samples_per_second"], "hpctrain_sps": hp["samples_per_second"],
       "pytorch_step_ms_median": pt.get("step_ms_median"), "hpctrain_step_ms_median": hp.get("step_ms_median"),
       "ratio": hp["samples_per_second"] / pt["samples_per_second"]}
if cfg == "2x1":  # throughput over the training loop on both sides, no step times
    row["pytorch_ddp_step_ms_median"] = row.pop("pytorch_step_ms_median")
    row["hpctrain_step_ms_median"] = None
    head = [l.strip() for l in open(train_out) if l.startswith("hpctrain: model")]
    row["hpctrain_startup"] = head[0] if head else None
    what = row["hpctrain_startup"] or ""
else:
    row["hpctrain_kernels"] = hp.get("kernels")
    what = hp.get("kernels") or ""
if "sgemm_2048_gflops_same_run" in hp:
    row["hpctrain_sgemm_2048_gflops"] = hp["sgemm_2048_gflops_same_run"]
row["pytorch_compute_dtypes"] = pt.get("compute_dtypes")
if precision == "bf16" and "bf16" not in what:
    sys.exit("compare: PRECISION=bf16, but hpctrain's %s run does not say bf16: %r" % (cfg, what))
if pt.get("precision", "fp32") != precision:
    sys.exit("compare: PRECISION=%s, but PyTorch's %s run says %s" % (precision, cfg, pt.get("precision")))
print(json.dumps(row))
PY
	tail -n 1 "$rows" | $py -c 'import json,sys; d=json.load(sys.stdin); ms=lambda v: "-" if v is None else "%.1f" % v; print("%-6d %-7s %10s %12.0f %10s %12.0f %7.2f" % (d["round"], d["config"], ms(d.get("pytorch_step_ms_median")), d["pytorch_sps"], ms(d["hpctrain_step_ms_median"]), d["hpctrain_sps"], d["ratio"]))'
}

echo "model $model, input $input, precision $precision, hpctrain kernels ${kernels:-default}, batch 64, $steps timed steps (median), threads in one process$([ "$ddp" = 1 ] && echo "; 2x1: $limit samples, 2 ranks x 1 thread, batch 64 per rank, 1 epoch")"
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

$py - "$rows" "$json" "$model" "$input" "$steps" "$limit" "$check" "$precision" "$kernels" "$cmds" "$ddp" "$hp" "$isa" "$hp_isa" "$hp_own" <<'PY'
import json, os, statistics, subprocess, sys
rows_path, out, model, inp, steps, limit, check, precision, kernels, cmds_path, ddp, hp, isa, hp_isa, hp_own = sys.argv[1:16]
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
    hp_sps = statistics.median(r["hpctrain_sps"] for r in rs)
    ratios = [round(r["ratio"], 3) for r in rs]
    summary.append({"config": cfg, "precision": precision, "pytorch_sps_median": pt, "hpctrain_sps_median": hp_sps,
                    "ratio_of_medians": hp_sps / pt, "ratios": ratios})
    print("%-7s %12.0f %12.0f %7.2f %s" % (cfg, pt, hp_sps, hp_sps / pt, " / ".join("%.2f" % x for x in ratios)))
c = json.loads(check)
flags = set(sh("lscpu | sed -n 's/^Flags: *//p'").split())
commands = {}
for l in open(cmds_path):
    k, v = l.rstrip("\n").split("\t", 1)
    commands.setdefault(k, v)
argv = "PRECISION=%s%s%s STEPS=%s LIMIT=%s DDP=%s%s bench/compare_pytorch.sh %s %s %s" % (
    precision, " KERNELS=" + kernels if kernels else "", " ISA=" + isa if isa else "", steps, limit, ddp,
    "" if hp == "./hpctrain" else " HPCTRAIN=" + hp,
    model, len(set(r["round"] for r in rows)), inp)
doc = {"model": model, "input": inp, "batch": 64, "steps": int(steps), "precision": precision,
       "hpctrain_kernels": kernels or "default",
       "isa_cap": {"isa": isa, "DNNL_MAX_CPU_ISA": os.environ.get("DNNL_MAX_CPU_ISA"),
                   "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")} if isa else None,
       "onednn_isa": {"hpctrain": hp_isa or None, "pytorch": (c.get("pytorch_build") or {}).get("onednn_isa")},
       "hpctrain_own_kernels_isa": hp_own or None,
       "precision_note": {"fp32": "fp32 throughout on both sides",
                          "bf16": "hpctrain: bf16 operands in convolutions and linear layers, fp32 accumulation, master weights "
                                  "and everything else fp32; PyTorch: torch.autocast('cpu', dtype=torch.bfloat16) around forward "
                                  "and loss (conv and linear in bf16, fp32 master weights and loss; batch norm, ReLU, pooling run "
                                  "in the bf16 they are given)"}[precision],
       "ddp": {"ran": ddp == "1", "ranks": 2, "threads_per_rank": 1, "batch_per_rank": 64, "limit": int(limit), "epochs": 1},
       "ddp_limit": int(limit),
       "params": {"pytorch": c["params"], "hpctrain": c["hpctrain_params"]}, "pytorch": c["framework"],
       "pytorch_build": c.get("pytorch_build"), "pytorch_compute_dtypes": c.get("compute_dtypes"),
       "cpu": sh("lscpu | sed -n 's/^Model name: *//p'"),
       "machine": {"cpu": sh("lscpu | sed -n 's/^Model name: *//p'"), "cpus_available": len(os.sched_getaffinity(0)),
                   "flags": {f: f in flags for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")}},
       "commit": os.environ.get("START_REV") or sh("git rev-parse --short HEAD"),
       "worktree_dirty": bool(os.environ.get("START_DIRTY") or sh("git status --porcelain --untracked-files=no")
                              or sh("git rev-parse --short HEAD") != os.environ.get("START_REV")),
       "hpctrain_binary": hp,
       "command": argv, "commands": commands,
       "statistic": "1xT rows: 64 / median step time, on both sides (hpctrain bench step, pytorch_models.py); "
                    "2x1 rows: samples trained by both ranks / training-loop seconds, on both sides (hpctrain's metrics "
                    "samples_per_second, pytorch_ddp.py); ratio = hpctrain / PyTorch",
       "rows": rows, "summary": summary}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print("wrote", out)
PY
