"""Megatron-LM's own published throughput (Narayanan et al. 2021, arXiv:2104.04473), each row predicted as a user
would type it. Pure.

Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC'21):
- Table 1, weak scaling: GPT models of 1.7B … 1T parameters on 32 … 3072 A100-80GB of Selene (DGX A100: 8 GPUs on
  NVSwitch, 8 × HDR 200 Gb/s InfiniBand per node), vocab 51200, seq 2048, fp16 mixed precision, activation
  recomputation, with their tensor (t) and pipeline (p) sizes, GPUs and global batch; the published figure is the
  achieved teraFLOP/s per GPU "for end-to-end training, i.e., includes all operations including data loading,
  optimization, and even logging".
- Table 2, PTD-P rows (against ZeRO-3): the 174.6B (GPT-3: h 12288, 96 heads, 96 layers) and 529.6B (h 20480,
  128 heads, 105 layers) models at model-parallel size 96 and 280 (t 8, since t is kept within a node, the paper's
  Takeaway #1: p 12 and 35), micro-batch 1, on 384 … 2240 GPUs; teraFLOP/s per GPU.
The FLOPs behind their teraFLOP/s are the paper's Eq. 3, F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration,
which counts the recomputed forward (hardware FLOPs of full recomputation, the full s×s attention); so the published
step is F / (X · n), compared with our predicted step (like with like: seconds against seconds).
Not published, so assumed here (docs/time.md says so): micro-batch as Korthikanti et al. 2022 (Table 3) ran the
same layouts on the same machine, 4 where p = 1 and 1 where p > 1; full recomputation (Sec. 5.1 of the paper
uses activation recomputation; Eq. 3 assumes it); the interleaved schedule (the paper's Sec. 2.2.2) with the
virtual stages Korthikanti's Table 3 used for the identical 530B and 1T layouts (3 and 1) and otherwise 2 chunks
per GPU (the paper's Fig. 4 draws 2), 3 where the layers of a stage do not split in 2; no sequence parallelism
(it came with Korthikanti et al. 2022).
Modelled from the code of the paper's period (NVIDIA/Megatron-LM at commit aed2f75, the code line with the paper's
interleaved schedule, --num-layers-per-virtual-pipeline-stage): ColumnParallelLinear all-reduces its input
gradient after the Linear's whole backward, synchronously (megatron/mpu/layers.py: copy_to_tensor_model_parallel_region
before F.linear; the overlap beside the weight-gradient GEMM came later), so `step --no-tp-overlap`; and train_step
all-reduces the data-parallel gradients after forward_backward_func (megatron/training.py), as Megatron-LM still
does by default (--overlap-grad-reduce off; Megatron Bridge's recipes turn it on): `--no-dp-overlap`; the
interleaved schedule waited for each point-to-point send (overlap_p2p_comm came with the 2023 code): `--no-pp-overlap`.

Smith et al. 2022, MT-NLG 530B (arXiv:2201.11990, Sec. 2.4; the same words in NVIDIA's and Microsoft's blog posts
of 2021-10): "the end-to-end throughput of our system for the 530 billion parameters model with batch size 1920
on 280, 350, and 420 DGX A100 servers on Selene ... iteration time of 60.1, 50.2, and 44.4 seconds, respectively.
These correspond to 126, 121, and 113 teraFLOP/s per GPU" (A100 80GB). Model: 105 layers, hidden 20480, 128
heads, seq 2048, GPT-2's BPE (vocab 50272 padded); DeepSpeed's pipeline with Megatron's tensor slicing: 8-way
tensor within a node, 35-way pipeline across nodes (cli99/llm-analysis examples/megatron-turing-nlg/run_train.sh
models it the same way). Their teraFLOP/s are Eq. 3 of Narayanan et al. (96·B·s·l·h²·(…) / (60.1 s · 2240) =
125.7e12), so they include full recomputation. Assumed: micro-batch 1, DeepSpeed's 1F1B pipeline (no
interleaving), the optimizer states sharded over data parallelism (ZeRO-1), fp16 mixed precision (A100: the same
tensor rate as bf16). Megatron-DeepSpeed's ColumnParallelLinear reduces the input gradient synchronously as the
2021 Megatron-LM did (microsoft/Megatron-DeepSpeed megatron/mpu/layers.py): `--no-tp-overlap`; its gradients are
reduced after the last micro-batch (`--no-dp-overlap`; with a pipeline they are exposed anyway).
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.validation.published_run import PublishedRun, command, evaluate, run_of
from trainledger.account.validation.runs import megatron_gpt

NARAYANAN = "Narayanan et al. 2021 (arXiv:2104.04473)"
MTNLG_SOURCE = "Smith et al. 2022 (arXiv:2201.11990), Sec. 2.4: MT-NLG 530B on Selene's A100-80GB"
NARAYANAN_ASSUMED = ("micro-batch 4 where p = 1, 1 where p > 1 (Korthikanti et al. 2022, Table 3)",
                     "full recomputation (Sec. 5.1; Eq. 3 assumes it)",
                     "the interleaved schedule: Korthikanti's virtual stages for its layouts, else 2 (3 where a stage's "
                     "layers do not split in 2)", "no sequence parallelism (it came in 2022)",
                     "no distributed optimizer (ZeRO 0)", "the 2021 code: the TP input-gradient reduce, the DP "
                     "gradient reduce and the pipeline sends exposed (aed2f75)")
MTNLG_ASSUMED = ("micro-batch 1", "DeepSpeed's 1F1B pipeline (no interleaving)", "the optimizer states sharded over "
                 "data parallelism (ZeRO-1)", "fp16 mixed precision", "full recomputation (the TFLOP/s count it)",
                 "Megatron-DeepSpeed's TP and DP reduces exposed, as the 2021 Megatron-LM")
SEQ_LEN, VOCAB = 2048, 51200
# Table 1: (parameters in billions, heads, hidden, layers, t, p, GPUs, global batch, achieved TFLOP/s per GPU)
NARAYANAN_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# Table 2, PTD-P rows: (parameters in billions, heads, hidden, layers, t, p, GPUs, global batch, TFLOP/s per GPU)
NARAYANAN_TABLE2 = [
    (174.6, 96, 12288, 96, 8, 12, 384, 1536, 153),
    (174.6, 96, 12288, 96, 8, 12, 768, 1536, 149),
    (174.6, 96, 12288, 96, 8, 12, 1536, 1536, 141),
    (529.6, 128, 20480, 105, 8, 35, 560, 2240, 171),
    (529.6, 128, 20480, 105, 8, 35, 1120, 2240, 167),
    (529.6, 128, 20480, 105, 8, 35, 2240, 2240, 159),
]
# MT-NLG 530B: (DGX A100 servers, iteration seconds, TFLOP/s per GPU as published)
MTNLG = [(280, 60.1, 126), (350, 50.2, 121), (420, 44.4, 113)]
MTNLG_VOCAB, MTNLG_BATCH = 50272, 1920
# virtual stages Korthikanti et al. 2022, Table 3, ran for the same layouts (hidden, layers, p) on Selene
KORTHIKANTI_INTERLEAVE = {(20480, 105, 35): 3, (25600, 128, 64): 1}


def eq3_flops_per_step(global_batch: int, layers: int, hidden: int, seq_len: int = SEQ_LEN,
                       vocab: int = VOCAB) -> float:
    """FLOPs of one iteration as Narayanan et al. 2021 count them (Eq. 3, with full recomputation):
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    return 96 * global_batch * seq_len * layers * hidden ** 2 * (1 + seq_len / (6 * hidden)
                                                                 + vocab / (16 * layers * hidden))


def assumed_micro_batch(pp: int) -> int:
    """The micro-batch the paper leaves unstated: 4 without pipeline, 1 with (Korthikanti et al. 2022, Table 3)."""
    return 4 if pp == 1 else 1


def assumed_interleave(hidden: int, layers: int, pp: int) -> int:
    """Virtual stages the paper leaves unstated: Korthikanti's Table 3 for its layouts, else 2 (3 where a stage's
    layers do not split in 2); 1 without pipeline."""
    if pp == 1:
        return 1
    if (hidden, layers, pp) in KORTHIKANTI_INTERLEAVE:
        return KORTHIKANTI_INTERLEAVE[(hidden, layers, pp)]
    per_stage = layers // pp
    return 2 if per_stage % 2 == 0 else 3


def narayanan_run(row, table: str = "Table 1") -> PublishedRun:
    """A row of NARAYANAN_TABLE1 or _TABLE2 as a published run: the model is the paper's Megatron GPT shape
    (runs.megatron_gpt: LayerNorm, GeLU MLP of 4h, biases, tied embeddings, vocab 51200); the published step is
    the row's Eq. 3 FLOPs / (its TFLOP/s per GPU · GPUs) (NARAYANAN_ASSUMED)."""
    size, heads, hidden, layers, t, p, n, batch, tflops_per_gpu = row
    mb, v = assumed_micro_batch(p), assumed_interleave(hidden, layers, p)
    run = run_of(batch_size=mb, seq_len=SEQ_LEN, global_batch_size=batch, precision="mixed-fp16", optimizer="adam",
                 tp=t, pp=p, interleave=v, zero=0, recompute="full", flash=False, framework="megatron",
                 tp_overlap=False, dp_overlap=False, pp_overlap=False)
    published = eq3_flops_per_step(batch, layers, hidden) / (tflops_per_gpu * 1e12 * n)
    return PublishedRun(f"{table}: {size:g}B, t {t} p {p}, {n} GPUs", f"{NARAYANAN}, {table}",
                        megatron_gpt(f"{size:g}B", hidden, heads, layers), "a100-80gb", n, run, "seconds", published,
                        figures=(("tflops_per_gpu", tflops_per_gpu),), assumptions=NARAYANAN_ASSUMED)


def narayanan_runs() -> list[PublishedRun]:
    """Every row of Tables 1 and 2 as a published run."""
    return [narayanan_run(row, table) for table, entries in (("Table 1", NARAYANAN_TABLE1),
                                                              ("Table 2", NARAYANAN_TABLE2)) for row in entries]


def narayanan_cli(row, table: str = "Table 1") -> str:
    """The `trainledger step` command for a row (published_run.command: the model is the config.json of the paper's
    Megatron GPT shape, published_run.model_config)."""
    return command(narayanan_run(row, table))


def narayanan_cases() -> list[dict]:
    """Every row of Tables 1 and 2: published and predicted seconds per iteration, error (predicted/published − 1)."""
    rows = []
    for table, entries in (("Table 1", NARAYANAN_TABLE1), ("Table 2", NARAYANAN_TABLE2)):
        for row in entries:
            size, heads, hidden, layers, t, p, n, batch, tflops_per_gpu = row
            case = narayanan_run(row, table)
            e = evaluate(case, with_memory=False)
            rows.append({"label": case.label, "table": table, "num_gpus": n,
                         "tp": t, "pp": p, "interleave": case.run.layout.interleave,
                         "batch_size": case.run.batch.batch_size, "global_batch_size": batch,
                         "published_tflops_per_gpu": tflops_per_gpu, "published_seconds": e["published_seconds"],
                         "predicted_seconds": e["predicted_seconds"], "error": e["error"],
                         "cli": command(case), "breakdown": e["step"]["breakdown"]})
    return rows


def mtnlg_spec():
    """MT-NLG 530B: the Megatron GPT shape of 105 layers, hidden 20480, 128 heads, with GPT-2's vocabulary padded."""
    return replace(megatron_gpt("mt-nlg-530B", 20480, 128, 105), vocab_size=MTNLG_VOCAB,
                   source="Smith et al. 2022 (arXiv:2201.11990): MT-NLG 530B")


def mtnlg_run(row) -> PublishedRun:
    """An MTNLG row (DGX A100 servers, iteration seconds, TFLOP/s per GPU) as a published run (MTNLG_ASSUMED)."""
    servers, seconds, tflops_per_gpu = row
    run = run_of(batch_size=1, seq_len=SEQ_LEN, global_batch_size=MTNLG_BATCH, precision="mixed-fp16",
                 optimizer="adam", tp=8, pp=35, zero=1, recompute="full", flash=False, framework="megatron",
                 tp_overlap=False, dp_overlap=False)
    n = 8 * servers
    return PublishedRun(f"530B, t 8 p 35, {n} GPUs", MTNLG_SOURCE, mtnlg_spec(), "a100-80gb", n, run, "seconds",
                        seconds, figures=(("tflops_per_gpu", tflops_per_gpu),), assumptions=MTNLG_ASSUMED)


def mtnlg_runs() -> list[PublishedRun]:
    """MT-NLG 530B on 2240, 2800 and 3360 A100 as published runs."""
    return [mtnlg_run(row) for row in MTNLG]


def mtnlg_cases() -> list[dict]:
    """MT-NLG 530B on 2240, 2800 and 3360 A100: published and predicted seconds per iteration, error."""
    rows = []
    for row in MTNLG:
        case = mtnlg_run(row)
        e = evaluate(case, with_memory=False)
        rows.append({"label": case.label, "num_gpus": case.num_gpus, "published_seconds": e["published_seconds"],
                     "published_tflops_per_gpu": row[2], "predicted_seconds": e["predicted_seconds"],
                     "error": e["error"], "breakdown": e["step"]["breakdown"], "cli": command(case)})
    return rows
