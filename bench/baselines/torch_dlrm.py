#!/usr/bin/env python3
"""The baselines a user would otherwise pick: DLRM / DLRM-DCNv2 in plain PyTorch, or in TorchRec,
timed on the shapes of a shardrec config, for comparison with `shardrec bench` on the same
machine.

They are comparison harnesses, never a dependency: shardrec runs without Python.
--impl torch (default) is the model a user writes by hand, what the DLRM reference and
TorchRec's DLRM_DCN compute: one nn.EmbeddingBag per table (sum pooling, sparse gradients,
TorchRec's default init), the bottom MLP with ReLU, the dot interaction or the low-rank cross
network (x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l) on [dense, pooled embeddings], the top
MLP with ReLU and a last linear layer, BCE-with-logits, and the config's optimizers from
torch.optim, the tables' over their sparse gradients (row-wise Adagrad becomes element-wise
Adagrad, which is what plain PyTorch has; Adam becomes SparseAdam).
--impl torchrec is TorchRec's own: its EmbeddingBagCollection and DLRM / DLRM_DCN models,
sharded by DistributedModelParallel in this one process (gloo on the CPU, NCCL on a GPU) onto
FBGEMM's fused table-batched kernels, the sparse optimizer fused into the backward
(apply_optimizer_in_backward: SGD, Adagrad, RowWiseAdagrad or Adam, as the config says).

Shapes come from the config as shardrec resolves it (`shardrec validate CONFIG --set ...`),
so the same --set overrides give both programs the same model. Batches are made on the device
before timing, as `shardrec bench` makes its batches before timing: fixed bags of
round(pooling_factor) ids drawn from the synthetic generator's Zipf law
(data.synthetic.zipf_alpha) with the hot rows scattered over the table, random dense features
and labels. --math picks the dense layers' math like runtime.gemm_math: f32 (full fp32), tf32
(TF32 tensor cores) or bf16: torch.autocast(device, bfloat16) around the forward and the loss,
so that the dense GEMMs (MLPs, cross net) run in bf16 (on the CPU through oneDNN: AMX where the
CPU has it, else AVX512-BF16) and the rest as autocast says; the tables, their lookups (TorchRec's
FBGEMM kernels too), the optimizers and their state stay fp32.

  bench/baselines/torch_dlrm.py --shardrec build/shardrec configs/dlrm_dcnv2_mlperf.yaml \
      --set runtime.device=cuda --set model.tables[0].num_embeddings=2000000 --math bf16
  bench/baselines/torch_dlrm.py --impl torchrec configs/quickstart.yaml --steps 300

Prints `config`, `step time` (median, p10, p90 over --steps steps, each timed by CUDA events on
a GPU) and `throughput` lines like `shardrec bench`, and with --json writes them as one object.
"""

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

# ---- the resolved config ----


def split_flow(text):
    """Splits a YAML flow sequence or mapping body at its top-level commas."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def parse_scalar(text):
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [parse_scalar(p) for p in split_flow(text[1:-1])]
    if text.startswith("{") and text.endswith("}"):
        out = {}
        for part in split_flow(text[1:-1]):
            key, _, value = part.partition(":")
            out[key.strip()] = parse_scalar(value)
        return out
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


def parse_block(lines, i, indent):
    """Parses the block mapping or sequence of `lines` (indent, text) from i at `indent`."""
    if lines[i][1].startswith("- "):
        out = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            out.append(parse_scalar(lines[i][1][2:]))
            i += 1
        return out, i
    out = {}
    while i < len(lines) and lines[i][0] == indent:
        key, _, value = lines[i][1].partition(":")
        i += 1
        if value.strip():
            out[key.strip()] = parse_scalar(value)
        elif i < len(lines) and lines[i][0] > indent:
            out[key.strip()], i = parse_block(lines, i, lines[i][0])
        else:
            out[key.strip()] = None
    return out, i


def parse_resolved(text):
    """The subset of YAML that `shardrec validate` prints: block mappings, `- {...}` items, flow
    sequences and mappings of scalars, `#` comment lines."""
    lines = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            lines.append((len(raw) - len(raw.lstrip(" ")), stripped))
    if not lines:
        raise ValueError("empty resolved config")
    config, end = parse_block(lines, 0, lines[0][0])
    if end != len(lines):
        raise ValueError(f"cannot read the resolved config at: {lines[end][1]}")
    return config


def resolved_config(shardrec, path, overrides):
    cmd = [shardrec, "validate", path]
    for kv in overrides:
        cmd += ["--set", kv]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
    config = parse_resolved(run.stdout)
    model = config.get("model") or {}
    for key in ("type", "dense_in_features", "tables", "bottom_mlp", "top_mlp"):
        if key not in model:
            sys.exit(f"{path}: the resolved config has no model.{key}")
    if model["type"] not in ("dlrm", "dlrm_dcn"):
        sys.exit(f"{path}: model.type {model['type']} is not dlrm or dlrm_dcn")
    return config


# ---- the model ----


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if last_relu or i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LowRankCrossNet(nn.Module):
    def __init__(self, width, num_layers, low_rank):
        super().__init__()
        self.v = nn.ModuleList(nn.Linear(width, low_rank, bias=False) for _ in range(num_layers))
        self.w = nn.ModuleList(nn.Linear(low_rank, width) for _ in range(num_layers))

    def forward(self, x0):
        x = x0
        for v, w in zip(self.v, self.w):
            x = x0 * w(v(x)) + x
        return x


class DLRM(nn.Module):
    def __init__(self, model):
        super().__init__()
        tables = model["tables"]
        dim = tables[0]["embedding_dim"]
        self.features = sum(len(t["feature_names"]) for t in tables)
        self.table_of_feature = [i for i, t in enumerate(tables) for _ in t["feature_names"]]
        self.embeddings = nn.ModuleList(
            nn.EmbeddingBag(t["num_embeddings"], dim, mode="sum", sparse=True) for t in tables)
        for table, t in zip(self.embeddings, tables):  # TorchRec's default init
            bound = math.sqrt(1.0 / t["num_embeddings"])
            nn.init.uniform_(table.weight, -bound, bound)
        self.bottom = mlp([model["dense_in_features"]] + model["bottom_mlp"], last_relu=True)
        if model["type"] == "dlrm_dcn":
            dcn = model["dcn"]
            over_in = dim * (self.features + 1)
            self.crossnet = LowRankCrossNet(over_in, dcn["num_layers"], dcn["low_rank"])
        else:
            self.crossnet = None
            f = self.features + 1
            over_in = dim + f * (f - 1) // 2
            self.register_buffer("pairs", torch.triu_indices(f, f, offset=1), persistent=False)
        self.top = mlp([over_in] + model["top_mlp"], last_relu=False)

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)
        pooled = [self.embeddings[t](ids[f], offsets[f]) for f, t in
                  enumerate(self.table_of_feature)]
        if self.crossnet is not None:
            inter = self.crossnet(torch.cat([x] + pooled, dim=1))
        else:
            t = torch.stack([x] + pooled, dim=1)  # [B, F + 1, D]
            z = torch.bmm(t, t.transpose(1, 2))
            i, j = self.pairs
            inter = torch.cat([x, z[:, i, j]], dim=1)
        return self.top(inter).squeeze(1)


# ---- batches ----


def zipf_ids(rows, count, alpha, generator, device):
    """Rows drawn like the synthetic generator's: a continuous Zipf rank by the inverse CDF, then
    an affine bijection that scatters the hot ranks over the table."""
    u = torch.rand(count, generator=generator, device=device, dtype=torch.float64)
    one_minus = 1.0 - alpha
    if abs(one_minus) < 1e-9:
        x = torch.exp(u * math.log(rows + 1.0))
    else:
        x = torch.pow(1.0 + u * ((rows + 1.0) ** one_minus - 1.0), 1.0 / one_minus)
    rank = (x.to(torch.int64) - 1).clamp_(0, rows - 1)
    mul = 1
    for candidate in range(rows // 2 + 1, rows):
        if math.gcd(candidate, rows) == 1:
            mul = candidate
            break
    return (rank * mul + rows // 3) % rows


def make_batches(config, count, device, seed):
    model = config["model"]
    batch = config["data"]["batch_size"]
    alpha = (config["data"].get("synthetic") or {}).get("zipf_alpha", 1.05)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    feature_rows, feature_bag = [], []
    for t in model["tables"]:
        for _ in t["feature_names"]:
            feature_rows.append(t["num_embeddings"])
            feature_bag.append(max(1, round(t["pooling_factor"])))
    batches = []
    for _ in range(count):
        dense = torch.rand(batch, model["dense_in_features"], generator=generator, device=device)
        labels = torch.randint(0, 2, (batch,), generator=generator, device=device).float()
        ids = [zipf_ids(r, batch * l, alpha, generator, device)
               for r, l in zip(feature_rows, feature_bag)]
        offsets = [torch.arange(0, batch * l, l, device=device) for l in feature_bag]
        batches.append((dense, ids, offsets, labels))
    return batches, sum(feature_bag)


def optimizer(params, opt, sparse):
    """The config's optimizer in torch.optim; row-wise Adagrad becomes element-wise Adagrad."""
    kind, lr, decay = opt["type"], opt["learning_rate"], opt.get("weight_decay", 0.0)
    if sparse and decay != 0:
        sys.exit("weight_decay on a table: torch.optim's sparse updates do not take it")
    if kind in ("adagrad", "rowwise_adagrad"):
        return torch.optim.Adagrad(params, lr=lr, eps=opt["eps"], weight_decay=decay,
                                   initial_accumulator_value=opt["initial_accumulator_value"])
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=decay)
    if kind == "adam":
        if sparse:
            return torch.optim.SparseAdam(params, lr=lr, betas=(opt["beta1"], opt["beta2"]),
                                          eps=opt["eps"])
        return torch.optim.Adam(params, lr=lr, betas=(opt["beta1"], opt["beta2"]),
                                eps=opt["eps"], weight_decay=decay)
    sys.exit(f"optimizer type {kind}: this baseline has sgd, adagrad, rowwise_adagrad, adam")


# ---- the two implementations: forward(batch) -> logits, the optimizers to step, the batches in
# the form forward takes, and the tables' bytes ----


def build_torch(config, device, batches):
    model = DLRM(config["model"]).to(device)
    sparse = list(model.embeddings.parameters())
    dense = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")]
    optimizers = [optimizer(dense, config["optimizer"]["dense"], sparse=False),
                  optimizer(sparse, config["optimizer"]["sparse"], sparse=True)]

    def forward(batch):
        dense_x, ids, offsets, _ = batch
        return model(dense_x, ids, offsets)

    return forward, optimizers, batches, sum(p.numel() * p.element_size() for p in sparse)


def build_torchrec(config, device, batches):
    try:
        import torch.distributed as dist
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
        from torchrec.distributed import DistributedModelParallel
        from torchrec.models.dlrm import DLRM as TorchRecDLRM, DLRM_DCN
        from torchrec.modules.embedding_configs import PoolingType
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
        from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    except ImportError as e:
        sys.exit(f"--impl torchrec needs torchrec and fbgemm_gpu: {e}")
    model_config = config["model"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:  # a free port: one process, nothing to agree on
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    tables = [EmbeddingBagConfig(name=t["name"], embedding_dim=t["embedding_dim"],
                                 num_embeddings=t["num_embeddings"],
                                 feature_names=t["feature_names"],
                                 pooling=PoolingType.MEAN if t["pooling"] == "mean"
                                 else PoolingType.SUM)
              for t in model_config["tables"]]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    common = dict(embedding_bag_collection=ebc,
                  dense_in_features=model_config["dense_in_features"],
                  dense_arch_layer_sizes=model_config["bottom_mlp"],
                  over_arch_layer_sizes=model_config["top_mlp"], dense_device=device)
    if model_config["type"] == "dlrm_dcn":
        model = DLRM_DCN(dcn_num_layers=model_config["dcn"]["num_layers"],
                         dcn_low_rank_dim=model_config["dcn"]["low_rank"], **common)
    else:
        model = TorchRecDLRM(**common)
    opt = config["optimizer"]["sparse"]
    fused = {"sgd": (torch.optim.SGD, {}),
             "adagrad": (torch.optim.Adagrad, {"eps": opt["eps"]}),
             "rowwise_adagrad": (RowWiseAdagrad, {"eps": opt["eps"]}),
             "adam": (torch.optim.Adam, {"eps": opt["eps"],
                                         "betas": (opt["beta1"], opt["beta2"])})}
    if opt["initial_accumulator_value"] != 0 or opt["weight_decay"] != 0:
        sys.exit("FBGEMM's fused optimizers here start Adagrad at 0 and have no weight_decay")
    if opt["type"] not in fused:
        sys.exit(f"optimizer type {opt['type']}: the fused optimizers here are {list(fused)}")
    cls, kwargs = fused[opt["type"]]
    apply_optimizer_in_backward(cls, model.sparse_arch.parameters(),
                                {"lr": opt["learning_rate"], **kwargs})
    dmp = DistributedModelParallel(module=model, device=device)
    kinds = sorted({f"{ps.sharding_type}/{ps.compute_kernel}"
                    for module in dmp.plan.plan.values() for ps in module.values()})
    print(f"torchrec plan     {', '.join(kinds)} (sharding type / compute kernel)")
    dense = [p for n, p in dmp.named_parameters() if "embedding_bags" not in n]
    optimizers = [optimizer(dense, config["optimizer"]["dense"], sparse=False)]
    keys = [f for t in model_config["tables"] for f in t["feature_names"]]
    batch_size = config["data"]["batch_size"]
    kjt_batches = []
    for dense_x, ids, _, labels in batches:
        lengths = torch.cat([torch.full((batch_size,), len(i) // batch_size, dtype=torch.int64,
                                        device=device) for i in ids])
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(ids),
                                                  lengths=lengths)
        kjt_batches.append((dense_x, kjt, labels))

    def forward(batch):
        dense_x, kjt, _ = batch
        return dmp(dense_x, kjt).squeeze(1)

    table_bytes = sum(t["num_embeddings"] * t["embedding_dim"] * 4 for t in model_config["tables"])
    return forward, optimizers, kjt_batches, table_bytes


# ---- the timed loop ----


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--shardrec", default="build/shardrec", help="the binary that resolves it")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--impl", choices=["torch", "torchrec"], default="torch")
    ap.add_argument("--math", choices=["f32", "tf32", "bf16"], default="f32")
    ap.add_argument("--device", default=None, help="default: cuda where available, else cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batches", type=int, default=4, help="distinct batches, cycled")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results as one JSON object")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batches < 1:
        sys.exit("--steps must be >= 1, --warmup >= 0 and --batches >= 1")

    config = resolved_config(args.shardrec, args.config, args.set)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = args.math == "tf32"
    torch.backends.cudnn.allow_tf32 = args.math == "tf32"

    batches, ids_per_sample = make_batches(config, args.batches, device, args.seed)
    build = build_torchrec if args.impl == "torchrec" else build_torch
    forward, optimizers, batches, table_bytes = build(config, device, batches)
    batch = config["data"]["batch_size"]
    loss_fn = nn.BCEWithLogitsLoss()
    use_autocast = args.math == "bf16"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_autocast)

    def step(i):
        current = batches[i % len(batches)]
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        with autocast:  # the loss too, as a training script under autocast has it
            logits = forward(current)
            loss = loss_fn(logits.float(), current[-1])
        loss.backward()
        for opt in optimizers:
            opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    if cuda:
        torch.cuda.synchronize(device)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
    times_ms = []
    wall0 = time.perf_counter()
    for i in range(args.steps):
        if cuda:
            events[i].record()
        t0 = time.perf_counter()
        loss = step(args.warmup + i)
        if not cuda:
            times_ms.append((time.perf_counter() - t0) * 1e3)
    if cuda:
        events[args.steps].record()
        torch.cuda.synchronize(device)
        times_ms = [events[i].elapsed_time(events[i + 1]) for i in range(args.steps)]
    wall_ms = (time.perf_counter() - wall0) * 1e3 / args.steps
    final_loss = float(loss)
    if not math.isfinite(final_loss):
        sys.exit(f"the loss is {final_loss} after {args.warmup + args.steps} steps")

    ordered = sorted(times_ms)
    median = statistics.median(ordered)
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    result = {
        "config": args.config,
        "model": config["model"]["type"],
        "tables": len(config["model"]["tables"]),
        "batch_size": batch,
        "ids_per_sample": ids_per_sample,
        "impl": args.impl,
        "math": args.math,
        "autocast": f"{device.type} bfloat16" if use_autocast else None,
        "device": f"{device} ({device_name})",
        "torch": torch.__version__,
        "steps": args.steps,
        "step_ms_median": median,
        "step_ms_p10": percentile(ordered, 0.1),
        "step_ms_p90": percentile(ordered, 0.9),
        "step_ms_wall": wall_ms,
        "samples_per_s": batch / (median / 1e3),
        "table_mib": table_bytes / 2**20,
        "final_loss": final_loss,
    }
    impl = "TorchRec (DistributedModelParallel, fused)" if args.impl == "torchrec" else "eager"
    print(f"baseline          PyTorch {torch.__version__} {impl}, {result['device']}, "
          f"--math {args.math}" + (f" (autocast {device.type} bfloat16)" if use_autocast else ""))
    print(f"config            {args.config} ({result['model']}, {result['tables']} tables, "
          f"batch {batch}, {ids_per_sample} ids per sample, tables {result['table_mib']:.1f} MiB)")
    print(f"step time         median {median:.3f} ms (p10 {result['step_ms_p10']:.3f}, "
          f"p90 {result['step_ms_p90']:.3f}; wall {wall_ms:.3f} per step)")
    print(f"throughput        {result['samples_per_s']:.0f} samples/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
