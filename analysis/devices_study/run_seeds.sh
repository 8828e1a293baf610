#!/bin/sh
# Issue 19 point 5: the devices study on seeds 0, 1, 2, every policy evaluated at the same
# simulated instants (every 60 s: eval.every_seconds), then reduced by collect_seeds.py.
#   sh analysis/devices_study/run_seeds.sh runs/devices_study_seeds
# Each scenario is 3 variants x 3 seeds = 9 trained runs (1,000 clients, MLP); run alone, the
# whole takes a CPU-hour or more on 2 cores (not measured here: the machine was shared).
set -e
OUT=${1:-runs/devices_study_seeds}
JOBS=${JOBS:-2}
for sc in devices_mlp devices_mlp_slownet; do
  python -m fedsim compare "scenarios/$sc.yaml" --seeds 0,1,2 --set eval.every_seconds=60 \
      --jobs "$JOBS" --out "$OUT/$sc" --quiet
done
python analysis/devices_study/collect_seeds.py "$OUT"
