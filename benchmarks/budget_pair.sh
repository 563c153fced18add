#!/usr/bin/env bash
# Two budgeted English-French runs side by side, one core and one TensorFlow thread each,
# so that both see the same machine (docs/budget.md, "The recipe's defaults").
#
#   bash benchmarks/budget_pair.sh DATA OUT BUDGET NAME_A "ARGS_A" NAME_B "ARGS_B"
#   bash benchmarks/budget_pair.sh ../shared/data/fra-eng runs/cmp 20m \
#       base20 "" vocab4k20 "--vocab-size 4000"
#
# Each run writes OUT/NAME/ (metrics.json: BLEU/chrF on dev.txt) and OUT/NAME.log.
set -u
if [ "$#" -ne 7 ]; then
  echo "usage: $0 DATA OUT BUDGET NAME_A ARGS_A NAME_B ARGS_B" >&2
  exit 2
fi
data=$1 out=$2 budget=$3
mkdir -p "$out"
run() {  # core name args
  local core=$1 name=$2 args=$3
  # shellcheck disable=SC2086  # ARGS are options, split on purpose
  TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 \
    nice -n 5 taskset -c "$core" python -m keras_attn.cli train --task tatoeba \
    --data "$data" --time-budget "$budget" --no-export --output "$out/$name" $args \
    > "$out/$name.log" 2>&1
  echo "$name: exit $?"
}
run 0 "$4" "$5" &
run 1 "$6" "$7" &
wait
