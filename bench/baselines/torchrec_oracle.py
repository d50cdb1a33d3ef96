#!/usr/bin/env python3
"""Trains TorchRec's own DLRM and DLRM_DCN from shardrec's initial weights on Criteo-format data
and writes the committed whole-model training oracle test/fixtures/torchrec_train/ (Python is only
for this; the build and the tests never need it). test/train/test_torchrec_oracle.cpp trains
shardrec from the same weights on the same data and compares every step's loss and the final
parameters.

Data: a small Criteo TSV (data.tsv, 64 lines) generated from SEED. Both sides read the same
batches because both read shardrec's own preprocessed shards: this script runs
`shardrec data criteo-preprocess` on data.tsv with PREPROCESS_ARGS and reads the fixed-size
records back with numpy (header 64 bytes, then f32 label, f32[13] dense, i32 ids per feature),
so the log transform, the id hashing and the multi-hot materialisation are not reimplemented
here; the test runs the same preprocessing in-process. Step s trains rows [s * B, (s + 1) * B).

Cases (<case>/config.yaml; the optimizer sections are the hyperparameters both sides use):
  <model>_sgd      torch.optim.SGD over the whole unfused model (the tables get dense autograd
                   gradients), dense and sparse at their own learning rates.
  <model>_rowwise  the tables' optimizer fused into the backward with TorchRec's own
                   fuse_embedding_optimizer(RowWiseAdagrad), i.e. FBGEMM's TBE with
                   EXACT_ROWWISE_ADAGRAD; the dense layers with torch.optim.Adagrad. The eps values
                   are large enough (1e-2, 1e-3) that eps inside or outside the sqrt shows.
Written per case: config.yaml, init.safetensors (`shardrec ckpt init` + `ckpt export`: the
TorchRec state_dict TorchRec starts from) and expected.safetensors ("losses" f32 [STEPS]:
TorchRec's loss of each step, then TorchRec's state_dict after the last step).

  /tmp/trvenv/bin/python bench/baselines/torchrec_oracle.py --shardrec build/shardrec \
      --out test/fixtures/torchrec_train
(the venv of bench/baselines/torchrec_interop.py). Checked with torch 2.14.1, torchrec 1.9.2,
fbgemm-gpu-cpu 1.9.0.
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import torch
import torchrec.optim as trec_optim
from safetensors.torch import load_file, save_file
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.modules.fused_embedding_modules import fuse_embedding_optimizer
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

SEED = 20261127
STEPS = 8
BATCH = 8
D = 4
# (table, rows, features, pooling): two features share t2, which is mean-pooled; the model's
# feature order is not the data's column order. The sum tables come before the mean table because
# TorchRec 1.9.2's FusedEmbeddingBagCollection runs one TBE per pooling type (in the order each
# type first appears) and concatenates their outputs in that order, while its KeyedTensor keeps
# the tables' key order: with a mean table between two sum tables the columns are mislabelled
# (train() asserts the fused output equals the plain EmbeddingBagCollection's).
TABLES = [("t0", 40, ["cat_0"], "sum"), ("t1", 20, ["cat_3"], "sum"),
          ("t2", 30, ["cat_1", "cat_2"], "mean")]
# Rows per Criteo column (cat_0 .. cat_3 for t0, t2, t2, t1) and ids per sample (cat_0 and
# cat_1 multi-hot); the unused columns 1.
TABLE_SIZES = [40, 30, 30, 20] + [1] * 22
MULTI_HOT = [3, 2, 1, 1] + [1] * 22
PREPROCESS_ARGS = ["--table-sizes", ",".join(map(str, TABLE_SIZES)), "--multi-hot",
                   ",".join(map(str, MULTI_HOT)), "--threads", "1", "--no-progress"]

MODEL = {
    "dlrm": "  bottom_mlp: [8, 4]\n  top_mlp: [8, 4, 1]\n",
    "dlrm_dcn": "  bottom_mlp: [8, 4]\n  top_mlp: [8, 4, 1]\n  dcn: {num_layers: 2, low_rank: 2}\n",
}
# Distinct dense and sparse rates, so that a swap shows.
OPTIMIZER = {
    "sgd": "  dense: {type: sgd, learning_rate: 0.1}\n"
           "  sparse: {type: sgd, learning_rate: 0.2}\n",
    "rowwise": "  dense: {type: adagrad, learning_rate: 0.05, eps: 0.001}\n"
               "  sparse: {type: rowwise_adagrad, learning_rate: 0.1, eps: 0.01}\n",
}


def config_text(model_type, optim):
    tables = "".join(
        f"    - {{name: {n}, num_embeddings: {e}, feature_names: [{', '.join(f)}], pooling: {p}}}\n"
        for n, e, f, p in TABLES)
    return (
        f"# {model_type} trained {STEPS} steps against TorchRec (bench/baselines/torchrec_oracle.py)."
        "\n# data.criteo_binary.path: where data.tsv was preprocessed (the test sets it).\n"
        f"train: {{steps: {STEPS}, seed: 11, log_every: 1, eval_every: 0, eval_samples: 0, "
        "checkpoint_every: 0}\n"
        f"data: {{type: criteo_binary, batch_size: {BATCH}, "
        "criteo_binary: {path: preprocessed, eval_days: 0}}\n"
        f"model:\n  type: {model_type}\n  dense_in_features: 13\n  embedding_dim: {D}\n"
        + MODEL[model_type] + "  tables:\n" + tables + "optimizer:\n" + OPTIMIZER[optim] +
        "runtime: {device: cpu, threads: 1}\n")


def write_tsv(path):
    """64 Criteo lines from SEED: ints with negatives and missing values, 32-bit hex ids."""
    rng = np.random.default_rng(SEED)
    with open(path, "w") as f:
        for _ in range(STEPS * BATCH):
            fields = [str(int(rng.integers(0, 2)))]
            for _ in range(13):
                x = int(rng.integers(-3, 400))
                fields.append("" if rng.random() < 0.1 else str(x))
            for c in range(26):
                v = int(rng.integers(0, 1 << 32))
                fields.append("" if c >= 4 or rng.random() < 0.1 else f"{v:08x}")
            f.write("\t".join(fields) + "\n")


def read_records(data_dir):
    """The preprocessed rows in order: labels [N], dense [N, 13], ids [N, sum(MULTI_HOT)]."""
    with open(os.path.join(data_dir, "manifest.json")) as f:
        manifest = json.load(f)
    ids = sum(MULTI_HOT)
    record = np.dtype([("label", "<f4"), ("dense", "<f4", 13), ("ids", "<i4", ids)])
    assert manifest["record"]["bytes"] == record.itemsize
    rows = [np.fromfile(os.path.join(data_dir, s["file"]), dtype=record, offset=64)
            for inp in manifest["inputs"] for s in inp["shards"]]
    return np.concatenate(rows)


def batch(records, step):
    """Step `step`'s batch as TorchRec takes it; keys in the tables' feature order."""
    r = records[step * BATCH:(step + 1) * BATCH]
    keys, lengths, values = [], [], []
    for _, _, features, _ in TABLES:
        for name in features:
            c = int(name.split("_")[1])
            first = sum(MULTI_HOT[:c])
            keys.append(name)
            lengths.append(np.full(BATCH, MULTI_HOT[c], dtype=np.int64))
            values.append(r["ids"][:, first:first + MULTI_HOT[c]].reshape(-1).astype(np.int64))
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.from_numpy(np.concatenate(values)),
        lengths=torch.from_numpy(np.concatenate(lengths)))
    return torch.from_numpy(r["dense"].copy()), kjt, torch.from_numpy(r["label"].copy())


def torchrec_model(model_type):
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=n, embedding_dim=D, num_embeddings=e, feature_names=f,
                                   pooling=PoolingType.SUM if p == "sum" else PoolingType.MEAN)
                for n, e, f, p in TABLES],
        device=torch.device("cpu"))
    if model_type == "dlrm":
        return DLRM(embedding_bag_collection=ebc, dense_in_features=13,
                    dense_arch_layer_sizes=[8, 4], over_arch_layer_sizes=[8, 4, 1])
    return DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=13,
                    dense_arch_layer_sizes=[8, 4], over_arch_layer_sizes=[8, 4, 1],
                    dcn_num_layers=2, dcn_low_rank_dim=2)


def train(model_type, optim, init, records):
    model = torchrec_model(model_type)
    model.load_state_dict(init, strict=True)
    if optim == "rowwise":
        _, kjt, _ = batch(records, 0)
        plain = model.sparse_arch.embedding_bag_collection(kjt)
        # TorchRec's fused optimizer: FBGEMM TBE, EXACT_ROWWISE_ADAGRAD, updated in the backward.
        model = fuse_embedding_optimizer(model, trec_optim.RowWiseAdagrad,
                                         {"lr": 0.1, "eps": 0.01}, torch.device("cpu"))
        model.load_state_dict(init, strict=True)
        fused = model.sparse_arch.embedding_bag_collection(kjt)
        assert fused.keys() == plain.keys()
        assert torch.allclose(fused.values(), plain.values(), rtol=1e-6, atol=1e-7)
    for name, t in model.state_dict().items():  # the fused tables were loaded, not copied aside
        assert torch.equal(t, init[name]), name
    dense = [p for n, p in model.named_parameters() if not n.startswith("sparse_arch.")]
    tables = [p for n, p in model.named_parameters() if n.startswith("sparse_arch.")]
    if optim == "sgd":
        opt = torch.optim.SGD([{"params": dense, "lr": 0.1}, {"params": tables, "lr": 0.2}])
    else:
        opt = torch.optim.Adagrad(dense, lr=0.05, eps=0.001)
    loss_fn = torch.nn.BCEWithLogitsLoss()  # mean over the batch
    losses = []
    model.train()
    for step in range(STEPS):
        dense_x, kjt, labels = batch(records, step)
        opt.zero_grad()
        loss = loss_fn(model(dense_features=dense_x, sparse_features=kjt).reshape(-1), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {n: t.detach().clone().contiguous() for n, t in model.state_dict().items()}
    return torch.tensor(losses, dtype=torch.float32), state


def run(cmd):
    print("+", " ".join(cmd))
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardrec", default="build/shardrec")
    ap.add_argument("--out", default="test/fixtures/torchrec_train")
    args = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    tsv = os.path.join(args.out, "data.tsv")
    write_tsv(tsv)
    work = tempfile.mkdtemp(prefix="torchrec_oracle_")
    data_dir = os.path.join(work, "preprocessed")
    run([args.shardrec, "data", "criteo-preprocess", "--in", tsv, "--out", data_dir] +
        PREPROCESS_ARGS)
    records = read_records(data_dir)
    assert len(records) == STEPS * BATCH
    for model_type in MODEL:
        for optim in OPTIMIZER:
            case = f"{model_type}_{optim}"
            out = os.path.join(args.out, case)
            os.makedirs(out, exist_ok=True)
            config = os.path.join(out, "config.yaml")
            with open(config, "w") as f:
                f.write(config_text(model_type, optim))
            ckpt = os.path.join(work, case, "init")
            export = os.path.join(work, case, "export")
            run([args.shardrec, "ckpt", "init", config, "--out", ckpt, "--set",
                 f"data.criteo_binary.path={data_dir}"])
            run([args.shardrec, "ckpt", "export", ckpt, "--format", "safetensors", "--out",
                 export])
            init = load_file(os.path.join(export, "model.safetensors"))
            losses, state = train(model_type, optim, init, records)
            print(case, "TorchRec losses:", losses.tolist())
            shutil.copy(os.path.join(export, "model.safetensors"),
                        os.path.join(out, "init.safetensors"))
            save_file({"losses": losses, **state}, os.path.join(out, "expected.safetensors"))
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
