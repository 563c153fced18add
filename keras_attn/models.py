"""Functional-API builders for the two translators, and access to their attention maps.

Both models take ``{"source": int32 (B, S), "target_in": int32 (B, T)}`` (0 = padding) and
return logits ``(B, T, tgt_vocab_size)``. Padding masks come from id 0 automatically.
"""
import dataclasses

import keras
from keras import ops

from keras_attn.layers import (BahdanauDecoder, Seq2SeqEncoder, TransformerDecoder,
                               TransformerEncoder)


def _inputs():
    return {"source": keras.Input((None,), dtype="int32", name="source"),
            "target_in": keras.Input((None,), dtype="int32", name="target_in")}


def transformer_seq2seq(src_vocab_size, tgt_vocab_size, num_hiddens=256, ffn_num_hiddens=1024,
                        num_heads=4, num_layers=2, dropout=0.1, max_len=256, use_bias=False,
                        norm_first=False, tie_embeddings=False, ffn_dropout=0.0,
                        num_decoder_layers=None, name="transformer_seq2seq"):
    """Encoder–decoder Transformer (Vaswani et al. 2017) as a functional ``keras.Model``.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (id 0 = padding).
        num_hiddens, ffn_num_hiddens, num_heads, num_layers: sizes (layers per stack).
        num_decoder_layers: the decoder's layers (Kasai et al. 2021); None: ``num_layers``.
        dropout: rate on the embeddings + positions, the attention weights and every
            residual branch (section 5.4). max_len: longest source/target sequence.
        ffn_dropout: rate on the FFN hidden layer (0 as in the paper).
        use_bias: biases in the attention projections. norm_first: pre-norm blocks.
        tie_embeddings: share the target embedding with the output projection (section 3.4).

    Sub-layers reachable as ``model.get_layer("encoder")`` / ``"decoder"``.

    Example:
        >>> model = transformer_seq2seq(100, 120, num_hiddens=32, ffn_num_hiddens=64)
        >>> model({"source": src, "target_in": tgt_in}).shape   # (B, T, 120)
    """
    inputs = _inputs()
    encoder = TransformerEncoder(src_vocab_size, num_hiddens, ffn_num_hiddens, num_heads,
                                 num_layers, dropout, use_bias, max_len, norm_first,
                                 ffn_dropout=ffn_dropout, name="encoder")
    decoder = TransformerDecoder(tgt_vocab_size, num_hiddens, ffn_num_hiddens, num_heads,
                                 num_decoder_layers or num_layers, dropout, use_bias, max_len,
                                 norm_first,
                                 tie_embeddings=tie_embeddings, ffn_dropout=ffn_dropout,
                                 name="decoder")
    enc_outputs = encoder(inputs["source"])
    logits = decoder(inputs["target_in"], enc_outputs)
    return keras.Model(inputs, logits, name=name)


def bahdanau_seq2seq(src_vocab_size, tgt_vocab_size, embed_size=256, num_hiddens=256,
                     num_layers=2, dropout=0.1, name="bahdanau_seq2seq"):
    """GRU encoder–decoder with additive attention (Bahdanau et al. 2015).

    Example:
        >>> model = bahdanau_seq2seq(100, 120, embed_size=16, num_hiddens=32)
        >>> model({"source": src, "target_in": tgt_in}).shape   # (B, T, 120)
    """
    inputs = _inputs()
    encoder = Seq2SeqEncoder(src_vocab_size, embed_size, num_hiddens, num_layers, dropout,
                             name="encoder")
    decoder = BahdanauDecoder(tgt_vocab_size, embed_size, num_hiddens, num_layers, dropout,
                              name="decoder")
    enc_outputs, enc_states = encoder(inputs["source"])
    source_mask = ops.not_equal(inputs["source"], 0)
    logits = decoder(inputs["target_in"], enc_outputs, enc_states,
                     enc_outputs_mask=source_mask)
    return keras.Model(inputs, logits, name=name)


def build_model(config):
    """The model a run's options describe.

    Args:
        config: a ``keras_attn.core.config.TrainConfig`` or its dict (``config.json``).

    Example:
        >>> build_model(runs.read_json("runs/dates/config.json"))
    """
    c = config if isinstance(config, dict) else dataclasses.asdict(config)
    if c["model"] == "transformer":
        return transformer_seq2seq(
            c["src_vocab_size"], c["tgt_vocab_size"], c["num_hiddens"], c["ffn_num_hiddens"],
            c["num_heads"], c["num_layers"], c["dropout"], max_len=c["max_len"] + 2,
            # Runs saved before these options existed: their defaults.
            ffn_dropout=c.get("ffn_dropout", 0.0), tie_embeddings=c.get("tie_embeddings", False),
            num_decoder_layers=c.get("num_decoder_layers", 0) or None,
            norm_first=c.get("norm_first", False))
    if c["model"] == "bahdanau":
        return bahdanau_seq2seq(c["src_vocab_size"], c["tgt_vocab_size"], c["num_hiddens"],
                                c["num_hiddens"], c["num_layers"], c["dropout"])
    raise ValueError("`model` must be 'transformer' or 'bahdanau'. "
                     f"Received: model={c['model']!r}")


def float32_model(model, config):
    """``model`` as it computes in float32: itself for a float32 run, else the same
    architecture built under the float32 policy with ``model``'s weights.

    Args:
        model: from :func:`build_model` (or ``model.keras``) for ``config``.
        config: the run's ``TrainConfig`` or its dict (``mixed_precision``).

    Example:
        >>> float32_model(model, config).get_layer("decoder").compute_dtype
        'float32'
    """
    c = config if isinstance(config, dict) else dataclasses.asdict(config)
    if c.get("mixed_precision", "") in ("", "float32"):
        return model
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        copy = build_model(c)
    finally:
        keras.config.set_dtype_policy(previous)
    copy.set_weights(model.get_weights())
    return copy


def model_kind(model):
    """``"transformer"`` or ``"bahdanau"`` for a model built by this module."""
    decoder = model.get_layer("decoder")
    if isinstance(decoder, TransformerDecoder):
        return "transformer"
    if isinstance(decoder, BahdanauDecoder):
        return "bahdanau"
    raise ValueError(f"`model` was not built by keras_attn.models. Received: {model.name}")


def attention_maps(model, batch):
    """Every attention map of ``model`` for ``batch``, as named numpy ``(B, H, Q, K)`` arrays.

    Transformer: ``encoder/self/layer_i``, ``decoder/self/layer_i``, ``decoder/cross/layer_i``.
    Bahdanau: ``decoder/cross`` ``(B, 1, T, S)`` (the additive weights of every step).

    Args:
        model: from :func:`transformer_seq2seq` or :func:`bahdanau_seq2seq`.
        batch: ``{"source": (B, S), "target_in": (B, T)}`` int arrays.
    """
    source = ops.convert_to_tensor(batch["source"], "int32")
    target_in = ops.convert_to_tensor(batch["target_in"], "int32")
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    maps = {}
    if model_kind(model) == "transformer":
        enc_outputs, enc_maps = encoder(source, return_attention_scores=True)
        _, dec_maps = decoder(target_in, enc_outputs,
                              enc_outputs_mask=ops.not_equal(source, 0),
                              return_attention_scores=True)
        stacks = {"encoder/self": enc_maps, "decoder/self": dec_maps["self"],
                  "decoder/cross": dec_maps["cross"]}
        maps = {f"{kind}/layer_{i}": w for kind, ws in stacks.items() for i, w in enumerate(ws)}
    else:
        enc_outputs, enc_states = encoder(source)
        _, w = decoder(target_in, enc_outputs, enc_states,
                       enc_outputs_mask=ops.not_equal(source, 0), return_attention_scores=True)
        maps["decoder/cross"] = ops.expand_dims(w, 1)
    return {k: ops.convert_to_numpy(v) for k, v in maps.items()}
