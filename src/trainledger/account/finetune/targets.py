"""LoRA targets: role names mapped onto the Linear (or GPT-2 Conv1D) modules of each model family.

Roles: q, k, v (the query / key / value projections), o (attention output), gate, up, down (the MLP's matrices; a
GELU MLP has no gate), head (the LM head d_model -> vocab). `all-linear` is PEFT's meaning (peft.tuners.tuners_utils,
`INCLUDE_LINEAR_LAYERS_SHORTHAND`: every nn.Linear / Conv1D of the model except the output layer): every role but
head.

Module names are those transformers 5 gives each family (modeling_<family>.py), the names PEFT's
`LoraConfig(target_modules=[...])` matches: a module is adapted when its name equals an entry or ends with
"." + the entry. Where one name would match two roles (GPT-2's attn.c_proj and mlp.c_proj), the entry carries its
parent's name. Fused projections hold several roles in one Linear:

    family                                  q, k, v                  o                gate, up            down
    llama mistral qwen2 qwen3 gemma2 ...    q_proj k_proj v_proj     o_proj           gate_proj up_proj   down_proj
    phi3                                    qkv_proj (fused)         o_proj           gate_up_proj (fused) down_proj
    gpt2 (Conv1D)                           attn.c_attn (fused)      attn.c_proj      -, mlp.c_fc         mlp.c_proj
    gpt_neox                                query_key_value (fused)  dense            -, dense_h_to_4h    dense_4h_to_h
    falcon                                  query_key_value (fused)  dense            -, dense_h_to_4h    dense_4h_to_h
    phi                                     q_proj k_proj v_proj     dense            -, fc1              fc2
    mpt                                     Wqkv (fused)             out_proj         -, up_proj          down_proj
    "" (trainledger's own Transformer)      q_proj k_proj v_proj     o_proj           mlp.gate, mlp.up    mlp.down

Every family's head is lm_head (trainledger's own tied head has no module of its own: no head role there).
Mixture-of-experts families get attention roles only: transformers 5 keeps the experts as fused 3-D parameters,
which target_modules does not reach as Linears. DeepSeek-V3's latent attention has no q/k/v mapping here.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.errors import TrainledgerError

ROLES = ("q", "k", "v", "o", "gate", "up", "down", "head")
ALL_LINEAR = "all-linear"
MLP_ROLES = ("gate", "up", "down")


@dataclass(frozen=True)
class FamilyModules:
    """A family's module names (PEFT target_modules entries); `qkv` / `gate_up` name a fused projection (None: q, k, v
    or gate, up are separate modules)."""

    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "o_proj"
    gate: str | None = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    qkv: str | None = None
    gate_up: str | None = None
    head: str = "lm_head"


_LLAMA = FamilyModules()
_NEOX = FamilyModules(qkv="query_key_value", o="dense", gate=None, up="dense_h_to_4h", down="dense_4h_to_h")
FAMILIES: dict[str, FamilyModules] = {
    **{name: _LLAMA for name in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "mixtral",
                                 "qwen2_moe", "qwen3_moe", "gpt_oss")},
    "phi3": FamilyModules(qkv="qkv_proj", gate_up="gate_up_proj"),
    "gpt2": FamilyModules(qkv="attn.c_attn", o="attn.c_proj", gate=None, up="mlp.c_fc", down="mlp.c_proj"),
    "gpt_neox": _NEOX,
    "falcon": _NEOX,
    "phi": FamilyModules(o="dense", gate=None, up="fc1", down="fc2"),
    "mpt": FamilyModules(qkv="Wqkv", o="out_proj", gate=None),
    "": FamilyModules(gate="mlp.gate", up="mlp.up", down="mlp.down"),      # trainledger.models (attention.py, mlp.py)
}


@dataclass(frozen=True)
class Projection:
    """One kind of weight matrix as the family's modules hold it: the target_modules entry naming it, its input width,
    the roles it holds with their output rows (in output order), and how many such modules the model has."""

    module: str
    in_features: int
    parts: tuple[tuple[str, int], ...]
    count: int

    @property
    def out_features(self) -> int:
        """Output rows of the whole module (all its parts: a fused projection's q + k + v)."""
        return sum(rows for _, rows in self.parts)

    def rows(self, roles) -> int:
        """Output rows of the parts holding one of `roles` (0: the module holds none of them)."""
        return sum(rows for role, rows in self.parts if role in roles)


def parse_lora_targets(targets, flag: str = "--lora-targets") -> tuple[str, ...]:
    """The roles of `targets` in ROLES order: "q,v", ["q", "v"] or "all-linear" (every role but head); a one-line
    error naming `flag` for an unknown or empty entry."""
    items = targets.split(",") if isinstance(targets, str) else list(targets)
    names = [str(item).strip().lower() for item in items]
    if ALL_LINEAR in names:
        if len(names) > 1:
            raise TrainledgerError(f"{flag} {ALL_LINEAR} stands alone (it is every role but head), got {targets!r}")
        return tuple(role for role in ROLES if role != "head")
    unknown = [name for name in names if name not in ROLES]
    if unknown or not names:
        raise TrainledgerError(f"{flag} must be role names among {', '.join(ROLES)} (comma-separated) or {ALL_LINEAR}, "
                               f"got {str(targets)[:60]!r}")
    return tuple(role for role in ROLES if role in names)


def family_modules(spec, flag: str = "--lora-targets") -> FamilyModules:
    """The module names of `spec.family`; a one-line error for a family without a mapping."""
    if spec.is_mla or spec.family not in FAMILIES:
        known = ", ".join(name or "trainledger" for name in FAMILIES)
        raise TrainledgerError(f"{flag}: no LoRA role mapping for model family {spec.family or spec.name!r} "
                               f"(multi-head latent attention has no q/k/v projections); mapped: {known}")
    return FAMILIES[spec.family]


def projections(spec) -> list[Projection]:
    """The adaptable weight matrices of `spec` as its family's modules hold them (attention, dense MLP, head).

    q: d_model -> n_heads·d_head, k and v: d_model -> n_kv_heads·d_head, o: n_heads·d_head -> d_model; gate, up:
    d_model -> d_ff, down: d_ff -> d_model (account.counting.params, the same matrices); head: d_model -> vocab.
    A mixture of experts contributes no MLP projections (module docstring)."""
    names, d, layers = family_modules(spec), spec.d_model, spec.n_layers
    q_rows, kv_rows = spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
    qkv = (("q", q_rows), ("k", kv_rows), ("v", kv_rows))
    if names.qkv:
        out = [Projection(names.qkv, d, qkv, layers)]
    else:
        out = [Projection(getattr(names, role), d, (part,), layers) for role, part in zip("qkv", qkv)]
    out.append(Projection(names.o, q_rows, (("o", d),), layers))
    if not spec.is_moe:
        f = spec.d_ff
        if names.gate_up:
            out.append(Projection(names.gate_up, d, (("gate", f), ("up", f)), layers))
        else:
            out += ([Projection(names.gate, d, (("gate", f),), layers)] if spec.gated_mlp else []) + \
                   [Projection(names.up, d, (("up", f),), layers)]
        out.append(Projection(names.down, f, (("down", d),), layers))
    if spec.family or not spec.tied_embeddings:      # trainledger's tied head is the embedding: no module to adapt
        out.append(Projection(names.head, d, (("head", spec.vocab_size),), 1))
    return out


def targeted(spec, targets, flag: str = "--lora-targets") -> list[tuple[Projection, int]]:
    """(projection, chosen output rows) for every projection holding a chosen role; an error naming `flag` when a
    chosen role is in no module of `spec` (a mixture of experts' MLP, a tied trainledger head) or none is.

    `gate` on a GELU MLP (GPT-2, GPT-NeoX, Falcon, Phi, MPT) is passed over, as PEFT passes over a target_modules
    entry that matches no module while another does: "q,k,v,o,gate,up,down" then means every matrix there is."""
    roles = parse_lora_targets(targets, flag)
    found = [(p, p.rows(roles)) for p in projections(spec) if p.rows(roles)]
    held = {role for p, _ in found for role, _ in p.parts}
    absent_gate = not spec.gated_mlp and not spec.is_moe
    missing = [role for role in roles if role not in held and not (role == "gate" and absent_gate and found)]
    if missing:
        why = ("a mixture of experts adapts attention only here (transformers 5's experts are fused 3-D parameters)"
               if spec.is_moe and set(missing) & set(MLP_ROLES) else
               f"its roles are {', '.join(r for p in projections(spec) for r, _ in p.parts)}")
        raise TrainledgerError(f"{flag} {','.join(missing)}: model {spec.name!r} ({spec.family or 'trainledger'}) has no "
                               f"such module; {why}")
    return found


def peft_target_modules(spec, targets, flag: str = "--lora-targets") -> list[str]:
    """The `target_modules` list PEFT is given for `targets` on `spec`: every module holding a chosen role. A fused
    module is named whole (PEFT adapts all its rows: lora.lora_trainable_params(..., fused="whole") counts that)."""
    return [p.module for p, _ in targeted(spec, targets, flag)]
