"""The benchmarks that are rerun, outside the package (importable from the repository root;
the tests find it through ``pytest.ini``'s ``pythonpath``). Commands: docs/benchmarks.md.

- The suite of ``scripts/bench.py`` (``cli``): ``mha`` (attention kernels), ``train``
  (training speed), ``decode`` (cached decoding), ``serve`` (every artefact offline; each
  engine in its own process, ``serve_engine``). ``timing``: interleaved timing, summaries.
  ``common``: threads, machine, matmul peak, FLOP counts, op profiles. ``references``: our
  encoder-decoder and keras_hub's. ``report``: results -> Markdown.
- ``serve_load``: ``keras-attn serve`` and LibreTranslate under HTTP load.
- ``artefact_agreement``: every artefact of a run against ``Translator``.
- ``step_ops``: the ops and milliseconds one decoding step adds in the SavedModel, run in a
  session as TF Serving runs it.
- ``passthrough``: spans that must not be translated, through a run's artefacts.
- ``results``: where a run writes (a new folder under ``benchmarks/results/``).

Nothing here imports ``scripts/``; scripts may import from here.
"""
