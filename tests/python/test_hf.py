"""attn.hf against transformers' own attention implementations on small
random models (no download): a left-padded batch gives sdpa's logits (eager's
where transformers' sdpa refuses, Gemma 2's softcap), gradients flow, and an
attention function registered without its mask is refused at the first call
(issue 36).  Skips when transformers is not installed."""

import copy

import numpy as np
import pytest

import attn


def _qwen2(tr, **extra):
    return tr.Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          **extra)


def _gemma3(tr):
    return tr.Gemma3TextConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               max_position_embeddings=64, sliding_window=4,
                               layer_types=["sliding_attention", "sliding_attention", "full_attention"])


def _gemma2(tr):
    return tr.Gemma2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           max_position_embeddings=64, sliding_window=4, attn_logit_softcapping=3.0)


def _model(tr, torch, config, implementation):
    """A model of its own config (from_config writes the implementation into
    the config it is given), checked to run the implementation asked for."""
    torch.manual_seed(0)
    m = tr.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=implementation)
    assert m.config._attn_implementation == implementation
    return m.eval()


def _pair(tr, torch, config, oracle="sdpa"):
    """(transformers' own implementation, attn's), the same weights."""
    import attn.hf

    theirs = _model(tr, torch, config, oracle)
    ours = _model(tr, torch, config, attn.hf.register())
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _left_padded_batch(torch):
    """Three sequences of 9, 5 and 2 tokens, left-padded to 9."""
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 97, (3, 9), generator=gen)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :7] = 0
    ids[mask == 0] = 0
    return ids, mask


CONFIGS = [("qwen2", _qwen2, "sdpa"), ("gemma3 sliding window", _gemma3, "sdpa"),
           ("gemma2 softcap", _gemma2, "eager")]


@pytest.mark.parametrize("name,make,oracle", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_left_padded_batch_matches_transformers(transformers, torch, name, make, oracle):
    theirs_model, ours_model = _pair(transformers, torch, make(transformers), oracle)
    ids, mask = _left_padded_batch(torch)
    with torch.no_grad():
        theirs = theirs_model(input_ids=ids, attention_mask=mask).logits
        ours = ours_model(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    np.testing.assert_allclose(ours[real].numpy(), theirs[real].numpy(), rtol=1e-4, atol=2e-5)
    # Each sequence alone (no padding) gives the same logits as in the batch.
    with torch.no_grad():
        alone = ours_model(input_ids=ids[1:2, 4:]).logits[0]
    np.testing.assert_allclose(alone.numpy(), ours[1, 4:].numpy(), rtol=1e-4, atol=2e-5)


def test_gradients_flow_through_the_registered_attention(transformers, torch):
    theirs_model, ours_model = _pair(transformers, torch, _qwen2(transformers))
    ids, mask = _left_padded_batch(torch)
    labels = ids.masked_fill(mask == 0, -100)
    grads = []
    for model in (theirs_model, ours_model):
        model.zero_grad()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    assert grads[1].abs().max() > 0
    np.testing.assert_allclose(grads[1].numpy(), grads[0].numpy(), rtol=1e-3, atol=1e-5)


def test_decode_with_a_cache_matches_sdpa(transformers, torch):
    theirs_model, ours_model = _pair(transformers, torch, _qwen2(transformers))
    ids, mask = _left_padded_batch(torch)
    with torch.no_grad():
        theirs = theirs_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
        ours = ours_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    assert torch.equal(ours, theirs)


def test_attention_registered_without_its_mask_is_refused(transformers, torch):
    import attn.hf
    from transformers import AttentionInterface

    AttentionInterface.register("attn-half-registered", attn.hf.attention_forward)
    model = _model(transformers, torch, _qwen2(transformers), "attn-half-registered")
    ids, mask = _left_padded_batch(torch)
    with pytest.raises(attn.ArgumentError, match=r"attn\.hf\.register\('attn-half-registered'\)"):
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)


def test_register_returns_its_name(transformers):
    import attn.hf
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert attn.hf.register("attn-named") == "attn-named"
    assert "attn-named" in AttentionInterface() and "attn-named" in AttentionMaskInterface()
    with pytest.raises(TypeError):
        attn.hf.register("")
