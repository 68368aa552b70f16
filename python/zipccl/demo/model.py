"""A small byte-level GPT: the shape of the models zipccl is for, at a size
that trains a hundred steps a minute on two CPU cores.

Pre-norm blocks of causal self-attention and a GELU MLP, learned positions,
no dropout (so runs are deterministic and two backends can be compared step
by step).

The blocks also run under tensor parallelism (``--lossy tp-fp8``, see
``tensor_parallel``): attention takes its heads from the width of the qkv
output it gets (a rank's shard holds n_heads / TP of them), and the
residual stream may be a rank's slice of the sequence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256  # bytes
    seq_len: int = 128
    d_model: int = 192
    n_layers: int = 4
    n_heads: int = 6

    def as_dict(self) -> dict:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Shapes from qkv's output, not x: under tensor parallelism x is
        # this rank's slice of the sequence and qkv's output the whole
        # sequence with this rank's heads (-1: however many those are).
        qkv = self.qkv(self.ln1(x))
        b, t, _ = qkv.shape
        q, k, v = (z.view(b, t, -1, self.head_dim).transpose(1, 2) for z in qkv.chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-byte cross-entropy."""
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        # The loss in float32 even when the blocks compute in bfloat16
        # (FSDP2 mixed precision): a bfloat16 loss is quantised to 0.4%,
        # which would hide (or fake) differences between two runs.
        logits = self.head(self.ln(x)).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # DTensors count their global size


def tensor_parallel(model: GPT, mesh: DeviceMesh) -> GPT:
    """Shards model over the 1-D mesh with torch's tensor parallelism,
    Megatron's layout with sequence parallelism: qkv and fc column-wise,
    proj and out row-wise, the LayerNorms on sequence slices. So every
    block all-gathers the sequence before qkv and fc and reduce-scatters
    it after proj and out, forward and backward; the embeddings reduce-
    scatter into sequence slices, and the head gathers its input and its
    logits (the loss sees them whole). Every rank must hold the same
    weights (same seed): each keeps its own shard of them rather than
    receiving rank 0's, which would cost a scatter per parameter.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    tp = mesh.size()
    cfg = model.cfg
    if cfg.n_heads % tp or cfg.seq_len % tp:
        raise ValueError(f"tensor parallelism over {tp} ranks needs n_heads ({cfg.n_heads}) and seq_len "
                         f"({cfg.seq_len}) divisible by {tp}")
    for block in model.blocks:
        _group_qkv_by_rank(block.qkv, tp)
        parallelize_module(block, mesh, {
            "ln1": SequenceParallel(),
            "qkv": ColwiseParallel(input_layouts=Shard(1)),
            "proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln2": SequenceParallel(),
            "fc": ColwiseParallel(input_layouts=Shard(1)),
            "out": RowwiseParallel(output_layouts=Shard(1)),
        }, src_data_rank=None)
    parallelize_module(model, mesh, {
        "tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "pos": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),  # (seq, d): dim 0
        "ln": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }, src_data_rank=None)
    return model


@torch.no_grad()
def _group_qkv_by_rank(qkv: nn.Linear, tp: int) -> None:
    """Reorders qkv's output rows from (q, k, v) to (q_0, k_0, v_0, q_1, ...),
    rank r's heads together, so that rank r's column-wise shard holds its
    own heads' q, k and v and Block.forward's chunk(3) finds them. A fixed
    permutation of the same weights: the model computes the same function."""
    d = qkv.in_features
    for p in (qkv.weight, qkv.bias):
        p.copy_(p.view(3, tp, d // tp, -1).transpose(0, 1).reshape(p.shape))
