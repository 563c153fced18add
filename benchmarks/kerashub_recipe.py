"""The keras.io KerasHub translation recipe on English->French, timed and scored as ours.

The recipe of "English-to-Spanish translation with KerasHub" (keras.io), on the project's
Tatoeba split: lower-cased text, WordPiece vocabularies of 15,000 (keras_hub's
``compute_word_piece_vocabulary``), sequences of 40 tokens, batch 64, one encoder and one
decoder layer of keras_hub (d 256, FFN 2048, 8 heads, learned positions), RMSprop, greedy
decoding with ``keras_hub.samplers.GreedySampler``. After each of ``--evals`` equal parts of
the training it decodes the 2,000 English sentences of dev.txt and scores them with
:func:`keras_attn.training.evaluation.corpus_scores` (sacrebleu, all references; as written and
D2L-normalised), and records the training wall minutes so far: the curve that
``python -m benchmarks.budget_figure`` draws beside ours.

Example:
    python -m benchmarks.kerashub_recipe --data ../shared/data/fra-eng --epochs 2 \\
        --output docs/benchmarks/kerashub_recipe.json
"""
import argparse
import json
import os
import re
import time

from benchmarks.results import fresh_dir

SPECIAL = ["[PAD]", "[UNK]", "[START]", "[END]"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data/fra-eng",
                   help="folder with train.txt and dev.txt (default: %(default)s)")
    p.add_argument("--epochs", type=float, default=2, help="(default: %(default)s)")
    p.add_argument("--evals", type=int, default=4,
                   help="scored points along the training (default: %(default)s)")
    p.add_argument("--vocab-size", type=int, default=15000, help="(default: %(default)s)")
    p.add_argument("--max-pairs", type=int, default=0,
                   help="train on the first N pairs only (0: all; default: %(default)s)")
    p.add_argument("--max-dev", type=int, default=0,
                   help="score the first N dev sentences only (0: all; default: %(default)s)")
    p.add_argument("--dims", default="256,2048,8",
                   help="embed, FFN and heads (default: %(default)s, the recipe's)")
    p.add_argument("--output", default="",
                   help="JSON written after each scored point (default: a new "
                        "benchmarks/results/ folder)")
    return p.parse_args(argv)


def natural(text):
    """keras_hub's detokenized WordPiece output (``j ' ai``, ``est - ce``) with the
    apostrophes and hyphens joined back into their words."""
    return re.sub(r" ?(['-]) ?", r"\1", text).strip()


def build_model(src_vocab, tgt_vocab, max_len, embed, ffn, heads):
    import keras
    import keras_hub

    encoder_inputs = keras.Input(shape=(None,), name="encoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(src_vocab, max_len, embed)(encoder_inputs)
    encoder_outputs = keras_hub.layers.TransformerEncoder(ffn, heads)(inputs=x)
    decoder_inputs = keras.Input(shape=(None,), name="decoder_inputs")
    y = keras_hub.layers.TokenAndPositionEmbedding(tgt_vocab, max_len, embed)(decoder_inputs)
    y = keras_hub.layers.TransformerDecoder(ffn, heads)(decoder_sequence=y,
                                                        encoder_sequence=encoder_outputs)
    y = keras.layers.Dropout(0.5)(y)
    outputs = keras.layers.Dense(tgt_vocab, activation="softmax")(y)
    return keras.Model([encoder_inputs, decoder_inputs], outputs, name="transformer")


def main(argv=None):
    args = parse_args(argv)
    args.output = args.output or os.path.join(fresh_dir("kerashub_recipe"),
                                              "kerashub_recipe.json")
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    from keras_attn.data import load_tatoeba, load_tatoeba_references
    from keras_attn.training.evaluation import corpus_scores

    max_len, batch = 40, 64
    embed, ffn, heads = (int(v) for v in args.dims.split(","))
    pairs, _ = load_tatoeba(os.path.join(args.data, "train.txt"), normalize=False,
                            max_pairs=args.max_pairs or None)
    pairs = [(en.lower(), fr.lower()) for en, fr in pairs]
    sources, refs = load_tatoeba_references(os.path.join(args.data, "dev.txt"),
                                            normalize=False)
    if args.max_dev:
        sources, refs = sources[:args.max_dev], refs[:args.max_dev]

    def vocab(texts):
        ds = tf.data.Dataset.from_tensor_slices(texts).batch(1000)
        return keras_hub.tokenizers.compute_word_piece_vocabulary(
            ds, vocabulary_size=args.vocab_size, lowercase=False, strip_accents=False,
            reserved_tokens=SPECIAL)

    t0 = time.time()
    eng_tok = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab([p[0] for p in pairs]),
                                                      lowercase=False)
    fra_tok = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab([p[1] for p in pairs]),
                                                      lowercase=False)
    vocab_seconds = time.time() - t0
    start_packer = keras_hub.layers.StartEndPacker(sequence_length=max_len + 1,
                                                   start_value=fra_tok.token_to_id("[START]"),
                                                   end_value=fra_tok.token_to_id("[END]"),
                                                   pad_value=fra_tok.token_to_id("[PAD]"))
    src_packer = keras_hub.layers.StartEndPacker(sequence_length=max_len,
                                                 pad_value=eng_tok.token_to_id("[PAD]"))

    def preprocess(eng, fra):
        fra = start_packer(fra_tok(fra))
        return {"encoder_inputs": src_packer(eng_tok(eng)), "decoder_inputs": fra[:, :-1]}, \
            fra[:, 1:]

    rng = np.random.default_rng(0)
    order = rng.permutation(len(pairs))
    eng = [pairs[i][0] for i in order]
    fra = [pairs[i][1] for i in order]
    train_ds = (tf.data.Dataset.from_tensor_slices((eng, fra)).batch(batch)
                .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(16))
    steps_per_epoch = -(-len(pairs) // batch)
    total_steps = int(args.epochs * steps_per_epoch)
    model = build_model(eng_tok.vocabulary_size(), fra_tok.vocabulary_size(), max_len,
                        embed, ffn, heads)
    model.compile("rmsprop", loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=0),
                  metrics=["accuracy"])

    start_id, end_id = fra_tok.token_to_id("[START]"), fra_tok.token_to_id("[END]")
    sampler = keras_hub.samplers.GreedySampler()

    @tf.function(reduce_retracing=True)
    def generate(encoder_input, prompt):
        # The recipe's decoding (the whole model re-run on the prefix at every step, no
        # cache) traced once per batch shape instead of run op by op: the same tokens.
        def next_fn(prompt, cache, index):
            logits = model([encoder_input, prompt])[:, index - 1, :]
            return logits, None, cache

        return sampler(next_fn, prompt, cache=None, index=1, stop_token_ids=[end_id])

    def translate(batch_sources):
        encoder_input = src_packer(eng_tok(tf.constant([s.lower() for s in batch_sources])))
        rows = len(batch_sources)
        prompt = tf.concat([tf.fill((rows, 1), start_id),
                            tf.zeros((rows, max_len - 1), "int32")], axis=-1)
        generated = generate(encoder_input, prompt).numpy()
        out = []
        for row in generated:
            ids = [t for t in row[1:].tolist() if t != 0]
            ids = ids[: ids.index(end_id)] if end_id in ids else ids
            words = fra_tok.detokenize(tf.constant(ids, "int32"))
            words = words if isinstance(words, str) else words.numpy().decode("utf-8")
            out.append(natural(words))
        return out

    record = {"recipe": "keras.io KerasHub translation (1+1 layers, d 256, FFN 2048, 8 heads,"
                        " WordPiece 15k, lower case, RMSprop, greedy)",
              "pairs": len(pairs), "dev_sentences": len(sources), "epochs": args.epochs,
              "steps_per_epoch": steps_per_epoch, "vocab_seconds": round(vocab_seconds, 1),
              "cpu": _cpu(), "points": []}
    train_seconds, done = vocab_seconds, 0
    cpu_seconds = time.process_time()  # every thread of this process: robust to other load
    for k in range(1, args.evals + 1):
        target = round(total_steps * k / args.evals)
        t0 = time.time()
        model.fit(train_ds.repeat(), initial_epoch=0, epochs=1, steps_per_epoch=target - done,
                  verbose=2)
        train_seconds += time.time() - t0
        train_cpu = time.process_time() - cpu_seconds
        done = target
        t0, cpu0 = time.time(), time.process_time()
        hyps = [h for i in range(0, len(sources), 256) for h in translate(sources[i:i + 256])]
        scores = corpus_scores(hyps, refs)
        record["points"].append({"steps": done, "epochs": round(done / steps_per_epoch, 3),
                                 "train_minutes": round(train_seconds / 60, 2),
                                 "train_cpu_minutes": round(train_cpu / 60, 2),
                                 "decode_seconds": round(time.time() - t0, 1), **scores,
                                 "samples": list(zip(sources[:5], hyps[:5]))})
        cpu_seconds += time.process_time() - cpu0  # decoding is not training
        print(json.dumps(record["points"][-1], ensure_ascii=False), flush=True)
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
    return record


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = re.search(r"model name\s*:\s*(.*)", info).group(1)
        return f"{name}, {os.cpu_count()} cores, AVX-512: {'avx512f' in info}"
    except (OSError, AttributeError):
        return "unknown"


if __name__ == "__main__":
    main()
