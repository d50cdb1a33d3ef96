#!/usr/bin/env bash
# A venv with the baselines' Python stack at the versions compare_cpu.sh was measured with:
# torch 2.5.1 (the CPU wheel where TORCH_INDEX answers, else the default index's 2.5.1, which
# carries CUDA libraries but runs on the CPU all the same), fbgemm-gpu-cpu 1.0.0 (built against
# torch 2.5) and torchrec 1.0.0 with its dependencies but one: it names the GPU package fbgemm-gpu,
# whose newest release (built against a newer torch) would overwrite fbgemm-gpu-cpu's module.
#   bench/baselines/setup_venv.sh            venv in $VENV (default /work/.venv-torchrec)
#   PYTHON=$VENV/bin/python bench/baselines/compare_cpu.sh
# Environment: VENV, PYTHON_BASE (the python that makes the venv, default python3), TORCH_INDEX
# (an index with the +cpu torch wheels; empty: skip it).
set -euo pipefail
venv=${VENV:-/work/.venv-torchrec}
torch_index=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
# torchrec 1.0.0's requirements less fbgemm-gpu.
torchrec_deps=(torchmetrics==1.0.3 tqdm pyre-extensions iopath numpy)

[[ -x $venv/bin/python ]] || "${PYTHON_BASE:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)
# Torch first and alone, so that fbgemm and torchrec resolve against it instead of a newer one.
if [[ -n $torch_index ]] && "${pip[@]}" --index-url "$torch_index" torch==2.5.1+cpu; then
    echo "torch 2.5.1+cpu from $torch_index"
else
    echo "torch 2.5.1+cpu not found${torch_index:+ at $torch_index}: torch==2.5.1 from the default index" >&2
    "${pip[@]}" torch==2.5.1
fi
"$venv/bin/python" -m pip uninstall -y fbgemm-gpu 2>/dev/null || true
"${pip[@]}" --force-reinstall --no-deps fbgemm-gpu-cpu==1.0.0
"${pip[@]}" torch==2.5.1 "${torchrec_deps[@]}"
"${pip[@]}" --no-deps torchrec==1.0.0
"$venv/bin/python" -c 'import torch, torchrec, fbgemm_gpu
print("torch", torch.__version__, "| torchrec", getattr(torchrec, "__version__", "?"),
      "| fbgemm_gpu", getattr(fbgemm_gpu, "__version__", "?"))'
