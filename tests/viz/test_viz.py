"""Figures of keras_attn.viz: valid PNG files, one panel per layer and head, padding keys
drawn with weight 0, and D2L's kernel-regression result (parametric beats non-parametric)."""
import json
import importlib.util
import pathlib

import numpy as np
import pytest

from tests.support import layer_checks as lc
from keras_attn import models, viz
from keras_attn.text import tokenizers as text
from keras_attn.layers.positional_encoding import sinusoidal_table
from keras_attn.schedules import NoamSchedule

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS, HEADS = 2, 2
SOURCE = np.array([[5, 6, 7, 8, 3, 0, 0]], "int32")  # two padded positions
PAD_COLUMNS = [5, 6]
TARGET_IN = np.array([[2, 4, 5, 6, 7]], "int32")


def check_png(path, min_bytes=5_000):
    """Assert a real PNG: signature, IHDR chunk, plausible width/height, not tiny."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert data[12:16] == b"IHDR", path
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 150 <= width <= 4000 and 150 <= height <= 4000, (path, width, height)
    assert len(data) > min_bytes, (path, len(data))
    return width, height


def image_axes(fig):
    """Axes that show a matrix (colour bars hold no image)."""
    return [ax for ax in fig.axes if ax.images]


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def transformer_figures(tmp_path_factory):
    model = models.transformer_seq2seq(12, 10, num_hiddens=8, ffn_num_hiddens=16,
                                       num_heads=HEADS, num_layers=LAYERS, dropout=0.0,
                                       max_len=16)
    prefix = tmp_path_factory.mktemp("maps") / "tiny"
    src_labels = ["a", "b", "c", "d", "[END]", viz.PAD_LABEL, viz.PAD_LABEL]
    tgt_labels = ["[START]", "w", "x", "y", "z"]
    figures = viz.plot_attention_maps(model, SOURCE, TARGET_IN, src_labels, tgt_labels,
                                      path_prefix=prefix)
    return model, figures, prefix


def test_show_heatmaps_grid(tmp_path):
    matrices = np.random.default_rng(0).random((2, 3, 5, 7)).astype("float32")
    path = tmp_path / "sub" / "grid.png"
    fig = viz.show_heatmaps(matrices, titles=["a", "b", "c"], path=path,
                            xticklabels=list("ABCDEFG"), yticklabels=list("vwxyz"))
    check_png(path)
    panels = image_axes(fig)
    assert len(panels) == 6
    assert len(fig.axes) == 7  # the panels and one shared colour bar
    np.testing.assert_array_equal(panels[4].images[0].get_array(), matrices[1, 1])
    assert [t.get_text() for t in panels[3].get_xticklabels()] == list("ABCDEFG")
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, float(matrices.max()))}


def test_show_heatmaps_single_matrix_and_own_colorbars():
    fig = viz.show_heatmaps(np.eye(4))
    assert len(image_axes(fig)) == 1
    fig = viz.show_heatmaps(np.stack([np.eye(3), 5 * np.eye(3)])[None], shared_colorbar=False)
    assert [ax.images[0].get_clim() for ax in image_axes(fig)] == [(0.0, 1.0), (0.0, 5.0)]
    assert len(fig.axes) == 4


@pytest.mark.parametrize("kwargs, message", [
    ({"matrices": np.zeros((2, 3, 4))}, "matrices"),
    ({"matrices": np.zeros((1, 1, 2, 3)), "xticklabels": ["a", "b"]}, "xticklabels"),
    ({"matrices": np.zeros((1, 1, 2, 3)), "yticklabels": ["a"]}, "yticklabels"),
    ({"matrices": np.zeros((1, 2, 2, 3)), "titles": ["a"]}, "titles"),
])
def test_show_heatmaps_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        viz.show_heatmaps(**kwargs)


def test_attention_maps_one_panel_per_layer_and_head(transformer_figures):
    _, figures, prefix = transformer_figures
    assert list(figures) == ["encoder/self", "decoder/self", "decoder/cross"]
    shapes = {"encoder/self": (7, 7), "decoder/self": (5, 5), "decoder/cross": (5, 7)}
    for kind, fig in figures.items():
        panels = image_axes(fig)
        assert len(panels) == LAYERS * HEADS, kind
        assert all(ax.images[0].get_array().shape == shapes[kind] for ax in panels)
        assert len(fig.axes) == LAYERS * HEADS + 1  # one colour bar
        check_png(f"{prefix}_{kind.replace('/', '_')}.png")


def test_attention_maps_match_model(transformer_figures):
    model, figures, _ = transformer_figures
    maps = models.attention_maps(model, {"source": SOURCE, "target_in": TARGET_IN})
    for layer in range(LAYERS):
        for head in range(HEADS):
            ax = image_axes(figures["decoder/cross"])[layer * HEADS + head]
            # the figure's model call against this one: the model's roundings
            lc.assert_close(np.ma.getdata(ax.images[0].get_array()),
                            maps[f"decoder/cross/layer_{layer}"][0, head],
                            terms=lc.transformer_terms(8, 16, HEADS, LAYERS, 7, 5))
            assert ax.get_title() == f"layer {layer + 1}, head {head + 1}"


@pytest.mark.parametrize("kind", ["encoder/self", "decoder/cross"])
def test_padding_keys_are_drawn_with_zero_weight(transformer_figures, kind):
    _, figures, _ = transformer_figures
    for ax in image_axes(figures[kind]):
        drawn = ax.images[0].get_array()  # masked array: exact zeros are left white
        np.testing.assert_array_equal(np.ma.getdata(drawn)[:, PAD_COLUMNS], 0.0)
        assert np.ma.getmaskarray(drawn)[:, PAD_COLUMNS].all()
        rows = np.ma.getdata(drawn).sum(-1)  # a softmax over 7 keys, then 7 summed
        lc.assert_close(rows, np.ones_like(rows), terms=2 * 7 + 3)
    bottom_left = image_axes(figures[kind])[(LAYERS - 1) * HEADS]
    labels = bottom_left.get_xticklabels()
    assert [t.get_text() for t in labels][-2:] == [viz.PAD_LABEL] * 2
    assert labels[-1].get_color() != labels[0].get_color()  # padding ticks greyed


def test_causal_future_is_zero(transformer_figures):
    _, figures, _ = transformer_figures
    for ax in image_axes(figures["decoder/self"]):
        drawn = np.ma.getdata(ax.images[0].get_array())
        np.testing.assert_array_equal(drawn[np.triu_indices(5, 1)], 0.0)


def test_bahdanau_cross_attention_single_panel(tmp_path):
    model = models.bahdanau_seq2seq(12, 10, embed_size=4, num_hiddens=8, num_layers=1,
                                    dropout=0.0)
    figures = viz.plot_attention_maps(model, SOURCE[0], TARGET_IN[0], path_prefix=tmp_path / "b")
    assert list(figures) == ["decoder/cross"]
    (ax,) = image_axes(figures["decoder/cross"])
    np.testing.assert_array_equal(np.ma.getdata(ax.images[0].get_array())[:, PAD_COLUMNS], 0.0)
    check_png(tmp_path / "b_decoder_cross.png")


def test_translation_attention_labels_tokens(tmp_path):
    from keras_attn.translator import Translator

    tok = text.Tokenizer(text.char_vocab(["ab 12"], extra_chars=""))
    model = models.transformer_seq2seq(tok.vocab_size, tok.vocab_size, num_hiddens=8,
                                       ffn_num_hiddens=16, num_heads=HEADS, num_layers=1,
                                       dropout=0.0, max_len=16)
    output = [tok.token_to_id("##1"), tok.token_to_id("##2"), text.END_ID, 0]

    class FixedOutput(Translator):  # decoding is test_translator's job: skip its tracing
        def translate_ids(self, source, beam_size=1, length_penalty=0.6):
            return np.array([output], "int32")

    translator = FixedOutput(model, tok, tok, max_len=6)
    translation, figures = viz.plot_translation_attention(translator, "ab 1", tmp_path / "t",
                                                          num_padding=1)
    assert translation == "12"
    enc = image_axes(figures["encoder/self"])[0]
    assert [t.get_text() for t in enc.get_yticklabels()] == ["a", "b", "␣", "1", "[END]",
                                                             "[PAD]"]
    cross = image_axes(figures["decoder/cross"])[0]
    assert [t.get_text() for t in cross.get_yticklabels()] == ["[START]", "1", "2"]
    assert figures["decoder/cross"].texts[0].get_text().startswith("“ab 1” → “12”")
    for kind in figures:
        check_png(tmp_path / f"t_{kind.replace('/', '_')}.png")
    with pytest.raises(ValueError, match="num_padding"):
        viz.plot_translation_attention(translator, "ab", num_padding=-1)


def test_token_labels():
    tok = text.Tokenizer(text.char_vocab(["a b"], extra_chars=""))
    ids = [tok.token_to_id("##a"), tok.token_to_id("## "), text.END_ID, text.PAD_ID]
    assert viz.token_labels(tok, ids) == ["a", "␣", "[END]", "[PAD]"]


def test_positional_encoding_figure(tmp_path):
    fig = viz.plot_positional_encoding(60, 32, path=tmp_path / "pe.png")
    check_png(tmp_path / "pe.png")
    curves, heat = fig.axes[:2]
    assert len(curves.lines) == 4  # columns 6-9
    # the same table, at most rounded once to float32 on its way into the figure
    lc.assert_close(heat.images[0].get_array(), sinusoidal_table(60, 32), terms=1)
    lc.assert_close(curves.lines[0].get_ydata(), sinusoidal_table(60, 32)[:, 6], terms=1)
    assert len(fig.axes) == 3  # with the colour bar
    with pytest.raises(ValueError, match="columns"):
        viz.plot_positional_encoding(10, 8, columns=(8,))


def test_schedules_figure(tmp_path):
    fig = viz.plot_schedules(tmp_path / "lr.png", warmups=(1000, 4000, 8000), total_steps=20000)
    check_png(tmp_path / "lr.png")
    noam_ax, cos_ax = fig.axes
    assert len(noam_ax.lines) == 3
    line = noam_ax.lines[1]  # warmup 4000: peak at step 4000
    steps, lr = line.get_xdata(), line.get_ydata()
    assert steps[np.argmax(lr)] == 4000
    # the same float32 formula evaluated twice: relative, per step (8 roundings: see
    # test_schedules.NOAM_TERMS)
    np.testing.assert_allclose(lr, np.asarray(NoamSchedule(512, 4000)(steps)),
                               rtol=lc.tolerance(1.0, terms=8))
    assert len(cos_ax.lines) == 2  # curve and the end-of-warmup marker


def test_leave_one_out():
    np.testing.assert_array_equal(viz.leave_one_out(np.array([1.0, 2.0, 3.0])),
                                  [[2, 3], [1, 3], [1, 2]])


def test_kernel_regression_parametric_beats_nonparametric(tmp_path, capsys):
    result = viz.kernel_regression_demo(tmp_path / "kr", epochs=5, seed=0)
    assert result["parametric_loss"] < result["nonparametric_loss"]
    assert len(result["epoch_losses"]) == 5
    # Before the first step w = 1: the same loss, leave-one-out Nadaraya-Watson over 49
    # keys (3 score steps, softmax and weighted sum over 49), then the squared error's
    # mean over 50 points
    lc.assert_close(result["epoch_losses"][0], result["nonparametric_loss"],
                    terms=3 + 2 * 49 + 2 + 50)
    assert not lc.is_close(result["w"], 1.0, terms=1)  # it moved
    assert "epoch 5, loss" in capsys.readouterr().out
    test_mse = list(result["test_mse"].values())  # average, non-parametric, parametric
    assert test_mse[2] < test_mse[1] < test_mse[0]
    check_png(tmp_path / "kr_predictions.png")
    check_png(tmp_path / "kr_attention.png")
    assert len(image_axes(result["figures"]["attention"])) == 2
    with pytest.raises(ValueError, match="epochs"):
        viz.kernel_regression_demo(epochs=0)


def test_kernel_regression_script(tmp_path, capsys):
    load_script("kernel_regression").main(["--out", str(tmp_path), "--epochs", "2"])
    assert "epoch 2, loss" in capsys.readouterr().out
    check_png(tmp_path / "kernel_regression_predictions.png")
    check_png(tmp_path / "kernel_regression_attention.png")


def test_plot_attention_script_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_script("plot_attention").main(["--help"])
    assert exit_info.value.code == 0
    assert "RUN_DIR" in capsys.readouterr().out.upper()


def test_budget_figure_script(tmp_path, capsys):
    script = load_script("budget_figure")
    runs = []
    for minutes, bleu in ((60, 51.0), (5, 24.0)):
        run = tmp_path / f"fra{minutes}"
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps(
            {"bleu": bleu, "bleu_d2l": bleu + 0.3, "budget": {"time_budget": 60.0 * minutes}}))
        runs.append(str(run))
    # Sorted by budget, whatever the order given.
    assert script.our_points(runs) == [(5.0, 24.0, 24.3), (60.0, 51.0, 51.3)]
    scores = tmp_path / "scores.json"  # keras-attn evaluate's output: every test sentence
    scores.write_text(json.dumps({"bleu": 23.0, "bleu_d2l": 23.5}))
    assert script.our_points([f"{runs[1]}:{scores}"]) == [(5.0, 23.0, 23.5)]
    kerashub = tmp_path / "kerashub.json"
    kerashub.write_text(json.dumps({"points": [
        {"train_minutes": 43.1, "bleu_d2l": 22.6}, {"train_minutes": 78.5, "bleu_d2l": 30.4}]}))
    out = tmp_path / "budget.png"
    script.main(runs + ["--kerashub", str(kerashub), "--output", str(out)])
    check_png(out)
    (tmp_path / "fra5" / "metrics.json").write_text(json.dumps({"bleu": 1.0, "bleu_d2l": 1.0}))
    with pytest.raises(SystemExit, match="not trained with --time-budget"):
        script.our_points(runs)
