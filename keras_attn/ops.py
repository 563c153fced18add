"""Masks and the masked softmax, the numerical core of every attention layer: the public home
of :mod:`keras_attn.kernels.masks`.

Example:
    >>> import numpy as np
    >>> from keras_attn import ops
    >>> w = ops.masked_softmax(np.ones((1, 2, 4), "float32"), valid_lens=np.array([2]))
    >>> np.asarray(w)[0, 0].round(2).tolist()
    [0.5, 0.5, 0.0, 0.0]
"""
from keras_attn.kernels.masks import (causal_mask, check_batch, combine_masks, keep_mask,
                                      large_negative, masked_softmax, normalize_mask,
                                      sequence_mask, slice_update, softmax,
                                      valid_lens_to_mask)

__all__ = ["sequence_mask", "causal_mask", "valid_lens_to_mask", "normalize_mask",
           "combine_masks", "masked_softmax", "softmax", "slice_update", "keep_mask",
           "check_batch", "large_negative"]
