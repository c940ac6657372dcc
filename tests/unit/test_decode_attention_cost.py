"""Attention's FLOPs and bytes per cached token, against the library's compiled decode step.

XLA's FLOP count of a decode step, at two cache lengths, differenced: what each extra cached
token costs. It also counts the softmax's elementwise work (a few operations per score), so
the formula (matmul FLOPs only) is held to within a few percent on heads wide enough for the
matmuls to dominate; the bytes are those the library's cache allocates per token.
"""

import jax
import jax.numpy as jnp
import pytest

from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.features import MLA
from inferbook.perf import hlo
from inferbook.perf.decode_attention_cost import decode_attention_per_cached_token

LATENT = ModelConfig(L=1, D=64, F=64, N=4, K=4, H=192, V=64, name="latent",
                     mla=MLA(R_kv=512, H_nope=128, H_rope=64, H_v=128))
GROUPED = ModelConfig(L=1, D=64, F=64, N=8, K=2, H=128, V=64, name="grouped")


def per_cached_token(cfg: ModelConfig) -> tuple[float, float]:
    params = decoder.init_params(cfg, 0)
    flops, nbytes = [], []
    for S in (256, 512):
        cache = jax.eval_shape(lambda S=S: kvcache.init_cache(cfg, 1, S))   # float32
        compiled = hlo.compile_fn(decode.decode_step, params, cfg,
                                  jax.ShapeDtypeStruct((1,), jnp.int32), cache)
        flops.append(hlo.flops(compiled))
        nbytes.append(sum(a.size * a.dtype.itemsize for a in cache.k + cache.v))
    return (flops[1] - flops[0]) / 256 / cfg.L, (nbytes[1] - nbytes[0]) / 256 / cfg.L


@pytest.mark.parametrize("cfg, form", [(LATENT, "absorbed"), (GROUPED, None)],
                         ids=["latent-absorbed", "grouped"])
def test_the_decode_step_spends_what_the_formula_says_per_cached_token(cfg, form):
    flops, nbytes = per_cached_token(cfg)
    want_flops, want_bytes = decode_attention_per_cached_token(cfg, form, 4)
    assert nbytes == want_bytes
    assert want_flops <= flops <= 1.03 * want_flops


def test_the_naive_form_pays_for_decompressing_every_latent():
    m, N = LATENT.mla, LATENT.N
    naive, read = decode_attention_per_cached_token(LATENT, "naive")
    absorbed, same = decode_attention_per_cached_token(LATENT, "absorbed")
    assert read == same == (m.R_kv + m.H_rope) * 2
    # Decompression (c · W_UK, c · W_UV) and attention over the decompressed heads.
    assert naive == 2 * m.R_kv * N * (m.H_nope + m.H_v) + 2 * N * m.H_qk + 2 * N * m.H_v
    assert naive > 100 * absorbed / N
    with pytest.raises(ValueError, match="form must be one of"):
        decode_attention_per_cached_token(LATENT, "folded")
    with pytest.raises(ValueError, match="no latent attention"):
        decode_attention_per_cached_token(GROUPED, "naive")
