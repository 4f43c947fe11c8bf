#!/bin/bash
# Chapter 9 on a GPU, in one call: execute the chapter and the solutions (outputs, code-hash stamp,
# benchmark records), then the chapter's kernel tests and graders (mutants refused, the slow variant
# timed), and pack what changed into $OUT/r.tar. Run from the repository root.
export CUDL_BACKEND=gpu
start=$SECONDS
python3 -m cudl.nbtools execute chapters/09-training.ipynb solutions/09-training.ipynb 2>&1 | tail -40
echo "notebooks: $((SECONDS - start)) s"
python3 - <<'PY'
import json
nb = json.load(open("chapters/09-training.ipynb"))
for c in nb["cells"]:
    for o in c.get("outputs", []):
        if o.get("name") == "stdout":
            print("".join(o["text"])[:1500])
PY
python3 -m pytest -q -x tests/kernels/test_09_training.py 2>&1 | tail -2
python3 -m pytest -q tests/test_graders.py -k "smoothed or sgd_nesterov or bias_grad_tall" 2>&1 | tail -2
python3 -c "
import cudl
src = open('tests/gpu/slow_variants/09-training/bias_grad_tall__one_block_per_columns.cu').read()
print(cudl.grade.run('bias_grad_tall', src, quiet=True).line[:300])"
echo "total: $((SECONDS - start)) s"
tar cf "$OUT/r.tar" chapters/09-training.ipynb solutions/09-training.ipynb exercises/09-training.ipynb \
    benchmarks/*.json
