"""keras_attn.kernels.tf_attention (TensorFlow only): how attention is cut into chunks of heads.

That the fast paths give what their keras.ops references give is tests/kernels/test_fastpath.py's
job; the chunked attention itself is checked through the layer in
tests/layers/test_multi_head_attention.py."""
from tests.support.attention_checks import CHUNK_B, CHUNK_CASES, CHUNK_HEADS, K, Q


def test_attention_chunks_cover_every_row_in_aligned_chunks(monkeypatch):
    from keras_attn.kernels import tf_attention as mha_module
    from keras_attn.kernels.tf_attention import attention_chunks
    monkeypatch.setattr(mha_module, "gpu_visible", lambda: False)  # the CPU rule
    for chunk_bytes, rows in CHUNK_CASES.items():
        assert attention_chunks(CHUNK_B, CHUNK_HEADS, Q, K, chunk_bytes, 0) == rows
        assert attention_chunks(CHUNK_B, CHUNK_HEADS, Q, K, chunk_bytes) == [12]  # small
    assert attention_chunks(16, 8, 512, 512) == [2] * 64  # 128 MiB: 1 MiB per head
    assert attention_chunks(16, 8, 256, 256) == [8] * 16  # 32 MiB: an example per chunk
    assert attention_chunks(32, 8, 128, 128) == [256]  # 16 MiB in all: one chunk
    assert attention_chunks(16, 8, 128, 128, 1 << 21, 0) == [32] * 4
    assert attention_chunks(None, 8, 256, 256) == [None]  # dynamic batch: no split
    assert attention_chunks(2, 8, 0, 5, 1 << 21, 0) == [16]  # no query
    for heads, q_len in ((6, 100), (8, 300), (12, 512)):
        for batch in (1, 3, 7):
            rows = attention_chunks(batch, heads, q_len, q_len, 1 << 18, 0)
            assert sum(rows) == batch * heads
            for n in rows:  # whole examples, or a divisor of the heads inside one
                assert n % heads == 0 or heads % n == 0
                assert n * 4 * q_len * q_len <= 1 << 18 or n == 1
    monkeypatch.setattr(mha_module, "gpu_visible", lambda: True)
    assert attention_chunks(16, 8, 512, 512) == [128]  # a GPU: one chunk
    assert attention_chunks(16, 8, 512, 512, 1 << 21, 0) == [128]
    # The decision injected: both sides run on any machine.
    assert attention_chunks(16, 8, 512, 512, gpu=False) == [2] * 64
    assert attention_chunks(16, 8, 512, 512, gpu=True) == [128]
