# Sourced by the GPU sessions' scripts (gpu_session.sh, gpu_target_session.sh) on
# the device, in the checkout: OUT made, the wheels the device image lacks
# (libcst, for `memscope fix`; the image has pyyaml) installed from .whl/ (ignored by git:
# carry it), memscope installed editable (its pytest plugin is found through the
# entry point; where that install fails, memscope is still imported from here),
# and what the machine has written to $OUT/env.txt.
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --find-links .whl --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site libcst && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
  || echo "editable install failed: memscope from PYTHONPATH" >>"$OUT/install.log"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, jax, jaxlib; print(sys.version); print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
  python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|jax-cuda|nvidia-cuda-nvcc|equinox|flax|optax|pytest|libcst|numpy|setuptools)[ -]'
  command -v ptxas; nproc
} >"$OUT/env.txt" 2>&1
