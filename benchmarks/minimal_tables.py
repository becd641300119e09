"""The floor for a shape-backend run: import what a run needs (numpy, Typer, Rich) and let Rich
draw the same tables, read from a JSON file that bench.py wrote from attntrace's own pieces.

    python minimal_tables.py TABLES.json

What attntrace adds above this is its own work: options, the configuration, the shape trace,
the costs and laying the rows out; Rich drawing the tables (about 0.1 s at llama-3-70b) is in
both. The JSON holds a list of pieces: a string (a line of text, "" for a blank line) or a table
``{"title", "columns": [{"header", "justify", "no_wrap"}], "rows": [[cell, ...]], ...}`` with
the table's box, edge, header, padding and title settings.
"""

import json
import sys

import numpy  # noqa: F401  (a run imports it: part of the floor)
import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

app = typer.Typer(add_completion=False)


def table(piece: dict) -> Table:
    drawn = Table(
        title=piece["title"],
        box=getattr(box, piece["box"]) if piece["box"] else None,
        show_edge=piece["show_edge"],
        show_header=piece["show_header"],
        padding=tuple(piece["padding"]),
        pad_edge=piece["pad_edge"],
        title_justify=piece["title_justify"],
    )
    for column in piece["columns"]:
        drawn.add_column(column["header"], justify=column["justify"], no_wrap=column["no_wrap"])
    for row in piece["rows"]:
        drawn.add_row(*row)
    return drawn


@app.command()
def draw(tables: str) -> None:
    console = Console()
    with open(tables, encoding="utf-8") as file:
        pieces = json.load(file)
    for piece in pieces:
        console.print(table(piece) if isinstance(piece, dict) else Text(piece))


if __name__ == "__main__":
    sys.exit(app())
