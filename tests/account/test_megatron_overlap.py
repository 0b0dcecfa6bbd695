"""What Megatron-LM hides behind compute and what it does not (account/time/comm.py), each from its code:

- the data-parallel gradient reduction runs after the last micro-batch unless --overlap-grad-reduce is given (off by
  default in megatron/training/arguments.py; the 2021 train_step all-reduced after forward_backward_func,
  NVIDIA/Megatron-LM megatron/training.py at commit aed2f75): `step --no-dp-overlap`; Megatron Bridge's recipes
  set overlap_grad_reduce, which `--framework megatron` assumes by default;
- the 2021 code (and Megatron-DeepSpeed, on which MT-NLG trained) reduced a column-parallel Linear's input
  gradient synchronously, after the Linear's backward (megatron/mpu/layers.py: copy_to_tensor_model_parallel_region
  before F.linear), not beside its weight-gradient GEMM: `step --no-tp-overlap`.
- the interleaved schedule's point-to-point sends run beside the next chunk's computation (overlap_p2p_comm:
  Megatron Bridge's CommOverlapConfig sets it whenever PP > 1 and VP > 1, batch_p2p_comm otherwise; Megatron-LM's
  own flag defaulted off in 2023 and on later; the 2021-22 code had none): `step --no-pp-overlap` for the old rows.
Checked by hand: the exposed seconds are the collectives' own seconds, summed.
"""

import json

import pytest

from trainledger.account.time import comm
from trainledger.account.time.overlap import collective_seconds
from trainledger.account.time.shard import Shard
from runs import step as step_time
from trainledger.account.validation.megatron_runs import mtnlg_cases, narayanan_cases
from trainledger.account.validation.runs import megatron_gpt
from trainledger.cli import main as cli_main
from trainledger.specs.hardware import get_gpu
from trainledger.specs.run import Run

A100 = get_gpu("a100-80gb")
GPT_18B = megatron_gpt("18.4B", 6144, 48, 40)          # Narayanan Table 1's 18.4B shape


def test_megatron_reduces_data_parallel_gradients_after_the_last_micro_batch():
    """t 8, 32 data-parallel ranks, 8 micro-batches of 4, without --overlap-grad-reduce: the whole all-reduce of the
    fp16 gradients is in dp_comm (its own seconds, not less), where PyTorch DDP hides all but its last 25 MB bucket
    behind the backward, and so does Megatron with the overlap (the default here, as the recipes set it)."""
    layout = dict(batch_size=4, seq_len=2048, global_batch_size=1024, num_gpus=256, precision="mixed-fp16",
                  optimizer="adam", tp=8, recompute="full", flash=False, with_memory=False)
    overlapped = step_time(GPT_18B, A100, framework="megatron", **layout)
    r = step_time(GPT_18B, A100, framework="megatron", dp_overlap=False, **layout)
    assert r["dp_overlap"] is False and overlapped["dp_overlap"] is True
    assert overlapped["breakdown"]["dp_comm"] < 0.5 * r["breakdown"]["dp_comm"]
    [grads] = [c for c in r["collectives"] if c["part"] == "dp_comm"]
    assert grads["name"] == "dp_grad_allreduce" and grads["hides_behind"] == ""
    assert "--overlap-grad-reduce" in grads["overlap"]
    assert r["breakdown"]["dp_comm"] == pytest.approx(grads["seconds"])
    assert grads["seconds"] > 0.1          # ~4.6 GB of fp16 gradients per GPU over 32 ranks on InfiniBand
    torch_ddp = step_time(GPT_18B, A100, framework="trainledger", zero=0, **layout)
    assert torch_ddp["breakdown"]["dp_comm"] < 0.5 * grads["seconds"]


def _tp_seconds_per_layer(tp_overlap: bool) -> tuple[float, float]:
    """(all TP collectives of one layer pass, the backward input-gradient all-reduces alone), seconds, by hand."""
    calls = comm.step_collectives(GPT_18B, Shard(4, 2048, "mixed-fp16", tp=8),
                                  Run().with_(recompute="full", tp_overlap=tp_overlap), style="megatron",
                                  layers_per_stage=1)
    tp = [c for c in calls if c.part == "tp_comm"]
    backward = [c for c in tp if c.name == "tp_allreduce_backward"]
    assert len(backward) == 1 and backward[0].count == 2      # f's backward: one per attention and MLP block
    assert backward[0].hides_behind == ("wgrad" if tp_overlap else "")
    return sum(collective_seconds(A100, c) for c in tp), collective_seconds(A100, backward[0])


def test_2021_megatron_tp_gradient_allreduce_is_exposed():
    """--no-tp-overlap: every TP collective of the layer is exposed, so the step's TP time is the collectives'
    seconds × 40 layers × 8 micro-batches exactly; with the overlap it is less, by at most the backward
    all-reduces that hide behind the weight-gradient GEMMs."""
    layout = dict(batch_size=4, seq_len=2048, global_batch_size=32, num_gpus=8, precision="mixed-fp16",
                  optimizer="adam", tp=8, recompute="full", flash=False, framework="megatron", with_memory=False)
    all_tp, backward = _tp_seconds_per_layer(False)
    exposed = step_time(GPT_18B, A100, tp_overlap=False, **layout)
    assert exposed["tp_overlap"] is False and exposed["micro_batches"] == 8
    assert exposed["breakdown"]["tp_comm"] == pytest.approx(all_tp * 40 * 8)
    overlapped = step_time(GPT_18B, A100, **layout)
    hidden = exposed["breakdown"]["tp_comm"] - overlapped["breakdown"]["tp_comm"]
    assert 0 < hidden <= backward * 40 * 8 * (1 + 1e-9)
    assert _tp_seconds_per_layer(True)[0] == pytest.approx(all_tp)      # the same bytes, only the overlap differs


def test_sequence_parallel_collectives_exposed_without_the_overlap():
    calls = comm.step_collectives(GPT_18B, Shard(1, 2048, tp=8, sp=True), Run().with_(tp_overlap=False),
                                  style="megatron")
    assert all(c.hides_behind == "" for c in calls if c.part == "tp_comm")
    calls = comm.step_collectives(GPT_18B, Shard(1, 2048, tp=8, sp=True), Run(), style="megatron")
    assert {c.hides_behind for c in calls if c.part == "tp_comm"} == {"", "wgrad", "dgrad"}


def test_the_2021_rows_are_predicted_with_the_2021_code():
    """Narayanan et al. 2021 and MT-NLG ran the 2021 code: their rows and commands say --no-tp-overlap and
    --no-dp-overlap."""
    for row in narayanan_cases() + mtnlg_cases():
        assert "--no-tp-overlap --no-dp-overlap" in row["cli"], row["label"]
    one_t = next(r for r in narayanan_cases() if r["label"] == "Table 1: 1008B, t 8 p 64, 3072 GPUs")
    assert abs(one_t["error"]) <= 0.05


COMMON = ["--gpu", "a100-80gb", "--num-gpus", "64", "--tp", "8", "--recompute", "full", "--precision", "mixed-fp16",
          "--optimizer", "adam", "--global-batch-size", "64", "--framework", "megatron", "--json"]


@pytest.mark.parametrize("which, layout", [
    ("tp", ["--pp", "8", "--interleave", "3", "--no-flash"]),    # the TP reductions, pipelined GPT-3 175B
    ("dp", ["--zero", "1"]),                                      # the DP reduction: no pipeline, 8 data-parallel ranks
])
def test_step_cli_no_overlap_flags(capsys, which, layout):
    """--no-tp-overlap / --no-dp-overlap with --framework megatron expose the reductions they name (the step gets
    slower by that part); elsewhere each says it changes nothing."""
    argv, part = ["step", "--model", "gpt3-175b", *COMMON, *layout], f"{which}_comm"
    answers = []
    for extra in ([], [f"--no-{which}-overlap"]):
        assert cli_main.main(argv + extra) == 0
        answers.append(json.loads(capsys.readouterr().out))
    with_overlap, without = answers
    assert with_overlap[f"{which}_overlap"] is True and without[f"{which}_overlap"] is False
    assert without["breakdown"][part] > with_overlap["breakdown"][part]
    assert without["step_seconds"] > with_overlap["step_seconds"]
    assert cli_main.main(["step", "--model", "gpt2", "--gpu", "h100", f"--no-{which}-overlap", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["assumptions"]
    assert any(f"--no-{which}-overlap changes nothing here" in n for n in notes)


def _deepspeed_train_schedule_seconds(m: int, p: int, forward: float, backward: float) -> float:
    """Makespan of DeepSpeed's pipeline TrainSchedule (deepspeed/runtime/pipe/schedule.py), simulated: 2(m + p − 1)
    slots; stage s runs the forward of micro-batch i in slot 2i + s and its backward in slot 2i + 2p − 1 − s (the
    schedule's step → micro-batch mapping, solved for the slot); a forward takes its input from stage s − 1 and a
    backward its gradient from stage s + 1 with blocking paired send/recv, so both partners start that slot only
    when both have finished the previous one. Communication itself costs nothing here."""
    valid = range(m).__contains__
    end = [0.0] * p
    for slot in range(2 * (m + p - 1)):
        work, start = [0.0] * p, list(end)
        for s in range(p):
            if (slot - s) % 2 == 0:              # a forward slot of stage s (a backward one of s − 1 and s + 1)
                work[s] = forward if valid((slot - s) // 2) else 0.0
                # receives micro-batch (slot − s)/2 from s − 1, sends s − 1 the gradient of its last backward
                if s > 0 and (valid((slot - s) // 2) or valid((slot - 2 * p + s) // 2)):
                    start[s] = start[s - 1] = max(end[s - 1], end[s])
            else:
                work[s] = backward if valid((slot - 2 * p + 1 + s) // 2) else 0.0
        end = [start[s] + work[s] for s in range(p)]
    return max(end)


@pytest.mark.parametrize("m, p, forward, backward", [(8, 4, 1.0, 2.0), (240, 35, 1.0, 3.0), (160, 35, 1.0, 3.0),
                                                     (3, 5, 1.0, 2.5)])
def test_deepspeed_pipeline_is_one_f_one_b(m, p, forward, backward):
    """MT-NLG ran DeepSpeed's pipeline engine, which the model times as 1F1B: its TrainSchedule, slot by slot, takes
    (m + p − 1)(t_f + t_b), i.e. the bubble (p − 1)/m of account.time.step.pipeline_bubble_fraction; the engine's
    schedule does not explain MT-NLG's residual."""
    from trainledger.account.time.step import pipeline_bubble_fraction
    seconds = _deepspeed_train_schedule_seconds(m, p, forward, backward)
    assert seconds == pytest.approx((m + p - 1) * (forward + backward))
    assert seconds / (m * (forward + backward)) - 1 == pytest.approx(pipeline_bubble_fraction(p, m))


def test_megatron_runs_the_interleaved_schedules_sends_beside_the_computation():
    """With --interleave > 1 and --framework megatron the sends run beside the stage's GEMMs by default: what they
    cost is the GEMMs slowed by the SMs NCCL holds while they run (interference.overlap_slowdown), a fraction of the
    exposed sends; --no-pp-overlap restores them whole; plain 1F1B and the other frameworks wait for each send."""
    from trainledger.account.time.interference import overlap_slowdown
    from trainledger.account.time.step import pp_overlap_default
    assert pp_overlap_default("megatron", 4, 2) and not pp_overlap_default("megatron", 4, 1)
    assert not pp_overlap_default("torchtitan", 4, 2) and not pp_overlap_default("megatron", 1, 1)
    from trainledger.specs import get_model
    llama = get_model("llama-3-8b")                   # untied embeddings: every pp_comm second is a send
    layout = dict(batch_size=1, seq_len=4096, global_batch_size=256, num_gpus=256, precision="mixed-bf16",
                  optimizer="adam", tp=8, sp=True, pp=4, interleave=2, recompute="full", framework="megatron",
                  with_memory=False)      # sp: no all-gather of the sent pieces over NVLink, one link to check
    hidden, exposed = step_time(llama, A100, **layout), step_time(llama, A100, **layout, pp_overlap=False)
    assert hidden["pp_overlap"] and not exposed["pp_overlap"]
    sends = exposed["breakdown"]["pp_comm"]
    slow = overlap_slowdown(A100, A100.inter_node_link)
    # the sends of one micro-batch are far shorter than its GEMMs: each costs comm · (1 − 1/slowdown)
    assert sends > 0 and hidden["breakdown"]["pp_comm"] == pytest.approx(sends * (1 - 1 / slow), rel=0.02)
    assert 0 < hidden["step_seconds"] < exposed["step_seconds"]
    one_f_one_b = dict(layout, interleave=1)
    assert not step_time(llama, A100, **one_f_one_b)["pp_overlap"]
    assert step_time(llama, A100, **one_f_one_b, pp_overlap=True)["pp_overlap"]


def test_the_2021_and_2022_rows_wait_for_their_sends():
    """Narayanan's interleaved rows say --no-pp-overlap; their step is the one with the sends exposed."""
    rows = [r for r in narayanan_cases() if r["interleave"] > 1]
    assert rows and all("--no-pp-overlap" in r["cli"] for r in rows)
