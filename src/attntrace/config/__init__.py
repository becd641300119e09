"""Stage 1, options to a validated config: :class:`AttentionConfig` (the sizes of one attention,
frozen and checked once) and the presets of real models that fill it in.

- :mod:`attntrace.config.attention_config`: AttentionConfig, its dtypes and validation.
- :mod:`attntrace.config.variants`: ``--rope-scaling`` and ``--relative-bias`` read into records.
- :mod:`attntrace.config.presets`: named real-model sizes, ``config.json`` and model folders.

Nothing here imports the engine, the renderers or the CLI (docs/architecture.md).
"""
