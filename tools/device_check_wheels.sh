#!/usr/bin/env bash
# The wheels tools/device_check.py needs beyond the device's own torch and transformers (and what those two
# need: numpy, safetensors, tokenizers, huggingface-hub, pyyaml, jinja2, typing-extensions), for Linux x86_64
# and CPython 3.10-3.13, into one folder (40 MiB: under the 64 MiB a device call may carry).
# No Ray, vLLM or DeepSpeed: cluster.backend=local and the hf strategies need none of them.
#   tools/device_check_wheels.sh [FOLDER]        (default: .cache/device_wheels, ignored by git)
# The device check unpacks the ones its interpreter loads (`--wheels FOLDER`; no pip needed there); the
# command that runs it on the device is in docs/device_check.md.
set -euo pipefail
out="${1:-.cache/device_wheels}"
mkdir -p "$out"
pip=(python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$out")

# pure Python: one wheel for every interpreter
"${pip[@]}" pydantic==2.14.3 annotated-types==0.8.0 typing-inspection==0.4.5 hydra-core==1.3.8 omegaconf==2.3.1 \
    gymnasium==1.4.0 farama-notifications==0.0.6 cloudpickle==3.1.2
# pytest and the plugins pyproject's addopts name (--benchmark-disable, -n/--dist, the timeout), as uv.lock pins
# them: the `gpu` tests' command of docs/device_check.md cannot parse those options without them
"${pip[@]}" pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 pygments==2.21.0 pytest-benchmark==5.3.1 \
    py-cpuinfo2==10.1.1 pytest-timeout==2.4.0 pytest-xdist==3.8.0 execnet==2.1.2
# compiled: one wheel per CPython version
for version in 3.10 3.11 3.12 3.13; do
    "${pip[@]}" --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        --python-version "$version" --implementation cp \
        pydantic-core==2.50.4 msgspec==0.19.0 msgpack==1.2.4 pillow==12.3.0
done
# antlr4 4.9.3 (what omegaconf 2.3 pins) is published as an sdist only: build its pure-Python wheel here
python3 -m pip wheel --quiet --no-deps --wheel-dir "$out" antlr4-python3-runtime==4.9.3
ls -1 "$out"
du -sh "$out"

# DeepSpeed (the gpu-marked ZeRO tests only, never the device check): PyPI has it as an sdist whose build imports
# torch, so its installed pure-Python package is copied from this workspace's venv (uv sync --extra deepspeed),
# with hjson, into .cache/device_ds (9 MiB), which the pytest command of docs/device_check.md puts on PYTHONPATH.
site="$(uv run --no-sync python -c 'import deepspeed, os; print(os.path.dirname(os.path.dirname(deepspeed.__file__)))' 2>/dev/null | tail -n 1 || true)"
if [ -n "$site" ]; then
    ds=.cache/device_ds
    rm -rf "$ds" && mkdir -p "$ds"
    cp -r "$site"/deepspeed "$site"/deepspeed-*.dist-info "$site"/hjson "$site"/hjson-*.dist-info "$ds"/
    find "$ds" -name __pycache__ -prune -exec rm -rf {} +
    du -sh "$ds"
else
    echo "no deepspeed in the venv: the DeepSpeed gpu tests will skip (uv sync --all-packages --extra deepspeed)"
fi
