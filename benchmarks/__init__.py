"""The benchmarks that are rerun (commands: docs/benchmarks.md), importable from the
repository root: the suite of ``scripts/bench.py`` (``cli``: ``mha``, ``train``,
``decode``, ``serve`` with ``serve_engine``; ``timing``, ``common``, ``references``,
``report``), ``serve_load``, ``artefact_agreement``, ``step_ops``, ``passthrough``, and
``results`` (where a run writes). Nothing here imports ``scripts/``.
"""
