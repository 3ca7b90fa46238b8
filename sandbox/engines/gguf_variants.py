"""Derive model variants from a GGUF file; runs under the engine's own Python (needs `gguf`).

    python -m sandbox.engines.gguf_variants f16 SRC DST
    python -m sandbox.engines.gguf_variants zero-key-band SRC DST --layers 2,5 --band 0:32
    python -m sandbox.engines.gguf_variants quantize SRC DST --type q8_0

``f16`` dequantizes every quantized tensor to F16 (the reference the quantized file came
from, as far as it can be recovered). ``zero-key-band`` zeroes a band of output channels of
the attention key projection (``blk.N.attn_k.weight``) in the given layers, the silent
failure a broken kernel causes: the affected heads attend with part of their keys gone, so
answers stay fluent and go wrong. Those tensors are stored as F16; the rest is copied as is.
``quantize`` runs llama.cpp's own quantizer (``llama_model_quantize``, as its
``llama-quantize`` tool does) on an F16 file: a real quantization error, not a dequantized
copy. The file is written beside DST and renamed into place, so DST exists only when
complete. This module imports nothing from the project: the engine's Python has gguf,
numpy and llama_cpp.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.quants import dequantize

QUANTIZED_SKIP = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)


def _copy_fields(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, file_type: int | None) -> None:
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        value: Any = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE and file_type is not None:
            value = file_type
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, main, sub_type=sub)


def _as_f16(tensor: Any) -> np.ndarray:
    return np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float16)


def derive(src: Path, dst: Path, *, dequantize_all: bool, zero: dict[int, tuple[int, int]]) -> None:
    reader = gguf.GGUFReader(src, "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    assert arch is not None, f"{src} names no architecture"
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(tmp, arch=arch.contents(), endianess=reader.endianess)
    alignment = reader.get_field(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    _copy_fields(reader, writer, gguf.LlamaFileType.MOSTLY_F16 if dequantize_all else None)

    key_tensors = {f"blk.{layer}.attn_k.weight": band for layer, band in zero.items()}
    missing = set(key_tensors) - {t.name for t in reader.tensors}
    if missing:
        raise SystemExit(f"{src} has no tensor {sorted(missing)}: choose layers the model has")
    tensors: list[tuple[str, np.ndarray, Any]] = []
    for tensor in reader.tensors:
        data, qtype = tensor.data, tensor.tensor_type
        quantized = qtype not in QUANTIZED_SKIP
        if tensor.name in key_tensors or (dequantize_all and quantized):
            data, qtype = _as_f16(tensor), gguf.GGMLQuantizationType.F16
        if tensor.name in key_tensors:
            lo, hi = key_tensors[tensor.name]
            data = data.copy()
            data[lo:hi, :] = 0  # rows are output channels (ne1): key dimensions
        tensors.append((tensor.name, data, qtype))
    for name, data, qtype in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
    tmp.rename(dst)


QUANT_TYPES = {"q8_0": 7, "q4_0": 2}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0, _Q4_0


def quantize(src: Path, dst: Path, *, type_name: str) -> None:
    import llama_cpp  # the engine's own library

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[type_name]
    params.nthread = 1
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    code = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if code != 0 or not tmp.is_file():
        raise SystemExit(f"llama_model_quantize {src} -> {type_name} failed (returned {code})")
    tmp.rename(dst)


def _band(text: str) -> tuple[int, int]:
    lo, hi = (int(x) for x in text.split(":"))
    return lo, hi


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gguf_variants")
    parser.add_argument("kind", choices=["f16", "zero-key-band", "quantize"])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--layers", default="", help="comma-separated layer indices")
    parser.add_argument("--band", type=_band, default=(0, 0), help="LO:HI output channels")
    parser.add_argument("--type", choices=sorted(QUANT_TYPES), default="q8_0")
    args = parser.parse_args(argv)
    if args.kind == "quantize":
        quantize(args.src, args.dst, type_name=args.type)
        return
    layers = [int(x) for x in args.layers.split(",") if x]
    if args.kind == "zero-key-band" and (not layers or args.band[1] <= args.band[0]):
        parser.error("zero-key-band needs --layers and a non-empty --band LO:HI")
    zero = {layer: args.band for layer in layers} if args.kind == "zero-key-band" else {}
    derive(args.src, args.dst, dequantize_all=args.kind == "f16", zero=zero)


if __name__ == "__main__":
    main()
