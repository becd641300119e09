"""A Hugging Face Llama (random init, saved by transformers): the ranks' outputs of --tp 2
--cp 2, saved rank by rank and put together by hand in the load-balanced order, equal what
transformers' own attention layer gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.slow
def test_ranks_of_a_saved_llama_layer_give_transformers_output(tmp_path: Path) -> None:
    from hf_models import build, capture

    sizes = {
        "vocab_size": 32,
        "hidden_size": 32,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
    }
    model = build("Llama", tmp_path / "hf", **sizes)
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    got = capture(model, model.model.layers[1].self_attn, ids)
    np.save(tmp_path / "x.npy", got.x)
    out = np.zeros_like(got.output)  # (B, S, H)
    chunks = {0: [0, 3], 1: [1, 2]}  # cp rank c holds chunks c and 2C-1-c of S/2C = 2 tokens
    for rank in range(4):
        result = CliRunner().invoke(
            app,
            [
                "run",
                "--model",
                str(tmp_path / "hf"),
                "--layer",
                "1",
                "--input",
                str(tmp_path / "x.npy"),
                "--tp",
                "2",
                "--cp",
                "2",
                "--rank",
                str(rank),
                "--save",
                str(tmp_path / f"r{rank}.npz"),
            ],
        )
        assert result.exit_code == 0, result.output
        with np.load(tmp_path / f"r{rank}.npz") as npz:
            local = npz["output"]  # (B, S/C, H): this rank's tokens, summed over the TP group
        assert local.shape == (2, 4, 32)
        rows = [i for chunk in chunks[rank // 2] for i in range(2 * chunk, 2 * chunk + 2)]
        if rank % 2 == 0:
            out[:, rows] = local
        else:  # the TP group's other rank holds the same all-reduced output
            np.testing.assert_allclose(local, out[:, rows], atol=1e-6)
    np.testing.assert_allclose(out, got.output, atol=1e-5)
