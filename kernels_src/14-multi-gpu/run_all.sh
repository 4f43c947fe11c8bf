#!/usr/bin/env bash
# Chapter 14's multi-GPU measurements, all in one go, on N GPUs of one machine (default: every GPU
# nvidia-smi lists). From the repository root, on a machine with CUDA, PyTorch and CuPy:
#
#     bash kernels_src/14-multi-gpu/run_all.sh            # all GPUs
#     bash kernels_src/14-multi-gpu/run_all.sh 2          # the first 2
#
# Results (JSON + the printed tables + the profiler trace) go to
# benchmarks/14-multi-gpu/<N>x-<gpu>/ (or the folder given as the second argument), which the
# chapter reads. Ray Train runs only where `import ray` works (pip install "ray[train]").
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1  # NVLink multicast stays off
here=$(dirname "$0")
n=${1:-$(nvidia-smi -L | wc -l)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
out=${2:-benchmarks/14-multi-gpu/${n}x-${gpu}}
mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1)))
run() { local name=$1; shift; echo "== $name: $*"; "$@" 2>&1 | tee "$out/$name.txt"; }
launch=(python3 -m torch.distributed.run --standalone --nproc-per-node="$n")

run p2p python3 "$here/p2p_matrix.py" --json "$out/p2p.json"
run nccl "${launch[@]}" "$here/nccl_bench.py" --json "$out/nccl.json"
run ring "${launch[@]}" "$here/ring_allreduce.py" --slices 1 0 --transport nccl peer \
    --json "$out/ring.json"
run ddp "${launch[@]}" "$here/ddp_train.py" --trace "$out/ddp_trace.json" --json "$out/ddp.json"
run ddp_one_bucket "${launch[@]}" "$here/ddp_train.py" --bucket-cap-mb 1000 --no-baseline \
    --json "$out/ddp_one_bucket.json"
run oneshot "${launch[@]}" "$here/oneshot_allreduce.py" --json "$out/oneshot.json"
if python3 -c "import ray.train" 2>/dev/null; then
    run ray python3 "$here/ray_train.py" --workers "$n" --json "$out/ray.json"
else
    echo "== ray: skipped (pip install 'ray[train]')"
fi
echo "== results in $out"
