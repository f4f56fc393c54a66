"""What a model's weights take on the devices, from metadata only.

The safetensors headers name every tensor with its dtype and shape: its bytes as stored are the
shape's elements times the dtype's size (quantized types included: packed int32, FP8, FP4, and
their float32 scales). The engine casts floating tensors to the dtype it serves in (--dtype, or
the config's, float32 as a 2-byte type) and loads quantized ones as stored; an online
--quantization (fp8, bitsandbytes) shrinks an unquantized checkpoint's layer weights as they
load. With model.safetensors.index.json only the files it maps are read (as the engines do);
without one, every top-level *.safetensors. Only the 8-byte length and the JSON header of each
file are read (common/model/safetensors_header.py); a file whose header cannot be read counts by its
size. A checkpoint of .bin (or .pt) files only counts by their sizes, scaled from the config's
dtype to the served one. Tensors are assigned to decoder layers by name, so the bytes of one
pipeline stage and one tensor-parallel rank follow the engine's split.
"""

from __future__ import annotations

import re

from .memory_tables import (
    AUTO_FROM_FLOAT32,
    BIN_INDEX,
    CAST_DTYPES,
    CONSOLIDATED_PREFIX,
    DTYPE_BYTES,
    EXPERTS_ONLY_QUANT,
    FIRST_STAGE_MARKERS,
    KEEP_DTYPE_MARKERS,
    MAX_WEIGHT_FILES,
    NOT_WEIGHTS,
    ONLINE_QUANT_BITS,
    SAFETENSORS_BITS,
    SAFETENSORS_INDEX,
)

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from ..model.modeldir import ModelDir

# A decoder layer's index in a tensor name: model.layers.12., transformer.h.3., blocks.7., ...
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|decoder_layers)\.(\d+)\.")
# Embeddings and a vision tower (whose own layers are no decoder layers) load on the first stage.
FIRST_STAGE = re.compile("|".join(FIRST_STAGE_MARKERS), re.IGNORECASE)
KEEP_DTYPE = re.compile("|".join(KEEP_DTYPE_MARKERS), re.IGNORECASE)


class Weights:
    """The served bytes of a checkpoint: per decoder layer, and outside them on the first and
    the last pipeline stage. `source` says what was read; `estimated`: from config.json's
    shapes, not the checkpoint's (common/memory/weight_estimate.py)."""

    def __init__(self, source: str, estimated: bool = False) -> None:
        self.source = source
        self.estimated = estimated
        self.layers: Dict[int, int] = {}
        self.first = 0
        self.last = 0
        self.files = 0
        self.problems: List[str] = []

    @property
    def total(self) -> int:
        return sum(self.layers.values()) + self.first + self.last

    def put(self, where: Any, size: int) -> None:
        """Add `size` bytes to a layer (its index), or to "first" or "last" (outside them)."""
        if where == "first":
            self.first += size
        elif where == "last":
            self.last += size
        else:
            self.layers[where] = self.layers.get(where, 0) + size

    def per_device(self, tp: int, stages: List[Tuple[int, int]]) -> List[int]:
        """Bytes on one tensor-parallel rank of each pipeline stage ([start, end) layer ranges):
        the decoder layers split evenly across the ranks, as the engine's parallel layers do."""
        out = []
        count = len(stages)
        for i, (start, end) in enumerate(stages):
            size = sum(v for k, v in self.layers.items() if start <= k < end)
            if count == 1 or i == 0:
                size += self.first
            if count == 1 or i == count - 1:
                size += self.last
            out.append(-(-size // tp))
        return out


def served_bytes(dtype_name: Optional[str]) -> Optional[int]:
    """Bytes per element of a served dtype name (--dtype, or the config's), None when unknown."""
    if not isinstance(dtype_name, str):
        return None
    return DTYPE_BYTES.get(dtype_name.lower().replace("torch.", ""))


def model_dtype_bytes(config: Dict[str, Any], dtype_arg: Optional[str]) -> int:
    """Bytes per element the engine serves floating weights in: --dtype, else the config's
    torch_dtype (transformers 5: dtype), float32 and a missing dtype as a 2-byte type."""
    if dtype_arg and dtype_arg.lower() != "auto":
        given = served_bytes(dtype_arg)
        if given is not None:
            return given
    stated = config.get("torch_dtype", config.get("dtype"))
    size = served_bytes(stated)
    return AUTO_FROM_FLOAT32 if size is None or size >= 4 else size


def read_weights(
    model: ModelDir, config: Dict[str, Any], dtype_arg: Optional[str] = None, quantization: Optional[str] = None
) -> Optional[Weights]:
    """The served bytes of the model's weights, or None when it holds no weight files. An index
    whose files are absent, all or some (the metadata of a model not yet downloaded, or one half
    downloaded), counts as none: its missing shards would count 0 bytes and promise a fit the
    checkpoint does not have; the caller estimates from config.json instead."""
    served = model_dtype_bytes(config, dtype_arg)
    online = None if config.get("quantization_config") else (quantization or "").lower() or None
    online = online if online in ONLINE_QUANT_BITS else None
    files, source = _safetensors_files(model)
    if not files or not all(model.state(name).exists for name in files[:MAX_WEIGHT_FILES]):
        return _bin_weights(model, config, served)
    weights = Weights(source)
    for name in files[:MAX_WEIGHT_FILES]:
        summary, problem = _file_summary(model, name)
        weights.files += 1
        if summary is None:
            weights.last += model.state(name).size
            weights.problems.append(f"{name}: counted by its size ({problem})")
            continue
        for (where, dtype, cast, role), amount in summary.items():
            if dtype is None:
                size = amount  # a dtype the table lacks: the bytes its offsets span
            else:
                bits = SAFETENSORS_BITS[dtype]
                if cast:
                    bits = ONLINE_QUANT_BITS[online] if online and _quantized_online(role, online) else served * 8
                size = -(-amount * bits // 8)
            weights.put(where, size)
    if len(files) > MAX_WEIGHT_FILES:
        weights.problems.append(f"{len(files) - MAX_WEIGHT_FILES} more weight files not read")
    return weights


# (real path, size, mtime) -> a file's summary: doctor judges one model on several cards and
# variants, and a header of tens of thousands of tensors is worth reading once.
_SUMMARIES: Dict[Tuple[str, int, int], Dict[Tuple[Any, Optional[str], bool, str], int]] = {}


def _file_summary(model: ModelDir, name: str) -> Tuple[Optional[Dict[Tuple[Any, Optional[str], bool, str], int]], str]:
    """The tensors of one file grouped by (where they load: a layer index, "first" or "last";
    dtype, None when the table lacks it; whether the engine casts it; its role for online
    quantization: "linear", "expert" or ""), each group's elements (or bytes, dtype None)."""
    import os

    from ..model.safetensors_header import read_header

    full = os.path.join(model.path, name)
    try:
        st = os.stat(full)
        key: Optional[Tuple[str, int, int]] = (os.path.realpath(full), st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and key in _SUMMARIES:
        return _SUMMARIES[key], ""
    header, problem = read_header(model, name)
    if header is None:
        return None, problem.reason if problem is not None else "no header"
    summary: Dict[Tuple[Any, Optional[str], bool, str], int] = {}
    for tensor, shape in header.shapes.items():
        dtype = header.dtypes.get(tensor)
        first = FIRST_STAGE.search(tensor) is not None
        layer = None if first else LAYER_INDEX.search(tensor)
        where: Any = "first" if first else int(layer.group(1)) if layer is not None else "last"
        if dtype not in SAFETENSORS_BITS:
            group = (where, None, False, "")
            summary[group] = summary.get(group, 0) + (header.spans.get(tensor) or 0)
            continue
        elements = 1
        for dim in shape:
            elements *= max(dim, 0)
        cast = dtype in CAST_DTYPES and KEEP_DTYPE.search(tensor) is None
        role = ""
        if cast and layer is not None and len(shape) >= 2 and tensor.endswith(".weight") and "norm" not in tensor:
            role = "expert" if ".experts." in tensor else "linear"
        group = (where, dtype, cast, role)
        summary[group] = summary.get(group, 0) + elements
    if key is not None:
        _SUMMARIES[key] = summary
    return summary, ""


def _safetensors_files(model: ModelDir) -> Tuple[List[str], str]:
    """The safetensors files the engine loads: the index's, else every top-level one (Mistral's
    consolidated file left out beside Hugging Face shards)."""
    from ..model.safetensors_header import weight_map

    mapping, _ = weight_map(model)
    if mapping is not None:
        files = sorted(set(mapping.values()))
        return [f for f in files if "/" not in f], f"the safetensors headers of the {SAFETENSORS_INDEX} files"
    names = [n for n in model.names() if n.endswith(".safetensors")]
    plain = [n for n in names if not n.startswith(CONSOLIDATED_PREFIX)]
    return (plain or names), "the safetensors headers"


def _quantized_online(role: str, method: str) -> bool:
    """Whether an online --quantization turns a tensor of this role into a quantized weight: a
    decoder layer's linear weight (MoE experts only, for the expert-only methods)."""
    if not role:
        return False
    return role == "expert" if method in EXPERTS_ONLY_QUANT else True


def _bin_weights(model: ModelDir, config: Dict[str, Any], served: int) -> Optional[Weights]:
    """.bin / .pt checkpoints (no safetensors): their sizes, from the config's dtype to the
    served one (a pickle's tensors cannot be listed without unpickling it)."""
    index, _ = model.read_json(BIN_INDEX)
    mapping = index.get("weight_map") if isinstance(index, dict) else None
    if isinstance(mapping, dict):
        names = sorted({v for v in mapping.values() if isinstance(v, str) and "/" not in v})
    else:
        names = [n for n in model.names() if n.endswith(".bin") and n not in NOT_WEIGHTS]
        names = names or [n for n in model.names() if n.endswith(".pt") and n not in NOT_WEIGHTS]
    if not names or not all(model.state(name).exists for name in names):  # half a download: estimated, as above
        return None
    stored = served_bytes(config.get("torch_dtype", config.get("dtype"))) or served
    weights = Weights(f"the sizes of {len(names)} .bin/.pt files")
    for name in names:
        state = model.state(name)
        if state.usable:
            weights.files += 1
            weights.last += state.size * served // stored
        elif state.problem is not None:
            weights.problems.append(state.problem.message())
    return weights
