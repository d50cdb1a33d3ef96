#!/usr/bin/env python3
"""Checks `shardrec ckpt export` against the real TorchRec and regenerates the committed fixtures
of test/fixtures/torchrec/<model>/ (Python is only for this; the build and the tests never need it).

For each of dlrm, dlrm_dcn and deepfm: shardrec trains a tiny model for 3 steps and exports it;
TorchRec's own DLRM / DLRM_DCN / SimpleDeepFMNN of the same shapes loads the export with
load_state_dict(strict=True), no renaming, no permutation; TorchRec's forward on a fixed batch gives
the logits. Written per model: config.yaml, model.safetensors (the export), batch.safetensors
(dense [B, 5] f32, lengths [F*B] i64 key-major, values [N] i64, logits [B] f32: TorchRec's
output; for SimpleDeepFMNN the input of its final Sigmoid). test/train/test_torchrec_interop.cpp
runs shardrec's forward on that batch with those weights and compares.

  python3 -m venv /tmp/trvenv && /tmp/trvenv/bin/pip install torch torchrec fbgemm-gpu-cpu safetensors
  (the fbgemm-gpu-cpu version must be the one built for that torch; without a GPU driver use it
  instead of fbgemm-gpu)
  /tmp/trvenv/bin/python bench/baselines/torchrec_interop.py --shardrec build/shardrec \
      --out test/fixtures/torchrec
Checked with torch 2.14.1, torchrec 1.9.2, fbgemm-gpu-cpu 1.9.0.
"""
import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torchrec.models.deepfm import SimpleDeepFMNN
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

DENSE_IN = 5
D = 4
# (table, rows, features, pooling): two features share t1, one table mean-pooled.
TABLES = [("t0", 40, ["f_t0"], "sum"), ("t1", 30, ["f_a", "f_b"], "mean"), ("t2", 20, ["f_t2"], "sum")]
BATCH = 6

MODEL = {
    "dlrm": "  bottom_mlp: [8, 4]\n  top_mlp: [8, 4, 1]\n",
    "dlrm_dcn": "  bottom_mlp: [8, 4]\n  top_mlp: [8, 4, 1]\n  dcn: {num_layers: 2, low_rank: 2}\n",
    "deepfm": "  bottom_mlp: [8, 4]\n  top_mlp: [1]\n  deepfm: {hidden: [6]}\n",
}


def config_text(model_type):
    tables = "".join(
        f"    - {{name: {n}, num_embeddings: {e}, feature_names: [{', '.join(f)}], pooling: {p}}}\n"
        for n, e, f, p in TABLES)
    return (
        f"# A tiny {model_type} for the TorchRec interop fixture (bench/baselines/torchrec_interop.py).\n"
        "train: {steps: 3, seed: 5, log_every: 1, eval_every: 0, eval_samples: 0, "
        "checkpoint_every: 3}\n"
        "data: {type: synthetic, batch_size: 8}\n"
        f"model:\n  type: {model_type}\n  dense_in_features: {DENSE_IN}\n  embedding_dim: {D}\n"
        + MODEL[model_type] + "  tables:\n" + tables +
        "optimizer:\n  dense: {type: adagrad, learning_rate: 0.1}\n"
        "  sparse: {type: rowwise_adagrad, learning_rate: 0.1}\n"
        "runtime: {device: cpu}\n")


def torchrec_model(model_type):
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=n, embedding_dim=D, num_embeddings=e, feature_names=f,
                                   pooling=PoolingType.SUM if p == "sum" else PoolingType.MEAN)
                for n, e, f, p in TABLES],
        device=torch.device("cpu"))
    if model_type == "dlrm":
        return DLRM(embedding_bag_collection=ebc, dense_in_features=DENSE_IN,
                    dense_arch_layer_sizes=[8, 4], over_arch_layer_sizes=[8, 4, 1])
    if model_type == "dlrm_dcn":
        return DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=DENSE_IN,
                        dense_arch_layer_sizes=[8, 4], over_arch_layer_sizes=[8, 4, 1],
                        dcn_num_layers=2, dcn_low_rank_dim=2)
    return SimpleDeepFMNN(num_dense_features=DENSE_IN, embedding_bag_collection=ebc,
                          hidden_layer_size=8, deep_fm_dimension=6)


def fixed_batch():
    rng = np.random.default_rng(20261126)
    keys, lengths, values = [], [], []
    for _, rows, features, _ in TABLES:
        for f in features:
            keys.append(f)
            ls = rng.integers(0, 4, size=BATCH)
            ls[1] = 0  # an empty bag in every feature
            lengths.append(ls)
            values.append(rng.integers(0, rows, size=int(ls.sum())))
    dense = torch.tensor(rng.standard_normal((BATCH, DENSE_IN)), dtype=torch.float32)
    lengths = torch.tensor(np.concatenate(lengths), dtype=torch.int64)
    values = torch.tensor(np.concatenate(values), dtype=torch.int64)
    return dense, keys, lengths, values


def run(cmd):
    print("+", " ".join(cmd))
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardrec", default="build/shardrec")
    ap.add_argument("--out", default="test/fixtures/torchrec")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="torchrec_interop_")
    for model_type in MODEL:
        out = os.path.join(args.out, model_type)
        os.makedirs(out, exist_ok=True)
        config = os.path.join(out, "config.yaml")
        with open(config, "w") as f:
            f.write(config_text(model_type))
        run_dir = os.path.join(work, model_type, "run")
        export = os.path.join(work, model_type, "export")
        run([args.shardrec, "train", config, "--out", run_dir])
        run([args.shardrec, "ckpt", "export", os.path.join(run_dir, "checkpoints"), "--format",
             "safetensors", "--out", export])
        state = load_file(os.path.join(export, "model.safetensors"))
        model = torchrec_model(model_type)
        # The whole point: TorchRec's own model takes the export as it is.
        model.load_state_dict(state, strict=True)
        model.eval()
        dense, keys, lengths, values = fixed_batch()
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
        with torch.no_grad():
            if model_type == "deepfm":
                # SimpleDeepFMNN ends in a Sigmoid; shardrec's forward gives the logit before it.
                seen = {}
                hook = model.over_arch.model[1].register_forward_hook(
                    lambda m, i, o: seen.update(logit=i[0]))  # returns None: output kept
                prob = model(dense, kjt)
                hook.remove()
                logits = seen["logit"]
                assert torch.equal(torch.sigmoid(logits), prob)
            else:
                logits = model(dense_features=dense, sparse_features=kjt)
        logits = logits.reshape(-1).contiguous()
        print(model_type, "TorchRec logits:", logits.tolist())
        shutil.copy(os.path.join(export, "model.safetensors"), os.path.join(out, "model.safetensors"))
        save_file({"dense": dense, "lengths": lengths, "values": values, "logits": logits},
                  os.path.join(out, "batch.safetensors"), metadata={"keys": ",".join(keys)})
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
