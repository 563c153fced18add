"""keras_attn.translation: the Python tokenizers equal the in-graph ones (the same ids, the
same text back), and the CTranslate2 engine runs without TensorFlow."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.support import run_fixtures
from keras_attn.text import subword
from keras_attn.text import tokenizers as text
from keras_attn.text import python_tokenizers as tokenizers

DEV = "/work/shared/data/fra-eng/dev.txt"
from tests.support import ROOT as REPO


def _sentences():
    """The tiny run's pairs, odd inputs, and up to 2,000 dev sentences when present."""
    en = [e for e, _ in run_fixtures.PAIRS] + ["", " ", "  Two  spaces.", "Tab\there",
                                                "Ünïcödé «quotes» — 3 €", "Je t'aime !"]
    fr = [f for _, f in run_fixtures.PAIRS] + ["Merci\u202f!", "\u00a0x", "été", "a  b"]
    if os.path.exists(DEV):
        with open(DEV, encoding="utf-8") as f:
            pairs = [line.rstrip("\n").split("\t") for line in f][:2000]
        en += [p[0] for p in pairs]
        fr += [p[1] for p in pairs if len(p) > 1]
    return en, fr


def _graph_ids(tok, texts):
    return tok.tokenize(tf.constant(texts, tf.string)).to_list()


def _random_rows(vocab_size, rows=300, seed=0):
    """Id rows with every kind of id: reserved, out of the vocabulary, [END] mid-row."""
    rng = np.random.default_rng(seed)
    out = rng.integers(-2, vocab_size + 3, size=(rows, 12))  # any id, reserved ones too
    ordinary = rng.random(out.shape) < 0.7
    out[ordinary] = rng.integers(4, vocab_size, size=int(ordinary.sum()))
    return out.astype("int32")


def _check_detokenize(graph_tok, python_tok, rows):
    theirs = [s.decode("utf-8") for s in graph_tok.detokenize(tf.constant(rows)).numpy()]
    assert python_tok.detokenize(rows.tolist()) == theirs


@pytest.mark.parametrize("normalization", ["nmt_nfkc_cf", "identity"])
def test_sentencepiece_equals_the_graph_ops(normalization):
    """The same pieces as tensorflow-text's FastSentencepieceTokenizer, and the same text
    back as SentencePieceTokenizer.detokenize, on the training side a run uses each
    normalisation for (sources: nmt_nfkc_cf, targets: identity)."""
    en, fr = _sentences()
    texts = en if normalization == "nmt_nfkc_cf" else fr
    proto = subword.learn_sentencepiece(texts, vocab_size=200, normalization=normalization)
    graph, python = subword.SentencePieceTokenizer(proto), tokenizers.PieceTokenizer(proto)
    assert python.vocab[4:] == graph.vocab[4:]
    ids = _graph_ids(graph, texts)
    assert python.tokenize(texts) == ids
    rows = np.zeros((len(ids), max(map(len, ids)) + 1), "int32")
    for r, row in enumerate(ids):
        rows[r, : len(row)] = row
        rows[r, len(row)] = text.END_ID
    _check_detokenize(graph, python, rows)
    _check_detokenize(graph, python, _random_rows(graph.vocab_size))


def test_characters_equal_the_graph_ops():
    """A character vocabulary: one id per character, a text with an unknown character one
    [UNK], and the same text back for any ids (reserved, unknown, after [END])."""
    en, _ = _sentences()
    vocab = text.char_vocab(en[:50], extra_chars="")
    graph, python = text.Tokenizer(vocab), tokenizers.CharTokenizer(vocab)
    texts = en[:50] + ["3 March 2021", "€ unknown", ""]
    assert python.tokenize(texts) == _graph_ids(graph, texts)
    _check_detokenize(graph, python, _random_rows(len(vocab)))


def test_load_reads_the_run_files(tmp_path):
    """``load``: a .model file, a character vocabulary, None for WordPiece."""
    proto = subword.learn_sentencepiece(["Bonjour !", "Merci."] * 20, vocab_size=30)
    subword.save_model(proto, str(tmp_path / "tgt.model"))
    assert isinstance(tokenizers.load(str(tmp_path / "tgt.model")), tokenizers.PieceTokenizer)
    text.save_vocab(text.char_vocab(["3 mai"]), str(tmp_path / "chars.txt"))
    assert isinstance(tokenizers.load(str(tmp_path / "chars.txt")), tokenizers.CharTokenizer)
    text.save_vocab(text.RESERVED_TOKENS + ["le", "##s"], str(tmp_path / "words.txt"))
    assert tokenizers.load(str(tmp_path / "words.txt")) is None


@pytest.fixture(scope="module")
def ct2_dates(tmp_path_factory):
    """The committed tiny dates run exported to CTranslate2, and its Translator."""
    pytest.importorskip("ctranslate2")
    from keras_attn.export import ctranslate2 as ct2_export
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(run_fixtures.TINY_DATES_RUN)
    path = str(tmp_path_factory.mktemp("ct2_dates") / "ct2")
    ct2_export.CTranslate2Exporter().export(translator, path, samples=["3 March 2021"])
    return {"path": path, "translator": translator}


def _run(code):
    """``python -c code`` with this checkout first on the path; its stdout's last line."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


NO_TENSORFLOW = ("assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, "
                 "sorted(m for m in sys.modules if m.startswith(('tensorflow', 'keras.')))[:5]\n")


@pytest.mark.heavy  # a fresh interpreter with CTranslate2
def test_ctranslate2_imports_no_tensorflow(ct2_dates):
    """A CTranslate2 model translates (documents, n-best), scores and gives confidences
    in a process that never imports TensorFlow (nor Keras), as Translator does."""
    text_in = "3 March 2021. 4 July 1999"
    expected = ct2_dates["translator"].translate_nbest([text_in])[0][0]
    out = json.loads(_run(
        "import sys, json\n"
        "from keras_attn.export.ctranslate2_runtime import CTranslate2Translator\n"
        f"ct2 = CTranslate2Translator({ct2_dates['path']!r})\n"
        f"out = ct2.translate_nbest([{text_in!r}])[0][0]\n"
        "out['log_prob'] = ct2.score(['3 March 2021'], ['2021-03-03'])[0]['log_prob']\n"
        + NO_TENSORFLOW + "print(json.dumps(out))\n"))
    assert out["translation"] == expected["translation"]
    # Summed log-probabilities of two engines: float32 rounding of ~20 terms each.
    assert abs(out["score"] - expected["score"]) < 1e-4
    assert abs(out["confidence"] - expected["confidence"]) < 1e-3
    assert out["log_prob"] < 0


@pytest.mark.slow  # two servers started in fresh interpreters: ~15 s
@pytest.mark.parametrize("replicas", [1, 2])
def test_serve_ctranslate2_imports_no_tensorflow(ct2_dates, replicas):
    """``keras-attn serve --engine ctranslate2`` answers a request with no TensorFlow or
    Keras imported in the server's process, and no TensorFlow library mapped into it or
    into its replica processes (Linux: /proc)."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("reads /proc")
    translation = ct2_dates["translator"].translate(["3 March 2021"])[0]
    line = _run(
        "import sys, os, json, threading, time, urllib.request, socket\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        "from keras_attn.cli import main\n"
        f"args = ['serve', {ct2_dates['path']!r}, '--engine', 'ctranslate2', '--port', "
        f"str(port), '--replicas', '{replicas}']\n"
        "threading.Thread(target=main, args=(args,), daemon=True).start()\n"
        "for _ in range(1200):\n"
        "    try:\n"
        "        langs = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/languages'))\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
        "body = json.dumps({'q': '3 March 2021', 'source': langs[0]['code'],\n"
        "                   'target': langs[0]['targets'][0]}).encode()\n"
        "req = urllib.request.Request(f'http://127.0.0.1:{port}/translate', body,\n"
        "                             {'Content-Type': 'application/json'})\n"
        "out = json.load(urllib.request.urlopen(req, timeout=120))['translatedText']\n"
        "pids = [os.getpid()] + [int(p) for t in os.listdir('/proc/self/task') for p in\n"
        "        open(f'/proc/self/task/{t}/children').read().split()]\n"
        "mapped = [p for p in pids if 'tensorflow' in open(f'/proc/{p}/maps').read()]\n"
        "assert not mapped, mapped\n"
        + NO_TENSORFLOW + "print(json.dumps([out, len(pids)]))\n")
    out, processes = json.loads(line)
    assert out == translation
    assert processes >= (1 if replicas == 1 else 1 + replicas)  # (+ multiprocessing's own)


def test_names_the_server_reads_without_tensorflow_agree():
    """serve/ keeps the exporters' file and signature names as its own constants (their
    modules import TensorFlow, Keras or CTranslate2, which a server may not need): they
    must be the names the exporters write."""
    pytest.importorskip("ctranslate2")
    from keras_attn.export import ctranslate2_runtime, saved_model
    from keras_attn.serve.locate import CT2_METADATA, MODEL_NAME

    assert MODEL_NAME == saved_model.MODEL_NAME
    assert CT2_METADATA == ctranslate2_runtime.METADATA


@pytest.mark.parametrize("batch_size", [2, 128])
def test_batches_sorted_by_length_give_the_same_hypotheses(batch_size):
    """translate_sentences sorts a request of several batches by source length and puts
    the results back in order: the same hypotheses as one sentence at a time, each row
    padded to the longest of its batch only."""
    from keras_attn.translation import pipeline

    class Echo:  # an engine whose hypothesis is its source ids, read back
        max_len, split_long = 8, False

        def __init__(self):
            self.calls = []

        def tokenize(self, sentences):
            return [[4 + len(w) for w in s.split()] for s in sentences]

        def decode(self, source, opts, prefix):
            self.calls.append(source.shape)
            return {"tokens": source[:, None, :], "scores": -source.sum(1, keepdims=True)}

        def detokenize(self, rows):
            return [" ".join(str(i) for i in row if i > 3) for row in rows]

    sentences = ["a bb ccc", "dddd", "e ff ggg hhhh iiiii jj k l m", "n", "", "oo pp"]
    engine = Echo()
    out = pipeline.translate_sentences(engine, sentences, batch_size, opts=None)
    ids = engine.tokenize(sentences)
    assert [h[0]["translation"] for h in out] == [
        " ".join(str(i) for i in row[: Echo.max_len - 1]) for row in ids]
    assert [h[0]["score"] for h in out] == [
        -float(sum(row[: Echo.max_len - 1]) + 3) for row in ids]  # + [END]
    if batch_size == 2:  # sorted: widths 1+1, 2+1, 7+1 ([END] included)
        assert [shape for shape in engine.calls] == [(2, 2), (2, 3), (2, 8)]


def test_a_request_tokenizes_each_sentence_once():
    """translate_documents tokenizes the request's sentences once (their lengths decide
    truncation, the same ids are decoded); a cut sentence's pieces are tokenized then."""
    from keras_attn.translation import pipeline

    class Counting:
        max_len, split_long = 8, False

        def __init__(self):
            self.tokenized = []

        def tokenize(self, sentences):
            self.tokenized += list(sentences)
            return [[4 + len(w) for w in s.split()] for s in sentences]

        def decode(self, source, opts, prefix):
            return {"tokens": source[:, None, :], "scores": np.zeros((len(source), 1))}

        def detokenize(self, rows):
            return [" ".join(str(i) for i in row if i > 3) for row in rows]

    engine = Counting()
    texts = ["A bb. Ccc dddd.", "e", "f gg hhh iiii jjjjj k l m n o."]
    docs = pipeline.translate_documents(engine, texts, lambda s, ids: pipeline.translate_sentences(
        engine, s, 128, None, ids=ids))
    assert sorted(engine.tokenized) == sorted(
        ["A bb.", "Ccc dddd.", "e", "f gg hhh iiii jjjjj k l m n o."])
    assert [d[0]["truncated"] for d in docs] == [False, False, True]


@pytest.mark.parametrize("factor", [0.5, 3.0])
def test_ctranslate2_greedy_length_limits_in_one_call(ct2_dates, factor):
    """max_length_factor gives each sentence its own limit: greedy decodes the batch once at
    the longest and again only the rows that ran past theirs; the hypotheses and scores are
    those of each sentence decoded alone."""
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    ct2 = CTranslate2Translator(ct2_dates["path"])
    texts = ["3 March 2021", "July 4, 1999", "12/25/2000", "1 Jan 1970", "Sunday 9 May 04"]
    alone = [ct2.translate_nbest([t], max_length_factor=factor, confidence=False)[0]
             for t in texts]

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def translate_batch(self, source, *args, **kwargs):
            self.calls.append(len(source))
            return self.inner.translate_batch(source, *args, **kwargs)

    ct2.translator = Counting(ct2.translator)
    together = ct2.translate_nbest(texts, max_length_factor=factor, confidence=False)
    assert [h[0]["translation"] for h in together] == [h[0]["translation"] for h in alone]
    np.testing.assert_allclose([h[0]["score"] for h in together],
                               [h[0]["score"] for h in alone], rtol=1e-5, atol=1e-5)
    assert ct2.translator.calls[0] == len(texts)
    limits = [max(1, int(np.ceil(factor * (len(t) + 1)))) for t in ct2.encode(texts)]
    if factor == 3.0:  # every date ends within three times its length: one call
        assert ct2.translator.calls == [len(texts)]
    else:  # cut short: the rows that ran past their limit again, one call per limit
        assert 1 < len(ct2.translator.calls) <= 1 + len(set(limits))
        assert sum(ct2.translator.calls[1:]) <= len(texts)


def test_ctranslate2_without_confidence_skips_score_batch(ct2_dates):
    """confidence=False: the same hypotheses and scores, no "confidence" and no
    score_batch call (the confidence's forced-decoding pass)."""
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    ct2 = CTranslate2Translator(ct2_dates["path"])
    texts = ["3 March 2021. 4 July 1999", "12/25/2000"]
    with_confidence = ct2.translate_nbest(texts, beam_size=2, num_hypotheses=2)

    class NoScoring:  # the ctranslate2.Translator, but score_batch fails the test
        def __init__(self, inner):
            self.inner = inner

        def translate_batch(self, *args, **kwargs):
            return self.inner.translate_batch(*args, **kwargs)

        def score_batch(self, *args, **kwargs):
            raise AssertionError("score_batch called without a confidence asked")

    ct2.translator = NoScoring(ct2.translator)
    without = ct2.translate_nbest(texts, beam_size=2, num_hypotheses=2, confidence=False)

    def strip(hyp):
        hyp = {k: v for k, v in hyp.items() if k != "confidence"}
        if "sentences" in hyp:
            hyp["sentences"] = [strip(h) for h in hyp["sentences"]]
        return hyp

    assert all("confidence" in h for hyps in with_confidence for h in hyps)
    assert not any("confidence" in h for hyps in without for h in hyps)
    assert without == [[strip(h) for h in hyps] for hyps in with_confidence]
