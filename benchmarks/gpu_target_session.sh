#!/usr/bin/env bash
# One GPU session (the device tool: minutes of device time, start included) that
# holds `--target gpu:<this GPU>` to the device: its own description beside
# memscope's, and every sample's deviceless figures beside its compile on the
# device, with the autotuner on and off (benchmarks/gpu_deviceless.py); beside
# them the GPU-marked tests and the suite; then, alone, `fit` at the device's
# limit on the transformer and the loss repeated (benchmarks/gpu_figures.py). Under the
# device image's own JAX and packages, memscope from this checkout; each stage
# under its own limit, so what finished comes back:
#
#     bash benchmarks/gpu_target_session.sh     # on the device; results in $OUT
#
# Wheels the image lacks (libcst and pyyaml, for `memscope fix`) travel in .whl/
# (ignored by git: carry it).
set -u
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
DEVICELESS_S="${DEVICELESS_S:-240}" GPU_TESTS_S="${GPU_TESTS_S:-150}"
FIGURES_S="${FIGURES_S:-200}" SUITE_S="${SUITE_S:-240}"

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --find-links .whl --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site libcst pyyaml && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
  || echo "editable install failed: memscope from PYTHONPATH" >>"$OUT/install.log"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, jax, jaxlib; print(sys.version); print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
  python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|jax-cuda|nvidia-cuda-nvcc|equinox|flax|optax|pytest|libcst)[ -]'
  command -v ptxas; nproc
} >"$OUT/env.txt" 2>&1

# The deviceless figures against the device's: CPU-bound for the most part.
( timeout "$DEVICELESS_S" python3 benchmarks/gpu_deviceless.py "$OUT/deviceless" --jobs 6 \
    >"$OUT/deviceless.log" 2>&1; echo "deviceless exit $?" >>"$OUT/deviceless.log" ) &
deviceless=$!

# The suite but the GPU-marked and real-sized tests, on 6 workers that each grow
# their GPU memory as needed, up to 4% of it.
( XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.04 \
    timeout -s INT -k 20 "$SUITE_S" python3 -m pytest -q -n 6 --dist loadfile -p no:cacheprovider \
    -p no:benchmark -m "not gpu and not real_sized" --timeout 200 -rfE \
    --junitxml="$OUT/suite.xml" >"$OUT/suite.log" 2>&1
  echo "suite exit $?" >>"$OUT/suite.log" ) &
suite=$!

XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s INT -k 20 "$GPU_TESTS_S" python3 -m pytest -v \
  -p no:cacheprovider -p no:benchmark -m gpu --timeout 100 -rsfE >"$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $?" >>"$OUT/gpu-tests.log"

wait "$deviceless"
wait "$suite"

# Then, alone on the device: fit at its own limit (its default allocator
# settings), the answer and the next size run, and the loss repeated.
mkdir -p /tmp/fig
timeout "$FIGURES_S" python3 benchmarks/gpu_figures.py /tmp/fig fit_transformer repeat \
  >"$OUT/figures.log" 2>&1
echo "figures exit $?" >>"$OUT/figures.log"
cp /tmp/fig/figures.json "$OUT/" 2>/dev/null
