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
# Set-up (the wheels the image lacks, carried in .whl/): benchmarks/_gpu_setup.sh.
set -u
. benchmarks/_gpu_setup.sh
DEVICELESS_S="${DEVICELESS_S:-240}" GPU_TESTS_S="${GPU_TESTS_S:-150}"
FIGURES_S="${FIGURES_S:-200}" SUITE_S="${SUITE_S:-240}"

# The deviceless figures against the device's: CPU-bound for the most part.
( timeout "$DEVICELESS_S" python3 -m benchmarks.gpu_deviceless "$OUT/deviceless" --jobs 6 \
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
timeout "$FIGURES_S" python3 -m benchmarks.gpu_figures /tmp/fig fit_transformer repeat \
  >"$OUT/figures.log" 2>&1
echo "figures exit $?" >>"$OUT/figures.log"
cp /tmp/fig/figures.json "$OUT/" 2>/dev/null
