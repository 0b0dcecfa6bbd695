"""Fine-tuning counts: what LoRA trains and what a quantized frozen base stores (pure arithmetic, no torch).

    targets   LoRA role names (q, k, v, o, gate, up, down, head; all-linear) mapped onto each family's modules as
              Hugging Face transformers names them, the fused projections among them (GPT-2's c_attn, GPT-NeoX's and
              Falcon's query_key_value, Phi-3's qkv_proj and gate_up_proj, MPT's Wqkv), and the `target_modules`
              list PEFT is given for a choice of roles
    lora      trainable parameters of the adapters (Hu et al. 2021, arXiv:2106.09685: r·(d_in + d_out) per
              adapted matrix), counted two ways on fused projections: on the chosen parts only (this package's
              meaning of a role) and as PEFT adapts the whole module it is given; frozen parameters
    quant     bytes of frozen base weights stored quantized: NF4 and double-quantized NF4 (Dettmers et al. 2023,
              arXiv:2305.14314, Sec. 3) as torchao's NF4Tensor and bitsandbytes' Params4bit hold them, int8 as
              bitsandbytes' LLM.int8 Int8Params holds it (Dettmers et al. 2022, arXiv:2208.07339)

Counts are checked against PEFT (get_peft_model on a transformers model built on the meta device,
get_nb_trainable_parameters) and bytes against the inner tensors of torchao's to_nf4 and bitsandbytes' quantize
functions (tests/account/test_finetune_*.py). Imports account.counting only.
"""
