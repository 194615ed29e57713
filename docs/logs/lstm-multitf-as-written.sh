#!/bin/bash
# configs/lstm-multitf.yaml's header commands as written (mpirun -np 2 --oversubscribe on this
# 2-core machine, as the header allows), stopped with SIGUSR1 after two progress lines.
export PATH=/work/wt-28/build:$PATH OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/multitf-XXXX); cd $work; ln -s /work/wt-28/configs configs; mkdir data
echo "\$ cd $work   # configs -> the checkout's configs/"
echo "\$ megabatch data synth-series --out data/multitf.h5 --rows 400000 --features 128 --streams m1:1,m5:5,m15:15,h1:60,h4:240"
megabatch data synth-series --out data/multitf.h5 --rows 400000 --features 128 --streams m1:1,m5:5,m15:15,h1:60,h4:240 2>&1
echo "exit $?"
echo "\$ mpirun -np 2 --oversubscribe megabatch train --config configs/lstm-multitf.yaml train.global_batch=64 train.precision=fp32 train.eval_batches=20"
mpirun -np 2 --oversubscribe megabatch train --config configs/lstm-multitf.yaml train.global_batch=64 train.precision=fp32 train.eval_batches=20 > train.out 2>&1 &
pid=$!
start=$(date +%s)
while kill -0 $pid 2>/dev/null; do
  n=$(grep -c "\] info: train: " train.out)
  if [ "$n" -ge 2 ] || [ $(( $(date +%s) - start )) -ge 170 ]; then
    echo "# $(date -u +%H:%M:%S): sending SIGUSR1 to mpirun after $(( $(date +%s) - start )) s ($n progress lines)" >> train.out
    kill -USR1 $pid; break
  fi
  sleep 2
done
wait $pid; code=$?
cat train.out
echo "exit $code"
rm -rf $work
