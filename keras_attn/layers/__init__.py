"""Keras 3 attention layers: D2L chapter 11 and "Attention Is All You Need".

Masked softmax, Nadaraya–Watson, additive, dot-product and multi-head attention,
positional encodings, the Transformer's blocks and stacks, Bahdanau's GRU encoder-decoder.

May import: :mod:`keras_attn.ops`, :mod:`keras_attn.kernels`, :mod:`keras_attn.core`, Keras.

Example:
    >>> from keras_attn.layers import MultiHeadAttention
    >>> mha = MultiHeadAttention(num_hiddens=64, num_heads=4)
"""
from keras_attn.layers.additive_attention import AdditiveAttention
from keras_attn.layers.dot_product_attention import DotProductAttention
from keras_attn.layers.dropout import Dropout
from keras_attn.layers.masked_softmax import MaskedSoftmax
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.layers.nadaraya_watson import NadarayaWatson
from keras_attn.layers.positional_encoding import LearnedPositionalEmbedding, PositionalEncoding
from keras_attn.layers.add_norm import AddNorm
from keras_attn.layers.bahdanau import BahdanauDecoder, Seq2SeqEncoder
from keras_attn.layers.ffn import PositionWiseFFN
from keras_attn.layers.transformer import TiedLogits, TransformerDecoder, TransformerEncoder
from keras_attn.layers.transformer_blocks import TransformerDecoderBlock, TransformerEncoderBlock

# from_config of every layer raises ValueError for unknown keys (Keras raises TypeError).
from keras_attn.layers import _checks as _checks_module  # noqa: E402

for _cls in (AdditiveAttention, DotProductAttention, Dropout, MaskedSoftmax, MultiHeadAttention,
             NadarayaWatson, LearnedPositionalEmbedding, PositionalEncoding, AddNorm,
             BahdanauDecoder, Seq2SeqEncoder, PositionWiseFFN, TiedLogits, TransformerDecoder,
             TransformerEncoder, TransformerDecoderBlock, TransformerEncoderBlock):
    _cls.from_config = classmethod(_checks_module.strict_from_config)
del _cls
