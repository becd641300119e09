"""(A copy of the shared start-up floor, ../shared/bench/minimal_run.py, so that bench.py runs anywhere.)

The start-up floor for `attntrace run --heads 12 --hidden 768`: the least a hand-written
script needs to print the same kind of output (seeded weights, the 18-step attention on numpy,
a Rich table of the steps, the parameters and one head's weights), parsed by Typer.

    python minimal_run.py --heads 12 --hidden 768

Benchmarks compare attntrace against this script, run the same way, in the same process order.
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
    console = Console()
    table = Table(title="steps")
    for col in ("#", "step", "shape", "dtype"):
        table.add_column(col)
    for i, (name, t) in enumerate(steps):
        table.add_row(str(i), name, str(t.shape), str(t.dtype))
    console.print(table)
    params = Table(title="parameters")
    for col in ("name", "shape", "count"):
        params.add_column(col)
    for name, t in p.items():
        params.add_row(name, str(t.shape), f"{t.size:,}")
    console.print(params)
    heat = Table(title="attention weights, head 0")
    for j in range(seq):
        heat.add_column(f"k{j}")
    for row in weights[0]:
        heat.add_row(*(f"{w:.3f}" for w in row))
    console.print(heat)


if __name__ == "__main__":
    app()
