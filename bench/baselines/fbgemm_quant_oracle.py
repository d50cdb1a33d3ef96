#!/usr/bin/env python3
"""Quantizes small tables with TorchRec's own QuantEmbeddingBagCollection (FBGEMM's IntNBit
table-batched rows) and writes the committed oracle test/fixtures/fbgemm_quant/rows.txt (Python is
only for this; the build and the tests never need it). test/modules/test_quant_fbgemm.cpp
quantizes the same f32 rows with shardrec's quantize_rows and compares every byte of every row:
the fp16 scale and bias in front, the packed codes, the padding to 16 bytes.

The rows: random normal values at several scales, a constant row, a row with one outlier, rows
of tiny and of large values, negative-only rows; dims 8, 16, 24, 64 and 128; int8, int4 and
int2 (torch.quint8, torch.quint4x2, torch.quint2x4 in TorchRec's qconfig).

File format (text), per case:
  case TYPE DIM ROWS ROW_BYTES
  then per row:  in DIM f32 bit patterns (hex)  /  out ROW_BYTES bytes (hex)

  /work/.venv-torchrec/bin/python bench/baselines/fbgemm_quant_oracle.py \
      --out test/fixtures/fbgemm_quant/rows.txt
Checked with torch 2.5.1, fbgemm-gpu-cpu 1.0.0, torchrec 1.0.0.
"""
import argparse
import struct

import torch
import torch.ao.quantization as tq
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)

TYPES = {"int8": torch.quint8, "int4": torch.quint4x2, "int2": torch.quint2x4}
DIMS = [8, 16, 24, 64, 128]  # FBGEMM packs rows of whole half-words: int2 dims of 8s


def rows_for(dim, gen):
    """Rows that exercise the rounding, the range and the corner cases."""
    rows = []
    for scale in (1e-3, 0.05, 1.0, 30.0):
        for _ in range(3):
            rows.append(torch.randn(dim, generator=gen) * scale)
    rows.append(torch.full((dim,), 0.375))  # constant: scale 0
    outlier = torch.randn(dim, generator=gen) * 0.01
    outlier[dim // 2] = 5.0
    rows.append(outlier)
    rows.append(-torch.rand(dim, generator=gen) - 1.0)  # negative only
    rows.append(torch.rand(dim, generator=gen) * 1e-6)  # tiny range: fp16 subnormal scale
    rows.append(torch.randn(dim, generator=gen) * 1000.0)
    return torch.stack(rows).to(torch.float32)


def quantized_rows(weights, qtype):
    """The table's rows as TorchRec's QuantEmbeddingBagCollection stores them (uint8)."""
    n, dim = weights.shape
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=n,
                                   feature_names=["f"])],
        device=torch.device("cpu"))
    with torch.no_grad():
        ebc.embedding_bags["t"].weight.copy_(weights)
    ebc.qconfig = tq.QConfig(activation=tq.PlaceholderObserver,
                             weight=tq.PlaceholderObserver.with_args(dtype=qtype))
    qebc = QuantEmbeddingBagCollection.from_float(ebc)
    # The whole stored rows: scale and bias, codes and padding (split_scale_shifts=False).
    (weight, _), = qebc._emb_modules[0].split_embedding_weights(split_scale_shifts=False)
    return weight.contiguous()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(20261128)
    lines = []
    for name, qtype in TYPES.items():
        for dim in DIMS:
            weights = rows_for(dim, gen)
            out = quantized_rows(weights, qtype)
            lines.append(f"case {name} {dim} {weights.shape[0]} {out.shape[1]}")
            for r in range(weights.shape[0]):
                bits = [struct.unpack("<I", struct.pack("<f", float(v)))[0] for v in weights[r]]
                lines.append("in " + " ".join(f"{b:08x}" for b in bits))
                lines.append("out " + " ".join(f"{int(b):02x}" for b in out[r]))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
