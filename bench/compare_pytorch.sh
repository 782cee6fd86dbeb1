#!/usr/bin/env bash
# hpctrain and PyTorch on the same model, batch and cores, side by side in
# one run (shared machines are noisy: compare the ratio, not the absolutes).
#   bench/compare_pytorch.sh [cnn|mlp] [rounds]
# Needs python3-torch (scripts/setup.sh --torch) and ./hpctrain (make build).
set -euo pipefail
model=${1:-cnn}
rounds=${2:-3}
cd "$(dirname "$0")/.."
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "compare: python3-torch missing (scripts/setup.sh --torch)" >&2; exit 1; }
[ -x ./hpctrain ] || { echo "compare: build ./hpctrain first (make build)" >&2; exit 1; }
printf '%-6s %-8s %8s %14s %14s %7s\n' round threads model pytorch_sps hpctrain_sps ratio
for r in $(seq "$rounds"); do
	for t in 1 2; do
		pt=$(/usr/bin/python3 bench/pytorch_cnn.py --model "$model" --threads "$t" --steps 40 | sed 's/.*"samples_per_second": \([0-9.]*\).*/\1/')
		hp=$(./hpctrain bench step -model "$model" -threads "$t" -steps 40 | sed -n 1p | sed 's/.*: \([0-9]*\) samples\/s.*/\1/')
		awk -v r="$r" -v t="$t" -v m="$model" -v pt="$pt" -v hp="$hp" 'BEGIN { printf "%-6s %-8s %8s %14.0f %14.0f %7.2f\n", r, t, m, pt, hp, hp / pt }'
	done
done
