"""LoRA (models/lora.py): PEFT's initialization and trainable counts, the starting model equal to its base, merging,
and the one-line refusals (rank 0 or above a layer's width, unknown targets, a tied head)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainledger.errors import TrainledgerError
from trainledger.models import Transformer
from trainledger.models.lora import (LoRALinear, LoRASettings, apply_lora, lora_layers, merged_state_dict,
                                     parse_targets, trainable_counts)
from trainledger.specs import get_model

transformers = pytest.importorskip("transformers", reason="the reference counts are PEFT's on transformers models")
peft = pytest.importorskip("peft", reason="the reference counts are PEFT's (pip install peft)")

LLAMA = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
# our role names and the transformers Llama modules PEFT targets for them
LLAMA_TARGETS = {"q,v": ["q_proj", "v_proj"], "q,k,v,o,gate,up,down": ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                          "gate_proj", "up_proj", "down_proj"],
                 "all-linear": "all-linear", "o,down,head": ["o_proj", "down_proj", "lm_head"]}


def _llama_pair(tmp_path):
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))
    hf.save_pretrained(tmp_path, safe_serialization=True)
    from trainledger.train.hf_io import load_hf_model
    ours, _ = load_hf_model(tmp_path)
    return hf, ours


@pytest.mark.parametrize("targets", list(LLAMA_TARGETS))
def test_trainable_parameters_equal_peft_on_a_llama_model(targets, tmp_path):
    hf, ours = _llama_pair(tmp_path)
    apply_lora(ours, LoRASettings(rank=8, alpha=16, targets=parse_targets(targets)))
    tuned = peft.get_peft_model(hf, peft.LoraConfig(r=8, lora_alpha=16, target_modules=LLAMA_TARGETS[targets]))
    theirs_trainable, theirs_total = tuned.get_nb_trainable_parameters()
    trainable, frozen = trainable_counts(ours)
    assert trainable == theirs_trainable > 0
    assert trainable + frozen == theirs_total
    # and by the paper's count, r·(d_in + d_out) per adapted Linear
    assert trainable == sum(8 * (m.in_features + m.out_features) for m in lora_layers(ours).values())


def test_llama_2_7b_q_v_rank_8_has_the_published_4_2m_adapters():
    # 32 layers × 2 matrices × 8 · (4096 + 4096) = 4,194,304 (Hu et al. 2021, arXiv:2106.09685, Sec. 4.1 count)
    with torch.device("meta"):
        model = Transformer(get_model("llama-2-7b"))
    apply_lora(model, LoRASettings(rank=8, targets=("q", "v")))
    assert trainable_counts(model)[0] == 4_194_304


def test_gpt2_output_and_mlp_adapters_equal_peft_counts(tmp_path):
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                                              n_positions=64))
    hf.save_pretrained(tmp_path, safe_serialization=True)
    from trainledger.train.hf_io import load_hf_model
    ours, _ = load_hf_model(tmp_path)
    apply_lora(ours, LoRASettings(rank=4, targets=parse_targets("o,up,down")))
    tuned = peft.get_peft_model(hf, peft.LoraConfig(r=4, target_modules=["attn.c_proj", "mlp.c_fc", "mlp.c_proj"],
                                                    fan_in_fan_out=True))
    assert trainable_counts(ours)[0] == tuned.get_nb_trainable_parameters()[0] > 0


def test_init_is_peft_s_kaiming_uniform_a_and_zero_b_so_the_model_starts_at_its_base():
    base_layer = nn.Linear(96, 48)
    torch.manual_seed(0)
    layer = LoRALinear(base_layer, rank=4, alpha=8)
    torch.manual_seed(0)
    expected = torch.empty(4, 96)
    nn.init.kaiming_uniform_(expected, a=math.sqrt(5))       # PEFT's reset_lora_parameters (init_lora_weights=True)
    assert torch.equal(layer.lora_A, expected)
    assert layer.lora_A.abs().max() <= 1 / math.sqrt(96) and torch.count_nonzero(layer.lora_B) == 0
    assert layer.scaling == 2.0
    spec = get_model("tiny")
    torch.manual_seed(1)
    base = Transformer(spec)
    adapted = Transformer(spec)
    adapted.load_state_dict(base.state_dict())
    apply_lora(adapted, LoRASettings(targets=("all-linear",)))
    idx = torch.randint(0, 256, (2, 16))
    assert torch.equal(base(idx), adapted(idx))
    assert all(not p.requires_grad for n, p in adapted.named_parameters() if "lora_" not in n)
    assert all(p.requires_grad for n, p in adapted.named_parameters() if "lora_" in n)


def test_merged_weights_compute_what_the_adapters_compute():
    spec = get_model("tiny").with_(tied_embeddings=False)
    torch.manual_seed(2)
    model = Transformer(spec)
    apply_lora(model, LoRASettings(rank=4, alpha=12, targets=parse_targets("q,k,v,o,up,down,head")))
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_(0, 0.05)
    plain = Transformer(spec)
    plain.load_state_dict(merged_state_dict(model))
    idx = torch.randint(0, 256, (2, 24))
    with torch.no_grad():
        adapted, merged = model(idx), plain(idx)
    assert (adapted - merged).abs().max() < 1e-4
    unadapted = Transformer(spec)
    unadapted.load_state_dict({k: v for k, v in merged_state_dict(model).items()})
    with torch.no_grad():
        for name, layer in lora_layers(model).items():       # the base alone differs: the update is not nothing
            unadapted.get_submodule(name).weight.copy_(layer.base.weight)
        assert (unadapted(idx) - adapted).abs().max() > 1e-2


@pytest.mark.parametrize("text, message", [
    ("q,x", "unknown target 'x'"), ("", "unknown target"), ("all-linear,q", "unknown target 'all-linear'"),
])
def test_unknown_targets_are_one_line(text, message):
    with pytest.raises(TrainledgerError, match=message) as error:
        parse_targets(text)
    assert "\n" not in str(error.value) and "q, k, v, o, gate, up, down, head, or all-linear" in str(error.value)


def test_targets_come_back_in_role_order():
    assert parse_targets("v, Q") == ("q", "v")
    assert parse_targets("all-linear") == ("all-linear",)


@pytest.mark.parametrize("rank, message", [(0, "must be a positive integer, got 0"),
                                           (129, "exceeds the width 128 of blocks.0.attn.q_proj")])
def test_rank_zero_or_above_the_width_is_refused(rank, message):
    model = Transformer(get_model("tiny"))
    with pytest.raises(TrainledgerError, match=message):
        apply_lora(model, LoRASettings(rank=rank))


def test_a_tied_head_and_absent_roles_are_refused():
    model = Transformer(get_model("tiny"))             # GPT-2 style: the head is the embedding, no gate
    with pytest.raises(TrainledgerError, match="tied to its token embedding"):
        apply_lora(model, LoRASettings(targets=("head",)))
    with pytest.raises(TrainledgerError, match="no such layer"):
        apply_lora(Transformer(get_model("tiny")), LoRASettings(targets=("gate",)))
