"""``attntrace explore``: an interactive page on 127.0.0.1 to turn the sizes of an attention and
watch every shape follow, step by step, in English or Chinese.

- :mod:`api`: the page's controls read into an ``AttentionConfig``, traced by the engine, and
  the JSON the page draws (steps, shapes, costs, explanations, numbers at small sizes);
- :mod:`prompt_rows`: with ``--prompt``, the weights of every layer of a model on its tokens;
- :mod:`page`: the one HTML document (style and script inline, nothing fetched);
- :mod:`server`: the standard library's ThreadingHTTPServer, a token in the URL, 403 without
  it, a one-line 400 for a bad parameter;
- :func:`serve`: what the command calls: start, print the URL, open a browser, stop on Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def serve(
    *,
    port: int = 0,
    lang: str = "en",
    model_dir: Path | None = None,
    prompt: str | None = None,
    open_browser: bool = True,
    say: Callable[[str], None] = print,
) -> None:
    """Serve the page until Ctrl-C: print its URL (token included), open it unless
    ``open_browser`` is False, then stop cleanly."""
    from attntrace.explore.server import ExploreServer, ExploreState

    state = ExploreState(lang=lang)
    if prompt is not None:
        from attntrace.explore.prompt_rows import prompt_rows

        state.prompt = prompt_rows(prompt, model_dir)
    server = ExploreServer(state, port)
    say(f"attntrace explore: {server.url}")
    say("(Ctrl-C stops it)")
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("attntrace explore: stopped")
    finally:
        server.server_close()
