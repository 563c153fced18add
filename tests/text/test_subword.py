"""keras_attn.text.subword: SentencePiece models learned, saved, run in TF and in TFLite."""
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.core import runs
from keras_attn.text import subword
from keras_attn.text import tokenizers as text
from tests.support import ROOT

FRENCH = [
    "Je vais bien, merci.", "Merci\u202f!", "Qui est-ce\u00a0?", "J'ai faim.", "J’ai soif.",
    "Est-ce que tu parles français\u202f?", "Il est 2:30.", "Tom n'est pas là.",
    "Ça va\u202f?", "Où est la gare\u202f?", "Nous sommes à Paris.", "C'est l'été\u202f!",
    "Elle a 25\u00a0ans.", "Appelle-moi demain.", "Vas-y\u202f!", "Le chat dort.",
]
ENGLISH = [
    "I'm fine, thanks.", "Thank you!", "Who is it?", "I'm hungry.", "I’m thirsty.",
    "Do you speak French?", "It's 2:30.", "Tom isn't here.", "How are you?",
    "Where is the station?", "We are in Paris.", "It's summer!", "She is 25.",
    "Call me tomorrow.", "Go ahead!", "The cat is sleeping.",
]
MESSY = [
    "WHERE IS THE STATION?", "It’s raining.", "“Hello,” she said.", "a  b\t\tc ",
    "Café déjà vu", "Call 555-0199 at 10:30", "I love it 😀", "", "x" * 2000,
]


@pytest.fixture(scope="module")
def french():
    return subword.SentencePieceTokenizer(
        subword.learn_sentencepiece(FRENCH * 8, vocab_size=120, normalization="identity"))


@pytest.fixture(scope="module")
def english():
    return subword.SentencePieceTokenizer(subword.learn_sentencepiece(ENGLISH * 8, 120))


def _decode(tok, ids):
    return [s.decode("utf-8") for s in tok.detokenize(ids).numpy()]


def test_round_trip_keeps_case_punctuation_and_french_spacing(french):
    ids = french.tokenize(tf.constant(FRENCH))
    assert _decode(french, ids) == FRENCH  # identity: U+202F, U+00A0 and ’ survive


def test_source_model_normalises_spaces_but_keeps_case(english):
    ids = english.tokenize(tf.constant(["  How  are\tyou? ", "Thank\u00a0you!"]))
    assert _decode(english, ids) == ["How are you?", "Thank you!"]


def test_case_folding_source_model_reads_any_case_alike():
    """nmt_nfkc_cf (the translator's source side): "WHERE", "Where" and "where" give the
    same pieces, spaces normalised as with nmt_nfkc."""
    tok = subword.SentencePieceTokenizer(
        subword.learn_sentencepiece(ENGLISH * 8, 120, normalization="nmt_nfkc_cf"))
    ids = tok.tokenize(tf.constant(["WHERE IS THE  STATION?", "Where is the station?",
                                    "where is the\tstation?"])).to_list()
    assert ids[0] == ids[1] == ids[2]
    assert _decode(tok, tok.tokenize(tf.constant(["Thank\u00a0You!"]))) == ["thank you!"]


def test_reserved_ids_are_those_of_text(french):
    assert french.vocab[:4] == text.RESERVED_TOKENS
    assert french.token_to_id(text.END) == text.END_ID


def test_detokenize_stops_at_end_and_drops_pad_and_start(french):
    merci = french.tokenize(tf.constant(["Merci\u202f!"]))[0].numpy().tolist()
    faim = french.tokenize(tf.constant(["J'ai faim."]))[0].numpy().tolist()
    rows = [[text.START_ID] + merci + [text.END_ID] + faim,
            faim + [text.PAD_ID, text.PAD_ID] + [text.END_ID] + merci]
    width = max(map(len, rows))
    ids = tf.constant([r + [text.PAD_ID] * (width - len(r)) for r in rows])
    assert _decode(french, ids) == ["Merci\u202f!", "J'ai faim."]
    assert _decode(french, tf.zeros([2, 0], tf.int32)) == ["", ""]


def test_detokenize_equals_sentencepiece_decode_on_random_ids(french):
    spm = pytest.importorskip("sentencepiece")
    processor = spm.SentencePieceProcessor(model_proto=french.proto)
    space = french.token_to_id(subword.SPACE)
    rng = random.Random(0)
    seqs = []
    while len(seqs) < 500:
        seq = [rng.randrange(4, french.vocab_size) for _ in range(rng.randrange(0, 12))]
        # SentencePiece writes two spaces for a lone "▁" before a piece that has its own,
        # and a trailing space for a lone "▁" at the end; the detokenizer writes one and
        # none (training text has neither: SentencePiece removes extra spaces).
        if seq[-1:] == [space] or any(a == space and french.vocab[b].startswith(subword.SPACE)
                                      for a, b in zip(seq, seq[1:])):
            continue
        seqs.append(seq)
    ours = _decode(french, tf.ragged.constant(seqs, dtype=tf.int32))
    assert ours == [processor.decode(s) for s in seqs]


def test_out_of_range_ids_read_as_unk(french):
    ids = tf.constant([[french.vocab_size + 5, -1, text.END_ID]])
    assert _decode(french, ids) == [f"{text.UNK} {text.UNK}"]


def test_save_and_load(tmp_path, french):
    path = str(tmp_path / "tgt.model")
    subword.save_model(french.proto, path)
    loaded = subword.load_tokenizer(path)
    assert isinstance(loaded, subword.SentencePieceTokenizer)
    assert loaded.vocab == french.vocab
    ids = french.tokenize(tf.constant(FRENCH))
    assert loaded.tokenize(tf.constant(FRENCH)).to_list() == ids.to_list()


def test_run_tokenizers_prefers_models_and_reads_vocabularies(tmp_path, french, english):
    with pytest.raises(FileNotFoundError, match="no tokenizers"):
        subword.run_tokenizers(str(tmp_path))
    p = runs.paths(str(tmp_path))
    text.save_vocab(text.char_vocab(["abc"]), p["src_vocab"])
    text.save_vocab(text.char_vocab(["abc"]), p["tgt_vocab"])
    src, _ = subword.run_tokenizers(str(tmp_path))
    assert isinstance(src, text.Tokenizer)
    subword.save_model(english.proto, p["src_model"])
    subword.save_model(french.proto, p["tgt_model"])
    src, tgt = subword.run_tokenizers(str(tmp_path))
    assert (src.vocab, tgt.vocab) == (english.vocab, french.vocab)


def test_bad_input():
    with pytest.raises(ValueError, match="normalization"):
        subword.learn_sentencepiece(ENGLISH, 50, normalization="lower")
    with pytest.raises(ValueError, match="empty"):
        subword.learn_sentencepiece(["", ""], 50)
    with pytest.raises(ValueError, match="vocab_size"):
        subword.learn_sentencepiece(ENGLISH, 3)
    spm = pytest.importorskip("sentencepiece")
    import io

    model = io.BytesIO()  # SentencePiece's own default ids: unk 0, bos 1, eos 2, no pad
    spm.SentencePieceTrainer.train(sentence_iterator=iter(ENGLISH * 8), model_writer=model,
                                   vocab_size=60, minloglevel=2)
    with pytest.raises(ValueError, match="pad/unk/bos/eos ids"):
        subword.SentencePieceTokenizer(model.getvalue())


def test_messy_input_tokenizes(english):
    ids = english.tokenize(tf.constant(MESSY)).to_list()
    assert len(ids) == len(MESSY) and ids[MESSY.index("")] == []
    assert all(0 <= i < english.vocab_size for row in ids for i in row)


class _RoundTrip(tf.Module):
    def __init__(self, tok):
        super().__init__()
        self.tok = tok

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(self, strings):
        return {"text": self.tok.detokenize(self.tok.tokenize(strings).to_tensor(0))}


@pytest.mark.parametrize("normalization", ["nmt_nfkc", "nmt_nfkc_cf"])
def test_tflite_runs_both_directions_without_flex(english, normalization):
    """The file needs only TFLite builtins and tensorflow-text's kernels; same text as TF
    (case folding included: it is part of the model's normalisation)."""
    tf_text = pytest.importorskip("tensorflow_text")
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    if normalization != "nmt_nfkc":
        english = subword.SentencePieceTokenizer(
            subword.learn_sentencepiece(ENGLISH * 8, 120, normalization=normalization))
    module = _RoundTrip(english)
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.round_trip.get_concrete_function()], module)
    converter.allow_custom_ops = True
    content = converter.convert()
    assert b"FlexDelegate" not in content and b"Flex" not in content
    interpreter = litert.InterpreterWithCustomOps(
        model_content=content,
        custom_op_registerers=tf_text.tflite_registrar.SELECT_TFTEXT_OPS)
    runner = interpreter.get_signature_runner()
    inputs = ENGLISH + MESSY
    got = runner(strings=np.array([s.encode("utf-8") for s in inputs], dtype=object))["text"]
    want = module.round_trip(tf.constant(inputs))["text"].numpy()
    assert [g.decode("utf-8") for g in got] == [w.decode("utf-8") for w in want]
    expected = ENGLISH if normalization == "nmt_nfkc" else [e.lower() for e in ENGLISH]
    assert [g.decode("utf-8") for g in got][: len(ENGLISH)] == expected


CORPUS = os.path.join(ROOT, "..", "shared", "data", "fra-eng")


@pytest.mark.skipif(not os.path.exists(os.path.join(CORPUS, "train.txt")),
                    reason="the fra-eng corpus (../shared/data/fra-eng) is not on this machine")
def test_round_trip_on_the_corpus():
    """Every French line of a 5,000-line sample comes back exactly as written."""
    with open(os.path.join(CORPUS, "train.txt"), encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t") for line in f][:5000]
    french = [fr for _, fr in lines]
    tok = subword.SentencePieceTokenizer(
        subword.learn_sentencepiece(french, 1000, normalization="identity"))
    assert _decode(tok, tok.tokenize(tf.constant(french))) == french
