"""Figures: attention heatmaps, positional encodings, learning-rate schedules, kernel regression.

Everything draws with matplotlib's object-oriented API on the headless Agg backend and
returns ``matplotlib.figure.Figure`` objects (saved to PNG when a path is given): attention
maps in :mod:`~keras_attn.viz.heatmaps`, the rest in :mod:`~keras_attn.viz.figures`.

Example:
    >>> from keras_attn import viz
    >>> viz.show_heatmaps(np.eye(10).reshape((1, 1, 10, 10)), path="eye.png")
    >>> viz.plot_translation_attention(Translator.from_run_dir("runs/dates"),
    ...                                "le 3 mars 2021", path_prefix="figures/dates")

References: D2L 11.1 (``show_heatmaps``), 11.2 (Nadaraya–Watson), 11.6 (positional
encoding), 11.7 (Transformer attention maps); Vaswani et al. 2017, section 5.3 (schedule).

May import: :mod:`keras_attn.models`, :mod:`keras_attn.layers`,
:mod:`keras_attn.schedules` and what is below them; never translation, training, export,
serve or cli (a Translator is passed in).
"""
import os
import sys

import matplotlib

# Headless rendering. Leave a backend the user already chose (pyplot imported, or
# MPLBACKEND set, e.g. by Jupyter) alone.
if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
    matplotlib.use("Agg")

from keras_attn.viz._common import DPI  # noqa: E402
from keras_attn.viz.figures import (kernel_regression_demo, leave_one_out,  # noqa: E402
                                    plot_positional_encoding, plot_schedules)
from keras_attn.viz.heatmaps import (PAD_LABEL, plot_attention_maps,  # noqa: E402
                                     plot_translation_attention, show_heatmaps, token_labels)

__all__ = ["DPI", "PAD_LABEL", "kernel_regression_demo", "leave_one_out", "plot_attention_maps",
           "plot_positional_encoding", "plot_schedules", "plot_translation_attention",
           "show_heatmaps", "token_labels"]
