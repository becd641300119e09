"""The planted sharding bugs: each a one-line change to one of the correct codes here, saved
as examples/distributed/<key>.py, with the bug diff --nproc must name, the first rank where it
shows and the line (of the planted file) of the first tensor that holds its numbers."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Planted:
    key: str  # the file name in examples/distributed/, and the catalogue's key
    source: str  # the correct code it changes (tests/data/distributed/)
    name: str  # the class or function diff builds
    old: str  # the correct line (stripped)
    new: str  # the planted line (stripped, same indentation)
    layout: str  # "tp" or "ring" / "ulysses" (--cp)
    rank: int  # the first rank where it shows
    shows: str  # a fragment of the line diff blames (the first tensor holding its numbers)
    init: dict = field(default_factory=dict)  # --init
    config: dict = field(default_factory=dict)  # the diff flags beyond the sizes
    nproc: int = 2
    #: the line the report names (its location or a caller's) minus the planted line: 0 where
    #: it names the planted line; otherwise the planted line makes no float tensor (a deleted
    #: collective, a Python scale or slice in __init__, int positions, an `if`) or the first
    #: tensor found is later than it (see /work/notes/h44c.md)
    named: int = 0


TP = {"causal": True}
CP = {"causal": True, "rope": True}

PLANTED = (
    Planted(
        "tp-no-all-reduce", "megatron_tp.py", "ParallelSelfAttention",
        "dist.all_reduce(partial)", "# dist.all_reduce(partial)",
        "tp", 0, "partial = F.linear(x, self.weight)", {"causal": True}, TP, named=-1,
    ),
    Planted(
        "tp-bias-before-and-after", "megatron_tp.py", "ParallelSelfAttention",
        "partial = F.linear(x, self.weight)", "partial = F.linear(x, self.weight, self.bias)",
        "tp", 0, "partial = F.linear(x, self.weight, self.bias)", {"causal": True}, TP,
    ),
    Planted(
        "tp-scale-local-heads", "megatron_tp.py", "ParallelSelfAttention",
        "self.scale = 1.0 / math.sqrt(self.head_dim)",
        "self.scale = 1.0 / math.sqrt(hidden // self.local_heads)",
        "tp", 0, "scores = q @ k.transpose(-2, -1) * self.scale", {"causal": True}, TP, named=14,
    ),
    Planted(
        "kv-not-replicated", "megatron_tp.py", "ParallelSelfAttention",
        "first, count = rank * kv_heads // world, 1", "first, count = rank % kv_heads, 1",
        "tp", 1, "return F.linear(x, self.weight, self.bias)",
        {"causal": True, "kv_heads": 2}, {"causal": True, "kv_heads": 2}, 4, named=6,
    ),
    Planted(
        "tp-global-heads-view", "dtensor_tp.py", "TPAttention",
        "return t.view(B, S, -1, self.head_dim).transpose(1, 2)  # the rank's heads: -1",
        "return t.view(B, S, self.heads, -1).transpose(1, 2)  # the rank's heads: -1",
        "tp", 0, "context = (weights @ v).transpose(1, 2).reshape(B, S, -1)",
        {"causal": True}, TP, named=10,
    ),
    Planted(
        "tp-scale-local-width", "dtensor_tp.py", "TPAttention",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(self.q_proj.weight.to_local().shape[0] "
        "// self.heads)",
        "tp", 0, "scores = q @ k.transpose(-2, -1)", {"causal": True}, TP,
    ),
    Planted(
        "cp-rope-restart", "ring.py", "RingAttention",
        "positions = torch.arange(rank * s, (rank + 1) * s)", "positions = torch.arange(s)",
        "ring", 1, "return x * emb.cos().float() + rotate_half(x) * emb.sin().float()", {}, CP,
        named=1,
    ),
    Planted(
        "ring-merge-mean", "ring.py", "RingAttention",
        "out = out * w_old.unsqueeze(-1) + block_out * w_new.unsqueeze(-1)",
        "out = (out + block_out) / 2",
        "ring", 1, "out = (out + block_out) / 2", {}, CP,
    ),
    Planted(
        "cp-causal-local", "ring.py", "RingAttention",
        "q, k, v, scale, causal=self.causal and source == rank",
        "q, k, v, scale, causal=self.causal",
        "ring", 1, "scores = scores.masked_fill(", {}, CP,
    ),
    Planted(
        "ring-local-keys-only", "ring.py", "RingAttention",
        "if not self.causal or source <= rank:", "if source == rank:",
        "ring", 1, "out = torch.softmax(scores, dim=-1) @ v", {}, CP,
        named=1,
    ),
    Planted(
        "ulysses-heads-order", "ulysses.py", "UlyssesAttention",
        "send = t.reshape(B, s, world, h // world, d).permute(2, 0, 1, 3, 4).contiguous()",
        "send = t.reshape(B, s, h // world, world, d).permute(3, 0, 1, 2, 4).contiguous()",
        "ulysses", 0, "return got.permute(", {}, CP, named=3,
    ),
    Planted(
        "ulysses-seq-order", "ulysses.py", "UlyssesAttention",
        "return got.permute(1, 0, 2, 3, 4).reshape(B, world * s, h // world, d)",
        "return got.permute(1, 2, 0, 3, 4).reshape(B, world * s, h // world, d)",
        "ulysses", 0, "return got.permute(", {}, CP,
    ),
    Planted(
        "cp-rope-restart-ulysses", "ulysses.py", "UlyssesAttention",
        "positions = torch.arange(rank * s, (rank + 1) * s)", "positions = torch.arange(s)",
        "ulysses", 1, "return x * emb.cos().float() + rotate_half(x) * emb.sin().float()", {}, CP,
        named=1,
    ),
)


def planted_text(p: Planted, correct: str) -> str:
    """The planted file: the correct code with the one line changed, and a first line saying
    which bug it holds."""
    lines = correct.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == p.old]
    assert len(hits) == 1, (p.key, hits)
    i = hits[0]
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = f"{indent}{p.new}\n"
    head = f"# planted sharding bug ({p.key}): line {i + 2} reads `{p.new}`\n"
    return head + "".join(lines)


def planted_line(p: Planted, text: str) -> int:
    """The line number of the planted line in the planted file."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.strip() == p.new)
