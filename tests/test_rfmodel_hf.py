"""rfmodel against the HF/torch implementations it mirrors: TinyModel weights load into
LlamaForCausalLM / Qwen3ForCausalLM with strict names and give the same logits; the GDN scan
equals HF's torch_recurrent_gated_delta_rule; round_bf16 equals torch's bfloat16 cast."""
import numpy as np
import pytest

pytestmark = pytest.mark.slow  # imports torch + transformers (several seconds)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rfmodel.gdn import gdn_scan  # noqa: E402
from rfmodel.maps import round_bf16  # noqa: E402
from rfmodel.model import TinyConfig, TinyModel  # noqa: E402


def _hf_model(family, cfg):
    common = dict(vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                  num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                  num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_eps,
                  tie_word_embeddings=cfg.tie_embeddings, attn_implementation="eager",
                  rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta})
    if family == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common)).eval()


@pytest.mark.parametrize("family, qk_norm, tie", [("llama", False, False), ("llama", False, True),
                                                  ("qwen3", True, False)])
def test_tiny_model_matches_hf_logits_and_names(family, qk_norm, tie):
    cfg = TinyConfig(vocab=64, hidden=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8,
                     intermediate=48, rope_theta=5000.0, qk_norm=qk_norm, tie_embeddings=tie)
    tiny = TinyModel.random(cfg, 7, dtype=np.float32)
    hf = _hf_model(family, cfg)
    weights = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tiny.w.items()}
    hf.load_state_dict(weights, strict=True)  # every name and shape matches HF
    ids = np.random.default_rng(1).integers(0, 64, 24)
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)[None]).logits[0].numpy()
    ours, _ = tiny.forward_exact(ids)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-5 * np.abs(ref).max())
    # and the other direction: an HF state_dict loads into TinyModel as is
    back = TinyModel(cfg, {k: v.numpy() for k, v in hf.state_dict().items()}, dtype=np.float32)
    np.testing.assert_array_equal(back.forward_exact(ids)[0], ours)


def test_gdn_scan_matches_hf_recurrent_gated_delta_rule():
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    rng = np.random.default_rng(0)
    H, N, dk, dv = 3, 17, 8, 5
    q, k = rng.standard_normal((2, H, N, dk)).astype(np.float32)
    v = rng.standard_normal((H, N, dv)).astype(np.float32)
    log_g = -rng.uniform(0.0, 1.0, (H, N)).astype(np.float32)
    beta = rng.uniform(0, 1, (H, N)).astype(np.float32)
    s0 = rng.standard_normal((H, dk, dv)).astype(np.float32)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    # HF layout (B, N, heads, d); it L2-normalises q, k and divides q by sqrt(d_k) itself
    out_hf, state_hf = torch_recurrent_gated_delta_rule(
        t(q.transpose(1, 0, 2))[None], t(k.transpose(1, 0, 2))[None], t(v.transpose(1, 0, 2))[None],
        t(log_g.T)[None], t(beta.T)[None], initial_state=t(s0)[None], output_final_state=True,
        use_qk_l2norm_in_kernel=True)
    qn = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dk)
    kn = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    out, state = gdn_scan(qn, kn, v, np.exp(log_g), beta, s0)
    np.testing.assert_allclose(out, out_hf[0].numpy().transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state, state_hf[0].numpy(), rtol=1e-5, atol=1e-5)


def test_round_bf16_equals_torch_bfloat16():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 5000),
                        (np.arange(-2000, 2000, dtype=np.int64) * 2**15 + 0x3F800000)
                        .astype(np.uint32).view(np.float32),  # exact bf16 ties
                        np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-45], np.float32)])
    ref = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(round_bf16(x).view(np.uint32), ref.view(np.uint32))
