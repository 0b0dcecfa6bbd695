"""A training run as one value: the settings of a run, grouped as a reader looks for them. Pure, no torch.

Every question trainledger answers is about one run: a model (specs.model.TransformerSpec), the hardware it runs on
(`Hardware`: a GPUSpec and the number of GPUs) and the run's settings (`Run`), in groups:

- `Batch`: the micro-batch per GPU, the global batch (sequences per optimizer step) and the sequence length;
- `Numerics`: the precision recipe and the optimizer (specs/recipes.py);
- `Layout`: data parallelism (dp, ZeRO and FSDP2's options), tensor (tp, sp), pipeline (pp, interleave, schedule,
  uneven chunks), context (cp) and expert parallelism (ep, etp and the routing options);
- `Finetune`: what is trained: every weight, or LoRA adapters beside a frozen (maybe quantized) base;
- `Levers`: what trades time for memory (recomputation, the optimizer step in backward, offloading to the host,
  a chunked loss) and the memory kept back (reserve);
- `Kernels`: which kernels run and how: flash attention, the FLOP convention, torch.compile, the framework, the
  overlap switches, the loss upcast, the multi-token-prediction modules and whose synchronizations end a step.

Each field carries its command-line flag, kind, help and unit in its metadata (`setting`): specs/run_table.py reads
them into the one table from which the CLI's flags, the web API's schema and form, the JSON `run` and the run file
(specs/run_file.py) are made, so a new setting is one field here. Each group validates what it can without a model in
its constructor, so no group with a value out of range can be built; every error names the flag a user typed.
What needs the model or the hardware (tp dividing the heads, dp from the GPU count, the default ZeRO stage)
is checked and filled in by specs/run_checks.py's `resolve`.

`None` means "the default, decided from the model, hardware or layout" (resolve() fills it in), never "off".
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace

from trainledger.errors import TrainledgerError
from trainledger.specs.recipes import OPTIMIZERS, RECIPES
from trainledger.specs.run_setting import (  # noqa: F401 (the settings' vocabularies and checks, re-exported)
    CPU_OFFLOAD, DISPATCHERS, FINETUNE_METHODS, FRAMEWORKS, FSDP_ACCUMULATE, FSDP_IMPLS, FSDP_PARAM_DTYPES, FSDP_REDUCE_DTYPES, LARGEST_INT, LOOPS,
    LORA_ROLES, QUANTIZE, RECOMPUTE_POLICIES, RESERVE_WORDS, RUN_COMMANDS, RUN_FILE_VERSION, SCHEDULES, Setting, _check_fields, _field,
    _is_int, _is_number, check_value, setting)


# ----- the groups ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Batch:
    """Sequences and tokens of one step: the micro-batch each GPU runs at once, the global batch over all GPUs and
    micro-batches of one optimizer step, and the tokens per sequence."""

    batch_size: int = _field(1, "--batch-size", "count", "micro-batch: sequences per GPU per forward/backward",
                             unit="sequences", label="Micro-batch per GPU", web={"type": "pow2", "min": 0, "max": 8},
                             commands={'step', 'memory', 'fit', 'profile'})
    global_batch_size: int | None = _field(
        None, "--global-batch-size", "count?", "sequences per optimizer step over all GPUs (default: one micro-batch "
        "per data-parallel rank)", unit="sequences", label="Global batch (sequences per step)",
        web={"type": "pow2", "min": 0, "max": 14, "value": 32}, commands={'step', 'layout', 'plan'})
    seq_len: int | None = _field(None, "--seq-len", "count?",
                                 "tokens per sequence (default: the context the model was pre-trained at)",
                                 unit="tokens", label="Sequence length",
                                 web={"type": "pow2", "min": 6, "max": 17},
                                 commands={'step', 'memory', 'layout', 'plan', 'fit', 'profile'})

    def __post_init__(self):
        _check_fields(self)


@dataclass(frozen=True)
class Numerics:
    """The precision recipe (bytes of weights, gradients, master weights and states; the compute dtype) and the
    optimizer (its states), as specs/recipes.py names them."""

    precision: str | None = _field(None, "--precision", "choice?", "precision recipe (default amp-bf16; amp-fp16 on "
                                   "a GPU without bf16, e.g. T4, V100; fp32 on a CPU, e.g. --gpu cpu)", choices=tuple(RECIPES),
                                   label="Precision recipe",
                                   commands={'step', 'memory', 'layout', 'plan', 'fit', 'profile'})
    optimizer: str = _field("adamw", "--optimizer", "choice", "optimizer", choices=tuple(OPTIMIZERS),
                            label="Optimizer", commands={'step', 'memory', 'layout', 'plan', 'fit', 'profile'})
    optimizer_impl: str = _field("foreach", "--optimizer-impl", "choice",
                                 "torch.optim's step: foreach (PyTorch's, with a state-sized √v temporary) or fused "
                                 "(fused=True, as torchtune sets it: none)", choices=("foreach", "fused"),
                                 commands={'step', 'memory', 'layout', 'fit'})

    def __post_init__(self):
        for name in ("precision", "optimizer", "optimizer_impl"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, value.strip().lower())
        _check_fields(self)


@dataclass(frozen=True)
class Fsdp:
    """How FSDP2 runs a ZeRO-3 layout in PyTorch (account/memory/fsdp.py resolves these choices for a recipe)."""

    param_dtype: str = _field("auto", "--fsdp-param-dtype", "choice",
                              "dtype FSDP2 gathers and computes in (MixedPrecisionPolicy.param_dtype); auto: the "
                              "recipe's compute dtype, as torchtitan, Lightning and Accelerate run it; fp32: no policy "
                              "(autocast over fp32 gathers, as `train --parallel fsdp`); stored: as the parameters are "
                              "stored, no policy", choices=FSDP_PARAM_DTYPES, commands={'step', 'memory'})
    reduce_dtype: str | None = _field(None, "--fsdp-reduce-dtype", "choice?",
                                      "dtype of the gradient reduce-scatter (default fp32 under a policy, as torchtitan)",
                                      choices=FSDP_REDUCE_DTYPES, commands={'step', 'memory'})
    reshard_after_forward: bool | None = _field(
        None, "--reshard-after-forward", "switch?", "free each block's gathered parameters after forward and gather "
        "them again in backward (default on; off with --pp, as torchtitan)", commands={'step', 'memory'})
    accumulate: str | None = _field(None, "--fsdp-accumulate", "choice?",
                                    "gradient accumulation: reduce-scatter every micro-batch (sharded, FSDP2's default) "
                                    "or keep unsharded gradients and parameters until the last (default sharded; "
                                    "unsharded with --pp)", choices=FSDP_ACCUMULATE, commands={'step', 'memory'})
    separate_embeddings: bool = _field(False, "--fsdp-separate-embeddings", "flag",
                                       "embedding and head as FSDP units of their own (torchtune's "
                                       "custom_sharded_layers)", commands={'step', 'memory'})
    replicate: int = _field(1, "--dp-replicate", "count", "HSDP: replicate over this many groups, shard inside each "
                            "(dp / replicate ranks)", unit="groups", commands={'step', 'memory'})
    # Not a flag: `fit` counts ZeRO-3 as the ZeRO paper shards the model states, without FSDP2's unit buffers
    impl: str = field(default="fsdp2", metadata={"file_only": True, "choices": FSDP_IMPLS,
                                                 "help": "fsdp2: ZeRO-3 as PyTorch's FSDP2 runs it, unit by unit; "
                                                         "paper: the states sharded as the ZeRO paper counts them"})

    def __post_init__(self):
        _check_fields(self)
        if self.impl not in FSDP_IMPLS:
            raise TrainledgerError(f"layout.fsdp.impl must be one of {', '.join(FSDP_IMPLS)}, got {self.impl!r}")


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts layer's routing and dispatch (account/time/expert_parallel.py)."""

    imbalance: float = _field(1.0, "--expert-imbalance", "at_least_one",
                              "busiest expert's tokens / the mean (>= 1; 1 = balanced, as published MoE benchmarks "
                              "force it)",
                              label="Busiest expert's load / mean (≥ 1; 1 = balanced)", commands={'step'})
    capacity_factor: float | None = _field(None, "--capacity-factor", "positive?",
                                           "cap each expert at this × the mean load and drop the excess (default: "
                                           "dropless)",
                                           label="Capacity factor: an expert's cap, × the mean load (> 0; blank = dropless)",
                                           web={"placeholder": "dropless"}, commands={'step'})
    overlap: float | None = _field(None, "--ep-overlap", "fraction?", "fraction of the all-to-all hidden behind other "
                                   "micro-batches' compute (default 1 with --schedule dualpipe, DeepSeek-V3 Sec. 3.2.1; else "
                                   "0: exposed)", label="Share of the all-to-all hidden (0 … 1; blank: 1 with DualPipe)",
                                   commands={'step'})
    dispatcher: str | None = _field(None, "--ep-dispatcher", "choice?", "token dispatcher: alltoall (one copy per routed "
                                    "expert, Megatron's default) or deepep / hybridep (token-based: one copy per GPU, one "
                                    "per node across nodes; deepep by default with --schedule dualpipe, DeepSeek-V3 Sec. "
                                    "3.2.2)", choices=DISPATCHERS, label="Token dispatcher (blank: alltoall; deepep with "
                                    "DualPipe)", commands={'step'})

    def __post_init__(self):
        _check_fields(self)


@dataclass(frozen=True)
class Layout:
    """How the GPUs share the work: dp · tp · pp · cp = the GPU count; ep and etp within them."""

    dp: int | None = _field(None, "--dp", "count?", "data-parallel ranks (default: num_gpus / (tp · pp · cp))",
                            unit="GPUs", commands={'step', 'memory'})
    zero: int | None = _field(None, "--zero", "zero?",
                              "ZeRO stage over the dp ranks (default: what a user of the layout runs: FSDP2 = 3 for "
                              "data parallelism alone, 1 with --pp or --framework megatron, 0 with dp 1; 0 = DDP)",
                              label="ZeRO stage over dp", commands={'step', 'memory', 'fit'})
    tp: int = _field(1, "--tp", "count", "tensor-parallel size; must divide the heads", unit="GPUs",
                     label="Tensor-parallel ranks", web={"type": "pow2", "min": 0, "max": 3}, commands={'step', 'memory'})
    sp: bool = _field(False, "--sp", "flag", "sequence parallelism with --tp (Korthikanti et al. 2022)",
                      label="Sequence parallelism (with tp)", commands={'step', 'memory'})
    pp: int = _field(1, "--pp", "count", "pipeline stages, 1F1B schedule", unit="stages", label="Pipeline stages",
                     web={"type": "pow2", "min": 0, "max": 6}, commands={'step', 'memory'})
    interleave: int = _field(1, "--interleave", "count", "virtual pipeline chunks per GPU, Megatron-LM's interleaved "
                             "schedule (1 = 1F1B)", unit="chunks", label="Interleaved chunks per stage", commands={'step'})
    schedule: str = _field("1f1b", "--schedule", "choice", "pipeline schedule: 1f1b (interleaved with --interleave > 1) "
                           "or dualpipe (DeepSeek-V3's bidirectional pipeline: a smaller bubble, a second copy of the "
                           "parameters; even --pp and micro-batches)", choices=SCHEDULES, commands={'step'},
                           label="Pipeline schedule (dualpipe: an even pp ≥ 2 and an even number of micro-batches)")
    uneven_chunks: bool = _field(False, "--uneven-chunks", "flag", "let the interleaved schedule's chunks hold unequal "
                                 "numbers of layers, as Megatron-Core's --pipeline-model-parallel-layout or "
                                 "torch.distributed.pipelining stages do (e.g. DeepSeek-V3's 61 layers over --pp 4 "
                                 "--interleave 8); each --pp × --interleave chunk holds at least one layer, and the bubble "
                                 "waits for the largest chunk", commands={'step'},
                                 label="Chunks of unequal size (Megatron's pipeline layout, e.g. DeepSeek-V3's 61 layers)")
    account_for_embedding_in_pipeline_split: bool = _field(False, "--account-for-embedding-in-pipeline-split", "flag", (
        "Megatron-LM's flag: the input embedding counts as a layer of the pipeline split, the first stage holds one layer "
        "fewer (e.g. 126 layers over --pp 16 --interleave 8)"), commands={'step'})     # not on the web form (yet)
    account_for_loss_in_pipeline_split: bool = _field(False, "--account-for-loss-in-pipeline-split", "flag", (
        "Megatron-LM's flag: the output layer and loss count as a layer of the pipeline split, the last stage holds one "
        "layer fewer"), commands={'step'})
    cp: int = _field(1, "--cp", "count", "context-parallel ranks splitting the sequence", unit="GPUs",
                     label="Context-parallel ranks", web={"type": "pow2", "min": 0, "max": 5}, commands={'step'})
    ep: int = _field(1, "--ep", "count", "expert-parallel size: each GPU holds n_experts/ep routed experts; must divide "
                     "the experts, and ep × etp must divide tp·cp·dp", unit="GPUs",
                     label="Expert-parallel ranks (mixture of experts)", web={"type": "pow2", "min": 0, "max": 8},
                     commands={'step', 'memory'})
    etp: int | None = _field(None, "--etp", "count?", "expert tensor-parallel size (Megatron's "
                             "expert_tensor_parallel_size; default: --tp): each "
                             "expert's d_ff split over etp GPUs; with --framework megatron it may differ from --tp and "
                             "ep may reach tp·cp·dp (MoE Parallel Folding)", unit="GPUs",
                             label="Expert tensor-parallel ranks (blank = tp; another value with the Megatron framework)",
                             web={"type": "pow2", "min": 0, "max": 3, "placeholder": "= tp"}, commands={'step'})
    fsdp: Fsdp = field(default_factory=Fsdp)
    experts: Experts = field(default_factory=Experts)

    def __post_init__(self):
        _check_fields(self)
        if not isinstance(self.fsdp, Fsdp) or not isinstance(self.experts, Experts):
            raise TrainledgerError("layout.fsdp and layout.experts must be Fsdp and Experts values")

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans: tp · pp · cp."""
        return self.tp * self.pp * self.cp


_FT = {'step', 'memory', 'layout', 'plan', 'fit', 'profile'}


@dataclass(frozen=True)
class Finetune:
    """What the run trains: every weight (full), or LoRA adapters (Hu et al. 2021, arXiv:2106.09685) beside the
    frozen base, which QLoRA stores in 4 bits (Dettmers et al. 2023, arXiv:2305.14314)."""

    method: str = _field("full", "--finetune", "choice", "full: every weight; lora: adapters on a frozen base; qlora: LoRA on "
                         "an nf4-dq base",
                         choices=FINETUNE_METHODS, commands=_FT)
    lora_rank: int = _field(8, "--lora-rank", "count", "LoRA rank r", unit="rank",
                            commands=_FT)
    lora_alpha: float = _field(16.0, "--lora-alpha", "positive", "LoRA scale alpha / r",
                               commands=_FT)
    lora_targets: str = _field("q,v", "--lora-targets", "roles", "adapted Linears: roles "
                               f"{','.join(LORA_ROLES)} or all-linear (PEFT's)", commands=_FT)
    quantize: str | None = _field(None, "--quantize", "choice?", "frozen base weights' storage (default nf4-dq "
                                  "with qlora, else none)", choices=QUANTIZE, commands=_FT)

    def __post_init__(self):
        for name in ("method", "lora_targets", "quantize"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, value.strip().lower().replace(" ", ""))
        _check_fields(self)
        if self.quantize not in (None, "none") and self.method == "full":
            raise TrainledgerError(f"--quantize {self.quantize}: quantized weights cannot be trained; quantize the "
                                   "frozen base of --finetune lora or qlora", "--quantize")

    @property
    def adapters(self) -> bool:
        """Whether LoRA adapters are trained (lora or qlora)."""
        return self.method != "full"

    @property
    def base_storage(self) -> str:
        """How the base weights are stored: the quantization (qlora's default nf4-dq), or 'none'."""
        if self.quantize is not None:
            return self.quantize
        return "nf4-dq" if self.method == "qlora" else "none"


@dataclass(frozen=True)
class Levers:
    """What a run trades for memory: activation recomputation, the optimizer step in backward, offloading to the
    host, a chunked loss, and the memory kept back per GPU."""

    recompute: str = _field("none", "--recompute", "choice",
                            "activation recomputation: none, selective (the attention core, Korthikanti), full (each "
                            "block), selective-op (torchtitan's per-op policy: every second matmul and the elementwise "
                            "ops re-run), selective-layer (torchtitan's per-layer policy: every second block fully)",
                            choices=RECOMPUTE_POLICIES, label="Activation recomputation", commands={'step', 'memory', 'fit'})
    optimizer_in_backward: bool = _field(
        False, "--optimizer-in-backward", "flag", "each parameter steps and frees its gradient in backward (no accumulation)",
        commands={'step', 'memory', 'layout', 'fit', 'profile'})
    activation_offload: bool = _field(
        False, "--activation-offload", "flag", "saved activations to pinned host memory",
        commands={'step', 'memory', 'layout', 'fit', 'profile'})
    cpu_offload: str = _field("none", "--cpu-offload", "choice", "host holds the optimizer states (and with params "
                              "the weights, FSDP2's)",
                              choices=CPU_OFFLOAD, commands={'step', 'memory', 'layout', 'fit', 'profile'})
    chunked_loss: int = _field(1, "--chunked-loss", "count", "cross-entropy in N sequence chunks (torchtune: 8)",
                               unit="chunks", commands={'step', 'memory', 'layout', 'fit', 'profile'})
    reserve: str | float = _field(
        "auto", "--reserve", "reserve",
        "bytes per GPU kept back besides the training step's peak, e.g. 2GiB; 'auto' (on NVIDIA and AMD GPUs what a "
        "CUDA process holds besides its tensors: the CUDA context 0.49 GiB (lazy module loading) + two cuBLAS "
        "workspaces 64 MiB + 10%% of the peak for the caching allocator's cache, account/memory/per_gpu.py; 0 on other "
        "devices; 'expandable' with --framework torchtitan, whose launcher sets expandable segments); 'cuda' (that CUDA "
        "reserve on any device and framework); or 'expandable' (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: "
        "context and workspaces only)", unit="bytes", commands={'step', 'memory', 'layout', 'plan'})

    def __post_init__(self):
        for name in ("reserve", "cpu_offload"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, getattr(self, name).strip().lower())
        _check_fields(self)


@dataclass(frozen=True)
class Kernels:
    """Which kernels run and how: attention, the FLOP convention, torch.compile, whose framework, its overlaps."""

    flash: bool = _field(True, "--flash", "switch", "flash attention (default on); --no-flash stores and streams the "
                         "T×T scores", label="Flash attention", commands={'step', 'memory', 'layout'})
    attention: str = _field("full", "--attention", "choice",
                            "attention-score FLOPs counted for MFU: the full T×T (PaLM, default) or half (Megatron); a "
                            "causal flash kernel executes half either way", choices=("full", "causal"),
                            commands={'step', 'layout', 'plan'})
    attention_kernel: str | None = _field(None, "--attention-kernel", "name?",
                                          "which measured flash-attention kernel of --gpu (e.g. flash-attention-2, "
                                          "cudnn; default: the first in `trainledger hardware --json`, what PyTorch "
                                          "SDPA runs)", commands={'step', 'layout'})
    compile: bool = _field(False, "--compile", "flag", "the model under torch.compile (Inductor, default mode): "
                           "pointwise ops between GEMMs and attention fused, fewer launches (docs/time.md)",
                           commands={'step', 'layout', 'profile'})
    framework: str = _field("trainledger", "--framework", "choice",
                            "whose kernels: our torch Transformer in eager PyTorch (default), torchtitan's Llama "
                            "(complex-number RoPE, --compile per block with the head and loss eager) or Megatron-LM's "
                            "fused GPT (fused norms/bias-GeLU/softmax, dropout, weight gradients fused into fp32 "
                            "main_grad)", choices=("trainledger", "torchtitan", "megatron"),
                            label="Framework (whose kernels run; the layout search takes it too)",
                            commands={'step', 'layout'})
    tp_overlap: bool = _field(True, "--tp-overlap", "switch",
                              "with --framework megatron: reduce a column-parallel Linear's input gradient beside its "
                              "weight-gradient GEMM (default, Megatron-LM since 2022); --no-tp-overlap: after the "
                              "Linear's backward, exposed, as the 2021 Megatron-LM and Megatron-DeepSpeed did",
                              label="Megatron: TP reduce beside the weight-gradient GEMM (off: --no-tp-overlap)",
                              commands={'step'})
    dp_overlap: bool = _field(True, "--dp-overlap", "switch",
                              "with --framework megatron: reduce data-parallel gradients beside the last micro-batch's "
                              "backward (default: --overlap-grad-reduce, as Megatron Bridge's and NeMo's recipes set "
                              "it); --no-dp-overlap: after the last micro-batch, exposed (Megatron-LM's own default "
                              "and its 2021 code)", commands={'step'},
                              label="Megatron: DP gradient reduce beside the last backward (off: --no-dp-overlap)")
    pp_overlap: bool | None = _field(
        None, "--pp-overlap", "switch?", "run the pipeline's point-to-point sends beside the next chunk's computation "
        "(default: with --framework megatron and --interleave > 1, as Megatron Bridge sets overlap_p2p_comm and "
        "Megatron-LM defaults to it since 2023; otherwise each send is waited for); --no-pp-overlap: exposed, as "
        "Megatron-LM's 2021-22 interleaved schedule ran",
        label="Pipeline sends beside the next chunk's computation", commands={'step'},
        web={"placeholder": "default: Megatron with --interleave > 1"})
    loss_upcast: bool = _field(True, "--loss-upcast", "switch",
                               "cast the logits to fp32 before the cross-entropy, which then saves an fp32 log-softmax "
                               "of 4 bytes per token and vocabulary entry (default on, as trainledger's Transformer "
                               "and torchtitan); --no-loss-upcast: on the 16-bit logits, 2 bytes each, as NeMo "
                               "Automodel's MaskedCrossEntropy(fp32_upcast=False)",
                               commands={'step', 'memory', 'layout'})
    mtp: bool | None = _field(None, "--mtp", "switch?",
                              "train the model's multi-token-prediction modules (DeepSeek-V3: 1) on the last pipeline "
                              "stage, counted in the model FLOPs (default: with --framework megatron, as DeepSeek-V3 "
                              "was pre-trained; our torch Transformer does not build them); --no-mtp leaves them out",
                              label="Multi-token-prediction modules (models with them, e.g. deepseek-v3)",
                              web={"placeholder": "default: with Megatron only"}, commands={'step'})
    loop: str = _field("train", "--loop", "choice",
                       "whose synchronizations end the step's timelines: trainledger's training loop, which reads the "
                       "loss and the gradient norm back after the backward (default), or `profile`'s steps, which "
                       "synchronize once at the end", choices=LOOPS, commands={'step'})
    # Not flags: Megatron-LM's dropout (None: as the framework runs it) and causal attention (a decoder's)
    dropout: bool | None = field(default=None, metadata={"file_only": True,
                                                         "help": "dropout masks (default: as the framework runs it)"})
    causal: bool = field(default=True, metadata={"file_only": True, "help": "causal (decoder) attention"})

    def __post_init__(self):
        _check_fields(self)
        if self.compile and self.framework not in ("trainledger", "torchtitan"):
            raise TrainledgerError("--compile models PyTorch code under torch.compile (--framework trainledger or "
                                   "torchtitan), not Megatron-LM's fused kernels", "--compile")
        if not self.loss_upcast and self.framework == "megatron":
            raise TrainledgerError("--no-loss-upcast describes a PyTorch loop's cross-entropy on 16-bit logits; "
                                   "Megatron-Core's vocab-parallel cross entropy upcasts them (--framework megatron)",
                                   "--no-loss-upcast")
        for name in ("dropout", "causal"):
            value = getattr(self, name)
            if not (isinstance(value, bool) or (name == "dropout" and value is None)):
                raise TrainledgerError(f"kernels.{name} must be true or false, got {value!r}")


GROUPS = {"batch": Batch, "numerics": Numerics, "layout": Layout, "finetune": Finetune, "levers": Levers,
          "kernels": Kernels}


def _group(name: str):    # GROUPS[name] as it is when a Run is made: a group put there (a test's) is the one it holds
    return field(default_factory=lambda: GROUPS[name]())


@dataclass(frozen=True)
class Run:
    """The settings of one training run (module docstring). Build it from groups, or `Run().with_(tp=8, ...)`."""

    batch: Batch = _group("batch")
    numerics: Numerics = _group("numerics")
    layout: Layout = _group("layout")
    finetune: Finetune = _group("finetune")
    levers: Levers = _group("levers")
    kernels: Kernels = _group("kernels")

    def __post_init__(self):
        for name, group in GROUPS.items():
            if not isinstance(getattr(self, name), group):
                raise TrainledgerError(f"run.{name} must be a {group.__name__}, got {type(getattr(self, name)).__name__}")

    def with_(self, **changes) -> "Run":
        """This run with fields changed by their field names, each unique across the groups:
        run.with_(tp=8, recompute="full", replicate=2)."""
        groups: dict[str, dict] = {}
        for name, value in changes.items():
            groups.setdefault(locate(name), {})[name] = value
        run = self
        for path, values in groups.items():
            run = _replace_at(run, path.split("."), values)
        return run


# ----- where a field is: the groups walked (specs/run_table.py reads the table from the same walk) -------------
def _nested_group(f) -> type | None:
    """The group class a field holds (layout.fsdp -> Fsdp), or None for a plain value."""
    if f.default_factory is not MISSING:
        made = f.default_factory()
        return type(made) if is_dataclass(made) else None
    return None


def _walk(group: type, prefix: str):
    """(path, field, group class or None) for every field of `group` and of the groups inside it, in order."""
    for f in fields(group):
        path = f"{prefix}.{f.name}" if prefix else f.name
        inner = _nested_group(f)
        if inner is not None:
            yield from _walk(inner, path)
        else:
            yield path, f


def fields_by_path() -> dict:
    """{"layout.tp": its dataclasses.Field, ...} for every value of a run (settings and file-only fields)."""
    return {path: f for name, group in GROUPS.items() for path, f in _walk(group, name)}


def locate(name: str) -> str:
    """The dotted path of the group holding the field `name` ("tp" -> "layout"; "replicate" -> "layout.fsdp"), or a
    dotted path itself ("layout.tp" -> "layout"); an error when no group has it or several do."""
    paths = [p for p in fields_by_path() if p == name or p.rsplit(".", 1)[-1] == name]
    if len(paths) != 1:
        what = "no field of a run is" if not paths else f"several fields are ({', '.join(paths)})"
        raise TrainledgerError(f"{what} called {name!r}")
    return paths[0].rsplit(".", 1)[0]


def _replace_at(value, parts: list[str], changes: dict):
    """`value` (a frozen group) with `changes` applied to the group at `parts` below it, rebuilt outwards."""
    if not parts:
        return replace(value, **changes)
    return replace(value, **{parts[0]: _replace_at(getattr(value, parts[0]), parts[1:], changes)})


@dataclass(frozen=True)
class Hardware:
    """The machine of a run: the accelerator (a GPUSpec, interconnect overrides applied; None where only a memory
    size is known), how many of them (None: tp · pp · cp · dp), and the memory each has if not the GPU's own
    (`--memory-per-gpu`)."""

    gpu: object
    num_gpus: int | None = None
    memory_per_gpu_bytes: float | None = None

    def __post_init__(self):
        if self.num_gpus is not None and (not _is_int(self.num_gpus) or not 0 < self.num_gpus <= LARGEST_INT):
            raise TrainledgerError(f"--num-gpus must be a positive integer, got {self.num_gpus!r}", "--num-gpus")
        if self.memory_per_gpu_bytes is not None and not (_is_number(self.memory_per_gpu_bytes)
                                                          and self.memory_per_gpu_bytes > 0):
            raise TrainledgerError(f"--memory-per-gpu must be a positive size, got {self.memory_per_gpu_bytes!r}",
                                   "--memory-per-gpu")

    @property
    def knows_memory(self) -> bool:
        """Whether there is a memory size to fit in: a GPU, or --memory-per-gpu."""
        return self.gpu is not None or self.memory_per_gpu_bytes is not None

    @property
    def memory_bytes(self) -> float:
        """Bytes each GPU has for the run: --memory-per-gpu, or what CUDA reports for the GPU."""
        return self.memory_per_gpu_bytes if self.memory_per_gpu_bytes is not None else self.gpu.memory_bytes
