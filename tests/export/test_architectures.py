"""One decoder: every architecture the builders allow decodes the same tokens
eagerly, from the SavedModel and from the TFLite files (float32).

The step all of them run is the decoder's own cached call; the artefacts differ only in
where it runs (eagerly with preallocated caches, a TensorFlow graph whose self-attention
cache grows, a TFLite interpreter with preallocated caches). Each model is tiny and has
random weights, large enough that the tokens differ from row to row and step to step.
A target that cannot hold a model refuses it by name.
"""
import numpy as np
import pytest
import tensorflow as tf

from keras_attn import decoding, export, models
from keras_attn.text import tokenizers as text

pytestmark = pytest.mark.slow  # ~10-15 s per architecture: a SavedModel and two TFLite files

MAX_LEN = 10
SOURCES = ["abc 01", "ba", "", "c0a1b2c0a1"]
# Every option of the Transformer builder, and both depths, in two models (the fast-path
# tests cover more of their pairs eagerly: test_fastpath); a two-layer Bahdanau model.
ARCHITECTURES = {
    "post-norm, 1 layer": dict(num_layers=1),
    "pre-norm, 2 layers, attention biases, tied logits": dict(
        num_layers=2, norm_first=True, use_bias=True, tie_embeddings=True),
    "bahdanau, 2 layers": dict(num_layers=2),
}


@pytest.fixture(scope="module")
def tokenizer():
    return text.Tokenizer(text.char_vocab(["abc 012"], extra_chars=""))


def _parts(name, tokenizer):
    vocab = tokenizer.vocab_size
    options = ARCHITECTURES[name]
    if name.startswith("bahdanau"):
        model = models.bahdanau_seq2seq(vocab, vocab, embed_size=8, num_hiddens=16,
                                        num_layers=options["num_layers"], dropout=0.0)
    else:
        model = models.transformer_seq2seq(vocab, vocab, num_hiddens=16, ffn_num_hiddens=32,
                                           num_heads=4, dropout=0.0, max_len=MAX_LEN + 2,
                                           **options)
    # Unit-scale weights, no biases, unit LayerNorm gains: rows decode differently.
    rng = np.random.default_rng(len(name))
    for w in model.weights:
        bias = w.path.endswith("bias") or w.path.endswith("beta")
        w.assign(np.ones(w.shape, "float32") if w.path.endswith("gamma") else
                 rng.normal(size=w.shape).astype("float32") * (0.0 if bias else 1.0))
    return export.Parts(model, tokenizer, tokenizer, MAX_LEN)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_eager_saved_model_and_tflite_decode_the_same_tokens(name, tokenizer, tmp_path):
    parts = _parts(name, tokenizer)
    # serving_default and translate_ids: the `translate` signature runs the same decoder
    # (tests/export/test_request.py checks it on two models); tracing it here for every
    # architecture would double this test's time.
    module = export.TranslatorModule(parts, request_signature=False)
    source, _ = module.encode_text(tf.constant(SOURCES))
    eager = decoding.greedy_decode_fixed(parts.model, source, MAX_LEN, text.START_ID,
                                         text.END_ID)
    lengths = eager["lengths"].numpy()
    tokens = [row[:n].tolist() for row, n in zip(eager["tokens"].numpy(), lengths)]
    assert len({tuple(t) for t in tokens}) > 1 and max(lengths) > 2  # the check can fail

    path = str(tmp_path / "saved_model")
    tf.saved_model.save(module, path, signatures=module.signatures())
    loaded = tf.saved_model.load(path).signatures
    ids = loaded[export.IDS_SIGNATURE](source=source)
    assert [row[:n].tolist() for row, n in zip(ids["tokens"].numpy(),
                                               ids["lengths"].numpy())] == tokens
    np.testing.assert_allclose(ids["score"], eager["log_prob"], rtol=1e-5, atol=1e-5)
    served = loaded[export.SERVING_SIGNATURE](text=tf.constant(SOURCES))["translation"]
    expected = tokenizer.detokenize(tf.constant(eager["tokens"])).numpy().tolist()
    # An empty text has no sentence: "" from every text artefact (documents are split).
    real = np.array([bool(s.strip()) for s in SOURCES])
    expected = [e if r else b"" for e, r in zip(expected, real)]
    assert served.numpy().tolist() == expected

    tflite = str(tmp_path / "text.tflite")
    export.TFLiteTextExporter(request_signature=False).write(parts, tflite)
    out = export.run_tflite_text(tflite, SOURCES)
    assert out["translation"].tolist() == expected
    # TFLite's own kernels (its GRU, its matmuls) round differently: a sum of 10 steps'
    # log-probabilities of a unit-scale random model agrees to ~5e-5 relative.
    np.testing.assert_allclose(out["score"][real], eager["log_prob"].numpy()[real], rtol=2e-4,
                               atol=1e-5)
    assert (out["score"][~real] == 0).all()

    builtin = export.TFLiteBuiltinExporter()
    if name.startswith("bahdanau"):  # the application's loop over a Transformer's step
        assert "Transformer models only" in builtin.supports(parts)
        with pytest.raises(ValueError, match="Transformer models only.*bahdanau"):
            builtin.write(parts, str(tmp_path / "builtin"))
        return
    builtin.write(parts, str(tmp_path / "builtin"))
    out = export.run_tflite_builtin(str(tmp_path / "builtin"), source.numpy())
    assert [row[:n].tolist() for row, n in zip(out["tokens"], out["lengths"])] == tokens
