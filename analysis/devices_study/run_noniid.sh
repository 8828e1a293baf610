#!/bin/sh
# Issue 19 point 5, the bias the study names: the slow-network MLP on NON-IID data (FedProx's
# Synthetic(1, 1): every client its own distribution). Windows drop the slowest uplinks every
# round, so their data never reach the model; unheard.py compares the final model's accuracy on
# the devices a run heard from and on those it never heard from.
#   sh analysis/devices_study/run_noniid.sh runs/devices_study_noniid
set -e
OUT=${1:-runs/devices_study_noniid}
JOBS=${JOBS:-2}
python -m fedsim compare scenarios/devices_mlp_slownet.yaml --variants window,wait --seeds 0 \
    --set data.iid=false --set eval.every_seconds=60 --jobs "$JOBS" --out "$OUT" --quiet
python analysis/devices_study/unheard.py "$OUT"/fednova-window/seed0 "$OUT"/fedavg-wait/seed0
