"""The exact tail's attention as prefix + causal square merged by log-sum-exp
(gpu.core.attention.prefix_then_causal) against one masked scaled_dot_product_attention."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.core.attention import blocks, causal_after_prefix, masked_attention, prefix_then_causal


def _tail_case(n_prefix: int, tail: int, exact: int, seed: int, dtype=torch.float32):
    """Queries: ``exact`` random prefix rows then the whole tail; every key visible (the
    ridge fill writes every row), causal: the late walk's mask with no window."""
    g = torch.Generator().manual_seed(seed)
    n = n_prefix + tail
    picks = torch.randperm(n_prefix, generator=g)[:exact].sort().values
    rows = torch.cat([picks, torch.arange(n_prefix, n)])
    allowed = torch.arange(n)[None, :] <= rows[:, None]
    q = torch.randn(1, 6, rows.numel(), 16, generator=g, dtype=dtype)
    k, v = (torch.randn(1, 2, n, 16, generator=g, dtype=dtype) for _ in range(2))
    return q, k, v, allowed


@settings(max_examples=60, deadline=None)
@given(n_prefix=st.integers(0, 400), tail=st.integers(1, 300), exact=st.integers(0, 20),
       block=st.sampled_from([1, 7, 64, 512]), seed=st.integers(0, 2**16))
def test_tail_blocks_equal_one_masked_call(n_prefix, tail, exact, block, seed):
    q, k, v, allowed = _tail_case(n_prefix, tail, min(exact, n_prefix), seed)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                                            scale=0.25, enable_gqa=True)
    got = masked_attention(q, k, v, allowed, 0.25, block=block)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_tail_takes_the_unmasked_kernels():
    """A 1,024-row tail after 1,024 filled rows: both blocks of 512 run prefix + causal
    square (no mask); exact prefix rows scattered before it run masked."""
    q, k, v, allowed = _tail_case(1024, 1024, 0, 0)
    plan = blocks(allowed, q.device)
    assert plan.fast == ((0, 512, 0, 1536), (512, 1024, 0, 2048)) and not plan.masked
    q, k, v, allowed = _tail_case(1024, 1024, 30, 0)
    plan = blocks(allowed, q.device)
    assert plan.masked and plan.masked[0][0] == 0 and not plan.whole


def test_causal_after_prefix_needs_every_prefix_column():
    """One hidden prefix column (a no-fill arm) or a span one column short of the causal
    square breaks the pattern."""
    _, _, _, allowed = _tail_case(64, 32, 0, 1)
    assert causal_after_prefix(allowed, (0, 32, 0, 96))
    hidden = allowed.clone()
    hidden[:, 10] = False
    assert not causal_after_prefix(hidden, (0, 32, 0, 96))
    assert not causal_after_prefix(allowed, (0, 32, 0, 95))  # span one short of the square


@settings(max_examples=20, deadline=None)
@given(c=st.integers(0, 200), m=st.integers(1, 120), seed=st.integers(0, 2**16))
def test_merge_is_softmax_over_the_union_bf16(c, m, seed):
    """In bf16 the merge stays within bf16 rounding of the float32 closed form."""
    q, k, v, allowed = _tail_case(c, m, 0, seed, torch.bfloat16)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=allowed, scale=0.25, enable_gqa=True)
    got = prefix_then_causal(q, k, v, 0.25)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


def test_without_the_merge_every_block_runs_masked(monkeypatch):
    """Before torch 2.9 (no grouped heads in the CPU flash kernel) the tail runs masked, with
    the same result."""
    import gpu.core.attention as attention

    q, k, v, allowed = _tail_case(300, 200, 5, 3)
    fast = masked_attention(q, k, v, allowed, 0.25, block=64)
    monkeypatch.setattr(attention, "CPU_MERGE", False)
    plan = blocks(allowed, q.device, block=64)
    assert not plan.fast
    torch.testing.assert_close(attention.attend(plan, q, k, v, 0.25), fast, rtol=1e-5, atol=1e-6)
