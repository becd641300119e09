"""The start-up floor for `attntrace run --heads 12 --hidden 768`: the least a hand-written
script needs to print the same kind of output (seeded weights, the 18-step attention on numpy,
Rich tables of the steps with their ops and axes, the costs, the parameters and one head's
weights, as `attntrace run` prints them), parsed by Typer; Rich draws every table.

    python minimal_run.py --heads 12 --hidden 768

Benchmarks compare attntrace against this script, run the same way, in the same process order.
(A copy of the shared start-up floor, ../shared/bench/minimal_run.py, so that bench.py runs
anywhere; formatted with ruff, the code unchanged.)
"""

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False)


@app.command()
def run(seq: int = 3, hidden: int = 768, heads: int = 12, seed: int = 0) -> None:
    d = hidden // heads
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((seq, hidden), dtype=np.float32)
    p = {
        f"{k}_{c}": rng.standard_normal(
            (hidden, hidden) if k == "w" else (hidden,), dtype=np.float32
        )
        * (hidden**-0.5 if k == "w" else 0.1)
        for c in "qkvo"
        for k in "wb"
    }
    steps = [("x", x)]
    proj = {c: x @ p[f"w_{c}"].T + p[f"b_{c}"] for c in "qkv"}
    steps += [(f"{c}_proj", proj[c]) for c in "qkv"]
    split = {c: proj[c].reshape(seq, heads, d) for c in "qkv"}
    steps += [(f"{c}_heads", split[c]) for c in "qkv"]
    q, k, v = (split[c].transpose(1, 0, 2) for c in "qkv")
    steps += [("q", q), ("k", k), ("v", v)]
    k_t = k.transpose(0, 2, 1)
    scores = q @ k_t
    scaled = scores / np.sqrt(d)
    e = np.exp(scaled - scaled.max(-1, keepdims=True))
    weights = e / e.sum(-1, keepdims=True)
    context = weights @ v
    context_heads = context.transpose(1, 0, 2)
    merged = context_heads.reshape(seq, hidden)
    output = merged @ p["w_o"].T + p["b_o"]
    steps += [
        ("k_t", k_t),
        ("scores", scores),
        ("scaled", scaled),
        ("weights", weights),
        ("context", context),
        ("context_heads", context_heads),
        ("merged", merged),
        ("output", output),
    ]
    ops = (
        ["x"] + [f"x @ w_{c}.T + b_{c}" for c in "qkv"] + [f"{c}_proj.view(S, h, d)" for c in "qkv"]
    )
    ops += [f"{c}_heads.transpose(0, 1)" for c in "qkv"]
    ops += [
        "k.transpose(-2, -1)",
        "q @ k_t",
        f"scores / sqrt({d})",
        "softmax(scaled, dim=-1)",
        "weights @ v",
        "context.transpose(0, 1)",
        "context_heads.reshape(S, H)",
        "merged @ w_o.T + b_o",
    ]
    axes = (
        ["(S, H)"] * 4 + ["(S, h, d)"] * 3 + ["(h, S, d)"] * 3 + ["(h, d, S)"] + ["(h, S, S)"] * 3
    )
    axes += ["(h, S, d)", "(S, h, d)", "(S, H)", "(S, H)"]
    console = Console()
    console.print(
        f"attntrace  multi-head self-attention  S={seq}  H={hidden}  h={heads}  d={d}  "
        "numpy float32"
    )
    console.print(
        " → ".join(
            str(t.shape)
            for n, t in steps
            if n in ("x", "q_heads", "q", "scores", "context", "context_heads", "output")
        )
    )
    table = Table(title="steps (every tensor float32)")
    for col in ("#", "step", "op", "shape", "axes"):
        table.add_column(col)
    for i, ((name, t), op, ax) in enumerate(zip(steps, ops, axes, strict=True)):
        table.add_row(str(i), name, op, str(t.shape), ax)
    console.print(table)
    costs = Table(title="costs (FLOPs; 1 MAC = 2 FLOPs)")
    for col in ("#", "step", "FLOPs", "bytes"):
        costs.add_column(col)
    flops = {
        "q_proj": 2 * seq * hidden * hidden,
        "scores": 2 * heads * seq * seq * d,
        "context": 2 * heads * seq * seq * d,
        "output": 2 * seq * hidden * hidden,
    }
    for i, (name, t) in enumerate(steps):
        costs.add_row(str(i), name, f"{flops.get(name, 0):,}", f"{t.nbytes:,}")
    costs.add_row("", "total", f"{sum(flops.values()):,}", f"{sum(t.nbytes for _, t in steps):,}")
    console.print(costs)
    params = Table(title="parameters")
    for col in ("name", "shape", "axes", "count", "bytes"):
        params.add_column(col)
    for name, t in p.items():
        params.add_row(
            name, str(t.shape), "(H, H)" if t.ndim == 2 else "(H,)", f"{t.size:,}", f"{t.nbytes:,}"
        )
    console.print(params)
    heat = Table(title="attention weights, head 0")
    heat.add_column("")
    for j in range(seq):
        heat.add_column(f"k{j}")
    heat.add_column("sum")
    for i, row in enumerate(weights[0]):
        heat.add_row(f"q{i}", *(f"{w:.3f}" for w in row), f"{row.sum():.2f}")
    console.print(heat)


if __name__ == "__main__":
    app()
