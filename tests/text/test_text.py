"""Tests for keras_attn.text: normalisation, vocabularies, in-graph tokenizers."""
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attn import export
from keras_attn.text import tokenizers as text
from keras_attn.text.tokenizers import END_ID, PAD_ID, START_ID, UNK_ID

FRA_ENG = Path(__file__).resolve().parents[3] / "shared" / "data" / "fra-eng"

# Small bilingual corpus (raw, as in the Tatoeba file) for learning a test vocabulary.
RAW_FR = [
    "Va\u00a0!", "J'ai faim.", "Est-ce que tu viens\u202f?", "Aujourd'hui, il fait beau.",
    "Où est la clé\u202f?", "Qu'est-ce que c'est\u00a0?", "Je n'ai pas d'argent.",
    "A-t-il mangé\u202f?", "C'est l'été, allons à la plage\u00a0!",
    "Il a dit «\u00a0oui\u00a0».",
    "Elle s'appelle Marie.", "Je suis très fatigué aujourd'hui.", "Peux-tu m'aider\u202f?",
    "Tom est arrivé à 2:30.", "Ça coûte 10\u00a0000 yens.", "Nous sommes déjà là.",
]
RAW_EN = [
    "Go!", "I'm hungry.", "Are you coming?", "It's nice today.", "Don't go.",
    "He said \"yes\".", "Tom arrived at 2:30.", "It costs 10,000 yen.",
]


@pytest.fixture(scope="module")
def word_tok():
    texts = [text.normalize_text(t) for t in RAW_FR + RAW_EN] * 20
    return text.Tokenizer(text.learn_wordpiece_vocab(texts, vocab_size=400))


@pytest.fixture(scope="module")
def char_tok():
    return text.Tokenizer(text.char_vocab(["le 3 mars 2021", "2021-03-03"]))


def roundtrip(tok, strings):
    out = tok.detokenize(tok.tokenize(tf.constant(strings))).numpy()
    return [s.decode("utf-8") for s in out]


# -- normalisation ---------------------------------------------------------------------
@pytest.mark.parametrize("raw, expected", [
    ("Va\u00a0!", "va !"),
    ("Cours\u202f!", "cours !"),
    ("Hello, world.", "hello , world ."),
    ("Wait...", "wait . . ."),
    ("I'm   home !", "i'm home !"),
    ("J’ai vu «\u2009Tom\u2009».", "j'ai vu « tom » ."),
    ("  ÉTÉ\u200b !", "été !"),
    (".Dot", ".dot"),  # first character: no space inserted (D2L, i > 0)
])
def test_normalize_text(raw, expected):
    assert text.normalize_text(raw) == expected
    assert text.normalize_text(expected) == expected  # idempotent
    assert text.normalize_text_tf(tf.constant([raw])).numpy()[0].decode() == expected


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="aAéÉçÇœ'’ ,.!?\u00a0\u202f\u2009\t-xyzÀ", max_size=30))
def test_normalize_graph_matches_python(raw):
    graph = text.normalize_text_tf(tf.constant([raw])).numpy()[0].decode("utf-8")
    assert graph == text.normalize_text(raw)


# -- vocabularies ------------------------------------------------------------------------
def test_reserved_tokens():
    assert text.RESERVED_TOKENS == ["[PAD]", "[UNK]", "[START]", "[END]"]
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)


def test_learned_vocab_starts_with_reserved(word_tok):
    vocab = word_tok.vocab
    assert vocab[:4] == text.RESERVED_TOKENS
    assert len(vocab) == word_tok.vocab_size <= 400
    assert "'" in vocab and "-" in vocab and any(t.startswith("##") for t in vocab)
    assert not word_tok.char_level


def test_tokenizer_rejects_bad_vocab():
    with pytest.raises(ValueError, match="must start with"):
        text.Tokenizer(["a", "[PAD]", "[UNK]", "[START]", "[END]"])
    with pytest.raises(ValueError, match="Duplicate"):
        text.Tokenizer(text.RESERVED_TOKENS + ["a", "a"])


def test_char_vocab_layout():
    vocab = text.char_vocab(["3 mai"], extra_chars="")
    assert vocab == text.RESERVED_TOKENS + [" ", "3", "a", "i", "m",
                                            "## ", "##3", "##a", "##i", "##m"]
    with pytest.raises(ValueError, match="line breaks"):
        text.char_vocab(["a\nb"])


def test_char_tokenizer_splits_into_characters(char_tok):
    s = "Le 3 MARS 2021"
    ids = char_tok.tokenize(tf.constant([s]))
    tokens = [char_tok.id_to_token(i) for i in ids[0].numpy()]
    assert tokens == ["##" + c for c in s]  # one id per character, spaces included
    assert char_tok.char_level
    # An unknown character makes the whole string [UNK] (no pre-tokenization).
    assert char_tok.tokenize(tf.constant(["3 \u4e00"])).to_list() == [[UNK_ID]]


@pytest.mark.parametrize("vocab_fn", [
    lambda: text.RESERVED_TOKENS + ["a", "##b", "é", "'"],
    lambda: text.char_vocab(["x y"]),  # contains the space token
])
def test_vocab_save_load_roundtrip_atomic(tmp_path, vocab_fn, monkeypatch):
    vocab = vocab_fn()
    path = tmp_path / "sub" / "vocab.txt"
    text.save_vocab(vocab, path)
    assert text.load_vocab(path) == vocab
    assert os.listdir(path.parent) == ["vocab.txt"]  # no temporary file left
    assert text.Tokenizer.from_file(path).vocab == vocab

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)  # what runs.atomic_write_text calls
    with pytest.raises(OSError, match="disk full"):
        text.save_vocab(vocab + ["extra"], path)
    assert text.load_vocab(path) == vocab  # old file intact
    assert os.listdir(path.parent) == ["vocab.txt"]


def test_save_vocab_rejects_bad_tokens(tmp_path):
    with pytest.raises(ValueError, match="index 4"):
        text.save_vocab(text.RESERVED_TOKENS + ["a\nb"], tmp_path / "v.txt")
    assert not (tmp_path / "v.txt").exists()


# -- round trips -------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [
    "J'ai faim.", "Est-ce que tu viens\u202f?", "Aujourd'hui, il fait beau.",
    "Où est la clé\u202f?", "Qu'est-ce que c'est\u00a0?", "A-t-il mangé\u202f?",
    "C'est l'été, allons à la plage\u00a0!", "Il a dit «\u00a0oui\u00a0».",
    "Tom est arrivé à 2:30.", "He said \"yes\".", "I'm hungry.", "It costs 10,000 yen.",
])
def test_word_roundtrip(word_tok, raw):
    s = text.normalize_text(raw)
    assert roundtrip(word_tok, [s]) == [s]


def test_word_tokenize_splits_apostrophe_and_hyphen(word_tok):
    ids = word_tok.tokenize(tf.constant(["j'ai", "est-ce"])).to_list()
    assert [word_tok.id_to_token(i) for i in ids[0]][1] == "'"
    assert "-" in [word_tok.id_to_token(i) for i in ids[1]]
    # FastWordpiece's own detokenizer would write "j ' ai"; ours joins them.
    assert word_tok.detokenize_tflite(tf.ragged.constant(ids)).numpy().tolist() == [
        b"j'ai", b"est-ce"]


def test_date_roundtrip_exact(char_tok):
    from keras_attn.data import generate_dates

    samples = generate_dates(300, seed=3)
    strings = [s for s, _ in samples] + [t for _, t in samples] + ["  le 3  mars ", ""]
    tok = text.Tokenizer(text.char_vocab(strings))
    assert roundtrip(tok, strings) == strings
    assert roundtrip(char_tok, ["2021-03-03", "le 3 mars 2021"]) == [
        "2021-03-03", "le 3 mars 2021"]


def test_detokenize_special_ids(word_tok):
    ids = word_tok.tokenize(tf.constant(["j'ai faim ."])).to_list()[0]
    row = [START_ID] + ids + [END_ID] + ids + [PAD_ID]  # text after [END] is ignored
    padded = [START_ID, PAD_ID] + ids + [PAD_ID] * (len(row) - len(ids) - 2)
    for dtype in (tf.int32, tf.int64):
        out = word_tok.detokenize(tf.constant([row, padded], dtype)).numpy().tolist()
        assert out == [b"j'ai faim .", b"j'ai faim ."]
    # [UNK] is written as "[UNK]"; ids outside the vocabulary count as [UNK].
    out = word_tok.detokenize(tf.constant([[UNK_ID, 10 ** 6, END_ID]])).numpy().tolist()
    assert out == [b"[UNK] [UNK]"]
    # Empty rows and an all-padding batch.
    assert word_tok.detokenize(tf.zeros([2, 0], tf.int32)).numpy().tolist() == [b"", b""]
    assert word_tok.detokenize(tf.constant([[END_ID, 5]])).numpy().tolist() == [b""]


def test_detokenize_never_glues_sentence_edges(word_tok):
    apostrophe, hyphen = word_tok.token_to_id("'"), word_tok.token_to_id("-")
    ai = word_tok.tokenize(tf.constant(["ai"])).to_list()[0]
    out = word_tok.detokenize_tflite(tf.ragged.constant([[apostrophe] + ai + [hyphen]]))
    assert out.numpy().tolist() == [b"' ai -"]


@pytest.mark.parametrize("spaced, natural", [
    ('il a dit " oui " .', 'il a dit "oui" .'),
    ('" a ? " " b . "', '"a ?" "b ."'),
    ("à 2 : 30 .", "à 2:30 ."),
    ("30 . 000 yens , 1 , 600 m , 0 . 3", "30 .000 yens , 1 ,600 m , 0 .3"),
    ("25 % et 30 $ ou $ 5", "25% et 30$ ou $5"),
    ("my parents'house", "my parents' house"),
    ("je t'aime", "je t'aime"),
])
def test_repair_rules(word_tok, spaced, natural):
    assert word_tok.repair(tf.constant([spaced])).numpy()[0].decode() == natural


def test_inside_tf_function(word_tok, char_tok):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def f(strings):
        ids = word_tok.tokenize(strings).to_tensor()  # (B, T) padded with 0
        return ids, word_tok.detokenize(ids), char_tok.detokenize(char_tok.tokenize(strings))

    s = ["est-ce que j'ai faim ?", "aujourd'hui ."]
    ids, words, chars = f(tf.constant(s))
    assert ids.dtype == tf.int32 and ids.shape[0] == 2
    assert [w.decode() for w in words.numpy()] == s
    assert [c.decode() for c in chars.numpy()] == s
    concrete = word_tok.tokenize.get_concrete_function()
    assert concrete.structured_input_signature[0][0].shape.as_list() == [None]


@pytest.mark.heavy  # a tokenizer saved and loaded as a SavedModel
def test_saved_model_roundtrip(tmp_path, word_tok):
    word_tok.detokenize.get_concrete_function(tf.TensorSpec([None, None], tf.int32))
    tf.saved_model.save(word_tok, str(tmp_path / "tok"))
    loaded = tf.saved_model.load(str(tmp_path / "tok"))
    s = tf.constant(["est-ce que j'ai faim ?"])
    ids = loaded.tokenize(s)
    np.testing.assert_array_equal(ids.to_tensor().numpy(), word_tok.tokenize(s).to_tensor())
    assert loaded.detokenize(ids.to_tensor()).numpy().tolist() == [b"est-ce que j'ai faim ?"]


def test_tflite_tokenize_detokenize(word_tok):
    """tokenize + detokenize_tflite convert and run in LiteRT with TF-Text custom ops."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    import tensorflow_text

    class Module(tf.Module):
        def __init__(self, tok):
            super().__init__()
            self.tok = tok

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def roundtrip(self, strings):
            ids = self.tok.tokenize(strings).to_tensor()
            return {"text": self.tok.detokenize_tflite(ids)}

    module = Module(word_tok)
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.roundtrip.get_concrete_function()], module)
    converter.allow_custom_ops = True
    content = converter.convert()
    interpreter = litert.InterpreterWithCustomOps(
        model_content=content,
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)
    ops = export.tflite_ops(content)
    assert not any("Regex" in op or "StringLower" in op
                   for op in ops["builtin"] + ops["custom"] + ops["flex"]), ops
    runner = interpreter.get_signature_runner()
    s = ["est-ce que j'ai faim ?", "a-t-il mangé ?"]
    out = runner(strings=np.array(s, dtype=object))["text"]
    assert [o.decode() for o in out] == s


@pytest.mark.slow  # learns two vocabularies on the real corpus
def test_real_corpus_roundtrip_rate():
    """>99 % of normalised dev.txt lines round-trip with a vocabulary learned on a sample."""
    if not (FRA_ENG / "train.txt").exists():
        pytest.skip(f"real corpus not found at {FRA_ENG} (shared data folder absent)")
    lines = (FRA_ENG / "train.txt").read_text(encoding="utf-8").splitlines()[::40]
    dev = (FRA_ENG / "dev.txt").read_text(encoding="utf-8").splitlines()
    for side in (0, 1):
        train = [text.normalize_text(line.split("\t")[side]) for line in lines]
        tok = text.Tokenizer(text.learn_wordpiece_vocab(train, vocab_size=2000))
        sents = [text.normalize_text(line.split("\t")[side]) for line in dev]
        out = roundtrip(tok, sents)
        rate = np.mean([a == b for a, b in zip(out, sents)])
        assert rate > 0.99, (side, rate)
