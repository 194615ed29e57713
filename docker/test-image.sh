#!/usr/bin/env bash
# The image's test stage (docker/Dockerfile, target test): run as a RUN step because a container
# runtime is not always at hand where images are built (scripts/image.sh builds with podman in
# a chroot). Proves, inside the runtime image: megabatch --version and --help; the demo data;
# the demo trained for 300 steps by `megabatch-launch -n 2` (mpirun -np 2, as root); and the
# Vertex AI mapping with a stand-in /gcs folder: AIP_CHECKPOINT_DIR=gs://... -> run.dir under
# /gcs (checkpoints/latest there, no *.tmp left), AIP_MODEL_DIR=gs://... -> the final model there.
set -euo pipefail
# Open MPI's shared memory and TCP transports only: a build sandbox has no RDMA devices, and
# UCX's probing of them fails or warns there (the same settings as tests/CMakeLists.txt).
# megabatch-launch passes every OMPI_* variable on, so users tune a real machine the same way.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_osc=^ucx
say() { echo "test-image.sh: $*"; }
start=$SECONDS
megabatch --version
megabatch --help >/tmp/help.txt
grep -q "usage: megabatch COMMAND" /tmp/help.txt || { cat /tmp/help.txt; say "megabatch --help printed no usage"; exit 1; }
cd /tmp
megabatch data synth-series --out /tmp/demo.h5
say "training the demo: megabatch-launch -n 2 (300 steps)"
megabatch-launch -n 2 train --config /opt/megabatch/configs/demo.yaml data.path=/tmp/demo.h5 \
  run.dir=/tmp/run train.max_steps=300 train.eval_every=100 run.checkpoint_every=100 train.threads=1
latest=$(cat /tmp/run/checkpoints/latest)
[[ $latest == step-00000300.h5 ]] || { say "expected the step-300 checkpoint, latest is '$latest'"; exit 1; }
tail -n 1 /tmp/run/metrics.jsonl
megabatch eval --checkpoint /tmp/run --split test

say "the Vertex AI mapping, with a stand-in /gcs"
mkdir -p /gcs/megabatch-test-bucket
AIP_CHECKPOINT_DIR=gs://megabatch-test-bucket/job-1/checkpoints/ AIP_MODEL_DIR=gs://megabatch-test-bucket/job-1/model \
  megabatch-launch -n 2 train --config /opt/megabatch/configs/demo.yaml data.path=/tmp/demo.h5 \
  train.max_steps=40 train.eval_every=0 run.checkpoint_every=20 train.threads=1 | tee /tmp/vertex.log
run=/gcs/megabatch-test-bucket/job-1/checkpoints
grep -q "run.dir=$run" /tmp/vertex.log || { say "AIP_CHECKPOINT_DIR was not mapped to run.dir=$run"; exit 1; }
[[ $(cat "$run/checkpoints/latest") == step-00000040.h5 ]] || { say "no step-40 checkpoint under $run"; exit 1; }
model=/gcs/megabatch-test-bucket/job-1/model/checkpoint.h5
megabatch inspect "$model" | grep -q "step 40" || { megabatch inspect "$model"; say "$model is not the step-40 model"; exit 1; }
left=$(find /gcs \( -name '*.tmp' -o -name '*.partial' \) -print)
[[ -z $left ]] || { say "files left half-written: $left"; exit 1; }
say "a resubmitted job resumes from AIP_CHECKPOINT_DIR"
AIP_CHECKPOINT_DIR=gs://megabatch-test-bucket/job-1/checkpoints megabatch-launch -n 2 train \
  --config /opt/megabatch/configs/demo.yaml data.path=/tmp/demo.h5 train.max_steps=60 train.eval_every=0 \
  run.checkpoint_every=20 train.threads=1 >/tmp/resume.log 2>&1 || { cat /tmp/resume.log; exit 1; }
grep -qi "resum" /tmp/resume.log || { cat /tmp/resume.log; say "the second job did not resume"; exit 1; }
[[ $(cat "$run/checkpoints/latest") == step-00000060.h5 ]] || { say "the resumed job did not reach step 60"; exit 1; }
rm -rf /gcs /tmp/run /tmp/demo.h5 /tmp/*.log /tmp/help.txt
say "passed in $((SECONDS - start)) s"
