"""torch's own DTensor test model (torch.testing._internal...common_dtensor.Attention), held in
my block, parallelized as torch's tests do: DTensor outputs kept (use_local_output=False)."""
import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from dataclasses import dataclass
import torch.nn.functional as F

# verbatim from torch/testing/_internal/distributed/_tensor/common_dtensor.py (torch 2.13)
@dataclass
class ModelArgs:
    n_layers: int = 2
    vocab_size: int = 8
    max_seq_len: int = 16
    dim: int = 16
    n_heads: int = 4
    dropout_p: float = 0.1
    use_attn_mask: bool = True
    weight_tying: bool = True
    checkpoint_activations: bool = False
    num_experts: int = 0


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        if args.dim % args.n_heads != 0:
            raise AssertionError(
                f"Expected args.dim % args.n_heads == 0, got {args.dim} % {args.n_heads}"
            )
        self.head_dim = args.dim // args.n_heads
        self.n_heads = args.n_heads
        self.dropout_p = args.dropout_p
        self.resid_dropout = nn.Dropout(args.dropout_p)
        self.use_attn_mask = args.use_attn_mask

        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x):
        bsz, seq_len, _ = x.size()
        queries, keys, values = self.wq(x), self.wk(x), self.wv(x)
        queries = queries.view(bsz, seq_len, self.n_heads, self.head_dim)
        keys = keys.view(bsz, seq_len, self.n_heads, self.head_dim)
        values = values.view(bsz, seq_len, self.n_heads, self.head_dim)

        queries = queries.transpose(1, 2)  # (bsz, n_heads, seq_len, head_dim)
        keys = keys.transpose(1, 2)  # (bsz, n_heads, seq_len, head_dim)
        values = values.transpose(1, 2)  # (bsz, n_heads, seq_len, head_dim)

        output = F.scaled_dot_product_attention(
            queries,
            keys,
            values,
            None,
            self.dropout_p if self.training else 0,
            self.use_attn_mask,
        )
        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.resid_dropout(self.wo(output))




class MyBlock(nn.Module):
    def __init__(self, device_mesh, dim=64, n_heads=4):
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.LayerNorm(dim)
        self.attention = Attention(ModelArgs(dim=dim, n_heads=n_heads, dropout_p=0.0))
        plan = {
            "wq": ColwiseParallel(use_local_output=False),
            "wk": ColwiseParallel(use_local_output=False),
            "wv": ColwiseParallel(use_local_output=False),
            "wo": RowwiseParallel(),
        }
        parallelize_module(self.attention, device_mesh, plan)

    def forward(self, x):
        return x + self.attention(self.norm(x))
