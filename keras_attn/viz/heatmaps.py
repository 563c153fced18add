"""Attention heatmaps: D2L's ``show_heatmaps`` grid and every attention map of a translator.

References: D2L 11.1 (``show_heatmaps``), 11.7 (the Transformer's attention maps).
"""
import matplotlib
import numpy as np
from matplotlib.figure import Figure

from keras_attn.viz._common import DPI, save, to_numpy

PAD_LABEL = "[PAD]"
_MAP_TITLES = {
    "encoder/self": "Encoder self-attention",
    "decoder/self": "Decoder self-attention (causal)",
    "decoder/cross": "Encoder–decoder attention",
}
_MAP_AXES = {  # (xlabel, ylabel) of each kind of map
    "encoder/self": ("Source keys", "Source queries"),
    "decoder/self": ("Target keys", "Target queries"),
    "decoder/cross": ("Source keys", "Target queries"),
}


def _check_labels(name, labels, size, what):
    if labels is not None and len(labels) != size:
        raise ValueError(f"`{name}` must have one label per {what} ({size}). "
                         f"Received: {name} with {len(labels)} labels")


def show_heatmaps(matrices, xlabel="Keys", ylabel="Queries", titles=None, cmap="Reds",
                  figsize=None, path=None, xticklabels=None, yticklabels=None, vmin=None,
                  vmax=None, shared_colorbar=True, suptitle=None, mask_zeros=False, dpi=DPI):
    """Grid of heatmaps ``(rows, cols, Q, K)`` with one colour scale, as D2L's ``show_heatmaps``.

    Args:
        matrices: array ``(rows, cols, Q, K)`` (or ``(Q, K)`` for a single map).
        xlabel, ylabel: axis names, written under the bottom row / left of the first column.
        titles: ``cols`` strings (one per column, repeated on every row) or ``rows`` lists
            of ``cols`` strings (one per panel).
        cmap: matplotlib colour map.
        figsize: inches; by default from the grid and matrix sizes.
        path: save the figure there as PNG (folders are created).
        xticklabels, yticklabels: ``K`` / ``Q`` strings (tokens) for every key / query.
        vmin, vmax: colour range; default ``min(0, data.min())`` .. ``data.max()`` over the
            whole grid.
        shared_colorbar: one colour bar and range for the grid (True), or one per panel.
        suptitle: title above the grid.
        mask_zeros: draw entries that are exactly 0 (masked keys) in white.
        dpi: resolution of the saved PNG.

    Returns:
        The ``matplotlib.figure.Figure``; its image axes hold the matrices
        (``ax.images[0].get_array()``, a masked array with ``mask_zeros``).

    Example:
        >>> show_heatmaps(weights[None, None], xticklabels=src, yticklabels=tgt, path="w.png")

    References: D2L 11.1.
    """
    matrices = to_numpy(matrices).astype("float32")
    if matrices.ndim == 2:
        matrices = matrices[None, None]
    if matrices.ndim != 4 or 0 in matrices.shape:
        raise ValueError("`matrices` must have shape (rows, cols, Q, K) or (Q, K). "
                         f"Received: matrices with shape={matrices.shape}")
    rows, cols, num_q, num_k = matrices.shape
    _check_labels("xticklabels", xticklabels, num_k, "key")
    _check_labels("yticklabels", yticklabels, num_q, "query")
    if titles is not None:
        titles = ([list(titles)] * rows if all(isinstance(t, str) for t in titles)
                  else [list(t) for t in titles])
        if len(titles) != rows or any(len(t) != cols for t in titles):
            raise ValueError(f"`titles` must hold {cols} strings or {rows} lists of {cols}. "
                             f"Received: titles={titles!r}")

    def color_range(data):
        finite = data[np.isfinite(data)]
        lo = (min(0.0, float(finite.min())) if finite.size else 0.0) if vmin is None else vmin
        hi = (float(finite.max()) if finite.size else 1.0) if vmax is None else vmax
        return lo, (hi if hi > lo else lo + 1.0)

    shared_range = color_range(matrices)
    if figsize is None:
        cell = 0.15 if (xticklabels is not None or yticklabels is not None) else 0.05
        width = min(max(2.0, cell * num_k + 0.6), 6.0)
        height = min(max(2.0, cell * num_q + 0.6), 6.0) * (num_q / max(num_q, num_k)) ** 0.5
        figsize = (cols * width + 1.2, rows * height + 0.8 + 0.3 * bool(suptitle))
    if mask_zeros:
        cmap = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
        cmap = cmap.with_extremes(bad="white")
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    for i in range(rows):
        for j in range(cols):
            ax = axes[i, j]
            lo, hi = shared_range if shared_colorbar else color_range(matrices[i, j])
            data = np.ma.masked_equal(matrices[i, j], 0.0) if mask_zeros else matrices[i, j]
            image = ax.imshow(data, cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest",
                              aspect="auto")
            if xticklabels is not None:
                ax.set_xticks(range(num_k), [str(t) for t in xticklabels], rotation=90,
                              fontsize=7)
            if yticklabels is not None:
                ax.set_yticks(range(num_q), [str(t) for t in yticklabels], fontsize=7)
            ax.tick_params(labelbottom=i == rows - 1, labelleft=j == 0)
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None:
                ax.set_title(titles[i][j], fontsize=9)
            if not shared_colorbar:
                fig.colorbar(image, ax=ax, shrink=0.8)
    if shared_colorbar:
        fig.colorbar(image, ax=axes, shrink=0.6 if rows > 1 else 0.9)
    if suptitle:
        fig.suptitle(suptitle)
    return save(fig, path, dpi)


def token_labels(tokenizer, ids):
    """Readable tick labels for token ids: ``##`` removed, a space shown as ``␣``.

    Args:
        tokenizer: a ``keras_attn.text.tokenizers.Tokenizer`` (anything with ``id_to_token``).
        ids: int sequence.
    Example:
        >>> token_labels(tok, [5, 4, 3, 0])   # ['a', '␣', '[END]', '[PAD]']
    """
    labels = []
    for i in to_numpy(ids).reshape(-1).tolist():
        token = tokenizer.id_to_token(i)
        token = token[2:] if token.startswith("##") and len(token) > 2 else token
        labels.append("␣" if token == " " else token)
    return labels


def _group_maps(maps, index):
    """``{"encoder/self/layer_0": (B, H, Q, K), ...}`` -> ``{kind: (layers, H, Q, K)}``."""
    groups = {}
    for name, weights in maps.items():
        kind, _, layer = name.partition("/layer_")
        groups.setdefault(kind, []).append((int(layer or 0), weights[index]))
    return {kind: np.stack([w for _, w in sorted(items, key=lambda t: t[0])])
            for kind, items in groups.items()}


def plot_attention_maps(model, source, target_in, src_labels=None, tgt_labels=None,
                        path_prefix=None, index=0, suptitle=None, cmap="Reds", dpi=DPI):
    """Every attention map of a translator for one example, one figure per kind of map
    (``keras_attn.models.attention_maps``: rows layers, columns heads). Weights exactly 0
    (padding keys, the causal mask's future) are drawn white.

    Args:
        model: from ``keras_attn.models``.
        source: int ``(S,)`` or ``(B, S)`` source ids, 0 = padding.
        target_in: int ``(T,)`` or ``(B, T)`` decoder inputs (``[START]`` then the output).
        src_labels, tgt_labels: ``S`` / ``T`` strings for the ticks (None: positions).
        path_prefix: save ``<path_prefix>_encoder_self.png``, ``..._decoder_self.png``,
            ``..._decoder_cross.png`` (Bahdanau: only ``..._decoder_cross.png``).
        index: which example of the batch to draw.
        suptitle: text put before each figure's title.
        cmap, dpi: as in :func:`show_heatmaps`.

    Returns:
        ``{kind: Figure}``, kinds ``"encoder/self"``, ``"decoder/self"``,
        ``"decoder/cross"``; each figure has ``layers * heads`` image axes.

    Example:
        >>> figs = plot_attention_maps(model, src_ids, tgt_in_ids, src_tokens, tgt_tokens,
        ...                            path_prefix="figures/dates")

    References: D2L 11.7 (figures of the Transformer's attention weights).
    """
    from keras_attn import models  # noqa: PLC0415  (keeps `import viz` light)

    source, target_in = to_numpy(source), to_numpy(target_in)
    source = source[None] if source.ndim == 1 else source
    target_in = target_in[None] if target_in.ndim == 1 else target_in
    _check_labels("src_labels", src_labels, source.shape[1], "source position")
    _check_labels("tgt_labels", tgt_labels, target_in.shape[1], "target position")
    maps = _group_maps(models.attention_maps(
        model, {"source": source.astype("int32"), "target_in": target_in.astype("int32")}),
        index)
    figures = {}
    for kind, weights in maps.items():  # (layers, H, Q, K)
        layers, heads = weights.shape[:2]
        keys = src_labels if kind.startswith("encoder") or kind.endswith("cross") else tgt_labels
        queries = src_labels if kind.startswith("encoder") else tgt_labels
        xlabel, ylabel = _MAP_AXES.get(kind, ("Keys", "Queries"))
        title = _MAP_TITLES.get(kind, kind)
        titles = ([[f"layer {i + 1}, head {j + 1}" for j in range(heads)] for i in range(layers)]
                  if layers * heads > 1 else None)
        fig = show_heatmaps(weights, xlabel, ylabel, titles, cmap, xticklabels=keys,
                            yticklabels=queries, vmin=0.0, vmax=1.0, mask_zeros=True,
                            suptitle=f"{suptitle}: {title}" if suptitle else title)
        for tick in (t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()):
            if tick.get_text() == PAD_LABEL:
                tick.set_color("0.6")  # padding keys in grey
        if path_prefix is not None:
            save(fig, f"{path_prefix}_{kind.replace('/', '_')}.png", dpi)
        figures[kind] = fig
    return figures


def plot_translation_attention(translator, sentence, path_prefix=None, num_padding=2,
                               dpi=DPI):
    """Translate ``sentence`` greedily and draw every attention map, labelled with tokens
    (``num_padding`` padding ids appended to the source show that padded keys take no
    weight; decoder row ``t`` predicts output token ``t``).

    Args:
        translator: a ``keras_attn.translator.Translator``.
        sentence: source text.
        path_prefix, dpi: as in :func:`plot_attention_maps`.
        num_padding: padding positions appended to the source.

    Returns:
        ``(translation, {kind: Figure})``.

    Example:
        >>> text, figs = plot_translation_attention(tr, "le 3 mars 2021", "docs/figures/dates")
    """
    from keras_attn.text import tokenizers as text  # noqa: PLC0415

    if not isinstance(num_padding, int) or num_padding < 0:
        raise ValueError("`num_padding` must be an int >= 0. "
                         f"Received: num_padding={num_padding!r}")
    source = to_numpy(translator.encode([sentence]))[:1]  # (1, S)
    tokens = to_numpy(translator.translate_ids(source))[0]  # (T,) up to [END], then 0
    tokens = tokens[tokens != text.PAD_ID]
    if tokens.size == 0:
        tokens = np.array([text.END_ID])
    translation = translator.tgt_tokenizer.detokenize(tokens[None]).numpy()[0].decode("utf-8")
    target_in = np.concatenate([[text.START_ID], tokens[:-1]]).astype("int32")
    padded = np.pad(source, [(0, 0), (0, num_padding)])
    figures = plot_attention_maps(
        translator.model, padded, target_in[None],
        token_labels(translator.src_tokenizer, padded[0]),
        token_labels(translator.tgt_tokenizer, target_in),
        path_prefix=path_prefix, suptitle=f"“{sentence}” → “{translation}”", dpi=dpi)
    return translation, figures
